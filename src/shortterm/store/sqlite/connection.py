"""The SQLite store's connection part: opening the file, the guard every statement runs under,
write transactions, and the file's upkeep (checkpoint, integrity check)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ...model.errors import ConfigError, StoreUnavailable
from ..own_entries import OwnEntries

__all__ = ["Connection", "Guard", "fetch"]

T = TypeVar("T")


class Guard(Protocol):
    """Runs ``fn`` as the operation ``what``: on a closed store, or when SQLite fails, it
    raises ``StoreUnavailable`` (rolling back a transaction left open)."""

    def __call__(self, what: str, fn: Callable[[], T], /) -> T: ...


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
            self.db = sqlite3.connect(self.path, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute(f"PRAGMA synchronous={synchronous.upper()}")
            self.db.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            self.db.execute("PRAGMA foreign_keys=ON")
            # Deleted rows are overwritten, not just unlinked: a purged user's ids and
            # summaries must not linger in free pages of the file.
            self.db.execute("PRAGMA secure_delete=ON")
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailable(f"cannot open SQLite database {self.path!r}: {exc}") from exc
        self.closed = False
        self.own_entries = OwnEntries()  # the journal entries appended through it

    def guard(self, what: str, fn: Callable[[], T]) -> T:
        """The store's :class:`Guard`."""
        if self.closed:
            raise StoreUnavailable(f"SQLite store {self.path!r} is closed")
        try:
            return fn()
        except sqlite3.Error as exc:
            if self.db.in_transaction:
                self.db.rollback()
            raise StoreUnavailable(f"SQLite {what} failed: {exc}") from exc

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        # IMMEDIATE takes the write lock up front, so a read-modify-write cannot interleave
        # with another writer.
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.rollback()
            raise
        self.db.execute("COMMIT")

    def close(self) -> None:
        """Close the connection (idempotent); the guard refuses every later operation."""
        if not self.closed:
            self.closed = True
            self.db.close()

    def checkpoint(self) -> None:
        """Fold the WAL into the main file and truncate it (tests and backups)."""
        self.guard("checkpoint", lambda: self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)"))

    def integrity_check(self) -> str:
        return str(
            self.guard(
                "integrity check", lambda: self.db.execute("PRAGMA integrity_check").fetchone()[0]
            )
        )


def fetch(
    guard: Guard, db: sqlite3.Connection, what: str, statement: str, args: Sequence[Any]
) -> list[Any]:
    """Every row of one read, run under ``guard``."""
    return guard(what, lambda: db.execute(statement, args).fetchall())
