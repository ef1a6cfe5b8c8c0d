"""The forget journal: appending entries with their fence rows, and hearing of new ones.

Followers learn of a change from NOTIFY on the schema's channel (no polling query), then read
the journal itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import suppress

import psycopg

from ...model.fence import EVERY_TARGET, JOURNAL_RETENTION_S
from .connection import Conn, Pool
from .values import jsonb, one

__all__ = ["JournalListener", "append", "prune"]


async def append(
    conn: Conn,
    t: str,
    kind: str,
    subject: Sequence[str | None],
    targets: Sequence[str],
    now: float,
) -> int:
    """Append one journal entry and its fence rows, inside the caller's transaction,
    which must hold the exclusive fence and journal locks (``PostgresStore._forget_tx``)."""
    cur = await conn.execute(
        f"INSERT INTO {t}journal (kind, subject, targets, at) "
        "VALUES (%s, %s, %s, %s) RETURNING seq",
        (kind, jsonb(list(subject)), jsonb(list(targets)), now),
    )
    seq = int(one(await cur.fetchone())[0])
    if targets:
        await conn.execute(
            f"INSERT INTO {t}fence SELECT t, %s, %s FROM unnest(%s::text[]) AS t "
            "ON CONFLICT DO NOTHING",
            (seq, now, list(targets)),
        )
    return seq


async def prune(conn: Conn, t: str, now: float) -> int | None:
    """Delete the journal entries and fence rows older than the journal's retention, and
    journal what went: a ``pruned`` entry naming the newest deleted sequence, fencing every
    write that began before it (it may have missed fence rows that are gone). Inside the
    caller's forget transaction. Returns its sequence, or None when nothing was old enough."""
    horizon = now - JOURNAL_RETENTION_S
    cur = await conn.execute(f"SELECT MAX(seq) FROM {t}journal WHERE at < %s", (horizon,))
    through = one(await cur.fetchone())[0]
    if through is None:
        return None
    await conn.execute(f"DELETE FROM {t}journal WHERE at < %s", (horizon,))
    await conn.execute(f"DELETE FROM {t}fence WHERE at < %s", (horizon,))
    return await append(conn, t, "pruned", [str(through)], [EVERY_TARGET], now)


class JournalListener:
    """One connection LISTENing on the schema's channel, counting what NOTIFY announces, so
    :meth:`moved` answers without a query (an outage costs no extra wait there)."""

    def __init__(self, pool: Pool, channel: str) -> None:
        self._pool = pool
        self._channel = channel
        self._task: asyncio.Task[None] | None = None
        self._heard = 0  # announcements since the last call of moved()
        self._listening = False
        self._closed = False

    def moved(self) -> bool:
        """True when NOTIFY announced a change since the last call. The listening connection
        counts one announcement each time it (re)connects, so whatever was journaled while it
        was away is read then. Starts listening on the first call."""
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(
                self._listen(), name="shortterm-journal-listener"
            )
        heard, self._heard = self._heard, 0
        return heard > 0

    async def _listen(self) -> None:
        """Hold one connection LISTENing for journal changes; reconnect after a failure."""
        conninfo = self._pool.conninfo
        if not isinstance(conninfo, str):
            return  # a computed conninfo: journal_moved polls on every call instead
        while not self._closed:
            try:
                conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
                async with conn:
                    await conn.execute(f'LISTEN "{self._channel}"')
                    self._heard += 1  # anything committed before LISTEN is read once more
                    self._listening = True
                    async for _ in conn.notifies():
                        self._heard += 1
            except (psycopg.Error, OSError):
                pass  # moved() says True meanwhile; try again shortly
            finally:
                self._listening = False
            await asyncio.sleep(0.5)

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
