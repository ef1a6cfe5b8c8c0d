"""The forget journal: appending entries with their fence rows, and hearing of new ones.

Followers learn of a change from NOTIFY on the schema's channel, then read the journal itself.
A NOTIFY that never arrives is indistinguishable from no change, so the listening connection
must also keep proving that it is alive; while it cannot, followers read the journal's end on
every call. A distilled write's NOTIFY names its entry: the process that wrote it does not
read it back (:meth:`JournalListener.own`). Through a pooler in transaction mode nothing can
LISTEN (the session is not ours between statements): the same connection then only polls the
journal's end, which is what its heartbeat reads anyway.
"""

from __future__ import annotations

import asyncio
import math
import os
import socket
import time
from collections.abc import Sequence
from contextlib import suppress
from typing import Any

import psycopg

from ...model.fence import EVERY_TARGET, JOURNAL_RETENTION_S
from ...model.horizons import HORIZON_RETENTION_S
from ..own_entries import OwnEntries
from .connection import Conn, Pool
from .values import jsonb, one

__all__ = ["JournalListener", "append", "prune"]

_monotonic = time.monotonic  # bound once: moved() runs on every call of every process
_CONNECT_TIMEOUT_S = 5.0
_BACKOFF_S = 0.05  # after the second failure in a row to prove alive; doubles up to the max
_BACKOFF_MAX_S = 2.0
_OWN_KEPT = 64  # our own entries not yet heard back: more in flight at once just cost reads


async def append(
    conn: Conn,
    t: str,
    kind: str,
    subject: Sequence[str | None],
    targets: Sequence[str],
    now: float,
    horizon: float | None = None,
    own: OwnEntries | None = None,
) -> int:
    """Append one journal entry and its fence rows (and, with ``horizon``, the newest horizon
    of each target), inside the caller's transaction, which must hold the exclusive fence
    and journal locks (``PostgresStore._forget_tx``); kept in ``own`` too."""
    cur = await conn.execute(
        f"INSERT INTO {t}journal (kind, subject, targets, at, horizon) "
        "VALUES (%s, %s, %s, %s, %s) RETURNING seq",
        (kind, jsonb(list(subject)), jsonb(list(targets)), now, horizon),
    )
    seq = int(one(await cur.fetchone())[0])
    if own is not None:
        own.add(seq, kind, subject, targets, now, horizon)
    if targets:
        await conn.execute(
            f"INSERT INTO {t}fence SELECT t, %s, %s FROM unnest(%s::text[]) AS t "
            "ON CONFLICT DO NOTHING",
            (seq, now, list(targets)),
        )
    if horizon is not None:
        await conn.execute(
            f"INSERT INTO {t}horizon SELECT t, %s, %s FROM unnest(%s::text[]) AS t "
            f"ON CONFLICT (target) DO UPDATE SET at = GREATEST({t}horizon.at, excluded.at), "
            "written = excluded.written",
            (horizon, now, list(targets)),
        )
    return seq


async def rewound(conn: Conn, t: str, past: int, now: float) -> int:
    """The journal went back below ``past`` (see ``Store.journal_rewound``): its sequence is
    moved to a *floor* above ``past`` and above every number it handed out, and a ``pruned``
    entry through that floor journaled (the floor itself is no entry's number, so every
    follower that passed the journal's end reloads). Inside the caller's forget transaction,
    whose journal lock keeps every other append out. Returns the entry's sequence."""
    cur = await conn.execute(
        "SELECT setval(s, GREATEST(%s, COALESCE(pg_sequence_last_value(s), 0)) + 1) "
        "FROM (SELECT pg_get_serial_sequence(%s, 'seq')::regclass AS s) AS q",
        (past, f"{t}journal"),
    )
    floor = int(one(await cur.fetchone())[0])
    return await append(conn, t, "pruned", [str(floor)], [EVERY_TARGET], now)


async def prune(conn: Conn, t: str, now: float) -> int | None:
    """Delete the journal entries and fence rows older than the journal's retention, and
    journal what went: a ``pruned`` entry naming the newest deleted sequence, fencing every
    write that began before it (it may have missed fence rows that are gone). Inside the
    caller's forget transaction. Returns its sequence, or None when nothing was old enough."""
    # Horizons outlive the journal by far (the platform keeps old messages): their own age.
    await conn.execute(f"DELETE FROM {t}horizon WHERE written < %s", (now - HORIZON_RETENTION_S,))
    oldest = now - JOURNAL_RETENTION_S
    cur = await conn.execute(f"SELECT MAX(seq) FROM {t}journal WHERE at < %s", (oldest,))
    through = one(await cur.fetchone())[0]
    if through is None:
        return None
    await conn.execute(f"DELETE FROM {t}journal WHERE at < %s", (oldest,))
    await conn.execute(f"DELETE FROM {t}fence WHERE at < %s", (oldest,))
    return await append(conn, t, "pruned", [str(through)], [EVERY_TARGET], now)


class JournalListener:
    """One connection LISTENing on the schema's channel, so that :meth:`moved` answers without
    a query while that connection is known to deliver.

    Known to deliver means *proved alive* within ``timeout_s``: every ``timeout_s / 3`` the
    connection answers a heartbeat, and an answer proves that every NOTIFY committed before
    the heartbeat was sent has been received (the server sends them ahead of the answer, and
    the heartbeat reads the journal's end as well). A connection that dies silently (a NAT or
    firewall dropping the flow: no reset, no data), one being re-established, and a process
    paused for longer than ``timeout_s`` all leave the proof stale, and then :meth:`moved`
    answers True: the caller reads the journal itself, one cheap query. So a forget made
    elsewhere is applied here at most ``timeout_s`` after it committed, whatever the
    connection does.

    ``conninfo`` is where to listen (default: the pool's). With ``notify=False`` (through a
    pooler in transaction mode) the connection does not LISTEN and prepares nothing: the
    heartbeat alone tells a change, as a moved journal end, so a forget made elsewhere is
    still applied here within ``timeout_s``, only no sooner than the next heartbeat.
    """

    def __init__(
        self,
        pool: Pool,
        channel: str,
        head_sql: str,
        *,
        timeout_s: float,
        conninfo: str | None = None,
        notify: bool = True,
    ) -> None:
        self._pool = pool
        self._channel = channel
        self._head_sql = head_sql  # reads the journal's end: the heartbeat
        self._timeout_s = timeout_s
        self._conninfo = conninfo
        self._notify = notify
        self._stop = asyncio.Event()  # set by close(): ends a polling pause at once
        self._task: asyncio.Task[None] | None = None
        self._conn: Conn | None = None  # the listening connection, while one is open
        self._announced = False  # a change was heard since the last call of moved()
        # Entries' NOTIFYs heard since then that may yet turn out ours: the notification can
        # arrive before the writing statement's answer, so before own() names the entry.
        self._heard: dict[str, None] = {}
        self._proved_until = -math.inf  # monotonic: when the last proof was sent + timeout_s
        self._head: int | None = None  # the journal's end at the last heartbeat
        self._own: dict[str, None] = {}  # payloads of our own entries (see own()), oldest first
        self._own_last = ""  # the newest of them
        self._failures = 0  # connections lost in a row without proving alive
        self._closed = False

    def moved(self) -> bool:
        """True when a change was announced since the last call, or when the listening
        connection has not proved itself alive within ``timeout_s`` (not listening yet,
        reconnecting, silently dead, or this process was paused). Starts listening on the
        first call. Alive and nothing announced: one flag read and one clock read."""
        if self._announced or self._heard:
            self._announced = False
            self._heard.clear()
            return True
        if _monotonic() < self._proved_until:
            return False
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(
                self._listen(), name="shortterm-journal-listener"
            )
        return True

    def own(self, seq: int) -> None:
        """An entry this process journaled and applied itself (a distilled write): its
        NOTIFY, and a heartbeat that finds it the journal's end, announce nothing. Every
        other process's entry comes with a NOTIFY of its own, so nothing else is missed."""
        payload = str(seq)
        self._own_last = payload
        if payload in self._heard:  # heard before we knew it was ours (see _heard)
            del self._heard[payload]
            return
        self._own[payload] = None
        if len(self._own) > _OWN_KEPT:
            del self._own[next(iter(self._own))]

    @property
    def alive(self) -> bool:
        """Whether the listening connection proved itself within ``timeout_s``; unlike
        :meth:`moved`, asking changes nothing."""
        return _monotonic() < self._proved_until

    async def _listen(self) -> None:
        """Hold one connection LISTENing. After a failure, reconnect at once if the lost
        connection had proved itself, else after a growing pause: callers read the journal
        themselves meanwhile, so there is no hurry."""
        conninfo = self._conninfo or self._pool.conninfo
        if not isinstance(conninfo, str):
            return  # a computed conninfo: moved() stays True, every call reads the journal
        while not self._closed:
            with suppress(psycopg.Error, OSError):  # TimeoutError is an OSError
                await self._session(conninfo)
            self._proved_until = -math.inf  # not listening: no call may trust the flag now
            self._failures += 1
            if self._failures > 1 and not self._closed:
                await asyncio.sleep(min(_BACKOFF_S * 2 ** (self._failures - 2), _BACKOFF_MAX_S))

    async def _session(self, conninfo: str) -> None:
        """One listening connection, from connecting until it fails or we close."""
        # Through a transaction pooler a named prepared statement may land on another
        # client's server connection: prepare nothing there.
        prepare = 5 if self._notify else None
        conn = await asyncio.wait_for(
            psycopg.AsyncConnection.connect(conninfo, autocommit=True, prepare_threshold=prepare),
            max(_CONNECT_TIMEOUT_S, self._timeout_s),
        )
        self._conn = conn
        try:
            async with conn:
                if self._notify:
                    await self._answer(conn, f'LISTEN "{self._channel}"')
                # Whatever was journaled while we did not listen is read once more.
                self._announced = True
                while not self._closed:
                    await self._prove(conn)
                    self._failures = 0
                    await self._pause(conn)
        finally:
            self._conn = None

    async def _pause(self, conn: Conn) -> None:
        """Until the next heartbeat is due: hearing notifications, or only waiting."""
        if not self._notify:
            with suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self._timeout_s / 3)
            return
        # Notifications that arrived during the heartbeat are yielded first.
        async for note in conn.notifies(timeout=self._timeout_s / 3):
            if note.payload in self._own:
                del self._own[note.payload]
            elif note.payload and len(self._heard) < _OWN_KEPT:
                self._heard[note.payload] = None
            else:
                self._announced = True

    async def _prove(self, conn: Conn) -> None:
        """A heartbeat: read the journal's end. Its answer proves every NOTIFY committed
        before it was sent has arrived; a moved end is announced as well (belt and braces: a
        psycopg before 3.2.4, which the requirements exclude, dropped notifications that
        arrived while a query ran), unless it ends on our own entry."""
        sent = _monotonic()
        row = await self._answer(conn, self._head_sql)
        head = None if row is None else int(row[0])
        if head != self._head:
            before, self._head = self._head, head
            ours = str(head) == self._own_last
            if not self._notify:
                # No NOTIFY tells of another process's entry just before ours: the end must
                # have moved by ours alone (a gap in the sequence costs one read, no more).
                ours = ours and before is not None and head == before + 1
            if not ours:
                self._announced = True
        self._proved_until = sent + self._timeout_s

    async def _answer(self, conn: Conn, query: str) -> tuple[Any, ...] | None:
        """Run ``query``; no answer within ``timeout_s`` severs the connection, which fails
        the wait at once. (Cancelling the wait instead would make psycopg ask the server to
        cancel the query and wait for it, up to 10 s on a dead connection.)"""
        timer = asyncio.get_running_loop().call_later(self._timeout_s, _sever, conn)
        try:
            cur = await conn.execute(query)
            return await cur.fetchone() if cur.description is not None else None
        finally:
            timer.cancel()

    async def close(self) -> None:
        self._closed = True
        self._stop.set()
        task, conn = self._task, self._conn
        if task is None:
            return
        if conn is not None:
            _sever(conn)  # its pending read fails at once and the task sees _closed
        else:
            task.cancel()  # connecting or pausing: nothing in flight to tidy
        with suppress(asyncio.CancelledError):
            await task


def _sever(conn: Conn) -> None:
    """Shut the connection's socket down under psycopg, so that a wait on it ends with an
    error now rather than when TCP gives up (never, on a connection dropped silently)."""
    with suppress(OSError, psycopg.Error):
        sock = socket.socket(fileno=os.dup(conn.fileno()))
        with sock:
            sock.shutdown(socket.SHUT_RDWR)
