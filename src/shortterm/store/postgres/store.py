"""The PostgreSQL store: the Store protocol's operations over a pool.

This class is the one module of the package over 500 lines: it is the protocol's two dozen
operations, each short, and splitting them further would scatter one transaction's steps.
The statement text lives in :mod:`.sql`, values in :mod:`.values`, connecting in
:mod:`.connection`, the journal in :mod:`.journal`, settings in :mod:`.settings`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from ...model import fence as fencing
from ...model import urls
from ...model.errors import ConfigError, StoreUnavailable
from ...model.keys import Privacy, ScopeKey, ScopeKind
from ...model.rows import DistilledWrite, HydrationRow, ScopeMeta, ScopeRow, ServerSummary
from ...model.settings import ServerSettings, UserSettings
from ..base import Forgotten
from ..sql_common import SCOPE_COLS, key_args
from . import journal, schema, sql
from . import settings as settings_sql
from .connection import Conn, Pool, first_contact, recheck
from .values import (
    clean,
    jsonb,
    lock_key,
    one,
    one_row,
    put_row_params,
    scope_params,
    scope_row,
    targets_of,
)

__all__ = ["PostgresStore"]


class PostgresStore:
    """A durable store in PostgreSQL. Use :meth:`from_url`, or pass a pool you manage.

    ``pool`` must hand out connections in autocommit mode. With ``schema``, every table lives
    in that schema (created by :meth:`migrate`), so several deployments or test runs can share
    one database without seeing each other.
    """

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

    @classmethod
    def from_url(cls, url: str, *, schema: str | None = None) -> PostgresStore:
        """``postgresql://user@host:5432/db?schema=name&pool_max_size=10``.

        The pool is created closed; it opens on first use (``migrate`` at ``shortterm.open``).
        """
        conninfo, options = urls.split_options(
            url,
            schemes=("postgresql", "postgres"),
            ours=sql.OWN_OPTIONS,
            wrong_scheme=f"not a PostgreSQL URL: {urls.shown_url(url)!r} (use postgresql://user@host/db)",
        )
        min_size = urls.at_least_one(options, "pool_min_size", 1, url)
        max_size = max(min_size, urls.at_least_one(options, "pool_max_size", 10, url))
        timeout_s = urls.positive_seconds(options, "pool_timeout_s", 30.0, url)
        reconnect_s = urls.positive_seconds(options, "pool_reconnect_timeout_s", 2.0, url)
        operation_timeout_s = urls.positive_seconds(options, "operation_timeout_s", 30.0, url)
        listen_timeout_s = urls.positive_seconds(options, "listen_timeout_s", 1.0, url)
        if "application_name=" not in conninfo:
            conninfo += ("&" if "?" in conninfo else "?") + "application_name=shortterm"
        connect_kwargs: dict[str, Any] = {"autocommit": True, "prepare_threshold": 0}
        pool: Pool = AsyncConnectionPool(
            conninfo,
            kwargs=connect_kwargs,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout_s,
            reconnect_timeout=reconnect_s,
            open=False,
            name="shortterm",
        )
        store = cls(
            pool,
            schema=schema or options.get("schema") or None,
            owns_pool=True,
            operation_timeout_s=operation_timeout_s,
            listen_timeout_s=listen_timeout_s,
        )
        store._first = (conninfo, connect_kwargs)
        return store

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

    def _multi_upsert(self, n: int, *, fenced: bool = False, journaled: bool = False) -> str:
        """:func:`sql.multi_upsert` for this schema, built once per shape."""
        found = self._multi.get((n, fenced, journaled))
        if found is None:
            found = self._multi[(n, fenced, journaled)] = sql.multi_upsert(
                self._upsert,
                self._fenced_upsert,
                self._t,
                self._channel,
                n,
                fenced=fenced,
                journaled=journaled,
            )
        return found

    async def _upsert_many(
        self,
        what: str,
        params: list[dict[str, Any]],
        fence: fencing.WriteFence | None = None,
        *,
        journaled: bool = False,
    ) -> list[ScopeRow]:
        if fence is not None:
            for p in params:
                p["fence"] = fence.position
                p["targets"] = list(targets_of(p, fence))
        extra: dict[str, Any] = {}
        if fence is not None:
            extra["fence_lock"] = self._fence_lock
            extra["journal_lock"] = self._journal_lock
            extra["journal_at"] = params[0]["now"] if params else 0.0
        fenced = fence is not None
        journaled = journaled and fenced
        if len(params) == 1 and not fenced:
            async with self._conn(what) as conn:
                cur = await conn.execute(self._upsert, params[0])
                return [scope_row(one(await cur.fetchone()))]
        keys = [(p["kind"], p["owner"], p["channel"], p["persona"] or "") for p in params]
        if len(set(keys)) < len(keys):
            # One statement cannot change a row twice: apply repeats in order, in a
            # transaction (the caller asked for something odd, not for something fast).
            async with self._tx(what) as conn:
                out = []
                for p in params:
                    single = {f"{name}_0": value for name, value in p.items()} | extra
                    statement = self._multi_upsert(1, fenced=fenced, journaled=journaled)
                    cur = await conn.execute(statement, single)
                    found = await cur.fetchone()
                    if found is not None:
                        out.append(scope_row(found[1:]))
                return out
        # Rows are locked in key order, whatever the caller's order, so two writers of
        # overlapping scopes can never deadlock.
        order = sorted(range(len(params)), key=keys.__getitem__)
        merged: dict[str, Any] = dict(extra)
        for i, j in enumerate(order):
            merged.update({f"{name}_{i}": value for name, value in params[j].items()})
        async with self._conn(what) as conn:
            statement = self._multi_upsert(len(params), fenced=fenced, journaled=journaled)
            cur = await conn.execute(statement, merged)
            result = await cur.fetchall()
        rows: list[ScopeRow | None] = [None] * len(params)
        for r in result:
            rows[order[r[0]]] = scope_row(r[1:])
        if fenced:
            return [r for r in rows if r is not None]
        return [one_row(r) for r in rows]

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

    # -- scopes ---------------------------------------------------------------------------

    async def touch(
        self,
        scopes: Sequence[tuple[ScopeKey, ScopeMeta]],
        *,
        increment: ScopeKey | None,
        now: float,
        fence: fencing.WriteFence | None = None,
    ) -> list[ScopeRow]:
        params = []
        for key, meta in scopes:
            p = scope_params(key, meta, now)
            if increment is not None and key == increment:
                p["inc"] = 1
            params.append(p)
        return await self._upsert_many("capture upsert", params, fence)

    async def write_distilled(
        self,
        scopes: Sequence[tuple[ScopeKey, ScopeMeta | None]],
        change: DistilledWrite,
        *,
        reset_counter: ScopeKey | None,
        now: float,
        fence: fencing.WriteFence | None = None,
    ) -> list[ScopeRow]:
        summary = clean(change.summary)
        patch = None if change.categories is None else jsonb(change.categories)
        params = []
        for key, meta in scopes:
            p = scope_params(key, meta, now)
            if change.set_summary:
                p["set_summary"] = True
                p["summary"] = summary
                p["summary_at"] = None if summary is None else now
            if patch is not None:
                p["patch"] = patch
                p["replace"] = change.replace_categories
            if reset_counter is not None and key == reset_counter:
                p["reset"] = 1
            params.append(p)
        return await self._upsert_many("distilled write", params, fence, journaled=True)

    async def load(self, key: ScopeKey) -> ScopeRow | None:
        async with self._conn("load") as conn:
            cur = await conn.execute(
                f"SELECT {SCOPE_COLS} FROM {self._t}scopes WHERE {sql.KEY_WHERE}", key_args(key)
            )
            r = await cur.fetchone()
            return None if r is None else scope_row(r)

    async def load_owner(self, kind: ScopeKind, owner_id: str) -> list[ScopeRow]:
        async with self._conn("owner load") as conn:
            cur = await conn.execute(
                f"SELECT {SCOPE_COLS} FROM {self._t}scopes WHERE kind = %s AND owner_id = %s",
                (kind, owner_id),
            )
            return [scope_row(r) for r in await cur.fetchall()]

    async def load_channel(self, channel_id: str) -> list[ScopeRow]:
        async with self._conn("channel load") as conn:
            cur = await conn.execute(
                f"SELECT {SCOPE_COLS} FROM {self._t}scopes WHERE channel_id = %s", (channel_id,)
            )
            return [scope_row(r) for r in await cur.fetchall()]

    async def list_servers(self, *, after: str | None, limit: int) -> list[ServerSummary]:
        # Ids are never empty, so "after ''" is "from the start" and the plan stays one range.
        async with self._conn("server list") as conn:
            cur = await conn.execute(sql.LIST_SERVERS.format(t=self._t), (after or "", limit))
            page = await cur.fetchall()
        return [ServerSummary(sid, name, n, at) for sid, n, at, name in page]

    async def iter_rows(self, *, batch_rows: int) -> AsyncIterator[list[ScopeRow]]:
        page_sql = (
            f"SELECT id, {SCOPE_COLS} FROM {self._t}scopes WHERE id > %s ORDER BY id LIMIT %s"
        )
        async for batch in self._pages("export read", page_sql, (), batch_rows):
            yield batch

    async def put_rows(
        self, rows: Sequence[ScopeRow], *, fence: fencing.WriteFence | None = None
    ) -> list[ScopeRow]:
        if not rows:
            return []
        params = [put_row_params(row) for row in rows]
        if fence is None:
            # One transaction; executemany pipelines the statements, so a batch costs about
            # one round trip rather than one per row.
            async with self._tx("row import") as conn, conn.cursor() as cur:
                await cur.executemany(self._put, params, returning=True)
                out = []
                while True:
                    out.append(scope_row(one(await cur.fetchone())))
                    if not cur.nextset():
                        break
            return out
        written = []
        async with self._tx("row import") as conn:
            await conn.execute(
                "SELECT pg_advisory_xact_lock_shared(%s::bigint), "
                "pg_advisory_xact_lock(%s::bigint)",
                (self._fence_lock, self._journal_lock),
            )
            for row, p in zip(rows, params, strict=True):
                m = row.meta
                targets = fencing.scope_targets(
                    row.key, m.server_id, m.parent_channel_id, fence.triggerer
                )
                cur = await conn.execute(
                    f"SELECT {self._t}fence_clear(%s::text[], %s::bigint)",
                    (list(targets), fence.position),
                )
                if not one(await cur.fetchone())[0]:
                    continue
                cur = await conn.execute(self._put, p)
                written.append(scope_row(one(await cur.fetchone())))
            for r in written:
                k = r.key
                await conn.execute(
                    f"INSERT INTO {self._t}journal (kind, subject, subject_user, at) "
                    "VALUES ('edit', %s, %s, %s)",
                    (
                        jsonb(list(k.astuple)),
                        k.owner_id if k.kind == "user" else None,
                        r.updated_at,
                    ),
                )
            await conn.execute(f"SELECT pg_notify('{self._channel}', '')")
        return written

    async def iter_distilled(
        self, *, since: float, batch_rows: int
    ) -> AsyncIterator[list[ScopeRow]]:
        # Keyset pages by id: each page is one short query on a pooled connection, so no
        # transaction or server-side cursor stays open while the caller works on a batch.
        page_sql = (
            f"SELECT id, {SCOPE_COLS} FROM {self._t}scopes WHERE id > %s AND "
            "((summary IS NOT NULL AND summary_at > %s) OR categories_at > %s) "
            "ORDER BY id LIMIT %s"
        )
        async for batch in self._pages("hydration read", page_sql, (since, since), batch_rows):
            yield batch

    async def iter_hydration(
        self, *, since: float, batch_rows: int
    ) -> AsyncIterator[list[HydrationRow]]:
        """:meth:`iter_distilled` as plain :data:`HydrationRow` tuples (model.rows): the
        columns in that order, an empty category map as NULL, the page's id cut off."""
        page_sql = (
            "SELECT id, kind, owner_id, channel_id, persona_id, server_id, server_name, "
            "channel_name, parent_channel_id, private, persona_lineage_id, summary, summary_at, "
            "NULLIF(categories, '{}'::jsonb), categories_at, turns_since_refresh, revision "
            f"FROM {self._t}scopes WHERE id > %s AND "
            "((summary IS NOT NULL AND summary_at > %s) OR categories_at > %s) "
            "ORDER BY id LIMIT %s"
        )
        last = 0
        while True:
            async with self._conn("hydration read") as conn:
                cur = await conn.execute(page_sql, (last, since, since, batch_rows))
                rows = await cur.fetchall()
            if not rows:
                return
            last = rows[-1][0]
            yield [r[1:] for r in rows]
            if len(rows) < batch_rows:
                return

    async def _pages(
        self, what: str, page_sql: str, args: tuple[Any, ...], batch_rows: int
    ) -> AsyncIterator[list[ScopeRow]]:
        """Keyset pages by id, ``page_sql`` taking (last id, *args, limit): each page is one
        short query on a pooled connection, so no transaction or server-side cursor stays
        open while the caller works on a batch."""
        last = 0
        while True:
            async with self._conn(what) as conn:
                cur = await conn.execute(page_sql, (last, *args, batch_rows))
                rows = await cur.fetchall()
            if not rows:
                return
            last = rows[-1][0]
            yield [scope_row(r[1:]) for r in rows]
            if len(rows) < batch_rows:
                return

    async def forget_channel(self, channel_id: str, *, now: float) -> Forgotten:
        async with self._forget_tx("channel delete") as conn:
            seq = await journal.append(
                conn, self._t, "channel", [channel_id], [fencing.channel_target(channel_id)], now
            )
            cur = await conn.execute(
                f"DELETE FROM {self._t}scopes WHERE channel_id = %s", (channel_id,)
            )
            return Forgotten(seq, cur.rowcount)

    async def forget_user(
        self, user_id: str, *, keep: UserSettings | None, now: float
    ) -> Forgotten:
        target = fencing.user_target(user_id)
        t = self._t
        async with self._forget_tx("user delete") as conn:
            seq = await journal.append(conn, self._t, "user", [target], [target], now)
            cur = await conn.execute(
                f"DELETE FROM {t}scopes WHERE kind = 'user' AND owner_id = %s", (user_id,)
            )
            await conn.execute(f"DELETE FROM {t}journal WHERE subject_user = %s", (user_id,))
            if keep is None:
                await conn.execute(f"DELETE FROM {t}user_settings WHERE user_id = %s", (user_id,))
            else:
                await settings_sql.write_user(conn, self._t, user_id, keep, now)
            return Forgotten(seq, cur.rowcount)

    async def forget_server_channel(
        self, server_id: str, channel_id: str, persona_id: str | None, *, now: float
    ) -> Forgotten:
        key = ScopeKey.server(server_id, channel_id, persona_id)
        target = fencing.server_channel_target(server_id, channel_id, persona_id)
        async with self._forget_tx("server channel delete") as conn:
            seq = await journal.append(
                conn, self._t, "server_channel", key.astuple[1:], [target], now
            )
            cur = await conn.execute(
                f"DELETE FROM {self._t}scopes WHERE {sql.KEY_WHERE}", key_args(key)
            )
            return Forgotten(seq, cur.rowcount)

    async def janitor(self, *, untouched_since: float) -> int:
        async with self._tx("janitor") as conn:
            cur = await conn.execute(
                f"DELETE FROM {self._t}scopes WHERE updated_at < %s", (untouched_since,)
            )
            deleted = cur.rowcount
        # The journal keeps its own retention, whatever the rows' (see journal.prune).
        async with self._forget_tx("journal prune") as conn:
            await journal.prune(conn, self._t, time.time())
        return deleted

    # -- the journal ----------------------------------------------------------------------

    def journal_moved(self) -> bool:
        """True when NOTIFY announced a change since the last call, or when the ``LISTEN``
        connection has not proved itself alive within ``listen_timeout_s`` (see
        :class:`journal.JournalListener`). No query: while the listener is alive, a flag."""
        return self._listener.moved()

    @property
    def listening(self) -> bool:
        """Whether the ``LISTEN`` connection proved itself alive within ``listen_timeout_s``,
        so that :meth:`journal_moved` answers from its flag (asking changes nothing)."""
        return self._listener.alive

    async def journal_since(self, seq: int, *, limit: int = 1000) -> list[fencing.JournalEntry]:
        async with self._conn("journal read") as conn:
            cur = await conn.execute(
                f"SELECT seq, kind, subject, targets FROM {self._t}journal WHERE seq > %s "
                "ORDER BY seq LIMIT %s",
                (seq, limit),
            )
            rows = await cur.fetchall()
        return [fencing.JournalEntry(int(r[0]), r[1], tuple(r[2]), tuple(r[3])) for r in rows]

    async def journal_head(self) -> int:
        async with self._conn("journal read") as conn:
            cur = await conn.execute(f"SELECT COALESCE(MAX(seq), 0) FROM {self._t}journal")
            return int(one(await cur.fetchone())[0])

    # -- settings -------------------------------------------------------------------------

    async def save_server_settings(
        self, server_id: str, settings: ServerSettings, *, now: float
    ) -> int:
        async with self._forget_tx("server settings write") as conn:
            targets = await settings_sql.write_server(conn, self._t, server_id, settings, now)
            return await journal.append(conn, self._t, "server_settings", [server_id], targets, now)

    async def server_settings_since(self, since: float) -> dict[str, ServerSettings]:
        async with self._conn("server settings read") as conn:
            return await settings_sql.read_servers(conn, self._t, since)

    async def save_user_settings(self, user_id: str, settings: UserSettings, *, now: float) -> int:
        async with self._forget_tx("user settings write") as conn:
            await settings_sql.write_user(conn, self._t, user_id, settings, now)
            full = settings.privacy is Privacy.FULL
            targets = [fencing.user_target(user_id)] if full else []
            return await journal.append(conn, self._t, "user_settings", [], targets, now)

    async def user_settings_since(self, since: float) -> dict[str, UserSettings]:
        async with self._conn("user settings read") as conn:
            return await settings_sql.read_users(conn, self._t, since)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._listener.close()
        if self._owns_pool:
            await self.pool.close()
