"""Tools for the forget-fence tests: random pauses at every await point of a backend, and an
oracle that finds words a forget should have removed.

``Jitter`` wraps a store or hot tier: every coroutine method pauses before it starts and
after it returns (no pause, a bare yield, or a short sleep, chosen at random), so concurrent
calls interleave differently on every run. ``Seen`` records, per written token, whether its
write began before a clear started: such a token must never be found afterwards.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import random
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
import redis.asyncio as aioredis

import shortterm
from shortterm.model.fence import WriteFence

TOKEN: contextvars.ContextVar[str | None] = contextvars.ContextVar("token", default=None)


class Jitter:
    """A store or hot tier whose every coroutine method pauses at random around its work."""

    def __init__(self, inner: Any, rng: random.Random, max_delay_s: float = 0.002) -> None:
        self._inner = inner
        self._rng = rng
        self._max_delay_s = max_delay_s

    async def _pause(self) -> None:
        roll = self._rng.random()
        if roll < 0.3:
            return
        if roll < 0.7:
            await asyncio.sleep(0)
        else:
            await asyncio.sleep(self._rng.random() * self._max_delay_s)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        async def paused(*args: Any, **kwargs: Any) -> Any:
            await self._pause()
            try:
                return await attr(*args, **kwargs)
            finally:
                await self._pause()

        return paused


@dataclass
class Seen:
    """When each token's write began, relative to the clears."""

    began_before_clear: set[str] = field(default_factory=set)
    clearing: bool = False
    cleared: bool = False

    def watch(self, memory: shortterm.Memory) -> None:
        """Record each write's beginning: after ``begin_write`` returned, so a token marked
        as begun before the clear really read its fence before the clear started."""
        engine = memory.engine  # where turns and the facade begin their writes
        original = engine.begin_write

        async def recording(triggerer: str | None = None) -> WriteFence:
            fence = await original(triggerer)
            token = TOKEN.get()
            if token is not None and not self.clearing:
                self.began_before_clear.add(token)
            return fence

        engine.begin_write = recording  # type: ignore[method-assign]


async def with_token(token: str, work: Callable[[], Awaitable[Any]]) -> Any:
    TOKEN.set(token)  # this task's own context
    return await work()


def found_in(text: str, tokens: set[str]) -> set[str]:
    return {t for t in tokens if t in text}


def redis_client(url: str) -> Any:
    """A client for a test's Redis: one node, or every node of a ``redis+cluster://`` URL
    (a cluster's scan walks each master)."""
    if "+cluster://" in url:
        from shortterm.cache.redis.client import open_url

        return open_url(url).client
    return aioredis.Redis.from_url(url, decode_responses=True)


async def raw_contents(
    *,
    sqlite_path: str | None = None,
    pg_url: str | None = None,
    schema: str | None = None,
    redis_url: str | None = None,
    prefix: str | None = None,
) -> str:
    """Everything the backends hold, as one text to search: SQLite and PostgreSQL rows
    (summaries and categories), and every value under the Redis prefix."""
    parts: list[str] = []
    if sqlite_path is not None:
        db = sqlite3.connect(sqlite_path)
        try:
            for row in db.execute("SELECT summary, categories FROM scopes"):
                parts.append(repr(row))
        finally:
            db.close()
    if pg_url is not None:
        table = f'"{schema}".scopes' if schema else "scopes"
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            cur = await conn.execute(f"SELECT summary, categories::text FROM {table}")
            parts.extend(repr(r) for r in await cur.fetchall())
    if redis_url is not None and prefix is not None:
        client = redis_client(redis_url)
        try:
            async for key in client.scan_iter(match=prefix + "*", count=1000):
                kind = await client.type(key)
                if kind == "hash":
                    parts.append(repr(await client.hgetall(key)))
                elif kind == "string":
                    parts.append(repr(await client.get(key)))
        finally:
            await client.aclose()
    return "\n".join(parts)
