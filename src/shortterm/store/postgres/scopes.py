"""The PostgreSQL store's scope-row part: captures, distilled writes, loads, exports,
hydration.

Statement text is in :mod:`.sql` (built for the store's schema in :mod:`.layout`), values in
:mod:`.values`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any

import psycopg

from ...model import fence as fencing
from ...model.fence import WriteFence
from ...model.keys import ScopeKey, ScopeKind
from ...model.rows import HydrationRow, ScopeRow, ServerSummary
from ..base import LOAD_MANY_KEYS, Distilled, TouchScopes
from ..sql_common import SCOPE_COLS, key_args, server_summaries
from . import sql
from .pooled import Pooled
from .values import clean, jsonb, one, one_row, put_row_params, scope_params, scope_row, targets_of

__all__ = ["Scopes"]


class Scopes:
    """The scope-row operations of :class:`~shortterm.store.postgres.PostgresStore`."""

    def __init__(self, pooled: Pooled) -> None:
        self._conn = pooled.conn
        self._tx = pooled.tx
        self._listener = pooled.listener
        self._layout = pooled.layout
        self._list_servers = sql.LIST_SERVERS.format(t=pooled.layout.t)
        self._multi: dict[tuple[int, bool, bool], tuple[str, tuple[str, ...]]] = {}

    def _multi_upsert(
        self, n: int, *, fenced: bool = False, journaled: bool = False
    ) -> tuple[str, tuple[str, ...]]:
        """:func:`sql.multi_upsert` for this schema, built once per shape, with positional
        parameters (:func:`sql.positional`) and their names in order."""
        found = self._multi.get((n, fenced, journaled))
        if found is None:
            found = self._multi[(n, fenced, journaled)] = sql.positional(
                sql.multi_upsert(
                    self._layout.upsert,
                    self._layout.fenced_upsert,
                    self._layout.t,
                    self._layout.channel,
                    n,
                    fenced=fenced,
                    journaled=journaled,
                )
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
            extra["fence_lock"] = self._layout.fence_lock
            extra["journal_lock"] = self._layout.journal_lock
            extra["journal_at"] = params[0]["now"] if params else 0.0
        fenced = fence is not None
        journaled = journaled and fenced
        if len(params) == 1 and not fenced:
            async with self._conn(what) as conn:
                cur = await conn.execute(self._layout.upsert, params[0])
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
                    cur = await _run_raw(conn, statement, single)
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
            cur = await _run_raw(conn, statement, merged)
            result = await cur.fetchall()
        rows: list[ScopeRow | None] = [None] * len(params)
        for r in result:
            rows[order[r[0]]] = scope_row(r[1:])
        if journaled and result:
            self._listener.own(result[0][-1])  # the statement's entries end at this one
        if fenced:
            return [r for r in rows if r is not None]
        return [one_row(r) for r in rows]

    def touch(
        self, scopes: TouchScopes, increment: ScopeKey | None, now: float, fence: WriteFence | None
    ) -> Awaitable[list[ScopeRow]]:
        params = []
        for key, meta in scopes:
            p = scope_params(key, meta, now)
            if increment is not None and key == increment:
                p["inc"] = 1
            params.append(p)
        return self._upsert_many("capture upsert", params, fence)

    def write_distilled(
        self, write: Distilled, now: float, fence: WriteFence | None
    ) -> Awaitable[list[ScopeRow]]:
        scopes, change, reset = write
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
            if reset is not None and key == reset:
                p["reset"] = 1
            params.append(p)
        return self._upsert_many("distilled write", params, fence, journaled=True)

    async def load(self, key: ScopeKey) -> ScopeRow | None:
        async with self._conn("load") as conn:
            cur = await conn.execute(self._layout.common.load, key_args(key))
            r = await cur.fetchone()
            return None if r is None else scope_row(r)

    async def load_many(self, keys: Sequence[ScopeKey]) -> list[ScopeRow | None]:
        wanted = list(dict.fromkeys(map(key_args, keys)))  # each key once, in order
        found: dict[tuple[str, str, str, str], ScopeRow] = {}
        for start in range(0, len(wanted), LOAD_MANY_KEYS):
            # One array per key column: four parameters whatever the count, no session state.
            columns = [list(c) for c in zip(*wanted[start : start + LOAD_MANY_KEYS], strict=True)]
            async with self._conn("batched load") as conn:
                cur = await conn.execute(self._layout.load_many, columns)
                for r in await cur.fetchall():
                    row = scope_row(r)
                    found[key_args(row.key)] = row
        return [found.get(args) for args in map(key_args, keys)]

    async def load_owner(self, kind: ScopeKind, owner_id: str) -> list[ScopeRow]:
        async with self._conn("owner load") as conn:
            cur = await conn.execute(self._layout.common.load_owner, (kind, owner_id))
            return [scope_row(r) for r in await cur.fetchall()]

    async def load_channel(self, channel_id: str) -> list[ScopeRow]:
        async with self._conn("channel load") as conn:
            cur = await conn.execute(self._layout.common.load_channel, (channel_id,))
            return [scope_row(r) for r in await cur.fetchall()]

    async def list_servers(self, after: str | None, limit: int) -> list[ServerSummary]:
        # Ids are never empty, so "after ''" is "from the start" and the plan stays one range.
        async with self._conn("server list") as conn:
            cur = await conn.execute(self._list_servers, (after or "", limit))
            page = await cur.fetchall()
        return server_summaries(page)

    async def iter_rows(self, batch_rows: int) -> AsyncIterator[list[ScopeRow]]:
        async for batch in self._pages(
            "export read", self._layout.common.rows_page, (), batch_rows
        ):
            yield batch

    async def put_rows(self, rows: Sequence[ScopeRow], fence: WriteFence | None) -> list[ScopeRow]:
        if not rows:
            return []
        params = [put_row_params(row) for row in rows]
        if fence is None:
            # One transaction; executemany pipelines the statements, so a batch costs about
            # one round trip rather than one per row.
            async with self._tx("row import") as conn, conn.cursor() as cur:
                await cur.executemany(self._layout.put, params, returning=True)
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
                (self._layout.fence_lock, self._layout.journal_lock),
            )
            for row, p in zip(rows, params, strict=True):
                m = row.meta
                targets = fencing.fence_targets(row.key, m.server_id, m.parent_channel_id, fence)
                cur = await conn.execute(
                    f"SELECT {self._layout.t}fence_clear(%s::text[], %s::bigint)",
                    (list(targets), fence.position),
                )
                if not one(await cur.fetchone())[0]:
                    continue
                cur = await conn.execute(self._layout.put, p)
                written.append(scope_row(one(await cur.fetchone())))
            for r in written:
                k = r.key
                await conn.execute(
                    f"INSERT INTO {self._layout.t}journal (kind, subject, subject_user, at) "
                    "VALUES ('edit', %s, %s, %s)",
                    (
                        jsonb(list(k.astuple)),
                        k.owner_id if k.kind == "user" else None,
                        r.updated_at,
                    ),
                )
            await conn.execute(f"SELECT pg_notify('{self._layout.channel}', '')")
        return written

    async def iter_distilled(self, since: float, batch_rows: int) -> AsyncIterator[list[ScopeRow]]:
        # Keyset pages by id: each page is one short query on a pooled connection, so no
        # transaction or server-side cursor stays open while the caller works on a batch.
        page_sql = (
            f"SELECT id, {SCOPE_COLS} FROM {self._layout.t}scopes WHERE id > %s AND "
            "((summary IS NOT NULL AND summary_at > %s) OR categories_at > %s) "
            "ORDER BY id LIMIT %s"
        )
        async for batch in self._pages("hydration read", page_sql, (since, since), batch_rows):
            yield batch

    async def iter_hydration(
        self, since: float, batch_rows: int
    ) -> AsyncIterator[list[HydrationRow]]:
        """:meth:`iter_distilled` as plain :data:`HydrationRow` tuples (model.rows): the
        columns in that order, an empty category map as NULL, the page's id cut off."""
        page_sql = (
            "SELECT id, kind, owner_id, channel_id, persona_id, server_id, server_name, "
            "channel_name, parent_channel_id, private, persona_lineage_id, summary, summary_at, "
            "NULLIF(categories, '{}'::jsonb), categories_at, turns_since_refresh, revision "
            f"FROM {self._layout.t}scopes WHERE id > %s AND "
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


async def _run_raw(
    conn: psycopg.AsyncConnection[Any],
    statement: tuple[str, tuple[str, ...]],
    params: dict[str, Any],
) -> psycopg.AsyncRawCursor[Any]:
    """Run a statement of :func:`sql.positional` with ``params`` by name."""
    text, names = statement
    cur = psycopg.AsyncRawCursor(conn)
    await cur.execute(text, [params[name] for name in names])
    return cur
