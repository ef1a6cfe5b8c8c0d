"""The PostgreSQL store's plumbing over its pool: every operation bounded in time, driver
errors mapped, transactions and the fence's locks, the schema."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg

from ...model.errors import ConfigError, StoreUnavailable
from ..sql_common import Statements
from . import journal, schema, sql
from .connection import Conn, Pool, first_contact, recheck
from .values import lock_key, one

__all__ = ["PooledStore"]


class PooledStore:
    """A pool of connections to one database (one schema in it), and a journal listener."""

    def __init__(
        self,
        pool: Pool,
        *,
        schema: str | None = None,
        owns_pool: bool = False,
        operation_timeout_s: float = 30.0,
        listen_timeout_s: float = 1.0,
    ) -> None:
        for name, value in (
            ("operation_timeout_s", operation_timeout_s),
            ("listen_timeout_s", listen_timeout_s),
        ):
            if not 0 < value < float("inf"):
                raise ConfigError(f"{name}={value!r} must be a positive number of seconds")
        if schema is not None and not sql.SCHEMA_NAME.match(schema):
            raise ConfigError(
                f"schema={schema!r}: use 1-63 letters, digits or underscores, not starting "
                "with a digit"
            )
        self.pool = pool
        self.schema = schema
        self.operation_timeout_s = operation_timeout_s
        self._owns_pool = owns_pool
        self._first: tuple[str, dict[str, Any]] | None = None  # how to connect, for the probe
        self._opened = False
        self._closed = False
        t = f'"{schema}".' if schema else ""
        self._t = t
        self._sql = Statements.of(t, "%s")
        self._upsert = sql.UPSERT.format(t=t)
        self._fenced_upsert = sql.FENCED_UPSERT.format(t=t)
        self._fence_lock = lock_key(f"shortterm.fence:{schema or ''}")
        self._journal_lock = lock_key(f"shortterm.journal:{schema or ''}")
        self._channel = f"stm_{lock_key(schema or 'public') & 0xFFFFFFFFFFFF:x}"
        self._listener = journal.JournalListener(
            pool,
            self._channel,
            f"SELECT COALESCE(MAX(seq), 0) FROM {t}journal",
            timeout_s=listen_timeout_s,
        )
        self._put = sql.PUT.format(t=t)
        self._multi: dict[tuple[int, bool, bool], str] = {}
        self._lock_name = f"shortterm.migrate:{schema or ''}"

    # -- plumbing -------------------------------------------------------------------------

    @asynccontextmanager
    async def _conn(self, what: str) -> AsyncIterator[Conn]:
        if self._closed:
            raise StoreUnavailable("PostgreSQL store is closed")
        sent = False  # once the caller has the connection, a failure is ambiguous
        try:
            # The bound covers the caller's statements too: they run while we are suspended
            # at the yield, in the same task.
            async with asyncio.timeout(self.operation_timeout_s):
                if not self._opened and self._owns_pool:
                    if self._first is not None:
                        await first_contact(*self._first, what)
                    await self.pool.open(wait=True, timeout=self.pool.timeout)
                    self._opened = True
                async with self.pool.connection() as conn:
                    sent = True
                    yield conn
        except TimeoutError as exc:
            raise StoreUnavailable(
                f"PostgreSQL {what} got no answer within {self.operation_timeout_s:g} s "
                "(operation_timeout_s)",
                maybe_applied=sent,
            ) from exc
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError):
                await recheck(self.pool)
            raise StoreUnavailable(
                f"PostgreSQL {what} failed: {exc}",
                maybe_applied=sent and not isinstance(exc, psycopg.errors.IntegrityError),
            ) from exc

    @asynccontextmanager
    async def _tx(self, what: str) -> AsyncIterator[Conn]:
        async with self._conn(what) as conn, conn.transaction():
            yield conn

    @asynccontextmanager
    async def _forget_tx(self, what: str) -> AsyncIterator[Conn]:
        """A transaction holding the fence lock exclusively (no fenced write is in flight
        while it runs) and the journal lock (sequence numbers commit in order)."""
        async with self._tx(what) as conn:
            await conn.execute(
                "SELECT pg_advisory_xact_lock(%s::bigint), pg_advisory_xact_lock(%s::bigint)",
                (self._fence_lock, self._journal_lock),
            )
            yield conn
            await conn.execute(f"SELECT pg_notify('{self._channel}', '')")

    # -- schema ---------------------------------------------------------------------------

    async def migrate(self) -> list[str]:
        """Apply pending migrations, each in one transaction with its ``schema_migrations``
        row. An advisory lock serializes processes migrating the same schema at once."""
        async with self._conn("migration") as conn:
            return await schema.migrate(conn, self._t, self.schema, self._lock_name)

    async def schema_version(self) -> int:
        async with self._conn("schema query") as conn:
            cur = await conn.execute(f"SELECT MAX(version) FROM {self._t}schema_migrations")
            return int(one(await cur.fetchone())[0] or 0)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._listener.close()
        if self._owns_pool:
            await self.pool.close()
