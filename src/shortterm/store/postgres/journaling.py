"""What the PostgreSQL store writes through the journal: forgets, settings, and the
journal's own reads (whether another process wrote, what it wrote)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from ...model import fence as fencing
from ...model.keys import Privacy, ScopeKey
from ...model.settings import ServerSettings, UserSettings
from ..base import Forgotten
from ..sql_common import key_args
from . import journal
from . import settings as settings_sql
from .pooled import PooledStore
from .values import jsonb, one

__all__ = ["Journaling"]


class Journaling(PooledStore):
    """The journaled operations of :class:`~shortterm.store.postgres.PostgresStore`."""

    async def forget_channel(self, channel_id: str, *, now: float) -> Forgotten:
        async with self._forget_tx("channel delete") as conn:
            seq = await journal.append(
                conn, self._t, "channel", [channel_id], [fencing.channel_target(channel_id)], now
            )
            cur = await conn.execute(self._sql.delete_channel, (channel_id,))
            return Forgotten(seq, cur.rowcount)

    async def forget_user(
        self, user_id: str, *, keep: UserSettings | None, now: float
    ) -> Forgotten:
        target = fencing.user_target(user_id)
        async with self._forget_tx("user delete") as conn:
            seq = await journal.append(conn, self._t, "user", [target], [target], now)
            cur = await conn.execute(self._sql.delete_user_scopes, (user_id,))
            await conn.execute(self._sql.delete_user_journal, (user_id,))
            if keep is None:
                await conn.execute(self._sql.delete_user_settings, (user_id,))
            else:
                await settings_sql.write_user(conn, self._t, user_id, keep, now)
            return Forgotten(seq, cur.rowcount)

    async def forget_server_channel(
        self, server_id: str, channel_id: str, persona_id: str | None, *, now: float
    ) -> Forgotten:
        key = ScopeKey.server(server_id, channel_id, persona_id)
        target = fencing.server_channel_target(server_id, channel_id, persona_id)
        async with self._forget_tx("server channel delete") as conn:
            seq = await journal.append(
                conn, self._t, "server_channel", key.astuple[1:], [target], now
            )
            cur = await conn.execute(self._sql.delete_key, key_args(key))
            return Forgotten(seq, cur.rowcount)

    async def janitor(self, *, untouched_since: float) -> int:
        async with self._tx("janitor") as conn:
            cur = await conn.execute(self._sql.janitor, (untouched_since,))
            deleted = cur.rowcount
        # The journal keeps its own retention, whatever the rows' (see journal.prune).
        async with self._forget_tx("journal prune") as conn:
            await journal.prune(conn, self._t, time.time())
        return deleted

    async def journal_rewound(self, past: int, *, now: float) -> int:
        async with self._forget_tx("journal rewind") as conn:
            return await journal.rewound(conn, self._t, past, now)

    def journal_moved(self) -> bool:
        """True when NOTIFY announced a change since the last call, or when the ``LISTEN``
        connection has not proved itself alive within ``listen_timeout_s`` (see
        :class:`journal.JournalListener`). No query: while the listener is alive, a flag."""
        return self._listener.moved()

    @property
    def listening(self) -> bool:
        """Whether the ``LISTEN`` connection proved itself alive within ``listen_timeout_s``,
        so that :meth:`journal_moved` answers from its flag (asking changes nothing)."""
        return self._listener.alive

    async def journal_since(
        self, seq: int, *, limit: int = 1000, forgets_only: bool = False
    ) -> list[fencing.JournalEntry]:
        query = self._sql.forgets_since if forgets_only else self._sql.journal_since
        # Retried once on a dropped connection: a process must not miss a forget (and serve
        # degraded) because its pool still held connections to a server that restarted.
        rows = await self._read("journal read", query, (seq, limit))
        return [
            fencing.JournalEntry(int(r[0]), r[1], tuple(r[2]), tuple(r[3]), float(r[4]))
            for r in rows
        ]

    async def journal_head(self) -> int:
        rows = await self._read("journal read", self._sql.journal_head, ())
        return int(rows[0][0])  # an aggregate: always one row

    async def fence_upgrade(
        self,
        scopes: Sequence[ScopeKey],
        *,
        since: int,
        targets: Sequence[str],
        now: float,
    ) -> int | None:
        subjects = jsonb([list(k.astuple) for k in scopes])
        # The forget locks: every fenced write in flight (holding the fence lock shared)
        # commits before the check, and none starts until our fence rows are committed.
        async with self._forget_tx("upgrade takeover") as conn:
            cur = await conn.execute(
                f"SELECT EXISTS (SELECT 1 FROM {self._t}journal WHERE seq > %s "
                "AND kind = 'edit' AND subject IN (SELECT jsonb_array_elements(%s::jsonb)))",
                (since, subjects),
            )
            if one(await cur.fetchone())[0]:
                return None
            return await journal.append(conn, self._t, "turn", [], targets, now)

    # -- settings -------------------------------------------------------------------------

    async def save_server_settings(
        self, server_id: str, settings: ServerSettings, *, now: float
    ) -> int:
        async with self._forget_tx("server settings write") as conn:
            targets = await settings_sql.write_server(conn, self._t, server_id, settings, now)
            return await journal.append(conn, self._t, "server_settings", [server_id], targets, now)

    async def server_settings_since(self, since: float) -> dict[str, ServerSettings]:
        async with self._conn("server settings read") as conn:
            return await settings_sql.read_servers(conn, self._t, since)

    async def save_user_settings(self, user_id: str, settings: UserSettings, *, now: float) -> int:
        async with self._forget_tx("user settings write") as conn:
            await settings_sql.write_user(conn, self._t, user_id, settings, now)
            # PARTIAL or FULL: no personal memory from now on, so a fence row refuses a
            # write in flight that carries the user's target (computed under NONE).
            narrowed = settings.privacy is not Privacy.NONE
            targets = [fencing.user_target(user_id)] if narrowed else []
            return await journal.append(conn, self._t, "user_settings", [], targets, now)

    async def user_settings_since(self, since: float) -> dict[str, UserSettings]:
        async with self._conn("user settings read") as conn:
            return await settings_sql.read_users(conn, self._t, since)
