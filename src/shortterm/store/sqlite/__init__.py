"""SQLite durable tier (stdlib ``sqlite3``, WAL).

Statements run on the event-loop thread on purpose: one takes 4-20 µs, while handing it to a
worker thread costs 40-110 µs per hop. Each logical operation is one transaction, so a crash
leaves it applied whole or not at all. ``synchronous=NORMAL`` (the default here) survives a
process crash; ``?synchronous=full`` in the URL also survives power loss, at a cost per commit.
A second process writing the same file waits up to ``busy_timeout_ms`` for the lock: SQLite is
for one process; several processes should use PostgreSQL.
"""

from .store import SQLiteStore
from .url import sqlite_path

__all__ = ["SQLiteStore", "sqlite_path"]
