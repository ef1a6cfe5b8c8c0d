"""The Redis hot tier on one node and on a Redis Cluster: median latency of a capture (user and
server scope of one channel, one script), a read of one entry, an owner read (the entries a
context's other-channel recall gathers, through the owner directory), and a forget's fence
(tombstones in every group, one pipeline) for several group counts.

    python benchmarks/bench_cluster.py --redis redis://127.0.0.1:6379/0 \\
        --cluster redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002

Run on demand (not a test). Every prefix it writes is private to the run and removed after.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable

from shortterm.cache.redis import RedisCache
from shortterm.model import Message, ScopeKey, ScopeMeta
from shortterm.model.config import Config

ROUNDS = 300
META = ScopeMeta(server_id="g1")


def _url(base: str, prefix: str, groups: int) -> str:
    return f"{base}{'&' if '?' in base else '?'}prefix={prefix}&groups={groups}"


async def _median_ms(step: Callable[[int], Awaitable[object]]) -> float:
    times = []
    for i in range(ROUNDS):
        started = time.perf_counter()
        await step(i)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


async def _measure(base: str, groups: int) -> dict[str, float]:
    prefix = f"stm-bench:{uuid.uuid4().hex[:12]}:"
    cache = RedisCache.from_url(_url(base, prefix, groups), Config())
    now = time.time()
    try:

        async def capture(i: int) -> None:
            channel = f"c{i % 20}"
            user, server = ScopeKey.user("u1", channel, "p1"), ScopeKey.server("g1", channel, "p1")
            msgs = (Message("user", f"hello {i}", author_id="u1", at=now),)
            await cache.capture_scopes([(user, msgs, None), (server, msgs, None)], META, now)

        figures = {"capture": await _median_ms(capture)}
        figures["get"] = await _median_ms(
            lambda i: cache.get(ScopeKey.server("g1", f"c{i % 20}", "p1"), now)
        )
        figures["owner read (20 channels)"] = await _median_ms(
            lambda i: cache.owner_entries("server", "g1", now)
        )
        figures["forget fence"] = await _median_ms(
            lambda i: cache.record_forget(i + 1, [f"t{i}"], now)
        )
        return figures
    finally:
        await cache.clear_prefix()
        await cache.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", required=True, help="a single node: redis://host:6379/0")
    parser.add_argument("--cluster", required=True, help="redis+cluster://host:port,...")
    args = parser.parse_args()
    print("| tier | groups | capture | get | owner read (20 channels) | forget fence |")
    print("|---|---|---|---|---|---|")
    for name, base in (("one node", args.redis), ("cluster (3 masters)", args.cluster)):
        for groups in (1, 4, 16, 64):
            f = await _measure(base, groups)
            cells = " | ".join(f"{value:.2f} ms" for value in f.values())
            print(f"| {name} | {groups} | {cells} |")


if __name__ == "__main__":
    asyncio.run(main())
