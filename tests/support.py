"""Test helpers shared by the suites (importable, unlike conftest)."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable

import pytest

from shortterm.cache.base import HotTier
from shortterm.store.base import Store

StoreFactory = Callable[[], Awaitable[Store]]
CacheFactory = Callable[..., Awaitable[HotTier]]

T0 = 1_800_000_000.0


class FakeClock:
    """Epoch seconds that move only when a test says so."""

    def __init__(self, start: float = T0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def service_url(variable: str, what: str) -> str:
    url = os.environ.get(variable)
    if url:
        return url
    if os.environ.get("SHORTTERM_TEST_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{variable} is required here ({what} tests are mandatory in CI)")
    pytest.skip(f"{what} not configured: set {variable} to run these tests")


def with_query(url: str, **options: object) -> str:
    """``url`` with ``options`` added to its query string."""
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return f"{url}{'&' if '?' in url else '?'}{query}"


async def drop_postgres_schema(url: str, schema: str) -> None:
    """Remove a test's private schema (and everything in it)."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def clear_redis_prefix(url: str, prefix: str) -> None:
    """Remove every key a test wrote under its private prefix (SCAN + DEL). The test
    cluster (``redis+cluster://``) is thrown away with the session instead."""
    import redis.asyncio as aioredis

    if "+cluster://" in url:
        return

    client = aioredis.Redis.from_url(url)
    try:
        async for name in client.scan_iter(match=f"{prefix}*", count=1000):
            await client.delete(name)
    finally:
        await client.aclose()
