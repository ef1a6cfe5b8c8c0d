"""A capture made after Redis lost or rolled back its data is kept: it began after every
forget it knows, so it is new data (docs/design.md, "When Redis forgets, goes back in time,
or fills up"). A ``redis-server`` of the test's own with RDB snapshots, PostgreSQL as the
durable tier; each test prints its round counts.

- **A restart from a snapshot older than a clear**: the group's mark is behind the clear, and
  its records from before it are back. The next capture into the cleared channel must not
  land beside them (an older record wins by revision, an append merges with it) only to be
  evicted with them when the group is repaired: the write is refused until the group is
  repaired, then written again.
- **A flush**: the group has no mark; the capture is refused until the group is reset, then
  written again (or the caller is told).
- **A reset above the write's position** (the journal moved between the write's start and the
  reset): the forgets in between are replayed into the group's fence, so the write lands
  unless one of them covers it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import shortterm
from shortterm import Message, ScopeKey
from shortterm.memory import rules
from shortterm.model import ScopeMeta
from tests.reliability.test_journal_authority import Server, _open, pytestmark  # noqa: F401

G, C, U, OTHER_C = "guild", "plans", "u-ana", "elsewhere"
ROUNDS = 12
KEYS = (ScopeKey.server(G, C, None), ScopeKey.user(U, C, None))


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    started = Server(tmp_path / "rdb", "--dbfilename", "dump.rdb")
    await started.start()
    yield started
    started.kill()


async def _said(memory: shortterm.Memory, word: str, *, append: bool = False) -> None:
    """A turn whose message the platform stamps now: after any clear before it."""
    turn = memory.turn(user_id=U, channel_id=C, server_id=G)
    said = Message("user", f"the code is {word}", author_id=U, speaker="Ana", at=time.time())
    await turn.capture(history=[said], replies=[shortterm.Reply("noted")], append=append)


async def _lost_in(memory: shortterm.Memory, word: str) -> list[ScopeKey]:
    """The scopes of the capture that do not serve the word."""
    lost = []
    for key in KEYS:
        entry = await memory.get(key)
        if entry is None or not any(word in m.content for m in entry.messages):
            lost.append(key)
    return lost


async def _lost(
    pg_url: str, schema: str, server: Server, memory: shortterm.Memory, word: str
) -> bool:
    """Whether the capturing process or a process opened afterwards misses the word."""
    if await _lost_in(memory, word):
        return True
    fresh = await _open(pg_url, schema, server.url)
    try:
        return bool(await _lost_in(fresh, word))
    finally:
        await fresh.close()


async def test_the_first_capture_after_a_restart_from_a_snapshot_older_than_a_clear_is_kept(
    pg_url: str, server: Server
) -> None:
    lost = 0
    for round_ in range(ROUNDS):
        summary, append = round_ % 2 == 1, round_ % 4 >= 2
        schema = f"t_{uuid.uuid4().hex[:16]}"
        memory = await _open(pg_url, schema, server.url)
        try:
            await _said(memory, "before " + uuid.uuid4().hex, append=append)
            await _said(memory, "again " + uuid.uuid4().hex, append=append)
            if summary:
                await memory.set_summary(KEYS[0], "an old summary")
            await server.admin("SAVE")  # the snapshot: the channel, and the mark before the clear
            await memory.clear_channel(C)
            server.kill()
            await server.start()  # Redis loads the snapshot: the clear is gone from it
            word = uuid.uuid4().hex
            await _said(memory, word, append=append)
            lost += await _lost(pg_url, schema, server, memory, word)
        finally:
            await memory.close()
            await _drop(pg_url, schema)
            await server.admin("FLUSHALL")
    print(f"restart from an older snapshot, then a capture: {lost} of {ROUNDS} lost")
    assert lost == 0


async def test_a_capture_after_a_flush_is_kept(pg_url: str, server: Server) -> None:
    lost = 0
    for round_ in range(ROUNDS):
        schema = f"t_{uuid.uuid4().hex[:16]}"
        memory = await _open(pg_url, schema, server.url)
        try:
            await _said(memory, "before " + uuid.uuid4().hex, append=round_ % 2 == 1)
            if round_ % 3 == 2:
                await memory.clear_channel(OTHER_C)  # a forget the reset fences behind it
            await server.admin("FLUSHALL")
            word = uuid.uuid4().hex
            await _said(memory, word, append=round_ % 2 == 1)
            lost += await _lost(pg_url, schema, server, memory, word)
        finally:
            await memory.close()
            await _drop(pg_url, schema)
    print(f"a flush, then a capture: {lost} of {ROUNDS} lost")
    assert lost == 0


META = ScopeMeta(server_id=G, channel_name="plans")


@pytest.mark.parametrize("covering", [False, True], ids=["unrelated", "covering"])
async def test_a_write_that_began_before_a_reset_lands_unless_a_forget_since_covers_it(
    pg_url: str, server: Server, covering: bool
) -> None:
    """Process A takes its fence; B clears a channel (this one or another), Redis is
    flushed, B's next call resets every group at the journal's end (above A's fence).
    A's write is refused for the reset, the clear is replayed into the group's fence, and
    the write lands only if the clear does not cover it."""
    schema = f"t_{uuid.uuid4().hex[:16]}"
    a = await _open(pg_url, schema, server.url)
    b = await _open(pg_url, schema, server.url)
    wrong = 0
    try:
        for _ in range(ROUNDS // 2):
            said = (Message("user", "the boat leaves at noon", author_id=U, at=time.time()),)
            fence = await a.begin_write()
            await b.clear_channel(C if covering else OTHER_C)
            await server.admin("FLUSHALL")
            assert await b.get(ScopeKey.server(G, OTHER_C, None)) is None  # B resets
            landed = await a.write(rules.CapturePlan([(KEYS[0], said)], META, None), fence=fence)
            entry = await a.get(KEYS[0])
            served = entry is not None and entry.messages == said
            wrong += landed is covering or served is covering
            await a.clear_channel(C)
    finally:
        await a.close()
        await b.close()
        await _drop(pg_url, schema)
    print(f"a write begun before a reset, forget {'covering' if covering else 'unrelated'}: "
          f"{wrong} of {ROUNDS // 2} wrong")  # fmt: skip
    assert wrong == 0


async def _drop(pg_url: str, schema: str) -> None:
    from tests.support import drop_postgres_schema

    await drop_postgres_schema(pg_url, schema)
