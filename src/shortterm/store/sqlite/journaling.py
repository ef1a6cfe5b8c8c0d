"""What the SQLite store writes through the journal: forgets, settings, and the journal's
own reads (whether another process wrote, what it wrote)."""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Callable, Sequence

from ...model import fence as fencing
from ...model.errors import StoreUnavailable
from ...model.keys import Privacy, ScopeKey
from ...model.settings import ServerSettings, UserSettings
from ..base import Forgotten
from ..sql_common import key_args
from . import journal, sql
from . import settings as settings_sql
from .connection import Connection

__all__ = ["Journaling"]

log = logging.getLogger("shortterm")


class Journaling(Connection):
    """The journaled operations of :class:`~shortterm.store.sqlite.SQLiteStore`."""

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
            n = db.execute(sql.COMMON.delete_channel, (channel_id,)).rowcount
            return seq, n

        return self._forget("channel delete", apply)

    async def forget_user(
        self, user_id: str, *, keep: UserSettings | None, now: float
    ) -> Forgotten:
        target = fencing.user_target(user_id)

        def apply(db: sqlite3.Connection) -> tuple[int, int]:
            seq = journal.append(db, "user", [target], [target], now)
            n = db.execute(sql.COMMON.delete_user_scopes, (user_id,)).rowcount
            db.execute(sql.COMMON.delete_user_journal, (user_id,))
            if keep is None:
                db.execute(sql.COMMON.delete_user_settings, (user_id,))
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
            n = db.execute(sql.COMMON.delete_key, key_args(key)).rowcount
            return seq, n

        return self._forget("server channel delete", apply)

    async def janitor(self, *, untouched_since: float) -> int:
        def run() -> int:
            with self._tx() as db:
                n = db.execute(sql.COMMON.janitor, (untouched_since,))
                # The journal keeps its own retention, whatever the rows' (see journal.prune).
                journal.prune(db, time.time())
                return n.rowcount

        return self._guard("janitor", run)

    async def journal_rewound(self, past: int, *, now: float) -> int:
        def apply(db: sqlite3.Connection) -> tuple[int, int]:
            return journal.rewound(db, past, now), 0

        return self._forget("journal rewind", apply).seq

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
        return self._fetch("private scope read", sql.COMMON.private_keys, ())

    async def journal_since(
        self, seq: int, *, limit: int = 1000, forgets_only: bool = False
    ) -> list[fencing.JournalEntry]:
        query = sql.COMMON.forgets_since if forgets_only else sql.COMMON.journal_since
        rows = self._fetch("journal read", query, (seq, limit))
        return [
            fencing.JournalEntry(
                r[0], r[1], tuple(json.loads(r[2])), tuple(json.loads(r[3])), float(r[4])
            )
            for r in rows
        ]

    async def journal_head(self) -> int:
        found = self._fetch("journal read", sql.COMMON.journal_head, ())
        return int(found[0][0] or 0)

    async def fence_upgrade(
        self,
        scopes: Sequence[ScopeKey],
        *,
        since: int,
        targets: Sequence[str],
        now: float,
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
                return None if found else journal.append(db, "turn", [], targets, now)

        return self._guard("upgrade takeover", run)

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
                # PARTIAL or FULL: no personal memory from now on, so a fence row refuses a
                # write in flight that carries the user's target (computed under NONE).
                narrowed = settings.privacy is not Privacy.NONE
                targets = [fencing.user_target(user_id)] if narrowed else []
                return journal.append(db, "user_settings", [], targets, now)

        return self._guard("user settings write", run)

    async def user_settings_since(self, since: float) -> dict[str, UserSettings]:
        return self._guard("user settings read", lambda: settings_sql.read_users(self._db, since))
