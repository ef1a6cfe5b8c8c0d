"""The SQLite store: the Store protocol's operations on one connection, on the loop thread.

Over 500 lines because it is the protocol's two dozen operations, each one short transaction;
cutting them apart would scatter a transaction's steps over files.

The statement text lives in :mod:`.sql`, rows and parameters in :mod:`.values`, the journal
and fence in :mod:`.journal`, settings in :mod:`.settings`, URLs in :mod:`.url`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from ...model import fence as fencing
from ...model.errors import ConfigError, StoreUnavailable
from ...model.keys import Privacy, ScopeKey, ScopeKind
from ...model.rows import (
    DistilledWrite,
    HydrationRow,
    ScopeMeta,
    ScopeRow,
    ServerSummary,
    merge_categories,
)
from ...model.settings import ServerSettings, UserSettings
from .. import migrations
from ..base import BufferedTouch, Forgotten, TouchedBatch
from ..sql_common import SCOPE_COLS, key_args
from ..wal_watch import WalWatch
from . import journal, sql
from . import settings as settings_sql
from .url import parse_url
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

__all__ = ["SQLiteStore"]

log = logging.getLogger("shortterm")

T = TypeVar("T")


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


class SQLiteStore:
    """A durable store in one SQLite file. Use :meth:`from_url` or pass a path."""

    def __init__(
        self, path: str | Path, *, synchronous: str = "NORMAL", busy_timeout_ms: int = 5000
    ) -> None:
        if synchronous.upper() not in ("NORMAL", "FULL", "EXTRA"):
            raise ConfigError(f"synchronous={synchronous!r}: use normal, full or extra")
        self.path = str(path)
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous.upper()}")
            self._db.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            self._db.execute("PRAGMA foreign_keys=ON")
            # Deleted rows are overwritten, not just unlinked: a purged user's ids and
            # summaries must not linger in free pages of the file.
            self._db.execute("PRAGMA secure_delete=ON")
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailable(f"cannot open SQLite database {self.path!r}: {exc}") from exc
        self._closed = False
        self._data_version: int | None = None  # as journal_moved last read it
        self._seen_version: int | None = None  # as any read of it last found it
        self.foreign_epoch = 0
        self._batch_epoch: int | None = None  # foreign_epoch at the last touch_batch
        self._wal = WalWatch(self.path)
        self._wal_seen: bytes | None = None
        self.unscrubbed_forgets = 0  # forgets whose WAL could not be truncated at once

    @classmethod
    def from_url(cls, url: str) -> SQLiteStore:
        path, options = parse_url(url)
        unknown = set(options) - {"synchronous", "busy_timeout_ms"}
        if unknown:
            raise ConfigError(f"unknown sqlite URL option(s) {sorted(unknown)} in {url!r}")
        return cls(
            path,
            synchronous=options.get("synchronous", "NORMAL"),
            busy_timeout_ms=int(options.get("busy_timeout_ms", "5000")),
        )

    # -- plumbing -------------------------------------------------------------------------

    def _guard(self, what: str, fn: Callable[[], T]) -> T:
        if self._closed:
            raise StoreUnavailable(f"SQLite store {self.path!r} is closed")
        try:
            return fn()
        except sqlite3.Error as exc:
            if self._db.in_transaction:
                self._db.rollback()
            raise StoreUnavailable(f"SQLite {what} failed: {exc}") from exc

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        # IMMEDIATE takes the write lock up front, so a read-modify-write cannot interleave
        # with another writer.
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.rollback()
            raise
        self._db.execute("COMMIT")

    # -- schema ---------------------------------------------------------------------------

    async def migrate(self) -> list[str]:
        def run() -> list[str]:
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
            )
            done = {v for (v,) in self._db.execute("SELECT version FROM schema_migrations")}
            applied = []
            for m in migrations.load("sqlite"):
                if m.version in done:
                    continue
                with self._tx() as db:
                    for statement in m.statements:
                        db.execute(statement)
                    db.execute(
                        "INSERT INTO schema_migrations VALUES (?, ?, datetime('now'))",
                        (m.version, m.name),
                    )
                applied.append(m.label)
            return applied

        return self._guard("migration", run)

    def schema_version(self) -> int:
        return self._guard(
            "schema query",
            lambda: (
                self._db.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0] or 0
            ),
        )

    # -- scopes ---------------------------------------------------------------------------

    async def touch(
        self,
        scopes: Sequence[tuple[ScopeKey, ScopeMeta]],
        *,
        increment: ScopeKey | None,
        now: float,
        fence: fencing.WriteFence | None = None,
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

        def run() -> list[ScopeRow]:
            rows = {r.key.astuple: r for r in map(scope_row, self._db.execute(statement, args))}
            return [rows[k.astuple] for k, _ in scopes if k.astuple in rows]

        if not scopes:
            return []
        return self._guard("capture upsert", run)

    async def touch_batch(self, touches: Sequence[BufferedTouch]) -> TouchedBatch:
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
        self._saw_version(db.execute("PRAGMA data_version").fetchone()[0])
        others = self.foreign_epoch != self._batch_epoch
        self._batch_epoch = self.foreign_epoch
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

    async def write_distilled(
        self,
        scopes: Sequence[tuple[ScopeKey, ScopeMeta | None]],
        change: DistilledWrite,
        *,
        reset_counter: ScopeKey | None,
        now: float,
        fence: fencing.WriteFence | None = None,
    ) -> list[ScopeRow]:
        def run() -> list[ScopeRow]:
            with self._tx() as db:
                return self._distilled_in(db, scopes, change, reset_counter, now, fence)

        return self._guard("distilled write", run)

    async def write_distilled_after(
        self,
        touches: Sequence[BufferedTouch],
        scopes: Sequence[tuple[ScopeKey, ScopeMeta | None]],
        change: DistilledWrite,
        *,
        reset_counter: ScopeKey | None,
        now: float,
        fence: fencing.WriteFence | None = None,
    ) -> tuple[TouchedBatch, list[ScopeRow]]:
        """:meth:`touch_batch` then :meth:`write_distilled`, in one transaction."""

        def run() -> tuple[TouchedBatch, list[ScopeRow]]:
            with self._tx() as db:
                done = self._touch_in(db, touches) if touches else TouchedBatch(0, [])
                return done, self._distilled_in(db, scopes, change, reset_counter, now, fence)

        return self._guard("distilled write", run)

    def _distilled_in(
        self,
        db: sqlite3.Connection,
        scopes: Sequence[tuple[ScopeKey, ScopeMeta | None]],
        change: DistilledWrite,
        reset_counter: ScopeKey | None,
        now: float,
        fence: fencing.WriteFence | None,
    ) -> list[ScopeRow]:
        """The distilled write inside a write transaction the caller holds: the fence check,
        every scope's upsert and the journal entries that let other processes pick it up."""

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
            if reset_counter is not None and key == reset_counter:
                p["reset"] = 1
            if fence is not None:
                p["fence"] = fence.position
                p.update(zip(TARGET_NAMES, padded_targets(key, meta, fence.triggerer), strict=True))
            return p

        statement = sql.UPSERT if fence is None else sql.FENCED_UPSERT
        out = []
        for key, meta in scopes:
            current: Mapping[str, str] = {}
            if change.categories is not None and not change.replace_categories:
                cur = db.execute(
                    f"SELECT categories FROM scopes WHERE {sql.KEY_WHERE}", key_args(key)
                ).fetchone()
                current = json.loads(cur[0]) if cur else {}
            r = db.execute(statement, params_for(key, meta, current)).fetchone()
            if r is not None:
                out.append(scope_row(r, key))
        if fence is not None:
            for row in out:
                journal.append_edit(db, row.key, now)
        return out

    async def load(self, key: ScopeKey) -> ScopeRow | None:
        def run() -> ScopeRow | None:
            r = self._db.execute(
                f"SELECT {SCOPE_COLS} FROM scopes WHERE {sql.KEY_WHERE}", key_args(key)
            ).fetchone()
            return None if r is None else scope_row(r)

        return self._guard("load", run)

    async def load_owner(self, kind: ScopeKind, owner_id: str) -> list[ScopeRow]:
        return self._guard(
            "owner load",
            lambda: [
                scope_row(r)
                for r in self._db.execute(
                    f"SELECT {SCOPE_COLS} FROM scopes WHERE kind = ? AND owner_id = ?",
                    (kind, owner_id),
                )
            ],
        )

    async def load_channel(self, channel_id: str) -> list[ScopeRow]:
        return self._guard(
            "channel load",
            lambda: [
                scope_row(r)
                for r in self._db.execute(
                    f"SELECT {SCOPE_COLS} FROM scopes WHERE channel_id = ?", (channel_id,)
                )
            ],
        )

    async def list_servers(self, *, after: str | None, limit: int) -> list[ServerSummary]:
        # Ids are never empty, so "after ''" is "from the start" and the plan stays one range.
        page = self._fetch("server list", sql.LIST_SERVERS, (after or "", limit))
        return [ServerSummary(sid, name, n, at) for sid, n, at, name in page]

    async def iter_rows(self, *, batch_rows: int) -> AsyncIterator[list[ScopeRow]]:
        # Keyset pages by id: each page is one short read, so no read transaction stays open
        # (and holds back WAL checkpoints) while the caller works on a batch.
        page_sql = f"SELECT id, {SCOPE_COLS} FROM scopes WHERE id > ? ORDER BY id LIMIT ?"
        last = 0
        while True:
            page = self._fetch("export read", page_sql, (last, batch_rows))
            if not page:
                return
            last = page[-1][0]
            yield [scope_row(r[1:]) for r in page]
            if len(page) < batch_rows:
                return
            await asyncio.sleep(0)

    async def put_rows(
        self, rows: Sequence[ScopeRow], *, fence: fencing.WriteFence | None = None
    ) -> list[ScopeRow]:
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

    async def iter_distilled(
        self, *, since: float, batch_rows: int
    ) -> AsyncIterator[list[ScopeRow]]:
        metas: dict[tuple[Any, ...], ScopeMeta] = {}
        async for batch in self.iter_hydration(since=since, batch_rows=batch_rows):
            yield hydration_scope_rows(batch, metas)

    async def iter_hydration(
        self, *, since: float, batch_rows: int
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

    def _fetch(self, what: str, statement: str, args: Sequence[Any]) -> list[Any]:
        return self._guard(what, lambda: self._db.execute(statement, args).fetchall())

    def _forget(
        self, what: str, apply: Callable[[sqlite3.Connection], tuple[int, int]]
    ) -> Forgotten:
        """Run one forget in one transaction, then fold the WAL into the file and truncate it,
        so no purged byte is left in the database, its ``-wal`` or its ``-shm`` once we
        return (``secure_delete`` zeroes the freed space in the file itself)."""

        def run() -> Forgotten:
            with self._tx() as db:
                seq, count = apply(db)
            self._scrub_wal()
            return Forgotten(seq, count)

        return self._guard(what, run)

    def _scrub_wal(self) -> None:
        for _attempt in range(3):
            busy, _log, _done = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if not busy:
                return
        # Another connection kept reading through the busy timeout: the bytes leave the WAL
        # at the next checkpoint. Counted and logged, so the operator can see it.
        self.unscrubbed_forgets += 1
        log.warning("shortterm could not truncate the SQLite WAL after a forget: a reader holds it")

    async def forget_channel(self, channel_id: str, *, now: float) -> Forgotten:
        def apply(db: sqlite3.Connection) -> tuple[int, int]:
            seq = journal.append(
                db, "channel", [channel_id], [fencing.channel_target(channel_id)], now
            )
            n = db.execute("DELETE FROM scopes WHERE channel_id = ?", (channel_id,)).rowcount
            return seq, n

        return self._forget("channel delete", apply)

    async def forget_user(
        self, user_id: str, *, keep: UserSettings | None, now: float
    ) -> Forgotten:
        target = fencing.user_target(user_id)

        def apply(db: sqlite3.Connection) -> tuple[int, int]:
            seq = journal.append(db, "user", [target], [target], now)
            n = db.execute(
                "DELETE FROM scopes WHERE kind = 'user' AND owner_id = ?", (user_id,)
            ).rowcount
            db.execute("DELETE FROM journal WHERE subject_user = ?", (user_id,))
            if keep is None:
                db.execute("DELETE FROM user_settings WHERE user_id = ?", (user_id,))
            else:
                settings_sql.write_user(db, user_id, keep, now)
            return seq, n

        return self._forget("user delete", apply)

    async def forget_server_channel(
        self, server_id: str, channel_id: str, persona_id: str | None, *, now: float
    ) -> Forgotten:
        key = ScopeKey.server(server_id, channel_id, persona_id)
        target = fencing.server_channel_target(server_id, channel_id, persona_id)

        def apply(db: sqlite3.Connection) -> tuple[int, int]:
            seq = journal.append(db, "server_channel", key.astuple[1:], [target], now)
            n = db.execute(f"DELETE FROM scopes WHERE {sql.KEY_WHERE}", key_args(key)).rowcount
            return seq, n

        return self._forget("server channel delete", apply)

    async def janitor(self, *, untouched_since: float) -> int:
        def run() -> int:
            with self._tx() as db:
                n = db.execute("DELETE FROM scopes WHERE updated_at < ?", (untouched_since,))
                # The journal keeps its own retention, whatever the rows' (see journal.prune).
                journal.prune(db, time.time())
                return n.rowcount

        return self._guard("janitor", run)

    # -- the journal ----------------------------------------------------------------------

    def journal_moved(self) -> bool:
        """Whether another connection committed since the last call: only then can the
        journal hold entries we have not read. While no connection commits, a read of the
        WAL-index header answers (a few hundred nanoseconds); after any commit, ours
        included, ``PRAGMA data_version`` tells whether it was another connection's."""
        if self._closed:
            raise StoreUnavailable(f"SQLite store {self.path!r} is closed")
        # The header first: a commit after this read changes it, so the next call looks.
        header = self._wal.header()
        if header is not None and header == self._wal_seen:
            return False
        version = self._guard(
            "data version", lambda: self._db.execute("PRAGMA data_version").fetchone()[0]
        )
        self._wal_seen = header
        moved = bool(version != self._data_version)
        self._data_version = version
        self._saw_version(version)
        return moved

    def _saw_version(self, version: int) -> None:
        """Count another connection's commit (``foreign_epoch``) the first time any read of
        ``PRAGMA data_version`` shows it; our own commits never change the value."""
        if version != self._seen_version:
            if self._seen_version is not None:
                self.foreign_epoch += 1
            self._seen_version = version

    async def private_scope_keys(self) -> list[tuple[str, str, str, str | None]]:
        return self._fetch(
            "private scope read",
            "SELECT kind, owner_id, channel_id, persona_id FROM scopes WHERE private = 1",
            (),
        )

    async def journal_since(self, seq: int, *, limit: int = 1000) -> list[fencing.JournalEntry]:
        rows = self._fetch(
            "journal read",
            "SELECT seq, kind, subject, targets FROM journal WHERE seq > ? ORDER BY seq LIMIT ?",
            (seq, limit),
        )
        return [
            fencing.JournalEntry(r[0], r[1], tuple(json.loads(r[2])), tuple(json.loads(r[3])))
            for r in rows
        ]

    async def journal_head(self) -> int:
        found = self._fetch("journal read", "SELECT MAX(seq) FROM journal", ())
        return int(found[0][0] or 0)

    # -- settings -------------------------------------------------------------------------

    async def save_server_settings(
        self, server_id: str, settings: ServerSettings, *, now: float
    ) -> int:
        def run() -> int:
            with self._tx() as db:
                targets = settings_sql.write_server(db, server_id, settings, now)
                return journal.append(db, "server_settings", [server_id], targets, now)

        return self._guard("server settings write", run)

    async def server_settings_since(self, since: float) -> dict[str, ServerSettings]:
        return self._guard(
            "server settings read", lambda: settings_sql.read_servers(self._db, since)
        )

    async def save_user_settings(self, user_id: str, settings: UserSettings, *, now: float) -> int:
        def run() -> int:
            with self._tx() as db:
                settings_sql.write_user(db, user_id, settings, now)
                full = settings.privacy is Privacy.FULL
                return journal.append(
                    db, "user_settings", [], [fencing.user_target(user_id)] if full else [], now
                )

        return self._guard("user settings write", run)

    async def user_settings_since(self, since: float) -> dict[str, UserSettings]:
        return self._guard("user settings read", lambda: settings_sql.read_users(self._db, since))

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._db.close()
            self._wal.close()  # after: closing its descriptor drops the process's locks

    def checkpoint(self) -> None:
        """Fold the WAL into the main file and truncate it (tests and backups)."""
        self._guard("checkpoint", lambda: self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)"))

    def integrity_check(self) -> str:
        return str(
            self._guard(
                "integrity check", lambda: self._db.execute("PRAGMA integrity_check").fetchone()[0]
            )
        )
