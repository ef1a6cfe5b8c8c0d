"""The PostgreSQL store's connection part: its pool (every operation bounded in time, driver
errors mapped, transactions and the fence's locks) and its journal listener.

Nothing here needs a session of its own, so the pool may sit behind a pooler in transaction
mode (``pooler="transaction"``): locks are transaction advisory locks, the migration's
``search_path`` is ``SET LOCAL``, tables are named with their schema, no temporary table; what
does need a session is left out there (prepared statements, ``LISTEN``: see :mod:`.journal`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

import psycopg
from psycopg_pool import PoolTimeout

from ...model.errors import ConfigError, StoreUnavailable
from ..own_entries import OwnEntries
from . import journal, sql
from .connection import Conn, Pool, PoolWatch, first_contact, recheck, server_hint
from .layout import Layout

__all__ = ["UNREACHABLE_WAIT_S", "Pooled"]

# While the server is down (the pool's newest connection attempt failed: a restart, a crash,
# a failover), a request does not wait for a pooled connection: the pool waits out psycopg's
# back-off between its attempts (1 s, then 2 s), and every request would wait for it, or for
# pool_timeout_s, or for the whole outage. Instead a request connects on its own (at most
# pool_max_size such connections at once, each closed after its operation) within this many
# seconds, or fails (``StoreUnavailable``, nothing sent): at once when the server refuses. So a
# request started during an outage answers within about this much, degraded or 503, and the
# first one after the server is back is served; a connection of its own also wakes the pool,
# and once the pool connects again, requests use it. A wait for the pool already under way ends
# when an attempt fails. A busy pool (the server up, or at its connection limit) is waited for
# as before, and statements keep operation_timeout_s.
UNREACHABLE_WAIT_S = 0.5


class Pooled:
    """A pool of connections to one database (one schema in it), and a journal listener.

    ``pooler="transaction"``: the pool's connections reach a pooler in transaction mode
    (PgBouncer's ``pool_mode = transaction``, …), so each transaction may run on another server
    connection. The pool must then prepare nothing (its ``kwargs`` say
    ``prepare_threshold=None``), and the journal is not LISTENed to through it: the
    listener polls the journal's end instead, or LISTENs at ``listen_url`` (a direct
    connection) when given.
    """

    def __init__(
        self,
        pool: Pool,
        *,
        schema: str | None,
        owns_pool: bool,
        operation_timeout_s: float,
        listen_timeout_s: float,
        pooler: Literal["transaction"] | None,
        listen_url: str | None,
        watch: PoolWatch | None,
        probes: Sequence[tuple[str, dict[str, Any], str]],
    ) -> None:
        """The arguments of :class:`~shortterm.store.postgres.PostgresStore`, checked here."""
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
        _check_pooler(pool, pooler)
        self.pool = pool
        self.schema = schema
        self.pooler = pooler
        self.operation_timeout_s = operation_timeout_s
        self._owns_pool = owns_pool
        # How to connect, for the probe before the pool opens: the pool's way, then listen_url.
        self._first = list(probes)
        self.watch = watch if watch is not None else PoolWatch()  # also read for readiness
        self._opened = False
        self._closed = False
        # Connections of the requests' own while the server is down (see UNREACHABLE_WAIT_S):
        # at most as many as the pool's.
        self._own_slots = asyncio.Semaphore(pool.max_size)
        self.own_entries = OwnEntries()  # the journal entries appended through this store
        self.layout = layout = Layout.of(schema)
        self.listener = journal.JournalListener(
            pool,
            layout.channel,
            layout.common.journal_head,
            timeout_s=listen_timeout_s,
            conninfo=listen_url,
            notify=pooler is None or listen_url is not None,
        )

    @asynccontextmanager
    async def conn(self, what: str) -> AsyncIterator[Conn]:
        if self._closed:
            raise StoreUnavailable("PostgreSQL store is closed")
        sent = False  # once the caller has the connection, a failure is ambiguous
        waiting: tuple[float, float, str] | None = None  # a pool wait: since, bound, its name
        watch = self.watch
        try:
            # The bound covers the caller's statements too: they run while we are suspended
            # at the yield, in the same task.
            async with asyncio.timeout(self.operation_timeout_s) as bound:
                if not self._opened and self._owns_pool:
                    await self._open(what)
                if watch.down:
                    async with self._own(what) as own:  # see UNREACHABLE_WAIT_S
                        sent = True
                        yield own
                    return
                waiting = self._wait_bound(bound)
                watch.waiting(bound)  # an attempt that fails meanwhile ends the wait
                try:
                    async with self.pool.connection(timeout=waiting[1]) as conn:
                        watch.served(bound, waiting[0])
                        waiting = None
                        sent = True
                        yield conn
                finally:
                    watch.served(bound)
        except TimeoutError as exc:
            if waiting is not None:
                raise self._exhausted(what, waiting[2]) from exc
            raise StoreUnavailable(
                f"PostgreSQL {what} got no answer within {self.operation_timeout_s:g} s "
                "(operation_timeout_s)",
                maybe_applied=sent,
            ) from exc
        except psycopg.Error as exc:
            if waiting is not None and isinstance(exc, PoolTimeout):
                raise self._exhausted(what, waiting[2]) from exc
            if isinstance(exc, psycopg.OperationalError):
                await recheck(self.pool)
            hint = server_hint(exc, pooled=self.pooler is not None)
            raise StoreUnavailable(
                f"PostgreSQL {what} failed: {exc}{hint}",
                maybe_applied=sent and not isinstance(exc, psycopg.errors.IntegrityError),
            ) from exc

    @asynccontextmanager
    async def _own(self, what: str) -> AsyncIterator[Conn]:
        """While the server is down: a connection of this request's own, made within
        ``UNREACHABLE_WAIT_S`` (a free slot included), closed after it; else
        ``StoreUnavailable``. Made like the pool's, but not counted as the pool's: ``down``
        ends when the pool connects again, which a success here asks it to do now."""
        pool = self.pool
        conninfo, kwargs = pool.conninfo, pool.kwargs
        if not isinstance(conninfo, str) or not isinstance(kwargs, dict):
            raise self._unreachable(what)  # computed per connection: the pool's alone
        try:
            async with asyncio.timeout(UNREACHABLE_WAIT_S):
                await self._own_slots.acquire()
                try:
                    conn = await psycopg.AsyncConnection.connect(conninfo, **kwargs)
                except BaseException:
                    self._own_slots.release()
                    raise
        except (psycopg.OperationalError, TimeoutError) as exc:
            raise self._unreachable(what) from exc
        try:
            await recheck(pool)  # the pool may be waiting out its back-off, or idle
            yield conn
        finally:
            try:
                await conn.close()
            finally:
                self._own_slots.release()

    def _unreachable(self, what: str) -> StoreUnavailable:
        message = (
            f"PostgreSQL {what}: the server is unreachable (the pool goes on reconnecting; "
            f"nothing was sent): {self.watch.refused}"
        )
        self.watch.timed_out(message)
        return StoreUnavailable(message, maybe_applied=False)

    async def read(self, what: str, query: str, params: Sequence[object]) -> list[Any]:
        """The rows of a read. A read changes nothing, so one that met a dropped connection is
        tried once more, on a connection the pool's re-check left (see :meth:`conn`): after a
        server restart or a failover every idle connection is dead, and the first call would
        otherwise fail (and serve degraded) while the server answers."""
        try:
            return await self.fetch(what, query, params)
        except StoreUnavailable as exc:
            cause = exc.__cause__
            if not isinstance(cause, psycopg.OperationalError) or isinstance(cause, PoolTimeout):
                raise
        return await self.fetch(what, query, params)

    async def fetch(self, what: str, query: str, params: Sequence[object]) -> list[Any]:
        async with self.conn(what) as conn:
            cur = await conn.execute(query, params)
            return await cur.fetchall()

    async def _open(self, what: str) -> None:
        for conninfo, kwargs, via in self._first:
            said = self.pooler is not None
            try:
                # listen_url's own probe names it: its failure is not the migration's.
                await first_contact(
                    conninfo, kwargs, f"{via} connection" if via else what,
                    listen=bool(via), pooler_said=said,
                )  # fmt: skip
            except StoreUnavailable as exc:
                if not via or via in str(exc):
                    raise
                raise StoreUnavailable(f"{via}: {exc}") from exc.__cause__
        await self.pool.open(wait=True, timeout=self.pool.timeout)
        self._opened = True

    def _wait_bound(self, bound: asyncio.Timeout) -> tuple[float, float, str]:
        """How long a wait for a pooled connection may last from now: ``pool_timeout_s``, or
        what is left of ``operation_timeout_s`` if that ends first (the bound the caller was
        promised holds whichever way the wait ends). With the monotonic time it began, and
        the bound's name."""
        now, deadline = time.monotonic(), bound.when()
        left = self.pool.timeout
        if deadline is not None:
            left = deadline - asyncio.get_running_loop().time()
        if self.pool.timeout <= left:
            return now, self.pool.timeout, "pool_timeout_s"
        return now, max(left, 0.001), "operation_timeout_s"

    def _exhausted(self, what: str, name: str) -> StoreUnavailable:
        """The error of a wait for a pooled connection that outlasted its bound, with the
        server's refusal when a connection attempt met one; kept for readiness. ``name``:
        the bound that ended it, unless an attempt failed meanwhile (the server is down)."""
        if self.watch.down:
            return self._unreachable(what)
        bound_s = self.pool.timeout if name == "pool_timeout_s" else self.operation_timeout_s
        message = (
            f"PostgreSQL {what}: no connection free within {bound_s:g} s ({name}): the pool "
            f"(pool_max_size={self.pool.max_size}) is exhausted or the server refuses new "
            "connections"
        )
        refused = self.watch.refused
        if refused is not None:
            message += f": {refused}"
        self.watch.timed_out(message)
        return StoreUnavailable(message, maybe_applied=False)

    @asynccontextmanager
    async def tx(self, what: str) -> AsyncIterator[Conn]:
        async with self.conn(what) as conn, conn.transaction():
            yield conn

    @asynccontextmanager
    async def forget_tx(self, what: str) -> AsyncIterator[Conn]:
        """A transaction holding the fence lock exclusively (no fenced write is in flight
        while it runs) and the journal lock (sequence numbers commit in order)."""
        layout = self.layout
        async with self.tx(what) as conn:
            await conn.execute(
                "SELECT pg_advisory_xact_lock(%s::bigint), pg_advisory_xact_lock(%s::bigint)",
                (layout.fence_lock, layout.journal_lock),
            )
            yield conn
            await conn.execute(f"SELECT pg_notify('{layout.channel}', '')")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self.listener.close()
        if self._owns_pool:
            await self.pool.close()


def _check_pooler(pool: Pool, pooler: str | None) -> None:
    """A pool behind a transaction pooler must not prepare: psycopg's statement names repeat
    on every connection, so a name prepared by another client on the same server connection
    would be taken for ours."""
    if pooler is None:
        return
    if pooler != "transaction":
        raise ConfigError(
            f"pooler={pooler!r}: the one mode that needs saying is 'transaction' (PgBouncer's "
            "pool_mode = transaction and the like); a session-mode pooler needs no option"
        )
    if not isinstance(pool.kwargs, dict):
        return  # computed per connection: the caller's to get right
    if pool.kwargs.get("prepare_threshold", 5) is not None:
        raise ConfigError(
            "pooler='transaction': make the pool with kwargs={'autocommit': True, "
            "'prepare_threshold': None}: no statement may be prepared through the pooler"
        )
