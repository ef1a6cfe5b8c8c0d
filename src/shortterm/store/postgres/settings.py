"""Server and user settings in PostgreSQL: their statements (run inside the caller's
transaction) and the store's settings part, which saves them journaled and reads them."""

from __future__ import annotations

from ...model import ServerSettings, UserSettings
from ...model.text import clean_text
from ..settings_fence import server_settings_targets, user_settings_targets
from ..sql_common import (
    SERVER_READ_COLS,
    server_settings,
    server_settings_values,
    server_upsert,
    user_settings,
)
from . import journal
from .connection import Conn
from .pooled import Pooled
from .values import clean, jsonb

__all__ = ["Settings", "read_servers", "read_users", "write_server", "write_user"]


class Settings:
    """The settings operations of :class:`~shortterm.store.postgres.PostgresStore`: a save is
    journaled in the same transaction, under the forget locks (it may fence)."""

    def __init__(self, pooled: Pooled) -> None:
        self._conn = pooled.conn
        self._forget_tx = pooled.forget_tx
        self._t = pooled.layout.t
        self._own = pooled.own_entries

    async def save_server(self, server_id: str, settings: ServerSettings, now: float) -> int:
        async with self._forget_tx("server settings write") as conn:
            targets = await write_server(conn, self._t, server_id, settings, now)
            return await journal.append(
                conn, self._t, "server_settings", [server_id], targets, now, own=self._own
            )

    async def servers_since(self, since: float) -> dict[str, ServerSettings]:
        async with self._conn("server settings read") as conn:
            return await read_servers(conn, self._t, since)

    async def save_user(self, user_id: str, settings: UserSettings, now: float) -> int:
        async with self._forget_tx("user settings write") as conn:
            await write_user(conn, self._t, user_id, settings, now)
            targets = user_settings_targets(user_id, settings)
            return await journal.append(
                conn, self._t, "user_settings", [], targets, now, own=self._own
            )

    async def users_since(self, since: float) -> dict[str, UserSettings]:
        async with self._conn("user settings read") as conn:
            return await read_users(conn, self._t, since)


async def write_server(
    conn: Conn, t: str, server_id: str, settings: ServerSettings, now: float
) -> list[str]:
    """Store one server's settings and categories; returns the fence targets of the channels
    that turned private (the writes still in flight made while they were public carry a
    public flag)."""
    s = settings
    upsert = server_upsert(f"{t}server_settings", "%s")
    values = server_settings_values(server_id, s, now, text=clean, flag=bool, id_list=jsonb)
    labels = [clean_text(c.label) for c in s.categories]
    descriptions = [clean_text(c.description) for c in s.categories]
    cur = await conn.execute(
        f"SELECT private_channel_ids FROM {t}server_settings WHERE server_id = %s",
        (server_id,),
    )
    old = await cur.fetchone()
    was_private = frozenset(old[0]) if old is not None else frozenset()
    await conn.execute(upsert, values)
    await conn.execute(f"DELETE FROM {t}server_categories WHERE server_id = %s", (server_id,))
    if labels:
        await conn.execute(
            f"INSERT INTO {t}server_categories "
            "SELECT %s, c.ord - 1, c.label, c.description "
            "FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY "
            "AS c(label, description, ord)",
            (server_id, labels, descriptions),
        )
    return server_settings_targets(server_id, s, was_private)


async def read_servers(conn: Conn, t: str, since: float) -> dict[str, ServerSettings]:
    """Settings of the servers changed at or after ``since``, categories in position order."""
    cur = await conn.execute(
        f"SELECT {', '.join(f's.{c}' for c in SERVER_READ_COLS)}, "
        "(SELECT COALESCE(jsonb_agg(jsonb_build_array(c.label, c.description) "
        f"ORDER BY c.position), '[]'::jsonb) FROM {t}server_categories c "
        "WHERE c.server_id = s.server_id) "
        f"FROM {t}server_settings s WHERE s.updated_at >= %s",
        (since,),
    )
    rows = await cur.fetchall()
    return {r[0]: server_settings(r, r[9], r[11]) for r in rows}


async def write_user(conn: Conn, t: str, user_id: str, settings: UserSettings, now: float) -> None:
    await conn.execute(
        f"INSERT INTO {t}user_settings VALUES (%s, %s, %s, %s) "
        "ON CONFLICT (user_id) DO UPDATE SET privacy = excluded.privacy, "
        "cross_server_opt_in = excluded.cross_server_opt_in, "
        "updated_at = excluded.updated_at",
        (user_id, settings.privacy.value, settings.cross_server_opt_in, now),
    )


async def read_users(conn: Conn, t: str, since: float) -> dict[str, UserSettings]:
    cur = await conn.execute(
        "SELECT user_id, privacy, cross_server_opt_in FROM "
        f"{t}user_settings WHERE updated_at >= %s",
        (since,),
    )
    rows = await cur.fetchall()
    return {uid: user_settings(p, opt) for uid, p, opt in rows}
