"""The SQLite store's journal part: what it writes through the forget journal (forgets, the
janitor's pruning, a rewind's floor, an upgrade's fence) and the journal's reads."""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Callable, Sequence

from ...model import fence as fencing
from ...model.keys import ScopeKey
from ...model.settings import UserSettings
from ..base import Forgotten
from ..sql_common import key_args
from . import journal, sql
from . import settings as settings_sql
from .connection import Connection, Guard, fetch

__all__ = ["Journaling"]

log = logging.getLogger("shortterm")


class Journaling:
    """The journaled operations of :class:`~shortterm.store.sqlite.SQLiteStore`, each one
    guarded operation (the store's coroutines call them: every statement runs on the loop
    thread anyway)."""

    def __init__(self, connection: Connection, guard: Guard) -> None:
        self._db = connection.db
        self._tx = connection.tx
        self._guard = guard
        self._own = connection.own_entries
        self.unscrubbed_forgets = 0  # forgets whose WAL could not be truncated at once

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

    def forget_channel(self, channel_id: str, now: float, horizon: float) -> Forgotten:
        def apply(db: sqlite3.Connection) -> tuple[int, int]:
            target = fencing.channel_target(channel_id)
            seq = journal.append(
                db, "channel", [channel_id], [target], now, horizon=horizon, own=self._own
            )
            n = db.execute(sql.COMMON.delete_channel, (channel_id,)).rowcount
            return seq, n

        return self._forget("channel delete", apply)

    def forget_user(
        self, user_id: str, keep: UserSettings | None, now: float, horizon: float
    ) -> Forgotten:
        target = fencing.user_target(user_id)

        def apply(db: sqlite3.Connection) -> tuple[int, int]:
            seq = journal.append(
                db, "user", [target], [target], now, horizon=horizon, own=self._own
            )
            n = db.execute(sql.COMMON.delete_user_scopes, (user_id,)).rowcount
            db.execute(sql.COMMON.delete_user_journal, (user_id,))
            if keep is None:
                db.execute(sql.COMMON.delete_user_settings, (user_id,))
            else:
                settings_sql.write_user(db, user_id, keep, now)
            return seq, n

        return self._forget("user delete", apply)

    def forget_server_channel(
        self, server_id: str, channel_id: str, persona_id: str | None, now: float
    ) -> Forgotten:
        key = ScopeKey.server(server_id, channel_id, persona_id)
        target = fencing.server_channel_target(server_id, channel_id, persona_id)

        def apply(db: sqlite3.Connection) -> tuple[int, int]:
            seq = journal.append(
                db, "server_channel", key.astuple[1:], [target], now, own=self._own
            )
            n = db.execute(sql.COMMON.delete_key, key_args(key)).rowcount
            return seq, n

        return self._forget("server channel delete", apply)

    def janitor(self, untouched_since: float) -> int:
        def run() -> int:
            with self._tx() as db:
                n = db.execute(sql.COMMON.janitor, (untouched_since,))
                # The journal keeps its own retention, whatever the rows' (see journal.prune).
                journal.prune(db, time.time())
                return n.rowcount

        return self._guard("janitor", run)

    def rewound(self, past: int, now: float) -> int:
        def apply(db: sqlite3.Connection) -> tuple[int, int]:
            return journal.rewound(db, past, now), 0

        return self._forget("journal rewind", apply).seq

    def since(self, seq: int, limit: int, forgets_only: bool) -> list[fencing.JournalEntry]:
        query = sql.COMMON.forgets_since if forgets_only else sql.COMMON.journal_since
        rows = fetch(self._guard, self._db, "journal read", query, (seq, limit))
        return [
            fencing.JournalEntry(
                r[0],
                r[1],
                tuple(json.loads(r[2])),
                () if r[3] == "[]" else tuple(json.loads(r[3])),  # an edit's: no targets
                float(r[4]),
                None if r[5] is None else float(r[5]),
            )
            for r in rows
        ]

    def horizons(self) -> list[tuple[str, float]]:
        rows = fetch(self._guard, self._db, "horizon read", sql.COMMON.horizons, ())
        return [(str(r[0]), float(r[1])) for r in rows]

    def head(self) -> int:
        found = fetch(self._guard, self._db, "journal read", sql.COMMON.journal_head, ())
        return int(found[0][0] or 0)

    def fence_upgrade(
        self, scopes: Sequence[ScopeKey], since: int, targets: Sequence[str], now: float
    ) -> int | None:
        # Subjects as journal.append_edit writes them, so equal keys are equal text.
        subjects = [json.dumps(list(k.astuple)) for k in scopes]
        marks = ", ".join("?" * len(subjects))

        def run() -> int | None:
            with self._tx() as db:  # the write lock: no fenced write runs meanwhile
                found = db.execute(
                    f"SELECT EXISTS (SELECT 1 FROM journal WHERE seq > ? AND kind = 'edit' "
                    f"AND subject IN ({marks}))",
                    (since, *subjects),
                ).fetchone()[0]
                return (
                    None if found else journal.append(db, "turn", [], targets, now, own=self._own)
                )

        return self._guard("upgrade takeover", run)
