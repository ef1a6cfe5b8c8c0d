"""Whether another connection committed to the SQLite file: the store's ``journal_moved``
and ``foreign_epoch``.

Only another connection's commit can bring journal entries (or rows) this process has not
seen. ``PRAGMA data_version`` tells exactly, but costs a read transaction; the WAL-index
header (:mod:`..wal_watch`) tells in a few hundred nanoseconds that nobody committed at all.
"""

from __future__ import annotations

from ...model.errors import StoreUnavailable
from ..wal_watch import WalWatch
from .connection import Connection, Guard

__all__ = ["CommitWatch"]


class CommitWatch:
    """Other connections' commits, as this connection sees them."""

    def __init__(self, connection: Connection, guard: Guard) -> None:
        self._connection = connection
        self._guard = guard
        self._wal = WalWatch(connection.path)
        self._wal_seen: bytes | None = None
        self._data_version: int | None = None  # as moved() last read it
        self._seen_version: int | None = None  # as any read of it last found it
        self.foreign_epoch = 0
        """How many times another connection's commit was seen (it only grows)."""

    def moved(self) -> bool:
        """Whether another connection committed since the last call: only then can the
        journal hold entries we have not read. While no connection commits, a read of the
        WAL-index header answers (a few hundred nanoseconds); after any commit, ours
        included, ``PRAGMA data_version`` tells whether it was another connection's."""
        connection = self._connection
        if connection.closed:
            raise StoreUnavailable(f"SQLite store {connection.path!r} is closed")
        # The header first: a commit after this read changes it, so the next call looks.
        header = self._wal.header()
        if header is not None and header == self._wal_seen:
            return False
        db = connection.db
        version = self._guard(
            "data version", lambda: db.execute("PRAGMA data_version").fetchone()[0]
        )
        self._wal_seen = header
        moved = bool(version != self._data_version)
        self._data_version = version
        self.saw_version(version)
        return moved

    def saw_version(self, version: int) -> None:
        """Count another connection's commit (``foreign_epoch``) the first time any read of
        ``PRAGMA data_version`` shows it; our own commits never change the value."""
        if version != self._seen_version:
            if self._seen_version is not None:
                self.foreign_epoch += 1
            self._seen_version = version

    def close(self) -> None:
        """Unmap the header; call it after the connection closed (see :class:`WalWatch`)."""
        self._wal.close()
