"""The PostgreSQL store's journal part: what it writes through the forget journal (forgets, the
janitor's pruning, a rewind's floor, an upgrade's fence) and the journal's reads."""

from __future__ import annotations

import time
from collections.abc import Sequence

from ...model import fence as fencing
from ...model.keys import ScopeKey
from ...model.settings import UserSettings
from ..base import Forgotten
from ..sql_common import key_args
from . import journal
from . import settings as settings_sql
from .pooled import Pooled
from .values import jsonb, one

__all__ = ["Journaling"]


class Journaling:
    """The journaled operations of :class:`~shortterm.store.postgres.PostgresStore`."""

    def __init__(self, pooled: Pooled) -> None:
        self._tx = pooled.tx
        self._forget_tx = pooled.forget_tx
        self._read = pooled.read
        layout = pooled.layout
        self._t = layout.t
        self._sql = layout.common
        self._own = pooled.own_entries

    async def forget_channel(self, channel_id: str, now: float, horizon: float) -> Forgotten:
        async with self._forget_tx("channel delete") as conn:
            target = fencing.channel_target(channel_id)
            seq = await journal.append(
                conn, self._t, "channel", [channel_id], [target], now, horizon, self._own
            )
            cur = await conn.execute(self._sql.delete_channel, (channel_id,))
            return Forgotten(seq, cur.rowcount)

    async def forget_user(
        self, user_id: str, keep: UserSettings | None, now: float, horizon: float
    ) -> Forgotten:
        target = fencing.user_target(user_id)
        async with self._forget_tx("user delete") as conn:
            seq = await journal.append(
                conn, self._t, "user", [target], [target], now, horizon, self._own
            )
            cur = await conn.execute(self._sql.delete_user_scopes, (user_id,))
            await conn.execute(self._sql.delete_user_journal, (user_id,))
            if keep is None:
                await conn.execute(self._sql.delete_user_settings, (user_id,))
            else:
                await settings_sql.write_user(conn, self._t, user_id, keep, now)
            return Forgotten(seq, cur.rowcount)

    async def forget_server_channel(
        self, server_id: str, channel_id: str, persona_id: str | None, now: float
    ) -> Forgotten:
        key = ScopeKey.server(server_id, channel_id, persona_id)
        target = fencing.server_channel_target(server_id, channel_id, persona_id)
        async with self._forget_tx("server channel delete") as conn:
            seq = await journal.append(
                conn, self._t, "server_channel", key.astuple[1:], [target], now, own=self._own
            )
            cur = await conn.execute(self._sql.delete_key, key_args(key))
            return Forgotten(seq, cur.rowcount)

    async def janitor(self, untouched_since: float) -> int:
        async with self._tx("janitor") as conn:
            cur = await conn.execute(self._sql.janitor, (untouched_since,))
            deleted = cur.rowcount
        # The journal keeps its own retention, whatever the rows' (see journal.prune).
        async with self._forget_tx("journal prune") as conn:
            await journal.prune(conn, self._t, time.time())
        return deleted

    async def rewound(self, past: int, now: float) -> int:
        async with self._forget_tx("journal rewind") as conn:
            return await journal.rewound(conn, self._t, past, now)

    async def since(self, seq: int, limit: int, forgets_only: bool) -> list[fencing.JournalEntry]:
        query = self._sql.forgets_since if forgets_only else self._sql.journal_since
        # Retried once on a dropped connection: a process must not miss a forget (and serve
        # degraded) because its pool still held connections to a server that restarted.
        rows = await self._read("journal read", query, (seq, limit))
        return [
            fencing.JournalEntry(
                int(r[0]),
                r[1],
                tuple(r[2]),
                tuple(r[3]),
                float(r[4]),
                None if r[5] is None else float(r[5]),
            )
            for r in rows
        ]

    async def horizons(self) -> list[tuple[str, float]]:
        rows = await self._read("horizon read", self._sql.horizons, ())
        return [(str(r[0]), float(r[1])) for r in rows]

    async def head(self) -> int:
        rows = await self._read("journal read", self._sql.journal_head, ())
        return int(rows[0][0])  # an aggregate: always one row

    async def fence_upgrade(
        self, scopes: Sequence[ScopeKey], since: int, targets: Sequence[str], now: float
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
            return await journal.append(conn, self._t, "turn", [], targets, now, own=self._own)
