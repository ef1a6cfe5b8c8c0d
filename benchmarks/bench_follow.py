"""What following other processes costs a call when nothing moved.

Every read and write first asks whether another process journaled something (SQLite's
``PRAGMA data_version``; on PostgreSQL a flag set by ``LISTEN``). This times that check on
its own (``store.journal_moved()``) and as a write sees it (``memory.begin_write()``), in
nanoseconds per call, median of repeated batches; and what catching up on one foreign forget
costs (another connection clears a channel; the next call applies it).

    python benchmarks/bench_follow.py [--postgres postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import shortterm

BATCH, BATCHES = 20_000, 15


def per_call_ns(fn: Callable[[], Any]) -> float:
    samples = []
    for _ in range(BATCHES):
        started = time.perf_counter_ns()
        for _ in range(BATCH):
            fn()
        samples.append((time.perf_counter_ns() - started) / BATCH)
    return statistics.median(samples)


async def per_await_ns(fn: Callable[[], Awaitable[Any]]) -> float:
    samples = []
    for _ in range(BATCHES):
        started = time.perf_counter_ns()
        for _ in range(BATCH):
            await fn()
        samples.append((time.perf_counter_ns() - started) / BATCH)
    return statistics.median(samples)


async def catch_up_us(
    memory: shortterm.Memory, other: shortterm.Memory, rounds: int, *, notified: bool
) -> float:
    """One foreign clear per round; the time of the call that applies it."""
    samples = []
    for i in range(rounds):
        await other.clear_channel(f"gone{i}")
        if notified:
            await asyncio.sleep(0.01)  # let the NOTIFY arrive: we time the apply, not the wire
        started = time.perf_counter_ns()
        await memory.begin_write()
        samples.append((time.perf_counter_ns() - started) / 1000)
    return statistics.median(samples)


async def measure(name: str, store: str) -> list[str]:
    config = shortterm.Config(sweep_interval_s=0)
    async with (
        shortterm.open(store, config=config) as memory,
        shortterm.open(store, config=config, hydrate=False) as other,
    ):
        check = per_call_ns(memory.store.journal_moved)
        begin = await per_await_ns(memory.begin_write)
        apply = await catch_up_us(memory, other, 200, notified=store.startswith("postgres"))
    return [f"| {name} | {check:.0f} | {begin:.0f} | {apply:.0f} |"]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", help="also measure PostgreSQL (a private schema)")
    args = parser.parse_args()
    rows = ["| store | journal_moved() ns | begin_write() ns | applying one foreign clear µs |"]
    rows.append("|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        rows += await measure("SQLite", f"sqlite:///{Path(tmp) / 'follow.db'}")
    if args.postgres:
        schema = f"bench_{uuid.uuid4().hex[:12]}"
        sep = "&" if "?" in args.postgres else "?"
        try:
            rows += await measure("PostgreSQL", f"{args.postgres}{sep}schema={schema}")
        finally:
            import psycopg

            with psycopg.connect(args.postgres, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    print("\n".join(rows))


if __name__ == "__main__":
    asyncio.run(main())
