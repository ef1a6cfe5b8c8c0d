"""Per-turn cost of each backend pair: SQLite + in-process beside PostgreSQL + Redis.

One turn is what the write and read paths ask of the tiers:

* capture: ``store.touch`` of the user and the server scope (one transaction, the live
  counter incremented) and ``cache.capture_scopes`` of both (one hot-tier call, as the
  facade's capture makes);
* get: ``cache.get`` of the server scope (a hit);
* summary: ``store.write_distilled`` of a summary to both scopes, resetting the counter.

Every write carries a forget fence, as the facade's writes do (checked in the same statement
or script that writes).

Each operation is timed on its own (median and p99 in µs); turns/s is measured twice, one turn
at a time and with 32 turns in flight. Network round trips per turn are counted by a second
pass through a loopback TCP relay that counts every change of direction of each connection
(timings come from the first pass, without the relay).

    python benchmarks/bench_backends.py --postgres postgresql://postgres@127.0.0.1:5432/test \\
        --redis redis://127.0.0.1:6379/0 [--turns 2000]

The PostgreSQL schema and the Redis prefix it uses are private to the run and removed after.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from shortterm.cache.base import HotTier
from shortterm.cache.inprocess import InProcessCache
from shortterm.model import Message, ScopeKey
from shortterm.model.config import Config
from shortterm.model.fence import WriteFence
from shortterm.store.base import DistilledWrite, ScopeMeta, Store
from shortterm.store.sqlite import SQLiteStore

CONFIG = Config()
META = ScopeMeta(server_id="g1", server_name="Guild", channel_name="general")
SUMMARY = DistilledWrite(summary="The group planned a hike on Saturday. " * 10, set_summary=True)
MESSAGES = tuple(
    Message("user", f"message {i} " + "lorem ipsum dolor sit amet " * 11, author_id=f"u{i % 3}")
    for i in range(10)
)


def scopes(i: int) -> tuple[ScopeKey, ScopeKey]:
    channel = f"c{i % 200}"
    return ScopeKey.user(f"u{i % 50}", channel, "p1"), ScopeKey.server("g1", channel, "p1")


# The durable journal's end when the run began: a fence below it is refused (the journal's
# start may have been pruned), as a real turn's is not.
JOURNAL_END = 0


def fence(i: int) -> WriteFence:
    """The fence a turn's writes carry (checked where they land, as the facade does)."""
    return WriteFence(JOURNAL_END, f"u{i % 50}")


async def capture(store: Store, cache: HotTier, i: int, now: float) -> None:
    user, server = scopes(i)
    f = fence(i)
    rows = await store.touch([(user, META), (server, META)], increment=server, now=now, fence=f)
    await cache.capture_scopes(
        [(user, MESSAGES, rows[0]), (server, MESSAGES, rows[1])], META, now, f
    )


async def get(store: Store, cache: HotTier, i: int, now: float) -> None:
    await cache.get(scopes(i)[1], now)


async def summary(store: Store, cache: HotTier, i: int, now: float) -> None:
    user, server = scopes(i)
    await store.write_distilled(
        [(user, META), (server, META)], SUMMARY, reset_counter=server, now=now, fence=fence(i)
    )


OPS: dict[str, Callable[[Store, HotTier, int, float], Awaitable[None]]] = {
    "capture": capture,
    "get": get,
    "summary": summary,
}


# -- counting round trips -------------------------------------------------------------------


@dataclass
class Relay:
    """A loopback TCP relay that counts request bursts (client→server after a reply)."""

    host: str
    port: int
    round_trips: int = 0
    server: asyncio.Server | None = None
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        last = ["down"]  # who spoke last on this connection

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, way: str) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await src.read(65536):
                    if way == "up" and last[0] == "down":
                        self.round_trips += 1
                    last[0] = way
                    dst.write(data)
                    await dst.drain()
            dst.close()

        tasks = [
            asyncio.create_task(pump(reader, up_writer, "up")),
            asyncio.create_task(pump(up_reader, writer, "down")),
        ]
        self.tasks.update(tasks)
        try:
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:  # closed when the relay is, too: no socket left for the collector
            writer.close()
            up_writer.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def _via(url: str, port: int) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))


# -- backends -------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def local_pair() -> AsyncIterator[tuple[Store, HotTier]]:
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "bench.db")
        cache = InProcessCache(
            crude_ttl_s=CONFIG.crude_ttl_s,
            summary_ttl_s=CONFIG.summary_ttl_s,
            max_entries=CONFIG.max_entries,
            max_bytes=CONFIG.max_bytes,
        )
        await store.migrate()
        try:
            yield store, cache
        finally:
            await cache.close()
            await store.close()


@contextlib.asynccontextmanager
async def shared_pair(
    pg_url: str, redis_url: str, tag: str
) -> AsyncIterator[tuple[Store, HotTier]]:
    from shortterm.cache.redis import RedisCache
    from shortterm.store.postgres import PostgresStore

    store = PostgresStore.from_url(pg_url, schema=f"bench_{tag}")
    cache = RedisCache.from_url(f"{redis_url}?prefix={quote(f'bench:{tag}:')}", CONFIG)
    await store.migrate()
    if hasattr(cache, "repair"):  # its groups marked, as a process opens them (fenced writes)
        await cache.repair(store, time.time())
    try:
        yield store, cache
    finally:
        await cache.clear_prefix()
        await cache.close()
        async with store._conn("cleanup") as conn:
            await conn.execute(f'DROP SCHEMA "bench_{tag}" CASCADE')
        await store.close()


# -- measuring ------------------------------------------------------------------------------


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(store: Store, cache: HotTier, turns: int) -> dict[str, object]:
    global JOURNAL_END
    JOURNAL_END = await store.journal_head()
    now = time.time()
    for i in range(200):  # warm-up: rows exist, statements are prepared, scripts loaded
        for op in OPS.values():
            await op(store, cache, i, now)
    timings: dict[str, list[float]] = {name: [] for name in OPS}
    turn_times: list[float] = []
    for i in range(turns):
        started = time.perf_counter()
        for name, op in OPS.items():
            t = time.perf_counter()
            await op(store, cache, i, now)
            timings[name].append((time.perf_counter() - t) * 1e6)
        turn_times.append(time.perf_counter() - started)

    async def one_turn(i: int) -> None:
        for op in OPS.values():
            await op(store, cache, i, now)

    started = time.perf_counter()
    for start in range(0, turns, 32):
        await asyncio.gather(*(one_turn(i) for i in range(start, min(turns, start + 32))))
    concurrent = turns / (time.perf_counter() - started)
    return {
        "ops": {n: (statistics.median(v), pct(v, 0.99)) for n, v in timings.items()},
        "sequential": len(turn_times) / sum(turn_times),
        "concurrent": concurrent,
    }


async def count_round_trips(pg_url: str, redis_url: str, tag: str) -> dict[str, dict[str, float]]:
    pg = urlsplit(pg_url)
    rd = urlsplit(redis_url)
    pg_relay = Relay(pg.hostname or "127.0.0.1", pg.port or 5432)
    redis_relay = Relay(rd.hostname or "127.0.0.1", rd.port or 6379)
    pg_port, redis_port = await pg_relay.start(), await redis_relay.start()
    out: dict[str, dict[str, float]] = {}
    try:
        async with shared_pair(_via(pg_url, pg_port), _via(redis_url, redis_port), tag) as (s, c):
            global JOURNAL_END
            JOURNAL_END = await s.journal_head()
            now = time.time()
            for i in range(20):
                for op in OPS.values():
                    await op(s, c, i, now)
            for name, op in OPS.items():
                before = (pg_relay.round_trips, redis_relay.round_trips)
                for i in range(100):
                    await op(s, c, i, now)
                out[name] = {
                    "postgres": (pg_relay.round_trips - before[0]) / 100,
                    "redis": (redis_relay.round_trips - before[1]) / 100,
                }
    finally:
        await pg_relay.close()
        await redis_relay.close()
    return out


def report(results: dict[str, dict[str, object]], trips: dict[str, dict[str, float]]) -> str:
    lines = [
        "| backends | op | median µs | p99 µs | PostgreSQL round trips | Redis round trips |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for backend, r in results.items():
        ops = r["ops"]
        assert isinstance(ops, dict)
        for name, (median, p99) in ops.items():
            shared = backend.startswith("PostgreSQL")
            pg = f"{trips[name]['postgres']:.2f}" if shared else "–"
            rd = f"{trips[name]['redis']:.2f}" if shared else "–"
            lines.append(f"| {backend} | {name} | {median:.0f} | {p99:.0f} | {pg} | {rd} |")
    lines += [
        "",
        "| backends | turns/s, one at a time | turns/s, 32 in flight |",
        "|---|---:|---:|",
    ]
    for backend, r in results.items():
        lines.append(f"| {backend} | {r['sequential']:.0f} | {r['concurrent']:.0f} |")
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", required=True, help="a PostgreSQL URL")
    parser.add_argument("--redis", required=True, help="a Redis URL")
    parser.add_argument("--turns", type=int, default=2000)
    args = parser.parse_args()
    tag = uuid.uuid4().hex[:12]
    results: dict[str, dict[str, object]] = {}
    async with local_pair() as (store, cache):
        results["SQLite + in-process"] = await measure(store, cache, args.turns)
    async with shared_pair(args.postgres, args.redis, tag) as (store, cache):
        results["PostgreSQL + Redis"] = await measure(store, cache, args.turns)
    trips = await count_round_trips(args.postgres, args.redis, tag + "rt")
    print(report(results, trips))


if __name__ == "__main__":
    asyncio.run(main())
