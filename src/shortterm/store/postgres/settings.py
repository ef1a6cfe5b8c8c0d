"""Server and user settings in PostgreSQL: the statements run inside the store's transaction."""

from __future__ import annotations

from ...model import ServerSettings, UserSettings
from ...model.fence import private_target
from ...model.text import clean_text
from ..sql_common import (
    SERVER_READ_COLS,
    server_settings,
    server_settings_values,
    server_upsert,
    user_settings,
)
from .connection import Conn
from .values import clean, jsonb

__all__ = ["read_servers", "read_users", "write_server", "write_user"]


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
    newly = sorted(s.private_channel_ids - was_private)
    return [private_target(server_id, c) for c in newly]


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
