"""One process's PostgreSQL throughput by pool size, and without prepared statements.

What ``pool_max_size`` and ``pooler=transaction`` cost one process: bench_backends.py's turns
(a fenced capture of two scopes, a hot-tier read, a fenced, journaled summary of both) on
PostgreSQL and an in-process hot tier, ``--in-flight`` turns at a time. Each variant runs
``--rounds`` times, interleaved with the others (a shared machine drifts); the median and the
spread of turns/s are printed, with the connections the pool opened.

    python benchmarks/bench_pool.py --postgres postgresql://postgres@127.0.0.1:5432/test \\
        [--pgbouncer postgresql://postgres@127.0.0.1:6432/test] [--turns 2000]

``--pgbouncer``: the same database through a PgBouncer in transaction mode, as well. The
PostgreSQL schema it uses is private to the run and removed after.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from shortterm.cache.inprocess import InProcessCache
from shortterm.store.postgres import PostgresStore

sys.path.insert(0, str(Path(__file__).parent))
import bench_backends as turns_of

CONFIG = turns_of.CONFIG


async def run_once(url: str, schema: str, turns: int, in_flight: int) -> tuple[float, int]:
    """Turns/s, and the connections the pool opened."""
    store = PostgresStore.from_url(url, schema=schema)
    cache = InProcessCache(
        crude_ttl_s=CONFIG.crude_ttl_s,
        summary_ttl_s=CONFIG.summary_ttl_s,
        max_entries=CONFIG.max_entries,
        max_bytes=CONFIG.max_bytes,
    )
    try:
        await store.migrate()
        turns_of.JOURNAL_END = await store.journal_head()
        now = time.time()

        async def one_turn(i: int) -> None:
            for op in turns_of.OPS.values():
                await op(store, cache, i, now)

        await asyncio.gather(*(one_turn(i) for i in range(in_flight)))  # warm-up
        started = time.perf_counter()
        for start in range(0, turns, in_flight):
            await asyncio.gather(
                *(one_turn(i) for i in range(start, min(turns, start + in_flight)))
            )
        rate = turns / (time.perf_counter() - started)
        opened: Any = store.pool.get_stats().get("connections_num", 0)
        return rate, int(opened)
    finally:
        await cache.close()
        await store.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", required=True, help="a PostgreSQL URL")
    parser.add_argument("--pgbouncer", help="the same database through PgBouncer (transaction)")
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="1,2,4,10")
    args = parser.parse_args()
    sep = "&" if "?" in args.postgres else "?"
    variants = {
        f"direct, pool_max_size={n}": f"{args.postgres}{sep}pool_max_size={n}"
        for n in map(int, args.sizes.split(","))
    }
    variants["direct, pool_max_size=4, no prepared statements"] = (
        f"{args.postgres}{sep}pool_max_size=4&pooler=transaction"
    )
    if args.pgbouncer:
        bsep = "&" if "?" in args.pgbouncer else "?"
        variants["PgBouncer (transaction), pool_max_size=4"] = (
            f"{args.pgbouncer}{bsep}pool_max_size=4&pooler=transaction"
        )
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    rates: dict[str, list[float]] = {name: [] for name in variants}
    opened: dict[str, int] = {}
    try:
        for _ in range(args.rounds):
            for name, url in variants.items():
                rate, opened[name] = await run_once(url, schema, args.turns, args.in_flight)
                rates[name].append(rate)
    finally:
        store = PostgresStore.from_url(args.postgres)
        async with store._conn("cleanup") as conn:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await store.close()
    print(
        f"| variant ({args.in_flight} turns in flight) | turns/s median | min–max | connections |"
    )
    print("|---|---:|---:|---:|")
    for name, values in rates.items():
        print(
            f"| {name} | {statistics.median(values):.0f} | {min(values):.0f}–{max(values):.0f} "
            f"| {opened[name]} |"
        )


if __name__ == "__main__":
    asyncio.run(main())
