"""SQLite durable tier (stdlib ``sqlite3``, WAL).

Statements run on the event-loop thread on purpose: one takes 4-20 µs, while handing it to a
worker thread costs 40-110 µs per hop. Each logical operation is one transaction, so a crash
leaves it applied whole or not at all. ``synchronous=NORMAL`` (the default here) survives a
process crash; ``?synchronous=full`` in the URL also survives power loss, at a cost per commit.
A second process writing the same file waits up to ``busy_timeout_ms`` for the lock: SQLite is
for one process; several processes should use PostgreSQL.
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
from types import MappingProxyType
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from ..model import (
    DistilledWrite,
    Privacy,
    ScopeKey,
    ScopeKind,
    ScopeMeta,
    ScopeRow,
    ServerSettings,
    ServerSummary,
    UserSettings,
    merge_categories,
)
from ..model.errors import ConfigError, StoreUnavailable
from ..model.fence import (
    JournalEntry,
    WriteFence,
    channel_target,
    private_target,
    scope_targets,
    server_channel_target,
    user_target,
)
from . import migrations
from .base import JOURNAL_RETENTION_S, Forgotten
from .sql_common import (
    SCOPE_COLS,
    SERVER_READ_COLS,
    key_args,
    key_where,
    put_params,
    server_settings,
    server_settings_values,
    server_upsert,
    user_settings,
)
from .wal_watch import WalWatch

__all__ = ["SQLiteStore", "sqlite_path"]

log = logging.getLogger("shortterm")

T = TypeVar("T")


# One upsert serves capture and tool writes alike. Metadata given as NULL means "unknown,
# keep what is stored"; the lineage is written on every upsert that knows it (never lost to a
# racing counter insert).
_UPSERT = f"""
INSERT INTO scopes AS s (kind, owner_id, channel_id, persona_id, server_id, server_name,
    channel_name, parent_channel_id, private, persona_lineage_id, summary, summary_at,
    categories, categories_at, turns_since_refresh, refresh_epoch, revision, created_at,
    updated_at)
VALUES (:kind, :owner, :channel, :persona, :server_id, :server_name, :channel_name, :parent,
    COALESCE(:private, 0), :lineage, :summary, :summary_at, COALESCE(:categories, '{{}}'),
    :categories_at, :inc, :reset, 1, :now, :now)
ON CONFLICT (kind, owner_id, channel_id, COALESCE(persona_id, '')) DO UPDATE SET
    server_id = COALESCE(:server_id, s.server_id),
    server_name = COALESCE(:server_name, s.server_name),
    channel_name = COALESCE(:channel_name, s.channel_name),
    parent_channel_id = COALESCE(:parent, s.parent_channel_id),
    private = CASE WHEN :private IS NULL THEN s.private ELSE MAX(:private, s.private) END,
    persona_lineage_id = COALESCE(:lineage, s.persona_lineage_id),
    summary = CASE WHEN :set_summary THEN :summary ELSE s.summary END,
    summary_at = CASE WHEN :set_summary THEN :summary_at ELSE s.summary_at END,
    categories = COALESCE(:categories, s.categories),
    categories_at = CASE WHEN :categories IS NULL THEN s.categories_at ELSE :categories_at END,
    turns_since_refresh = CASE WHEN :reset THEN 0 ELSE s.turns_since_refresh + :inc END,
    refresh_epoch = s.refresh_epoch + :reset,
    revision = s.revision + 1,
    updated_at = :now
RETURNING {SCOPE_COLS}
"""

_SERVER_UPSERT = server_upsert("server_settings", "?")

# The capture path: every scope of a turn in one statement (one implicit transaction, one
# WAL append). Capture always knows its metadata, so only "unknown" names and lineage keep
# the stored value; the counter grows by each row's own increment.
_TOUCH_COLS = (
    "kind, owner_id, channel_id, persona_id, server_id, server_name, channel_name, "
    "parent_channel_id, private, persona_lineage_id, turns_since_refresh, revision, "
    "created_at, updated_at"
)
_TOUCH_ON_CONFLICT = (
    "ON CONFLICT (kind, owner_id, channel_id, COALESCE(persona_id, '')) DO UPDATE SET "
    "server_id = COALESCE(excluded.server_id, s.server_id), "
    "server_name = COALESCE(excluded.server_name, s.server_name), "
    "channel_name = COALESCE(excluded.channel_name, s.channel_name), "
    "parent_channel_id = COALESCE(excluded.parent_channel_id, s.parent_channel_id), "
    "private = MAX(excluded.private, s.private), "
    "persona_lineage_id = COALESCE(excluded.persona_lineage_id, s.persona_lineage_id), "
    "turns_since_refresh = s.turns_since_refresh + excluded.turns_since_refresh, "
    "revision = s.revision + 1, updated_at = excluded.updated_at "
    f"RETURNING {SCOPE_COLS}"
)
_TOUCH_ROW = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)"
_TOUCH = f"INSERT INTO scopes AS s ({_TOUCH_COLS}) VALUES {{rows}} {_TOUCH_ON_CONFLICT}"
_TOUCH_BY_ROWS = {n: _TOUCH.format(rows=", ".join([_TOUCH_ROW] * n)) for n in (1, 2, 3, 4)}

# The fenced capture: the same upsert, each row kept only while no forget journaled after the
# write's position covers one of its targets (up to MAX_TARGETS per row, NULL-padded). One
# statement, so the check and the write are one atomic step under SQLite's write lock.
MAX_TARGETS = 6
_TARGET_COLS = ", ".join(f"v.column{15 + i}" for i in range(MAX_TARGETS))
_FENCED_ROW = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?" + ", ?" * MAX_TARGETS + ")"
_FENCED_TOUCH = (
    f"INSERT INTO scopes AS s ({_TOUCH_COLS}) "
    f"SELECT {', '.join(f'v.column{i}' for i in range(1, 15))} FROM (VALUES {{rows}}) AS v "
    "WHERE NOT EXISTS (SELECT 1 FROM fence AS f WHERE f.seq > ? "
    f"AND f.target IN ({_TARGET_COLS})) {_TOUCH_ON_CONFLICT}"
)
_FENCED_TOUCH_BY_ROWS = {
    n: _FENCED_TOUCH.format(rows=", ".join([_FENCED_ROW] * n)) for n in (1, 2, 3, 4)
}
_TARGET_PARAMS = ", ".join(f":t{i}" for i in range(MAX_TARGETS))
_FENCED_UPSERT = _UPSERT.replace("VALUES (", "SELECT ", 1).replace(
    ":now, :now)\nON CONFLICT",
    ":now, :now\nWHERE NOT EXISTS (SELECT 1 FROM fence AS f WHERE f.seq > :fence "
    f"AND f.target IN ({_TARGET_PARAMS}))\nON CONFLICT",
    1,
)
assert _FENCED_UPSERT.count("NOT EXISTS") == 1

_KEY_WHERE = key_where("?")

# One keyset page of servers: a range over the leading columns of scopes_key (kind, owner_id),
# which also yields the groups in order, so the scan stops after LIMIT groups. EXPLAIN QUERY
# PLAN: "SEARCH s USING INDEX scopes_key (kind=? AND owner_id>?)", no temp B-tree for the
# GROUP BY or ORDER BY; per group, a "CORRELATED SCALAR SUBQUERY" doing "SEARCH n USING INDEX
# scopes_key (kind=? AND owner_id=?)" and sorting that server's own rows. The name is the one
# on the most recently updated row that has one (ties: the row created last).
_LIST_SERVERS = """
SELECT s.owner_id, COUNT(*), MAX(s.updated_at),
    (SELECT n.server_name FROM scopes AS n
     WHERE n.kind = 'server' AND n.owner_id = s.owner_id AND n.server_name IS NOT NULL
     ORDER BY n.updated_at DESC, n.id DESC LIMIT 1)
FROM scopes AS s
WHERE s.kind = 'server' AND s.owner_id > ?
GROUP BY s.owner_id ORDER BY s.owner_id LIMIT ?
"""


_NO_CATEGORIES: Mapping[str, str] = MappingProxyType({})


def _row(r: Sequence[Any], key: ScopeKey | None = None, meta: ScopeMeta | None = None) -> ScopeRow:
    """A row from its columns. Keys read back from our own table were validated when they
    were written; positional construction because hydration builds a million of these."""
    return ScopeRow(
        key if key is not None else ScopeKey._unchecked(r[0], r[1], r[2], r[3]),
        meta if meta is not None else ScopeMeta(r[4], r[5], r[6], r[7], bool(r[8]), r[9]),
        r[10],
        r[11],
        json.loads(r[12]) if r[12] != "{}" else _NO_CATEGORIES,
        r[13],
        r[14],
        r[15],
        r[16],
        r[17],
    )


def _hydration_row(r: Sequence[Any], metas: dict[tuple[Any, ...], ScopeMeta]) -> ScopeRow:
    """:func:`_row` sharing one ScopeMeta per distinct value: the scopes of one channel (its
    users and personas) carry the same, so a million rows need far fewer objects."""
    parts = (r[4], r[5], r[6], r[7], bool(r[8]), r[9])
    meta = metas.get(parts)
    if meta is None:
        if len(metas) > 65536:
            metas.clear()
        meta = metas[parts] = ScopeMeta(*parts)
    return _row(r, meta=meta)


def _params(key: ScopeKey, meta: ScopeMeta | None, now: float) -> dict[str, Any]:
    m = meta or _UNKNOWN_META
    return {
        "kind": key.kind,
        "owner": key.owner_id,
        "channel": key.channel_id,
        "persona": key.persona_id,
        "server_id": m.server_id if meta else (key.owner_id if key.kind == "server" else None),
        "server_name": m.server_name,
        "channel_name": m.channel_name,
        "parent": m.parent_channel_id,
        "private": int(m.private) if meta else None,
        "lineage": m.persona_lineage_id,
        "summary": None,
        "summary_at": None,
        "set_summary": 0,
        "categories": None,
        "categories_at": None,
        "inc": 0,
        "reset": 0,
        "now": now,
    }


_UNKNOWN_META = ScopeMeta()

# Import: the row as given replaces every stored value; only the revision is ours.
_PUT = f"""
INSERT INTO scopes AS s (kind, owner_id, channel_id, persona_id, server_id, server_name,
    channel_name, parent_channel_id, private, persona_lineage_id, summary, summary_at,
    categories, categories_at, turns_since_refresh, refresh_epoch, revision, created_at,
    updated_at)
VALUES (:kind, :owner, :channel, :persona, :server_id, :server_name, :channel_name, :parent,
    :private, :lineage, :summary, :summary_at, :categories, :categories_at, :turns, :epoch, 1,
    :updated_at, :updated_at)
ON CONFLICT (kind, owner_id, channel_id, COALESCE(persona_id, '')) DO UPDATE SET
    server_id = excluded.server_id, server_name = excluded.server_name,
    channel_name = excluded.channel_name, parent_channel_id = excluded.parent_channel_id,
    private = excluded.private, persona_lineage_id = excluded.persona_lineage_id,
    summary = excluded.summary, summary_at = excluded.summary_at,
    categories = excluded.categories, categories_at = excluded.categories_at,
    turns_since_refresh = excluded.turns_since_refresh, refresh_epoch = excluded.refresh_epoch,
    revision = s.revision + 1, updated_at = excluded.updated_at
RETURNING {SCOPE_COLS}
"""


def _put_params(row: ScopeRow) -> dict[str, Any]:
    return put_params(row, text=_as_is, flag=int, categories=_categories_json)


def _as_is(value: str | None) -> str | None:
    return value


def _categories_json(categories: dict[str, str]) -> str:
    return json.dumps(categories, ensure_ascii=False, sort_keys=True)


_TARGET_NAMES = tuple(f"t{i}" for i in range(MAX_TARGETS))


def _padded(key: ScopeKey, meta: ScopeMeta | None, triggerer: str | None) -> list[str | None]:
    """The write's fence targets, NULL-padded to the statement's fixed width."""
    m = meta or _UNKNOWN_META
    server_id = m.server_id if meta else (key.owner_id if key.kind == "server" else None)
    targets: list[str | None] = list(scope_targets(key, server_id, m.parent_channel_id, triggerer))
    return targets + [None] * (MAX_TARGETS - len(targets))


def _journal(
    db: sqlite3.Connection,
    kind: str,
    subject: Sequence[str | None],
    targets: Sequence[str],
    now: float,
    subject_user: str | None = None,
) -> int:
    """Append one journal entry and its fence rows; returns its sequence number."""
    cur = db.execute(
        "INSERT INTO journal (kind, subject, subject_user, targets, at) VALUES (?, ?, ?, ?, ?)",
        (kind, json.dumps(list(subject)), subject_user, json.dumps(list(targets)), now),
    )
    seq = int(cur.lastrowid or 0)
    if targets:  # edits and settings changes fence nothing
        db.executemany(
            "INSERT OR IGNORE INTO fence VALUES (?, ?, ?)", [(t, seq, now) for t in targets]
        )
    return seq


def _journal_edit(db: sqlite3.Connection, key: ScopeKey, now: float) -> int:
    owner = key.owner_id if key.kind == "user" else None
    return _journal(db, "edit", key.astuple, (), now, subject_user=owner)


def _path_from_url(url: str) -> tuple[str, dict[str, str]]:
    parts = urlsplit(url)
    if parts.scheme != "sqlite":
        raise ConfigError(
            f"not a sqlite URL: {url!r} (use sqlite:///relative.db or sqlite:////abs.db)"
        )
    path = unquote(parts.path)
    if parts.netloc:
        raise ConfigError(f"sqlite URLs have no host: {url!r}; use sqlite:///{parts.netloc}{path}")
    path = path[1:] if path.startswith("/") else path  # sqlite:///a.db -> a.db ; //// -> /abs
    if not path:
        raise ConfigError(f"sqlite URL without a path: {url!r}")
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    return path, options


def sqlite_path(url: str) -> str:
    """The file a ``sqlite://`` URL names (relative to the working directory unless absolute)."""
    return _path_from_url(url)[0]


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
        self._data_version: int | None = None
        self._wal = WalWatch(self.path)
        self._wal_seen: bytes | None = None
        self.unscrubbed_forgets = 0  # forgets whose WAL could not be truncated at once

    @classmethod
    def from_url(cls, url: str) -> SQLiteStore:
        path, options = _path_from_url(url)
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
        fence: WriteFence | None = None,
    ) -> list[ScopeRow]:
        live = increment.astuple if increment is not None else None
        args: list[Any] = []
        for key, m in scopes:
            args += (
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
                int(key.astuple == live),
                now,
                now,
            )
            if fence is not None:
                args += _padded(key, m, fence.triggerer)
        n = len(scopes)
        if fence is None:
            statement = _TOUCH_BY_ROWS.get(n) or _TOUCH.format(rows=", ".join([_TOUCH_ROW] * n))
        else:
            statement = _FENCED_TOUCH_BY_ROWS.get(n) or _FENCED_TOUCH.format(
                rows=", ".join([_FENCED_ROW] * n)
            )
            args.append(fence.position)

        def run() -> list[ScopeRow]:
            rows = {r.key.astuple: r for r in map(_row, self._db.execute(statement, args))}
            return [rows[k.astuple] for k, _ in scopes if k.astuple in rows]

        if not scopes:
            return []
        return self._guard("capture upsert", run)

    async def write_distilled(
        self,
        scopes: Sequence[tuple[ScopeKey, ScopeMeta | None]],
        change: DistilledWrite,
        *,
        reset_counter: ScopeKey | None,
        now: float,
        fence: WriteFence | None = None,
    ) -> list[ScopeRow]:
        def params_for(
            key: ScopeKey, meta: ScopeMeta | None, current: Mapping[str, str]
        ) -> dict[str, Any]:
            p = _params(key, meta, now)
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
                p.update(zip(_TARGET_NAMES, _padded(key, meta, fence.triggerer), strict=True))
            return p

        statement = _UPSERT if fence is None else _FENCED_UPSERT

        def run() -> list[ScopeRow]:
            # One transaction: the fence check, every scope's upsert and the journal entries
            # that let other processes pick the change up.
            with self._tx() as db:
                out = []
                for key, meta in scopes:
                    current: Mapping[str, str] = {}
                    if change.categories is not None and not change.replace_categories:
                        cur = db.execute(
                            f"SELECT categories FROM scopes WHERE {_KEY_WHERE}", key_args(key)
                        ).fetchone()
                        current = json.loads(cur[0]) if cur else {}
                    r = db.execute(statement, params_for(key, meta, current)).fetchone()
                    if r is not None:
                        out.append(_row(r, key))
                if fence is not None:
                    for row in out:
                        _journal_edit(db, row.key, now)
                return out

        return self._guard("distilled write", run)

    async def load(self, key: ScopeKey) -> ScopeRow | None:
        def run() -> ScopeRow | None:
            r = self._db.execute(
                f"SELECT {SCOPE_COLS} FROM scopes WHERE {_KEY_WHERE}", key_args(key)
            ).fetchone()
            return None if r is None else _row(r)

        return self._guard("load", run)

    async def load_owner(self, kind: ScopeKind, owner_id: str) -> list[ScopeRow]:
        return self._guard(
            "owner load",
            lambda: [
                _row(r)
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
                _row(r)
                for r in self._db.execute(
                    f"SELECT {SCOPE_COLS} FROM scopes WHERE channel_id = ?", (channel_id,)
                )
            ],
        )

    async def list_servers(self, *, after: str | None, limit: int) -> list[ServerSummary]:
        # Ids are never empty, so "after ''" is "from the start" and the plan stays one range.
        page = self._fetch("server list", _LIST_SERVERS, (after or "", limit))
        return [ServerSummary(sid, name, n, at) for sid, n, at, name in page]

    async def iter_rows(self, *, batch_rows: int) -> AsyncIterator[list[ScopeRow]]:
        # Keyset pages by id: each page is one short read, so no read transaction stays open
        # (and holds back WAL checkpoints) while the caller works on a batch.
        sql = f"SELECT id, {SCOPE_COLS} FROM scopes WHERE id > ? ORDER BY id LIMIT ?"
        last = 0
        while True:
            page = self._fetch("export read", sql, (last, batch_rows))
            if not page:
                return
            last = page[-1][0]
            yield [_row(r[1:]) for r in page]
            if len(page) < batch_rows:
                return
            await asyncio.sleep(0)

    async def put_rows(
        self, rows: Sequence[ScopeRow], *, fence: WriteFence | None = None
    ) -> list[ScopeRow]:
        params = [_put_params(row) for row in rows]
        now = max((row.updated_at for row in rows), default=0.0)

        def run() -> list[ScopeRow]:
            with self._tx() as db:
                out = []
                for row, p in zip(rows, params, strict=True):
                    if fence is not None and _fenced(db, row.key, row.meta, fence):
                        continue
                    out.append(_row(db.execute(_PUT, p).fetchone(), row.key))
                if fence is not None:
                    for written in out:
                        _journal_edit(db, written.key, now)
                return out

        if not rows:
            return []
        return self._guard("row import", run)

    async def iter_distilled(
        self, *, since: float, batch_rows: int
    ) -> AsyncIterator[list[ScopeRow]]:
        cursor = self._guard(
            "hydration query",
            lambda: self._db.execute(
                f"SELECT {SCOPE_COLS} FROM scopes WHERE (summary IS NOT NULL AND summary_at > ?) "
                "OR categories_at > ?",
                (since, since),
            ),
        )
        metas: dict[tuple[Any, ...], ScopeMeta] = {}
        try:
            while True:
                rows = self._guard("hydration read", lambda: cursor.fetchmany(batch_rows))
                if not rows:
                    return
                yield [_hydration_row(r, metas) for r in rows]
                await asyncio.sleep(0)  # let the loop breathe between batches
        finally:
            cursor.close()

    def _fetch(self, what: str, sql: str, args: Sequence[Any]) -> list[Any]:
        return self._guard(what, lambda: self._db.execute(sql, args).fetchall())

    def _delete(self, what: str, sql: str, args: Sequence[Any]) -> int:
        return self._guard(what, lambda: self._db.execute(sql, args).rowcount)

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
            seq = _journal(db, "channel", [channel_id], [channel_target(channel_id)], now)
            n = db.execute("DELETE FROM scopes WHERE channel_id = ?", (channel_id,)).rowcount
            return seq, n

        return self._forget("channel delete", apply)

    async def forget_user(
        self, user_id: str, *, keep: UserSettings | None, now: float
    ) -> Forgotten:
        target = user_target(user_id)

        def apply(db: sqlite3.Connection) -> tuple[int, int]:
            seq = _journal(db, "user", [target], [target], now)
            n = db.execute(
                "DELETE FROM scopes WHERE kind = 'user' AND owner_id = ?", (user_id,)
            ).rowcount
            db.execute("DELETE FROM journal WHERE subject_user = ?", (user_id,))
            if keep is None:
                db.execute("DELETE FROM user_settings WHERE user_id = ?", (user_id,))
            else:
                _save_user(db, user_id, keep, now)
            return seq, n

        return self._forget("user delete", apply)

    async def forget_server_channel(
        self, server_id: str, channel_id: str, persona_id: str | None, *, now: float
    ) -> Forgotten:
        key = ScopeKey.server(server_id, channel_id, persona_id)
        target = server_channel_target(server_id, channel_id, persona_id)

        def apply(db: sqlite3.Connection) -> tuple[int, int]:
            seq = _journal(db, "server_channel", key.astuple[1:], [target], now)
            n = db.execute(f"DELETE FROM scopes WHERE {_KEY_WHERE}", key_args(key)).rowcount
            return seq, n

        return self._forget("server channel delete", apply)

    async def delete_channel(self, channel_id: str) -> int:
        return (await self.forget_channel(channel_id, now=time.time())).rows

    async def delete_user_scopes(self, user_id: str) -> int:
        """The user's personal rows only (their settings stay): see :meth:`forget_user`."""
        found = self._fetch("user settings read", _USER_SETTINGS_OF, (user_id,))
        keep = user_settings(*found[0]) if found else None
        return (await self.forget_user(user_id, keep=keep, now=time.time())).rows

    async def delete_server_channel(
        self, server_id: str, channel_id: str, persona_id: str | None
    ) -> int:
        forgotten = await self.forget_server_channel(
            server_id, channel_id, persona_id, now=time.time()
        )
        return forgotten.rows

    async def janitor(self, *, untouched_since: float) -> int:
        def run() -> int:
            with self._tx() as db:
                n = db.execute("DELETE FROM scopes WHERE updated_at < ?", (untouched_since,))
                # The journal only has to outlive a follower's lag and a write in flight.
                horizon = max(untouched_since, time.time() - JOURNAL_RETENTION_S)
                db.execute("DELETE FROM journal WHERE at < ?", (horizon,))
                db.execute("DELETE FROM fence WHERE at < ?", (horizon,))
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
        return moved

    async def journal_since(self, seq: int, *, limit: int = 1000) -> list[JournalEntry]:
        rows = self._fetch(
            "journal read",
            "SELECT seq, kind, subject, targets FROM journal WHERE seq > ? ORDER BY seq LIMIT ?",
            (seq, limit),
        )
        return [
            JournalEntry(r[0], r[1], tuple(json.loads(r[2])), tuple(json.loads(r[3]))) for r in rows
        ]

    async def journal_head(self) -> int:
        found = self._fetch("journal read", "SELECT MAX(seq) FROM journal", ())
        return int(found[0][0] or 0)

    # -- settings -------------------------------------------------------------------------

    async def save_server_settings(
        self, server_id: str, settings: ServerSettings, *, now: float
    ) -> int:
        s = settings

        def run() -> int:
            with self._tx() as db:
                old = db.execute(
                    "SELECT private_channel_ids FROM server_settings WHERE server_id = ?",
                    (server_id,),
                ).fetchone()
                was_private = frozenset(json.loads(old[0])) if old else frozenset()
                db.execute(
                    _SERVER_UPSERT,
                    server_settings_values(
                        server_id, s, now, text=_as_is, flag=int, id_list=json.dumps
                    ),
                )
                db.execute("DELETE FROM server_categories WHERE server_id = ?", (server_id,))
                db.executemany(
                    "INSERT INTO server_categories VALUES (?, ?, ?, ?)",
                    [(server_id, i, c.label, c.description) for i, c in enumerate(s.categories)],
                )
                # A channel turning private fences the writes still in flight that were made
                # while it was public (they carry a public flag).
                targets = [
                    private_target(server_id, c)
                    for c in sorted(s.private_channel_ids - was_private)
                ]
                return _journal(db, "server_settings", [server_id], targets, now)

        return self._guard("server settings write", run)

    async def server_settings_since(self, since: float) -> dict[str, ServerSettings]:
        def run() -> dict[str, ServerSettings]:
            rows = self._db.execute(
                f"SELECT {', '.join(SERVER_READ_COLS)} FROM server_settings WHERE updated_at >= ?",
                (since,),
            ).fetchall()
            out = {}
            for r in rows:
                cats = self._db.execute(
                    "SELECT label, description FROM server_categories WHERE server_id = ? "
                    "ORDER BY position",
                    (r[0],),
                ).fetchall()
                out[r[0]] = server_settings(r, json.loads(r[9]), cats)
            return out

        return self._guard("server settings read", run)

    async def save_user_settings(self, user_id: str, settings: UserSettings, *, now: float) -> int:
        def run() -> int:
            with self._tx() as db:
                _save_user(db, user_id, settings, now)
                full = settings.privacy is Privacy.FULL
                return _journal(
                    db, "user_settings", [], [user_target(user_id)] if full else [], now
                )

        return self._guard("user settings write", run)

    async def user_settings_since(self, since: float) -> dict[str, UserSettings]:
        return self._guard(
            "user settings read",
            lambda: {
                uid: user_settings(p, opt)
                for uid, p, opt in self._db.execute(
                    "SELECT user_id, privacy, cross_server_opt_in FROM user_settings "
                    "WHERE updated_at >= ?",
                    (since,),
                )
            },
        )

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._wal.close()
            self._db.close()

    def checkpoint(self) -> None:
        """Fold the WAL into the main file and truncate it (tests and backups)."""
        self._guard("checkpoint", lambda: self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)"))

    def integrity_check(self) -> str:
        return str(
            self._guard(
                "integrity check", lambda: self._db.execute("PRAGMA integrity_check").fetchone()[0]
            )
        )


_USER_SETTINGS_OF = "SELECT privacy, cross_server_opt_in FROM user_settings WHERE user_id = ?"


def _save_user(db: sqlite3.Connection, user_id: str, settings: UserSettings, now: float) -> None:
    db.execute(
        "INSERT INTO user_settings VALUES (?, ?, ?, ?) ON CONFLICT (user_id) DO UPDATE SET "
        "privacy=excluded.privacy, cross_server_opt_in=excluded.cross_server_opt_in, "
        "updated_at=excluded.updated_at",
        (user_id, settings.privacy.value, int(settings.cross_server_opt_in), now),
    )


def _fenced(
    db: sqlite3.Connection, key: ScopeKey, meta: ScopeMeta | None, fence: WriteFence
) -> bool:
    """Whether a forget journaled after ``fence`` covers this write (inside its transaction)."""
    targets = [t for t in _padded(key, meta, fence.triggerer) if t is not None]
    marks = ", ".join("?" * len(targets))
    found = db.execute(
        f"SELECT 1 FROM fence WHERE seq > ? AND target IN ({marks}) LIMIT 1",
        (fence.position, *targets),
    ).fetchone()
    return found is not None
