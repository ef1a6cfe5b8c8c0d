"""Two figures of the shared (Redis) hot tier's edges, through the facade on PostgreSQL + Redis:

* round trips: PostgreSQL and Redis round trips of one capture, one context and one tool call,
  counted by the loopback relay of ``bench_backends.py`` (a context's owner read returns the
  newest settings change, and the write scripts check the floor, in round trips they made
  anyway);
* a loss of Redis data: the median capture, the first one after a ``FLUSHDB`` (refused by the
  floor), and the next (the floor set again, the journal followed), on a ``redis-server`` of
  the script's own (started here, on a free port, without persistence).

    python benchmarks/redis_edges.py --postgres postgresql://postgres@127.0.0.1:5432/test \\
        --redis redis://127.0.0.1:6379/0

The PostgreSQL schemas and the Redis prefix it uses are private to the run and removed after.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import redis.asyncio as aioredis

import shortterm
from shortterm import Message, Reply
from shortterm.tool import texts

sys.path.insert(0, str(Path(__file__).parent))
from bench_backends import Relay, _via

CONFIG = shortterm.Config(sweep_interval_s=0)
N = 50


async def _drop(memory: shortterm.Memory, schema: str) -> None:
    async with memory.store._conn("cleanup") as conn:  # type: ignore[attr-defined]
        await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def _turn(memory: shortterm.Memory, i: int) -> shortterm.Turn:
    return memory.turn(user_id="u1", channel_id=f"c{i % 5}", server_id="g1", persona_id="p")


async def _capture(memory: shortterm.Memory, i: int) -> None:
    await _turn(memory, i).capture(
        history=[Message("user", f"hi {i}", author_id="u1")], replies=[Reply("ok")]
    )


async def round_trips(pg_url: str, redis_url: str) -> None:
    pg_relay, rd_relay = Relay("127.0.0.1", 5432), Relay("127.0.0.1", 6379)
    pg_port, rd_port = await pg_relay.start(), await rd_relay.start()
    tag = uuid.uuid4().hex[:10]
    store = _via(pg_url, pg_port) + f"?schema=trips_{tag}"
    cache = _via(redis_url, rd_port) + f"?prefix={quote(f'trips:{tag}:')}"
    try:
        async with shortterm.open(store=store, cache=cache, config=CONFIG) as memory:

            async def context(i: int) -> None:
                await _turn(memory, i).context()

            async def tool(i: int) -> None:
                result = await _turn(memory, i).call_tool(texts.TOOL_NAME, {"summary": f"s{i}"})
                assert result.ok, result.message

            async def capture(i: int) -> None:
                await _capture(memory, i)

            ops = (("capture", capture), ("context", context), ("tool call", tool))
            for i in range(10):
                for _name, op in ops:
                    await op(i)
            for name, op in ops:
                await asyncio.sleep(0.3)  # the NOTIFYs of the previous op have arrived
                before = (pg_relay.round_trips, rd_relay.round_trips)
                for i in range(N):
                    await op(i)
                print(
                    f"{name}: PostgreSQL {(pg_relay.round_trips - before[0]) / N:.2f}, "
                    f"Redis {(rd_relay.round_trips - before[1]) / N:.2f} round trips"
                )
            await _drop(memory, f"trips_{tag}")
            await memory.cache.clear_prefix()  # type: ignore[attr-defined]
    finally:
        await pg_relay.close()
        await rd_relay.close()


async def loss(pg_url: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = subprocess.Popen(  # noqa: ASYNC220 - returns at once; pinged below
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    raw = aioredis.Redis.from_url(url)
    tag = uuid.uuid4().hex[:10]
    try:
        for _ in range(100):
            try:
                await raw.ping()
                break
            except (OSError, aioredis.ConnectionError):
                await asyncio.sleep(0.05)
        store = f"{pg_url}?schema=loss_{tag}"
        async with shortterm.open(store=store, cache=url, config=CONFIG) as memory:

            async def timed(i: int) -> float:
                started = time.perf_counter()
                await _capture(memory, i)
                return (time.perf_counter() - started) * 1e3

            for i in range(50):
                await timed(i)
            normal = [await timed(i) for i in range(200)]
            refused, next_one = [], []
            for r in range(30):
                await memory.clear_channel(f"c{r % 5}")
                await raw.flushdb()
                refused.append(await timed(r))
                next_one.append(await timed(r + 1))
            print(
                f"capture, median ms: {statistics.median(normal):.2f}; the first after a "
                f"FLUSHDB (refused) {statistics.median(refused):.2f}; the next (floor set "
                f"again, journal followed) {statistics.median(next_one):.2f}; "
                f"scopes refused: {memory.cache.stats()['fenced']} (30 losses, 2 scopes each)"
            )
            await _drop(memory, f"loss_{tag}")
    finally:
        await raw.aclose()
        server.kill()
        server.wait()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", required=True, help="a PostgreSQL URL")
    parser.add_argument("--redis", required=True, help="a Redis URL (round trips only)")
    args = parser.parse_args()
    await round_trips(args.postgres, args.redis)
    await loss(args.postgres)


if __name__ == "__main__":
    asyncio.run(main())
