"""Per-turn cost of capture and context against a dict + deque + index floor, in one run.

Run on demand (not part of the test suite)::

    .venv/bin/python benchmarks/bench_turn_cost.py                 # print the figures
    .venv/bin/python benchmarks/bench_turn_cost.py --write docs/benchmarks.md

``--turns`` turns (default 4,000) of the chat-day workload (``shortterm.bench.core``: seed 42,
50 servers × 20 channels × 5,000 users, Zipf-skewed, 10% in DMs), so most user scopes are new
to the hot tier, each with nine messages of history and one reply. Every turn first renders its
context (``turn.context()``), then captures (``turn.capture``). The floor is the chat-day
bench's: dict + deque(maxlen=10) + dict-of-set indexes, with a context that joins the live
deque and the owner's three most recent other channels. Stores: ``memory://`` (no durable
I/O) and a fresh SQLite file (the embedded default). Each figure is the median of
``--rounds`` rounds' medians, in µs; the ratio divides medians measured in the same round.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import shortterm
from shortterm.bench.core import T0, Floor, Workload
from shortterm.bench.report import machine, publish

SECTION = "Per-turn cost against the floor"


def plan(turns: int) -> list[dict[str, Any]]:
    """The chat-day workload's turns (seed 42), each with its history and reply, made once."""
    work = Workload()
    out = []
    for _ in range(turns):
        t = work.turn()
        t["history"] = work.history(t["user_id"], T0)
        t["replies"] = [work.reply(t["persona_id"])]
        out.append(t)
    return out


def timed(samples: list[float], start: int) -> None:
    samples.append((time.perf_counter_ns() - start) / 1000)


async def shortterm_round(store: str, turns: list[dict[str, Any]]) -> dict[str, float]:
    capture: list[float] = []
    context: list[float] = []
    config = shortterm.Config(sweep_interval_s=0)
    async with shortterm.open(store, config=config, clock=lambda: T0) as memory:
        for t in turns:
            turn = memory.turn(
                user_id=t["user_id"],
                channel_id=t["channel_id"],
                server_id=t["server_id"],
                persona_id=t["persona_id"],
            )
            t0 = time.perf_counter_ns()
            await turn.context()
            timed(context, t0)
            t0 = time.perf_counter_ns()
            await turn.capture(t["history"], t["replies"])
            timed(capture, t0)
    return {"capture": statistics.median(capture), "context": statistics.median(context)}


def floor_round(turns: list[dict[str, Any]]) -> dict[str, float]:
    floor = Floor()
    capture: list[float] = []
    context: list[float] = []
    for t in turns:
        t0 = time.perf_counter_ns()
        floor.context(t)
        timed(context, t0)
        t0 = time.perf_counter_ns()
        floor.capture(t, t["history"])
        timed(capture, t0)
    return {"capture": statistics.median(capture), "context": statistics.median(context)}


def measure(turns: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    work = plan(turns)
    out: dict[str, dict[str, list[float]]] = {}

    def add(name: str, run: Callable[[], dict[str, float]], floor: dict[str, float]) -> None:
        figures = run()
        row = out.setdefault(name, {})
        for op, us in figures.items():
            row.setdefault(op, []).append(us)
            row.setdefault(op + " ratio", []).append(us / floor[op])

    for _ in range(rounds):
        floor = floor_round(work)
        for op, us in floor.items():
            out.setdefault("floor", {}).setdefault(op, []).append(us)
        add("memory://", lambda: asyncio.run(shortterm_round("memory://", work)), floor)
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite:///{Path(tmp) / 'turns.db'}"
            add("sqlite (fresh file)", lambda: asyncio.run(shortterm_round(url, work)), floor)  # noqa: B023
    return out


def table(out: dict[str, dict[str, list[float]]]) -> str:
    med = statistics.median
    rows = [
        "| store | capture µs | × floor | context µs | × floor |",
        "|---|---:|---:|---:|---:|",
    ]
    f = out["floor"]
    rows.append(f"| floor | {med(f['capture']):.1f} | — | {med(f['context']):.1f} | — |")
    for name, r in out.items():
        if name == "floor":
            continue
        rows.append(
            f"| {name} | {med(r['capture']):.1f} | {med(r['capture ratio']):.1f} "
            f"| {med(r['context']):.1f} | {med(r['context ratio']):.1f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--write", default=None, help="markdown file to update")
    args = parser.parse_args(argv)
    out = measure(args.turns, args.rounds)
    shown = ["benchmarks/bench_turn_cost.py", *(argv if argv is not None else sys.argv[1:])]

    text = (
        f"Machine: {machine()}. Command: `python {' '.join(shown)}`. {args.turns:,} turns "
        "of the chat-day workload (seed 42; 50 servers × 20 channels × 5,000 users), nine "
        "messages of history and a reply each; per turn a context then a capture; medians of "
        f"{args.rounds} rounds' medians; each ratio divides by the floor of its own round.\n\n"
        + table(out)
    )
    publish(text, args.write, SECTION)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
