"""Read back everything a backend holds, to look for what must not be there.

Each audit returns ``(place, text)`` pairs: every row of every table (SQLite, PostgreSQL), the
raw bytes of the SQLite files (free pages and the WAL included), and every key and value
under a Redis prefix.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import redis.asyncio as aioredis

Found = list[tuple[str, str]]


def sqlite_rows(db: Path) -> Found:
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        out: Found = []
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                out.append((table, repr(row)))
        return out
    finally:
        conn.close()


def sqlite_bytes(folder: Path) -> Found:
    """Every file of the database (main file, WAL, shared memory) as text, bytes kept."""
    return [
        (path.name, path.read_bytes().decode("utf-8", "replace"))
        for path in sorted(folder.iterdir())
        if path.is_file()
    ]


async def postgres_rows(url: str, schema: str) -> Found:
    out: Found = []
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        )
        tables = [str(r[0]) for r in await cur.fetchall()]
        assert "scopes" in tables, tables
        for table in tables:
            cur = await conn.execute(f'SELECT t::text FROM "{schema}"."{table}" t')
            out.extend((table, str(r[0])) for r in await cur.fetchall())
    return out


async def redis_keyspace(url: str, prefix: str) -> Found:
    """Every key under ``prefix`` (SCAN) with its whole value, whatever its type."""
    client = aioredis.Redis.from_url(url, decode_responses=True)
    out: Found = []
    try:
        async for name in client.scan_iter(match=f"{prefix}*", count=1000):
            kind = await client.type(name)
            if kind == "hash":
                value: object = await client.hgetall(name)
            elif kind == "set":
                value = sorted(await client.smembers(name))
            elif kind == "zset":
                value = await client.zrange(name, 0, -1, withscores=True)
            elif kind == "list":
                value = await client.lrange(name, 0, -1)
            else:
                value = await client.get(name)
            out.append((name, f"{name} {value!r}"))
    finally:
        await client.aclose()
    return out


def holding(found: Found, *needles: str) -> list[str]:
    """The places whose text contains any of ``needles``."""
    return [place for place, text in found if any(n in text for n in needles)]
