"""A capture's cost on the embedded default (SQLite + in-process), write-behind off and on.

Each configuration captures the same chat-day turns (``shortterm.bench.core.Workload``) into a
fresh SQLite file under a complete in-process hot tier, as the core benchmark does, and the
floor (dict + deque) does the same work in the same process. Reported per capture: median,
p99 and mean in µs; with the write-behind, also the amortized mean, which adds the final
flush (``memory.close``) to the captures' time. Flushes run inside the timed captures that
reach ``write_behind_turns`` (the loop never idles here, so the timer never fires): their
cost is in the mean, not hidden. Configurations alternate over ``--rounds`` rounds (the best
round of each is shown), so a noisy machine slows them alike.

The first capture of a scope the hot tier does not hold is written through, write-behind or
not; in a first pass of 20,000 chat-day turns most user scopes are such. ``--warm`` times a
second pass over the same turns (every scope held: a bot that has been up for a while).

    PYTHONPATH=src python benchmarks/bench_write_behind.py [--turns 20000] [--rounds 3] [--warm]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from shortterm.bench.core import T0, Floor, Workload
from shortterm.cache.inprocess import InProcessCache
from shortterm.memory.facade import Memory
from shortterm.model import Message
from shortterm.model.config import Config
from shortterm.store.sqlite import SQLiteStore

FLUSH_NS: dict[str, int] = {}


async def one_run(
    tmp: Path, tag: str, turns: int, window_ms: int, warm: bool
) -> tuple[list[int], int]:
    """Per-capture ns, and the ns of the closing flush; the ns spent in flushes go to
    ``FLUSH_NS[tag]``."""
    cfg = Config(sweep_interval_s=0, write_behind_ms=window_ms)
    cache = InProcessCache(
        crude_ttl_s=cfg.crude_ttl_s,
        summary_ttl_s=cfg.summary_ttl_s,
        max_entries=cfg.max_entries,
        max_bytes=cfg.max_bytes,
    )
    store = SQLiteStore(tmp / f"wb-{tag}.db")
    await store.migrate()
    memory = Memory(store=store, cache=cache, config=cfg, clock=lambda: T0)
    cache.set_complete(True)  # as after a full hydration, as in the core benchmark
    wb = memory.write_behind
    FLUSH_NS[tag] = 0
    if wb is not None:
        flush = wb.flush

        async def timed_flush() -> None:
            start = time.perf_counter_ns()
            await flush()
            FLUSH_NS[tag] += time.perf_counter_ns() - start

        wb.flush = timed_flush  # type: ignore[method-assign]
    if warm:
        # The same turns once, untimed: every scope is then held by the hot tier (a bot
        # that has been up for a while), so no capture is the first of its scope.
        work = Workload()
        for _ in range(turns):
            t = work.turn()
            turn = memory.turn(**t)
            await turn.capture(
                history=work.history(t["user_id"], T0), replies=[work.reply(t["persona_id"])]
            )
        await memory.flush()
    work = Workload()
    samples: list[int] = []
    for _ in range(turns):
        t = work.turn()
        history, reply = work.history(t["user_id"], T0), work.reply(t["persona_id"])
        turn = memory.turn(**t)
        start = time.perf_counter_ns()
        await turn.capture(history=history, replies=[reply])
        samples.append(time.perf_counter_ns() - start)
    start = time.perf_counter_ns()
    if memory.write_behind is not None:
        await memory.write_behind.close()
    closing = time.perf_counter_ns() - start
    stats = memory.stats()
    await memory.close()
    assert stats["lost_counter_steps"] == 0
    return samples, closing


def floor_run(turns: int) -> list[int]:
    floor, work, samples = Floor(), Workload(), []
    for _ in range(turns):
        t = work.turn()
        said = [*work.history(t["user_id"], T0), Message("assistant", work.filler[:300], at=T0)]
        start = time.perf_counter_ns()
        floor.capture(t, said)
        samples.append(time.perf_counter_ns() - start)
    return samples


def line(name: str, samples: list[int], extra_ns: int = 0) -> str:
    xs = sorted(samples)
    median = statistics.median(xs) / 1000
    p99 = xs[int(len(xs) * 0.99)] / 1000
    mean = statistics.fmean(xs) / 1000
    amortized = (sum(xs) + extra_ns) / len(xs) / 1000
    return f"| {name} | {median:.2f} | {p99:.2f} | {mean:.2f} | {amortized:.2f} |"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--warm", action="store_true", help="time a second pass over the same turns"
    )
    args = parser.parse_args()
    best: dict[str, tuple[list[int], int]] = {}
    flush_share: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, window in (("write-behind off (0 ms)", 0), ("write-behind on (50 ms)", 50)):
                tag = f"{r}-{window}"
                samples, closing = await one_run(Path(tmp), tag, args.turns, window, args.warm)
                if name not in best or statistics.fmean(samples) < statistics.fmean(best[name][0]):
                    best[name] = (samples, closing)
                    flush_share[name] = FLUSH_NS[tag] / args.turns / 1000
            floor = floor_run(args.turns)
            if "floor" not in best or statistics.fmean(floor) < statistics.fmean(best["floor"][0]):
                best["floor"] = (floor, 0)
    passed = "second pass over the same turns" if args.warm else "first pass"
    print(f"{args.turns} captures per configuration ({passed}), best of {args.rounds} rounds")
    print("| capture | median µs | p99 µs | mean µs | amortized mean µs |")
    print("|---|---:|---:|---:|---:|")
    for name in ("floor", "write-behind off (0 ms)", "write-behind on (50 ms)"):
        samples, closing = best[name]
        print(line(name, samples, closing))
    share = flush_share["write-behind on (50 ms)"]
    print(f"flushes (inside the timed captures and at close): {share:.2f} µs per capture")


if __name__ == "__main__":
    asyncio.run(main())
