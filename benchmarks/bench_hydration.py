"""Hydration at open: ``shortterm.open`` of a store holding N live summary rows (the rows
``shortterm bench --hydrate`` writes: 500 servers, one channel per row, a ~980-character
summary each), into the in-process hot tier.

    python benchmarks/bench_hydration.py --rows 100000,1000000 [--repeat 3] [--profile]
        [--postgres postgresql://postgres@127.0.0.1:5432/test]

Each size runs in a fresh process, so an earlier size's heap does not slow a later one. Wall
seconds of the open (what ``shortterm bench`` reports) and the process's CPU seconds over it
(user + system: on a machine shared with other work the CPU figure moves less), split into
reading the rows (the store's ``iter_hydration``), loading them into the tier
(``apply_hydration``) and the rest of the open; medians of ``--repeat`` opens. ``--profile``
prints a cProfile of one more open to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shortterm.bench.core import T0, write_hydration_rows
from shortterm.cache.inprocess import InProcessCache
from shortterm.memory import open as open_memory
from shortterm.model.config import Config
from shortterm.store.postgres import PostgresStore
from shortterm.store.sqlite import SQLiteStore

SUMMARY = "a distilled summary of the channel " * 28  # as write_hydration_rows writes


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def open_once(store: Any, rows: int) -> tuple[float, float, float, float]:
    """One open into a new in-process tier: wall s, CPU s, and the CPU s of reading the rows
    and of loading them into the tier."""
    cache = InProcessCache(
        crude_ttl_s=43200, summary_ttl_s=86400, max_entries=rows * 2, max_bytes=1 << 40
    )
    spent = {"read": 0.0, "load": 0.0}
    read, load = store.iter_hydration, cache.apply_hydration

    async def timed_read(**kw: Any) -> Any:
        batches = read(**kw)
        while True:
            began = cpu_s()
            try:
                batch = await batches.__anext__()
            except StopAsyncIteration:
                return
            finally:
                spent["read"] += cpu_s() - began
            yield batch

    async def timed_load(*args: Any) -> None:
        began = cpu_s()
        await load(*args)
        spent["load"] += cpu_s() - began

    store.iter_hydration = timed_read
    cache.apply_hydration = timed_load  # type: ignore[method-assign,assignment]
    started, cpu = time.perf_counter(), cpu_s()
    memory = await open_memory(
        store, cache, config=Config(sweep_interval_s=0), clock=lambda: T0 + 60
    )
    wall, cpu = time.perf_counter() - started, cpu_s() - cpu
    hydrated = memory.stats()["hydrated_rows"]
    await memory.close()
    assert hydrated == rows, (hydrated, rows)
    return wall, cpu, spent["read"], spent["load"]


async def runs(
    new_store: Callable[[], Any], rows: int, repeat: int, profile: bool
) -> list[tuple[float, float, float, float]]:
    out = [await open_once(new_store(), rows) for _ in range(repeat)]
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        await open_once(new_store(), rows)
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(20)
        print(text.getvalue(), file=sys.stderr)
    return out


async def postgres_runs(
    url: str, rows: int, repeat: int, profile: bool
) -> list[tuple[float, float, float, float]]:
    """The same rows in a schema of their own, dropped afterwards."""
    import psycopg

    schema = f"bench_h_{uuid.uuid4().hex[:10]}"
    store = PostgresStore.from_url(url, schema=schema)
    await store.migrate()
    await store.close()
    try:
        with psycopg.connect(url) as conn:
            conn.execute(
                f'INSERT INTO "{schema}".scopes (kind, owner_id, channel_id, persona_id, '
                "server_id, summary, summary_at, turns_since_refresh, created_at, updated_at) "
                "SELECT 'server', 's' || (i %% 500), 'c' || i, 'p0', 's' || (i %% 500), %s, "
                "%s, 3, %s, %s FROM generate_series(0, %s - 1) AS i",
                (SUMMARY, T0, T0, T0, rows),
            )
        return await runs(lambda: PostgresStore.from_url(url, schema=schema), rows, repeat, profile)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


async def one(rows: int, repeat: int, profile: bool, postgres: str | None) -> dict[str, Any]:
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = await write_hydration_rows(rows, Path(tmp))
        result["sqlite"] = await runs(lambda: SQLiteStore(path), rows, repeat, profile)
    if postgres:
        result["postgresql"] = await postgres_runs(postgres, rows, repeat, profile)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", default="100000,1000000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="cProfile one more open")
    parser.add_argument("--postgres", default=None, help="also hydrate from this PostgreSQL")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.one is not None:
        print(json.dumps(asyncio.run(one(opts.one, opts.repeat, opts.profile, opts.postgres))))
        return
    print(
        "| rows | store | wall s | CPU s | of which reading rows | loading into the tier "
        "| the rest | wall s, each open |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---|")
    for rows in (int(n) for n in opts.rows.split(",")):
        args = [sys.executable, __file__, "--one", str(rows), "--repeat", str(opts.repeat)]
        args += ["--profile"] if opts.profile else []
        args += ["--postgres", opts.postgres] if opts.postgres else []
        done = subprocess.run(args, check=True, stdout=subprocess.PIPE, text=True)
        result = json.loads(done.stdout.strip().splitlines()[-1])
        for store, opens in result.items():
            wall, cpu, read, load = (statistics.median(o[i] for o in opens) for i in range(4))
            rest = statistics.median(o[1] - o[2] - o[3] for o in opens)
            each = ", ".join(f"{o[0]:.2f}" for o in opens)
            print(
                f"| {rows:,} | {store} | {wall:.2f} | {cpu:.2f} | {read:.2f} | {load:.2f} "
                f"| {rest:.2f} | {each} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
