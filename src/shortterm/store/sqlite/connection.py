"""The SQLite store's connection: opening the file, transactions, errors, the schema."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from ...model.errors import ConfigError, StoreUnavailable
from .. import migrations
from ..wal_watch import WalWatch

__all__ = ["Connection"]

T = TypeVar("T")


class Connection:
    """One connection to one SQLite file, used on the loop thread."""

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

    def _fetch(self, what: str, statement: str, args: Sequence[Any]) -> list[Any]:
        return self._guard(what, lambda: self._db.execute(statement, args).fetchall())

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
