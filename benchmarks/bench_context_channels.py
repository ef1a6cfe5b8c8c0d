"""Benchmark: one turn's context against the number of live channels in its server.

A server of N live channels, each with a captured conversation (every third with a summary):
the ten newest a minute apart, the others spread over the ten hours before; a turn in one of
its three newest channels shows the same three other channels at every N, so the output is
the same and only the server's size changes.
Per context, at each N: the wall time (median), the Redis commands (counted as the client
packs them, a pipeline's each) and, with ``--instructions``, the instructions under callgrind
(this script run twice under valgrind with T and 2T contexts: the difference over T, start-up
and population cancelled out). Each figure is also given as a ratio to the smallest N::

    .venv/bin/python benchmarks/bench_context_channels.py --instructions
    .venv/bin/python benchmarks/bench_context_channels.py --instructions \\
        --postgres postgresql://postgres@127.0.0.1:5432/test --redis redis://127.0.0.1:6379/0 \\
        --cluster --write docs/benchmarks.md

The embedded default (SQLite + the in-process tier) runs at 10, 100, 1,000 and 10,000
channels; PostgreSQL + Redis (``--redis``; ``--cluster``: a Redis Cluster of three masters
started here, as the tests start one) at 10, 100 and 1,000. Population goes straight to the
hot tier (its ``capture``), so a size builds in seconds even under valgrind.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import shortterm
from shortterm import Config, Message, ScopeKey
from shortterm.bench.redis_commands import counted_commands
from shortterm.bench.report import machine, publish
from shortterm.store.base import ScopeMeta, ScopeRow

ROOT = Path(__file__).resolve().parents[1]
HEADING = "Context vs channels in the server"
NOW = 1_800_000_000.0
SERVER = "g1"
EMBEDDED_SIZES = (10, 100, 1_000, 10_000)
SHARED_SIZES = (10, 100, 1_000)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def _history(channel: int, at: float) -> tuple[Message, ...]:
    said = f"channel {channel}: what we planned for the trip, and who brings the maps"
    return (
        Message("user", said, author_id="u7", speaker="Ana", at=at - 30),
        Message("assistant", f"noted for channel {channel}", speaker="Tomo", at=at - 20),
        Message("user", "and the tickets?", author_id="u8", speaker="Bo", at=at - 10),
        Message("assistant", "booked on Friday", speaker="Tomo", at=at),
    )


def captured_at(i: int, channels: int) -> float:
    """When channel i was last captured: the ten newest a minute apart (what a turn shows
    is the same at every size), the rest spread over the 10 hours before (all live: messages
    live 12 hours)."""
    if i < 10:
        return NOW - 60 * (i + 1)
    return NOW - 600 - (i - 10) * (36_000 / channels)


async def populate(memory: shortterm.Memory, channels: int) -> None:
    """Channel i was last captured at ``captured_at(i)``; every third one holds a summary."""
    cache = memory.cache
    for i in range(channels):
        at = captured_at(i, channels)
        key = ScopeKey.server(SERVER, f"c{i}", None)
        meta = ScopeMeta(server_id=SERVER, server_name="Trips", channel_name=f"chan-{i}")
        row = None
        if i % 3 == 0:
            summary = f"Channel {i} settled the route and the budget."
            row = ScopeRow(key=key, meta=meta, summary=summary, summary_at=at - 600)
        await cache.capture(key, _history(i, at), meta, row, at)


async def contexts(memory: shortterm.Memory, count: int) -> list[int]:
    """``count`` contexts, turns in the three newest channels in turn; their lengths."""
    lengths = []
    for i in range(count):
        turn = memory.turn(
            user_id="u7",
            channel_id=f"c{i % 3}",
            server_id=SERVER,
            user_name="Ana",
            bot_name="Tomo",
        )
        ctx = await turn.context()
        lengths.append(sum(len(item.text) for item in ctx.items))
    return lengths


@dataclass
class Urls:
    store: str
    cache: str
    cleanup: list[Any]


def urls(tier: str, args: argparse.Namespace, tmp: Path) -> Urls:
    if tier == "embedded":
        return Urls(f"sqlite:///{tmp / f'ctx-{uuid.uuid4().hex[:8]}.db'}", "memory://", [])
    tag = uuid.uuid4().hex[:12]
    schema, prefix = f"bench_{tag}", f"stm-bench:{tag}:"
    redis = args.cluster_url if tier == "cluster" else args.redis
    sep_pg = "&" if "?" in args.postgres else "?"
    sep_redis = "&" if "?" in redis else "?"
    return Urls(
        f"{args.postgres}{sep_pg}schema={schema}",
        f"{redis}{sep_redis}prefix={quote(prefix)}",
        [(args.postgres, schema), (redis, prefix)],
    )


async def cleanup(found: Urls) -> None:
    if not found.cleanup:
        return
    import psycopg
    import redis.asyncio as aioredis

    (pg, schema), (redis, prefix) = found.cleanup
    async with await psycopg.AsyncConnection.connect(pg, autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    if "+cluster://" in redis:
        return  # the cluster is thrown away with the run
    client = aioredis.Redis.from_url(redis)
    try:
        async for name in client.scan_iter(match=f"{prefix}*", count=1000):
            await client.delete(name)
    finally:
        await client.aclose()


def _open(found: Urls, clock: Clock, channels: int) -> Any:
    config = Config(sweep_interval_s=0, max_entries=max(4 * channels, 1000))
    return shortterm.open(store=found.store, cache=found.cache, clock=clock, config=config)


async def measure(found: Urls, channels: int, iterations: int) -> dict[str, Any]:
    """Wall time and Redis commands per context at one size."""
    clock = Clock()
    async with _open(found, clock, channels) as memory:
        await populate(memory, channels)
        lengths = await contexts(memory, 60)  # warm: the owner's completeness, the renders
        gc.collect()
        gc.freeze()
        tally = [0]
        samples = []
        with counted_commands(tally):
            for _ in range(iterations):
                started = time.perf_counter_ns()
                await contexts(memory, 1)
                samples.append(time.perf_counter_ns() - started)
        gc.unfreeze()
    return {
        "lengths": sorted(set(lengths)),
        "wall_us": statistics.median(samples) / 1000,
        "commands": tally[0] / iterations,
    }


async def instructions(
    tier: str, args: argparse.Namespace, tmp: Path, channels: int, turns: int
) -> float:
    """Instructions per context under callgrind: runs of T and 2T contexts (each on a store
    and a prefix of its own), differenced."""
    totals = []
    for n in (turns, 2 * turns):
        found = urls(tier, args, tmp)
        try:
            done = await asyncio.to_thread(_callgrind, tier, channels, n, found)
        finally:
            await cleanup(found)
        counted = re.search(r"Collected : (\d+)", done.stderr)
        if counted is None:
            raise RuntimeError(f"no instruction count from callgrind:\n{done.stderr[-2000:]}")
        totals.append(int(counted.group(1)))
    return (totals[1] - totals[0]) / turns


def _callgrind(tier: str, channels: int, n: int, found: Urls) -> Any:
    store, cache = found.store, found.cache
    if tier != "embedded":  # valgrind runs the client ~50x slower: bounds for that pace
        store += "&operation_timeout_s=600&pool_timeout_s=600"
        cache += "&socket_timeout=120"
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        __file__,
        "--child",
        tier,
        str(channels),
        str(n),
        store,
        cache,
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return done


async def child(tier: str, channels: int, turns: int, store: str, cache: str) -> None:
    """What runs under valgrind: open, populate, warm up, then ``turns`` contexts."""
    found = Urls(store, cache, [])
    async with _open(found, Clock(), channels) as memory:
        await populate(memory, channels)
        await contexts(memory, 30)
        await contexts(memory, turns)


async def run_tier(tier: str, args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    sizes = EMBEDDED_SIZES if tier == "embedded" else SHARED_SIZES
    rows = []
    for channels in [s for s in sizes if s <= args.max_channels]:
        found = urls(tier, args, tmp)
        try:
            row = await measure(found, channels, args.iterations)
        finally:
            await cleanup(found)
        row["channels"] = channels
        if args.instructions:
            row["instructions"] = await instructions(tier, args, tmp, channels, args.turns)
        rows.append(row)
        shown = (
            f"{row['instructions'] / 1000:,.0f}k instructions, " if "instructions" in row else ""
        )
        print(
            f"{tier:>8} {channels:>6,} channels: {shown}{row['commands']:.1f} Redis commands, "
            f"{row['wall_us']:,.0f} µs per context (output {row['lengths']} characters)",
            flush=True,
        )
    return rows


def _ratio(row: dict[str, Any], first: dict[str, Any], key: str) -> str:
    return f"{row[key] / first[key]:.2f}×" if first.get(key) else "–"


def table(tier: str, rows: list[dict[str, Any]]) -> list[str]:
    first = rows[0]
    out = []
    for r in rows:
        ins = r.get("instructions")
        shown = f"{ins / 1000:,.0f}k ({_ratio(r, first, 'instructions')})" if ins else "–"
        out.append(
            f"| {tier} | {r['channels']:,} | {shown} | {r['commands']:.0f} "
            f"({_ratio(r, first, 'commands')}) | {r['wall_us'] / 1000:.2f} ms "
            f"({_ratio(r, first, 'wall_us')}) | {', '.join(map(str, r['lengths']))} |"
        )
    return out


def report(results: dict[str, list[dict[str, Any]]], command: str) -> str:
    names = {
        "embedded": "SQLite + in-process",
        "redis": "PostgreSQL + Redis",
        "cluster": "PostgreSQL + Redis Cluster (3 masters)",
    }
    lines = [
        "```bash",
        command,
        "```",
        "",
        f"{machine()}. A server of N live channels (4 messages each, every third with a "
        "summary; the ten newest a minute apart, the rest over the ten hours before); turns "
        "in its three newest channels, so each shows the same three other channels at every "
        "N (the context's length, in characters, in the last column). Per context: "
        "instructions under callgrind (runs of T and 2T contexts, differenced), Redis "
        "commands as the client packs them, the median wall time; in brackets, the ratio to "
        "10 channels.",
        "",
        "| tiers | channels | instructions | Redis commands | wall | context characters |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for tier, rows in results.items():
        lines += table(names[tier], rows)
    return "\n".join(lines)


@contextlib.contextmanager
def started_cluster() -> Iterator[str]:
    sys.path.insert(0, str(ROOT))
    from tests.cluster_support import running_cluster  # the tests' own cluster, reused

    with running_cluster() as cluster:
        yield str(cluster.url)


async def main(args: argparse.Namespace) -> None:
    results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        tiers = [] if args.no_embedded else ["embedded"]
        if args.redis:
            tiers.append("redis")
        if args.cluster:
            args.cluster_url = stack.enter_context(started_cluster())
            tiers.append("cluster")
        for tier in tiers:
            results[tier] = await run_tier(tier, args, Path(tmp))
    shown = [a for a in sys.argv[1:] if not a.startswith("--write") and a != args.write]
    command = " ".join([".venv/bin/python benchmarks/bench_context_channels.py", *shown])
    publish(report(results, command), args.write, HEADING)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        tier, channels, turns, store, cache = sys.argv[2:7]
        asyncio.run(child(tier, int(channels), int(turns), store, cache))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=300, help="timed contexts per size")
    parser.add_argument("--turns", type=int, default=100, help="T, for --instructions")
    parser.add_argument("--instructions", action="store_true", help="count under callgrind")
    parser.add_argument("--max-channels", type=int, default=10_000)
    parser.add_argument("--no-embedded", action="store_true", help="only the shared tiers")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--redis", help="a Redis URL: also PostgreSQL + Redis")
    parser.add_argument("--cluster", action="store_true", help="also a Redis Cluster, started here")
    parser.add_argument("--write", help="a markdown file to put the table in")
    asyncio.run(main(parser.parse_args()))
