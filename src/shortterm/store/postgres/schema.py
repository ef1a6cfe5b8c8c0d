"""Schema migrations for PostgreSQL: the SQL files under ``migrations/postgresql``."""

from __future__ import annotations

from .. import migrations
from .connection import Conn
from .sql import MIGRATE_LOCK
from .values import one

__all__ = ["migrate", "version"]


async def migrate(conn: Conn, t: str, schema: str | None, lock_name: str) -> list[str]:
    """Apply pending migrations, each in one transaction with its ``schema_migrations``
    row. An advisory lock serializes processes migrating the same schema at once."""
    applied: list[str] = []
    async with conn.transaction():
        await conn.execute(MIGRATE_LOCK, (lock_name,))
        if schema:
            await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"', prepare=False)
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {t}schema_migrations (version INTEGER PRIMARY "
            "KEY, name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
            prepare=False,
        )
    for m in migrations.load("postgresql"):
        async with conn.transaction():
            await conn.execute(MIGRATE_LOCK, (lock_name,))
            cur = await conn.execute(
                f"SELECT 1 FROM {t}schema_migrations WHERE version = %s", (m.version,)
            )
            if await cur.fetchone() is not None:
                continue  # another process applied it while we waited
            if schema:
                await conn.execute(f'SET LOCAL search_path TO "{schema}"', prepare=False)
            for statement in m.statements:
                await conn.execute(statement, prepare=False)
            await conn.execute(
                f"INSERT INTO {t}schema_migrations (version, name) VALUES (%s, %s)",
                (m.version, m.name),
            )
        applied.append(m.label)
    return applied


async def version(conn: Conn, t: str) -> int:
    """The newest migration applied (0 for none)."""
    cur = await conn.execute(f"SELECT MAX(version) FROM {t}schema_migrations")
    return int(one(await cur.fetchone())[0] or 0)
