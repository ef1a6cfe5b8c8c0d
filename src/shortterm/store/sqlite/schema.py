"""Schema migrations for SQLite: the SQL files under ``migrations/sqlite``, run inside the
store's guard."""

from __future__ import annotations

from .. import migrations
from .connection import Connection

__all__ = ["migrate", "version"]


def migrate(connection: Connection) -> list[str]:
    """Apply the pending migrations, each in its own transaction with its
    ``schema_migrations`` row; returns the labels of those applied now."""
    db = connection.db
    db.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations "
        "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
    )
    done = {v for (v,) in db.execute("SELECT version FROM schema_migrations")}
    applied = []
    for m in migrations.load("sqlite"):
        if m.version in done:
            continue
        with connection.tx() as tx:
            for statement in m.statements:
                tx.execute(statement)
            tx.execute(
                "INSERT INTO schema_migrations VALUES (?, ?, datetime('now'))",
                (m.version, m.name),
            )
        applied.append(m.label)
    return applied


def version(connection: Connection) -> int:
    """The newest migration applied (0 for none)."""
    found = connection.db.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0]
    return int(found or 0)
