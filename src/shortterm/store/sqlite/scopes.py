"""The SQLite store's scope-row part: captures, distilled writes, loads, exports, hydration.

Each operation is one guarded call on the loop thread (see :mod:`shortterm.store.sqlite`);
the store's coroutines call them. Statement text is in :mod:`.sql`, rows and parameters in
:mod:`.values`, the fence checks in :mod:`.journal`.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from ...model.fence import WriteFence
from ...model.keys import ScopeKey, ScopeKind
from ...model.rows import (
    HydrationRow,
    ScopeMeta,
    ScopeRow,
    ServerSummary,
    merge_categories,
)
from ..base import LOAD_MANY_KEYS, BufferedTouch, Distilled, TouchedBatch, TouchScopes
from ..sql_common import SCOPE_COLS, key_args, server_summaries
from . import journal, sql
from .commits import CommitWatch
from .connection import Connection, Guard, fetch
from .values import (
    HYDRATION_SELECT,
    TARGET_NAMES,
    hydration_rows,
    hydration_scope_rows,
    padded_targets,
    put_row_params,
    scope_params,
    scope_row,
)

__all__ = ["Scopes"]

_REVISION = SCOPE_COLS.split(", ").index("revision")


def _touch_row(key: ScopeKey, m: ScopeMeta, steps: int, now: float) -> tuple[Any, ...]:
    """The parameters of one :data:`sql.TOUCH_ROW`: the scope, its metadata, its counter step."""
    return (
        key.kind,
        key.owner_id,
        key.channel_id,
        key.persona_id,
        m.server_id,
        m.server_name,
        m.channel_name,
        m.parent_channel_id,
        int(m.private),
        m.persona_lineage_id,
        steps,
        now,
        now,
    )


def _args(touches: Sequence[BufferedTouch]) -> list[Any]:
    """The parameters of :data:`sql.TOUCH` rows, each with its own counter step."""
    args: list[Any] = []
    for t in touches:
        args += _touch_row(t.key, t.meta, t.steps, t.now)
    return args


class Scopes:
    """The scope-row operations of :class:`~shortterm.store.sqlite.SQLiteStore`."""

    def __init__(self, connection: Connection, guard: Guard, commits: CommitWatch) -> None:
        self._db = connection.db
        self._tx = connection.tx
        self._guard = guard
        self._commits = commits
        self._batch_epoch: int | None = None  # commits.foreign_epoch at the last touch_batch

    def touch(
        self, scopes: TouchScopes, increment: ScopeKey | None, now: float, fence: WriteFence | None
    ) -> list[ScopeRow]:
        live = increment.astuple if increment is not None else None
        args: list[Any] = []
        for key, m in scopes:
            args += _touch_row(key, m, int(key.astuple == live), now)
            if fence is not None:
                args += padded_targets(key, m, fence.triggerer)
        n = len(scopes)
        if fence is None:
            statement = sql.TOUCH_BY_ROWS.get(n) or sql.TOUCH.format(
                rows=", ".join([sql.TOUCH_ROW] * n)
            )
        else:
            statement = sql.FENCED_TOUCH_BY_ROWS.get(n) or sql.FENCED_TOUCH.format(
                rows=", ".join([sql.FENCED_ROW] * n)
            )
            args += (fence.position, fence.position)

        def upsert(db: sqlite3.Connection) -> list[ScopeRow]:
            rows = {r.key.astuple: r for r in map(scope_row, db.execute(statement, args))}
            return [rows[k.astuple] for k, _ in scopes if k.astuple in rows]

        def run() -> list[ScopeRow]:
            if fence is None or not fence.extra_targets:
                return upsert(self._db)
            # Targets beyond the statement's fixed width: checked in the same transaction.
            with self._tx() as db:
                return [] if journal.extra_fenced(db, fence) else upsert(db)

        if not scopes:
            return []
        return self._guard("capture upsert", run)

    def touch_batch(self, touches: Sequence[BufferedTouch]) -> TouchedBatch:
        """A write-behind's flush: every buffered touch in one transaction (one commit, one
        WAL append). The rows come back (in no promised order) only when another connection
        committed since our previous batch (otherwise they hold nothing the caller does not
        know, and building and mirroring them was two thirds of a flush's cost), and a cold
        touch's row when it existed before."""
        if not touches:
            return TouchedBatch(0, [])

        def run() -> TouchedBatch:
            with self._tx() as db:
                return self._touch_in(db, touches)

        return self._guard("write-behind flush", run)

    def _touch_in(self, db: sqlite3.Connection, touches: Sequence[BufferedTouch]) -> TouchedBatch:
        """The buffered touches, inside a write transaction the caller holds."""
        commits = self._commits
        commits.saw_version(db.execute("PRAGMA data_version").fetchone()[0])
        others = commits.foreign_epoch != self._batch_epoch
        self._batch_epoch = commits.foreign_epoch
        # BEGIN IMMEDIATE holds the write lock: no forget commits until we do, so one read
        # of the fence's end tells which touches no forget can cover.
        head = db.execute(sql.FENCE_END).fetchone()[0] or 0
        kept = [
            t
            for t in touches
            if t.fence.position >= head or not journal.fenced(db, t.key, t.meta, t.fence)
        ]
        rows: list[ScopeRow] = []
        for start in range(0, len(kept), sql.BATCH_TOUCH_ROWS):
            chunk = kept[start : start + sql.BATCH_TOUCH_ROWS]
            cold = {t.key.astuple for t in chunk if t.cold}
            written = db.execute(sql.touch_rows(len(chunk), others or bool(cold)), _args(chunk))
            if others:
                rows.extend(map(scope_row, written))
            elif cold:
                # Only a row that existed before (its revision grew past a fresh insert's 1)
                # holds what the hot tier lacks.
                rows.extend(scope_row(r) for r in written if r[_REVISION] > 1 and r[:4] in cold)
        return TouchedBatch(len(kept), rows)

    def write_distilled(
        self, write: Distilled, now: float, fence: WriteFence | None
    ) -> list[ScopeRow]:
        def run() -> list[ScopeRow]:
            with self._tx() as db:
                return self._distilled_in(db, write, now, fence)

        return self._guard("distilled write", run)

    def write_distilled_after(
        self,
        touches: Sequence[BufferedTouch],
        write: Distilled,
        now: float,
        fence: WriteFence | None,
    ) -> tuple[TouchedBatch, list[ScopeRow]]:
        """:meth:`touch_batch` then :meth:`write_distilled`, in one transaction."""

        def run() -> tuple[TouchedBatch, list[ScopeRow]]:
            with self._tx() as db:
                done = self._touch_in(db, touches) if touches else TouchedBatch(0, [])
                return done, self._distilled_in(db, write, now, fence)

        return self._guard("distilled write", run)

    def _distilled_in(
        self, db: sqlite3.Connection, write: Distilled, now: float, fence: WriteFence | None
    ) -> list[ScopeRow]:
        """The distilled write inside a write transaction the caller holds: the fence check,
        every scope's upsert and the journal entries that let other processes pick it up."""
        scopes, change, reset = write

        def params_for(
            key: ScopeKey, meta: ScopeMeta | None, current: Mapping[str, str]
        ) -> dict[str, Any]:
            p = scope_params(key, meta, now)
            if change.set_summary:
                p["set_summary"] = 1
                p["summary"] = change.summary
                p["summary_at"] = None if change.summary is None else now
            merged = merge_categories(current, change)
            if merged is not None:
                p["categories"] = json.dumps(merged, ensure_ascii=False, sort_keys=True)
                p["categories_at"] = now if merged else None
            if reset is not None and key == reset:
                p["reset"] = 1
            if fence is not None:
                p["fence"] = fence.position
                p.update(zip(TARGET_NAMES, padded_targets(key, meta, fence.triggerer), strict=True))
            return p

        if fence is not None and journal.extra_fenced(db, fence):
            return []  # a forget of a target the whole write carries overtook it
        statement = sql.UPSERT if fence is None else sql.FENCED_UPSERT
        out = []
        for key, meta in scopes:
            current: Mapping[str, str] = {}
            if change.categories is not None and not change.replace_categories:
                cur = db.execute(sql.CATEGORIES_OF, key_args(key)).fetchone()
                current = json.loads(cur[0]) if cur else {}
            r = db.execute(statement, params_for(key, meta, current)).fetchone()
            if r is not None:
                out.append(scope_row(r, key))
        if fence is not None:
            for row in out:
                journal.append_edit(db, row.key, now)
        return out

    def load(self, key: ScopeKey) -> ScopeRow | None:
        def run() -> ScopeRow | None:
            r = self._db.execute(sql.COMMON.load, key_args(key)).fetchone()
            return None if r is None else scope_row(r)

        return self._guard("load", run)

    def load_many(self, keys: Sequence[ScopeKey]) -> list[ScopeRow | None]:
        wanted = list(dict.fromkeys(map(key_args, keys)))  # each key once, in order

        def run() -> dict[tuple[str, str, str, str], ScopeRow]:
            found = {}
            for start in range(0, len(wanted), LOAD_MANY_KEYS):
                chunk = json.dumps(wanted[start : start + LOAD_MANY_KEYS])
                for r in self._db.execute(sql.LOAD_MANY, (chunk,)):
                    row = scope_row(r)
                    found[key_args(row.key)] = row
            return found

        if not keys:
            return []
        found = self._guard("batched load", run)
        return [found.get(args) for args in map(key_args, keys)]

    def load_owner(self, kind: ScopeKind, owner_id: str) -> list[ScopeRow]:
        return self._guard(
            "owner load",
            lambda: [
                scope_row(r) for r in self._db.execute(sql.COMMON.load_owner, (kind, owner_id))
            ],
        )

    def load_channel(self, channel_id: str) -> list[ScopeRow]:
        return self._guard(
            "channel load",
            lambda: [
                scope_row(r) for r in self._db.execute(sql.COMMON.load_channel, (channel_id,))
            ],
        )

    def list_servers(self, after: str | None, limit: int) -> list[ServerSummary]:
        # Ids are never empty, so "after ''" is "from the start" and the plan stays one range.
        page = fetch(self._guard, self._db, "server list", sql.LIST_SERVERS, (after or "", limit))
        return server_summaries(page)

    async def iter_rows(self, batch_rows: int) -> AsyncIterator[list[ScopeRow]]:
        # Keyset pages by id: each page is one short read, so no read transaction stays open
        # (and holds back WAL checkpoints) while the caller works on a batch.
        last = 0
        while True:
            page = fetch(
                self._guard, self._db, "export read", sql.COMMON.rows_page, (last, batch_rows)
            )
            if not page:
                return
            last = page[-1][0]
            yield [scope_row(r[1:]) for r in page]
            if len(page) < batch_rows:
                return
            await asyncio.sleep(0)

    def put_rows(self, rows: Sequence[ScopeRow], fence: WriteFence | None) -> list[ScopeRow]:
        params = [put_row_params(row) for row in rows]
        now = max((row.updated_at for row in rows), default=0.0)

        def run() -> list[ScopeRow]:
            with self._tx() as db:
                out = []
                for row, p in zip(rows, params, strict=True):
                    if fence is not None and journal.fenced(db, row.key, row.meta, fence):
                        continue
                    out.append(scope_row(db.execute(sql.PUT, p).fetchone(), row.key))
                if fence is not None:
                    for written in out:
                        journal.append_edit(db, written.key, now)
                return out

        if not rows:
            return []
        return self._guard("row import", run)

    async def iter_distilled(self, since: float, batch_rows: int) -> AsyncIterator[list[ScopeRow]]:
        metas: dict[tuple[Any, ...], ScopeMeta] = {}
        async for batch in self.iter_hydration(since, batch_rows):
            yield hydration_scope_rows(batch, metas)

    async def iter_hydration(
        self, since: float, batch_rows: int
    ) -> AsyncIterator[list[HydrationRow]]:
        """:meth:`iter_distilled` as plain :data:`HydrationRow` tuples (model.rows)."""
        cursor = self._guard(
            "hydration query", lambda: self._db.execute(HYDRATION_SELECT, (since, since))
        )
        try:
            while True:
                rows = self._guard("hydration read", lambda: cursor.fetchmany(batch_rows))
                if not rows:
                    return
                yield hydration_rows(rows)
                await asyncio.sleep(0)  # let the loop breathe between batches
        finally:
            cursor.close()

    def private_scope_keys(self) -> list[tuple[str, str, str, str | None]]:
        return fetch(self._guard, self._db, "private scope read", sql.COMMON.private_keys, ())
