"""What following other processes costs a call when nothing moved.

Every read and write first asks whether another process journaled something (SQLite's
``PRAGMA data_version``; on PostgreSQL a flag set by ``LISTEN``). This times that check on
its own (``store.journal_moved()``) and as a write sees it (``memory.begin_write()``), in
nanoseconds per call, median of repeated batches; and what catching up on one foreign forget
costs (another connection clears a channel; the next call applies it).

With ``--behind``, instead: a process ``N`` distilled writes behind (another process's tool
calls, one ``edit`` journal entry per scope, ``N`` scopes), the time of the call that applies
them and the statements it sends (SQLite: its trace callback; PostgreSQL: the round trips of a
loopback relay in a run of their own, as ``round_trips.py`` counts them, LISTEN left out), the
median of ``--rounds`` rounds.

    python benchmarks/bench_follow.py [--postgres postgresql://postgres@127.0.0.1:5432/test]
    python benchmarks/bench_follow.py --behind 1000 10000 [--postgres …]
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
from shortterm import ScopeKey
from shortterm.model.rows import DistilledWrite, ScopeMeta

BATCH, BATCHES = 20_000, 15
EDITS_PER_WRITE = 25  # scopes per distilled write of the process ahead


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


async def _edits(other: shortterm.Memory, keys: list[ScopeKey]) -> None:
    change = DistilledWrite(summary="noted elsewhere", set_summary=True)
    meta = ScopeMeta(server_id="g1", channel_name="general")
    for start in range(0, len(keys), EDITS_PER_WRITE):
        fence = await other.begin_write()
        chunk = [(k, meta) for k in keys[start : start + EDITS_PER_WRITE]]
        await other.store.write_distilled(
            chunk, change, reset_counter=None, now=time.time(), fence=fence
        )


async def behind(
    store: str, n: int, rounds: int, sent: Callable[[], int] | None = None
) -> list[tuple[float, int]]:
    """Per round, the call that applies ``n`` foreign edits: its ms, and the statements it
    sent as ``sent`` tells them (a running count), or SQLite's trace callback (0 otherwise)."""
    config = shortterm.Config(sweep_interval_s=0, write_behind_ms=0)
    figures = []
    async with (
        shortterm.open(store, config=config) as memory,
        shortterm.open(store, config=config, hydrate=False) as other,
    ):
        await memory.begin_write()
        db = getattr(memory.store, "_connection", None)  # SQLite's: traced
        for r in range(rounds):
            await _edits(other, [ScopeKey.server("g1", f"r{r}-c{i}", "p1") for i in range(n)])
            traced: list[str] = []
            if db is not None:
                db.db.set_trace_callback(traced.append)
            before = sent() if sent is not None else 0
            memory.journal.behind = True  # a NOTIFY may still be on its way
            started = time.perf_counter()
            await memory.begin_write()
            elapsed_ms = (time.perf_counter() - started) * 1000
            if db is not None:
                db.db.set_trace_callback(None)
            statements = sent() - before if sent is not None else len(traced)
            figures.append((elapsed_ms, statements))
    return figures


async def measure_behind(name: str, store: str, ns: list[int], rounds: int) -> list[str]:
    rows = []
    for n in ns:
        figures = await behind(store, n, rounds)
        times = [ms for ms, _ in figures]
        statements = [k for _, k in figures]
        if not store.startswith("sqlite"):
            # Counted in a run of their own: the relay's hop is not in the times.
            statements = [k for _, k in await _relayed(store, n, rounds)]
        rows.append(
            f"| {name} | {n:,} | {statistics.median(statements):,.0f} | "
            f"{statistics.median(times):,.0f} |"
        )
        print(rows[-1], flush=True)
    return rows


async def _relayed(store: str, n: int, rounds: int) -> list[tuple[float, int]]:
    from round_trips import Relay, relayed, target

    relay = Relay(target(store))
    port = await relay.start()
    try:
        url = relayed(store, port)
        url += f"{'&' if '?' in url else '?'}sslmode=disable"
        return await behind(url, n, rounds, lambda: relay.round_trips)
    finally:
        relay.close()
        await asyncio.sleep(0.5)  # the relayed connections, closed by the stores, wind down


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", help="also measure PostgreSQL (a private schema)")
    parser.add_argument("--behind", type=int, nargs="+", metavar="N", help="edits behind")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.behind:
        await main_behind(args)
        return
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


async def main_behind(args: argparse.Namespace) -> None:
    rows = ["| store | edits behind | statements | ms to apply them |", "|---|---:|---:|---:|"]
    with tempfile.TemporaryDirectory() as tmp:
        db = f"sqlite:///{Path(tmp) / 'behind.db'}"
        rows += await measure_behind("SQLite", db, args.behind, args.rounds)
    if args.postgres:
        schema = f"bench_{uuid.uuid4().hex[:12]}"
        sep = "&" if "?" in args.postgres else "?"
        try:
            url = f"{args.postgres}{sep}schema={schema}"
            rows += await measure_behind("PostgreSQL", url, args.behind, args.rounds)
        finally:
            import psycopg

            with psycopg.connect(args.postgres, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    print("\n".join(rows))


if __name__ == "__main__":
    asyncio.run(main())
