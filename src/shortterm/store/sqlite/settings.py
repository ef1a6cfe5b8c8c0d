"""Server and user settings in SQLite: their statements (run inside the caller's guard and
transaction) and the store's settings part, which saves them journaled and reads them."""

from __future__ import annotations

import json
import sqlite3

from ...model import ServerSettings, UserSettings
from ..settings_fence import server_settings_targets, user_settings_targets
from ..sql_common import SERVER_READ_COLS, server_settings, server_settings_values, user_settings
from . import journal
from .connection import Connection, Guard
from .sql import SERVER_UPSERT
from .values import as_is

__all__ = ["Settings", "read_servers", "read_users", "write_server", "write_user"]


class Settings:
    """The settings operations of :class:`~shortterm.store.sqlite.SQLiteStore`: a save
    is journaled in the same transaction."""

    def __init__(self, connection: Connection, guard: Guard) -> None:
        self._db = connection.db
        self._tx = connection.tx
        self._guard = guard
        self._own = connection.own_entries

    def save_server(self, server_id: str, settings: ServerSettings, now: float) -> int:
        def run() -> int:
            with self._tx() as db:
                targets = write_server(db, server_id, settings, now)
                return journal.append(
                    db, "server_settings", [server_id], targets, now, own=self._own
                )

        return self._guard("server settings write", run)

    def servers_since(self, since: float) -> dict[str, ServerSettings]:
        return self._guard("server settings read", lambda: read_servers(self._db, since))

    def save_user(self, user_id: str, settings: UserSettings, now: float) -> int:
        def run() -> int:
            with self._tx() as db:
                write_user(db, user_id, settings, now)
                targets = user_settings_targets(user_id, settings)
                return journal.append(db, "user_settings", [], targets, now, own=self._own)

        return self._guard("user settings write", run)

    def users_since(self, since: float) -> dict[str, UserSettings]:
        return self._guard("user settings read", lambda: read_users(self._db, since))


def write_server(
    db: sqlite3.Connection, server_id: str, settings: ServerSettings, now: float
) -> list[str]:
    """Store one server's settings and categories; returns the fence targets of the channels
    that turned private (the writes still in flight made while they were public carry a
    public flag)."""
    s = settings
    old = db.execute(
        "SELECT private_channel_ids FROM server_settings WHERE server_id = ?",
        (server_id,),
    ).fetchone()
    was_private = frozenset(json.loads(old[0])) if old else frozenset()
    db.execute(
        SERVER_UPSERT,
        server_settings_values(server_id, s, now, text=as_is, flag=int, id_list=json.dumps),
    )
    db.execute("DELETE FROM server_categories WHERE server_id = ?", (server_id,))
    db.executemany(
        "INSERT INTO server_categories VALUES (?, ?, ?, ?)",
        [(server_id, i, c.label, c.description) for i, c in enumerate(s.categories)],
    )
    return server_settings_targets(server_id, s, was_private)


def read_servers(db: sqlite3.Connection, since: float) -> dict[str, ServerSettings]:
    """Settings of the servers changed at or after ``since``, categories in position order."""
    rows = db.execute(
        f"SELECT {', '.join(SERVER_READ_COLS)} FROM server_settings WHERE updated_at >= ?",
        (since,),
    ).fetchall()
    out = {}
    for r in rows:
        cats = db.execute(
            "SELECT label, description FROM server_categories WHERE server_id = ? "
            "ORDER BY position",
            (r[0],),
        ).fetchall()
        out[r[0]] = server_settings(r, json.loads(r[9]), cats)
    return out


def write_user(db: sqlite3.Connection, user_id: str, settings: UserSettings, now: float) -> None:
    db.execute(
        "INSERT INTO user_settings VALUES (?, ?, ?, ?) ON CONFLICT (user_id) DO UPDATE SET "
        "privacy=excluded.privacy, cross_server_opt_in=excluded.cross_server_opt_in, "
        "updated_at=excluded.updated_at",
        (user_id, settings.privacy.value, int(settings.cross_server_opt_in), now),
    )


def read_users(db: sqlite3.Connection, since: float) -> dict[str, UserSettings]:
    return {
        uid: user_settings(p, opt)
        for uid, p, opt in db.execute(
            "SELECT user_id, privacy, cross_server_opt_in FROM user_settings WHERE updated_at >= ?",
            (since,),
        )
    }
