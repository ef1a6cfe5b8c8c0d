"""A cheap look at whether any connection committed to a SQLite database in WAL mode.

``PRAGMA data_version`` answers exactly (commits by *other* connections), but it opens a
read transaction, whose shared-memory locks cost several microseconds. Every commit in WAL
mode rewrites the WAL-index header at the start of the ``-shm`` file (its frame count and
checksums change; a WAL restart changes its salts). Reading those bytes through a read-only
mapping costs a few hundred nanoseconds, so the pragma runs only after the header changed.

Unchanged header bytes prove that nothing was committed since they were read: a commit
that returned has written the header. The mapping stays valid while our own connection is
open, because SQLite truncates ``-shm`` only when no connection holds it (and our own
descriptor must not drop the locks that say so: see ``_open``).
"""

from __future__ import annotations

import mmap
import os

__all__ = ["WalWatch"]

# The WAL-index header is two 48-byte copies; the first one is written last on a commit.
_HEADER_BYTES = 96


class WalWatch:
    """The WAL-index header bytes of one database, read without a transaction."""

    def __init__(self, db_path: str) -> None:
        self._path = db_path + "-shm"
        self._map: mmap.mmap | None = None
        self._fd: int | None = None

    def header(self) -> bytes | None:
        """The header now, or ``None`` when there is no shared-memory file to read (an
        in-memory database, or WAL not yet started): callers then ask SQLite itself."""
        if self._map is None:
            self._map = self._open()
            if self._map is None:
                return None
        return self._map[:_HEADER_BYTES]

    def _open(self) -> mmap.mmap | None:
        # Closing any descriptor of a file drops every POSIX lock the process holds on it,
        # SQLite's own among them: with its shared lock on the -shm file gone, another
        # process opening the database believes it is the first and truncates the -shm
        # file under our mappings (SIGBUS). So our descriptor stays open until close(),
        # which runs after the connection closed.
        try:
            if os.stat(self._path).st_size < _HEADER_BYTES:
                return None
        except OSError:
            return None
        if self._fd is None:
            try:
                self._fd = os.open(self._path, os.O_RDONLY)
            except OSError:
                return None
        try:
            return mmap.mmap(self._fd, _HEADER_BYTES, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            return None

    def close(self) -> None:
        """Unmap and close; call it after the database connection is closed (see _open)."""
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
