"""The PostgreSQL store: the Store protocol's operations over a pool.

This module holds the scope rows' operations (captures, distilled writes, loads, exports,
hydration); the pool's plumbing and the schema are in :mod:`.pooled`, the journaled
operations (forgets, settings, journal reads) in :mod:`.journaling`. The statement text lives
in :mod:`.sql`, values in :mod:`.values`, connecting in :mod:`.connection`, the journal in
:mod:`.journal`, settings rows in :mod:`.settings`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

from psycopg_pool import AsyncConnectionPool

from ...model import fence as fencing
from ...model import urls
from ...model.errors import ConfigError
from ...model.keys import ScopeKey, ScopeKind
from ...model.rows import DistilledWrite, HydrationRow, ScopeMeta, ScopeRow, ServerSummary
from ..sql_common import SCOPE_COLS, key_args, server_summaries
from . import sql
from .connection import Pool, PoolWatch, check_options, watched_connection
from .journaling import Journaling
from .values import clean, jsonb, one, one_row, put_row_params, scope_params, scope_row, targets_of

__all__ = ["POOL_MAX_SIZE", "PostgresStore"]

# Connections a process's pool may open (``pool_max_size``); with its LISTEN connection, each
# process may hold this plus one of the server's ``max_connections`` (docs/design.md, "The
# connection budget"). Four carry one process's load as fast as ten did.
POOL_MAX_SIZE = 4


class PostgresStore(Journaling):
    """A durable store in PostgreSQL. Use :meth:`from_url`, or pass a pool you manage.

    ``pool`` must hand out connections in autocommit mode. With ``schema``, every table lives
    in that schema (created by :meth:`migrate`), so several deployments or test runs can share
    one database without seeing each other.
    """

    @classmethod
    def from_url(cls, url: str, *, schema: str | None = None) -> PostgresStore:
        """``postgresql://user@host:5432/db?schema=name&pool_max_size=4``.

        The pool is created closed; it opens on first use (``migrate`` at ``shortterm.open``).
        An option neither ours nor libpq's is refused here (``ConfigError``), by name.

        ``pooler=transaction`` says the URL reaches a pooler in transaction mode (PgBouncer,
        …): said, not detected, because nothing a client sees tells such a pooler from the
        server (PgBouncer answers ``SHOW`` only on its admin console, and passes the server's
        parameters through), and a wrong guess towards prepared statements would run another
        client's statement of the same name. ``listen_url`` (percent-encoded) is a direct
        connection to LISTEN on; without it, through the pooler, the journal's end is polled.
        """
        conninfo, options = urls.split_options(
            url,
            schemes=("postgresql", "postgres"),
            ours=sql.OWN_OPTIONS,
            wrong_scheme=f"not a PostgreSQL URL: {urls.shown_url(url)!r} (use postgresql://user@host/db)",
        )
        check_options(conninfo, url, sql.OWN_OPTIONS)
        min_size = urls.at_least_one(options, "pool_min_size", 1, url)
        max_size = max(min_size, urls.at_least_one(options, "pool_max_size", POOL_MAX_SIZE, url))
        timeout_s = urls.positive_seconds(options, "pool_timeout_s", 30.0, url)
        reconnect_s = urls.positive_seconds(options, "pool_reconnect_timeout_s", 2.0, url)
        operation_timeout_s = urls.positive_seconds(options, "operation_timeout_s", 30.0, url)
        listen_timeout_s = urls.positive_seconds(options, "listen_timeout_s", 1.0, url)
        pooler = _pooler(options, url)
        listen_url = options.get("listen_url") or None
        if listen_url is not None:
            try:
                check_options(listen_url, listen_url, ())
            except ConfigError as exc:
                raise ConfigError(f"listen_url: {exc}") from None
            listen_url = _named(listen_url)
        conninfo = _named(conninfo)
        # Through a transaction pooler nothing is prepared (see above); else every statement
        # is, on first use.
        connect_kwargs: dict[str, Any] = {
            "autocommit": True,
            "prepare_threshold": None if pooler else 0,
        }
        watch = PoolWatch()
        pool: Pool = AsyncConnectionPool(
            conninfo,
            kwargs=connect_kwargs,
            connection_class=watched_connection(watch),
            min_size=min_size,
            max_size=max_size,
            timeout=timeout_s,
            reconnect_timeout=reconnect_s,
            open=False,
            name="shortterm",
        )
        return cls(
            pool,
            schema=schema or options.get("schema") or None,
            owns_pool=True,
            operation_timeout_s=operation_timeout_s,
            listen_timeout_s=listen_timeout_s,
            pooler=pooler,
            listen_url=listen_url,
            watch=watch,
            probes=[
                (conninfo, connect_kwargs, ""),
                *([(listen_url, {"autocommit": True}, "listen_url")] if listen_url else []),
            ],
        )

    # -- plumbing -------------------------------------------------------------------------

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
                        if journaled:
                            self._listener.own(found[-1])
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
        if journaled and result:
            self._listener.own(result[0][-1])  # the statement's entries end at this one
        if fenced:
            return [r for r in rows if r is not None]
        return [one_row(r) for r in rows]

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
            cur = await conn.execute(self._sql.load, key_args(key))
            r = await cur.fetchone()
            return None if r is None else scope_row(r)

    async def load_owner(self, kind: ScopeKind, owner_id: str) -> list[ScopeRow]:
        async with self._conn("owner load") as conn:
            cur = await conn.execute(self._sql.load_owner, (kind, owner_id))
            return [scope_row(r) for r in await cur.fetchall()]

    async def load_channel(self, channel_id: str) -> list[ScopeRow]:
        async with self._conn("channel load") as conn:
            cur = await conn.execute(self._sql.load_channel, (channel_id,))
            return [scope_row(r) for r in await cur.fetchall()]

    async def list_servers(self, *, after: str | None, limit: int) -> list[ServerSummary]:
        # Ids are never empty, so "after ''" is "from the start" and the plan stays one range.
        async with self._conn("server list") as conn:
            cur = await conn.execute(sql.LIST_SERVERS.format(t=self._t), (after or "", limit))
            page = await cur.fetchall()
        return server_summaries(page)

    async def iter_rows(self, *, batch_rows: int) -> AsyncIterator[list[ScopeRow]]:
        async for batch in self._pages("export read", self._sql.rows_page, (), batch_rows):
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
                targets = fencing.fence_targets(row.key, m.server_id, m.parent_channel_id, fence)
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


def _pooler(options: dict[str, str], url: str) -> Literal["transaction"] | None:
    value = options.get("pooler", "none")
    if value == "transaction":
        return "transaction"
    if value == "none":
        return None
    raise ConfigError(
        f"pooler={value!r} in {urls.shown_url(url)!r}: use pooler=transaction for a pooler in "
        "transaction mode (PgBouncer, …), or none (the default: the server, or a pooler in "
        "session mode)"
    )


def _named(conninfo: str) -> str:
    """``conninfo`` with ``application_name=shortterm`` unless it names itself."""
    if "application_name=" in conninfo:
        return conninfo
    return conninfo + ("&" if "?" in conninfo else "?") + "application_name=shortterm"
