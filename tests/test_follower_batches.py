"""A process behind on other processes' distilled writes loads their scopes in batches: a page
of journal entries costs one read and one load, whatever the number of edits in it; and the
order of effects holds within a page (a forget between two edits of a channel still wins).

Statements are counted where they leave the process: SQLite's trace callback on the store's
connection, and for PostgreSQL the Execute and Query messages on the wire, through a loopback
relay (the LISTEN connection left out: its heartbeat is not the catch-up's cost).
"""

from __future__ import annotations

import asyncio
import sqlite3
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

import shortterm
from shortterm import Config, ScopeKey
from tests.support import FakeClock, with_query

G, P = "g1", "p1"
EDITS = 10_000
BUDGET = 20  # statements for a process EDITS entries behind (issue: "at most 20")
NOTED = "noted by the other process"


def cfg() -> Config:
    return Config(sweep_interval_s=0, write_behind_ms=0)


@dataclass
class StatementRelay:
    """A loopback relay to PostgreSQL that counts the statements its clients send: Execute
    messages (the extended protocol, one per statement, pipelined or not) and Query messages
    (the simple protocol). A connection whose statements include LISTEN is not counted."""

    target: tuple[str, int]
    statements: list[str] = field(default_factory=list)
    _listeners: set[int] = field(default_factory=set)
    _server: asyncio.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._link, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def count(self) -> int:
        return len(self.statements)

    async def _link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        down = asyncio.create_task(_pipe(up_reader, writer))
        try:
            await self._client(reader, up_writer, id(writer))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            up_writer.close()
            await down
            writer.close()

    async def _client(
        self, reader: asyncio.StreamReader, up: asyncio.StreamWriter, conn: int
    ) -> None:
        # The startup message has no type byte (sslmode and gssencmode are disabled, so it is
        # the first message); every later one is a type byte and a length that counts itself.
        head = await reader.readexactly(4)
        up.write(head + await reader.readexactly(struct.unpack("!i", head)[0] - 4))
        parsed = ""  # the text of the last Parse: the statement an Execute runs
        while True:
            kind = await reader.readexactly(1)
            size = await reader.readexactly(4)
            body = await reader.readexactly(struct.unpack("!i", size)[0] - 4)
            up.write(kind + size + body)
            await up.drain()
            if kind == b"P":
                parsed = body.split(b"\0", 2)[1].decode(errors="replace")
            text = body.split(b"\0", 1)[0].decode(errors="replace") if kind == b"Q" else parsed
            if kind in (b"P", b"Q") and text.lstrip().upper().startswith("LISTEN"):
                self._listeners.add(conn)
            if kind in (b"E", b"Q") and conn not in self._listeners and text.strip():
                self.statements.append(text)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


@dataclass
class Counted:
    """A store URL for the process under test, and how to read its statement count."""

    url: str
    relay: StatementRelay | None = None
    traced: list[str] = field(default_factory=list)

    def watch(self, memory: shortterm.Memory) -> None:
        if self.relay is None:
            # The SQLite store's one connection (a test reaches into it to count).
            memory.store._connection.db.set_trace_callback(self.traced.append)  # type: ignore[attr-defined]

    def statements(self) -> list[str]:
        return list(self.relay.statements if self.relay is not None else self.traced)


@pytest.fixture
async def counted(store_url: str) -> AsyncIterator[Counted]:
    if store_url.startswith("sqlite"):
        yield Counted(store_url)
        return
    parts = urlsplit(store_url)
    relay = StatementRelay((parts.hostname or "127.0.0.1", parts.port or 5432))
    port = await relay.start()
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{port}"
    relayed = urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) > 1 else host))
    try:
        yield Counted(with_query(relayed, sslmode="disable", gssencmode="disable"), relay)
    finally:
        await relay.close()


async def journal_edits(store_url: str, count: int, now: float) -> None:
    """``count`` distilled writes of as many server scopes, as another process's tool calls
    leave them (the row, and an ``edit`` entry naming it), written in bulk: through the API
    the setup alone would take most of a minute on PostgreSQL."""
    if store_url.startswith("sqlite"):
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as db:
            n = "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ? - 1)"
            db.execute(
                f"{n} INSERT INTO scopes (kind, owner_id, channel_id, persona_id, server_id, "
                "summary, summary_at, created_at, updated_at) "
                "SELECT 'server', ?, 'c' || i, ?, ?, ?, ?, ?, ? FROM n",
                (count, G, P, G, NOTED, now, now, now),
            )
            db.execute(
                f"{n} INSERT INTO journal (kind, subject, at) "
                "SELECT 'edit', json_array('server', ?, 'c' || i, ?), ? FROM n",
                (count, G, P, now),
            )
        return
    url, _, query = store_url.partition("?")
    schema = dict(p.split("=", 1) for p in query.split("&"))["schema"]
    async with await psycopg.AsyncConnection.connect(url) as conn:
        await conn.execute(
            f'INSERT INTO "{schema}".scopes (kind, owner_id, channel_id, persona_id, server_id, '
            "summary, summary_at, created_at, updated_at) "
            "SELECT 'server', %s::text, 'c' || i, %s::text, %s::text, %s::text, %s::float8, "
            "%s::float8, %s::float8 "
            "FROM generate_series(0, %s::int - 1) AS i",
            (G, P, G, NOTED, now, now, now, count),
        )
        await conn.execute(
            f'INSERT INTO "{schema}".journal (kind, subject, at) '
            "SELECT 'edit', jsonb_build_array('server', %s::text, 'c' || i, %s::text), %s::float8 "
            "FROM generate_series(0, %s::int - 1) AS i",
            (G, P, now, count),
        )
        await conn.commit()


async def test_a_process_far_behind_loads_the_edited_scopes_in_batches(
    store_url: str, counted: Counted, clock: FakeClock
) -> None:
    keys = [ScopeKey.server(G, f"c{i}", P) for i in range(EDITS)]
    async with shortterm.open(store=counted.url, clock=clock, config=cfg()) as idle:
        await idle.begin_write()  # the idle process is current, and its listener proved alive
        head = idle.journal.head
        await journal_edits(store_url, EDITS, clock())
        counted.watch(idle)
        before = len(counted.statements())
        # A NOTIFY may still be on its way: the call reads the journal either way.
        idle.journal.behind = True
        await idle.begin_write()
        spent = counted.statements()[before:]
        assert idle.journal.head >= head + EDITS
        assert len(spent) <= BUDGET, f"{len(spent)} statements: {spent[:3]} …"
        now = clock()
        for key in keys[:: EDITS // 50] + keys[-1:]:
            entry, _ = await idle.cache.live(key, now)
            assert entry is not None and entry.summary == NOTED, key


async def test_a_forget_between_two_edits_of_a_page_wins(store_url: str, clock: FakeClock) -> None:
    """Edits, a clear of their channel, an edit again: all in one page the idle process reads
    at once. The scope written after the clear is served with its new summary, the one only
    written before it is gone, and another channel's edit is kept."""
    before = ScopeKey.user("ana", "target", P)
    again = ScopeKey.server(G, "target", P)
    other = ScopeKey.server(G, "elsewhere", P)
    async with (
        shortterm.open(store=store_url, clock=clock, config=cfg()) as idle,
        shortterm.open(store=store_url, clock=clock, config=cfg(), hydrate=False) as writer,
    ):
        await idle.begin_write()
        await writer.set_summary(before, "before the clear")
        await writer.set_summary(again, "before the clear")
        await writer.set_summary(other, "another channel")
        await writer.clear_channel("target")
        await writer.set_summary(again, "after the clear")
        idle.journal.behind = True
        await idle.begin_write()
        now = clock()
        assert (await idle.cache.live(before, now))[0] is None
        kept = (await idle.cache.live(again, now))[0]
        assert kept is not None and kept.summary == "after the clear"
        elsewhere = (await idle.cache.live(other, now))[0]
        assert elsewhere is not None and elsewhere.summary == "another channel"
        assert idle.stats()["read_through"] == 0
        # What the idle process serves agrees with the durable tier.
        assert await idle.get(before) is None
        got = await idle.get(again)
        assert got is not None and got.summary == "after the clear"


async def test_a_page_of_edits_of_one_scope_loads_it_once(
    store_url: str, counted: Counted, clock: FakeClock
) -> None:
    """Many edits of the same few scopes (a busy channel's tool calls) cost one load a page,
    and the scope is served as last written."""
    key = ScopeKey.server(G, "busy", P)
    async with (
        shortterm.open(store=counted.url, clock=clock, config=cfg()) as idle,
        shortterm.open(store=store_url, clock=clock, config=cfg(), hydrate=False) as writer,
    ):
        await idle.begin_write()
        for i in range(30):
            await writer.set_summary(key, f"note {i}")
        counted.watch(idle)
        start = len(counted.statements())
        idle.journal.behind = True
        await idle.begin_write()
        spent = counted.statements()[start:]
        assert len(spent) <= 3, spent  # SQLite's data_version check, one read, one load
        entry = (await idle.cache.live(key, clock()))[0]
        assert entry is not None and entry.summary == "note 29"
