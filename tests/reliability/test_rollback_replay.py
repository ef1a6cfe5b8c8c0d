"""A Redis that went back past many forgets is replayed in bounded steps (docs/design.md,
"When Redis forgets, goes back in time, or fills up"): the call that finds it answers within
2 s, no Redis command takes over 50 ms, and nothing forgotten is served at any point.

A ``redis-server`` of the test's own with RDB, PostgreSQL as the durable tier. The process
captures into a channel it will clear, one it keeps and a few others; Redis is snapshotted;
10,000 forgets are journaled in bulk as other processes would have (written straight into
the journal with their fence targets, and every group's mark moved past them, as those
processes would have: through the API it would take minutes), and the process clears the
first channel (the 10,001st). Redis is then restarted from the snapshot: every group's mark
is back before the 10,001 forgets, and the cleared channel's messages are back in it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest
import redis.asyncio as aioredis

import shortterm
from shortterm import Message, Reply, ScopeKey
from shortterm.cache.redis import keeper
from shortterm.model.errors import CacheUnavailable
from shortterm.model.fence import channel_target, user_target
from tests.reliability.test_journal_authority import Server, _open, pytestmark  # noqa: F401

G, SECRET, KEPT, U = "guild", "plans", "kept", "u-ana"
SECRET_KEY, KEPT_KEY = ScopeKey.server(G, SECRET, None), ScopeKey.server(G, KEPT, None)
FORGETS = 10_000
FILLER = 24  # channels with records, which the bulk forgets clear (or purge the users of)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    started = Server(tmp_path / "rdb", "--dbfilename", "dump.rdb")
    await started.start()
    yield started
    started.kill()


async def _journal_in_bulk(pg_url: str, schema: str, count: int) -> int:
    """``count`` forgets other processes journaled: clears of the filler channels and of
    channels Redis never held, and purges of the filler users; returns the journal's end."""
    kinds, subjects, targets = [], [], []
    for i in range(count):
        if i % 4 == 3:
            digest = user_target(f"u-{i % FILLER}")
            kinds.append("user")
            subjects.append(json.dumps([digest]))
            targets.append(json.dumps([digest]))
        else:
            channel = f"ch-{i % FILLER}" if i % 2 == 0 else f"other-{i}"
            kinds.append("channel")
            subjects.append(json.dumps([channel]))
            targets.append(json.dumps([channel_target(channel)]))
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await conn.execute(
            f'INSERT INTO "{schema}".journal (kind, subject, targets, at) '
            "SELECT k, s, t, %s FROM unnest(%s::text[], %s::jsonb[], %s::jsonb[]) AS r(k, s, t)",
            (time.time(), kinds, subjects, targets),
        )
        cur = await conn.execute(f'SELECT max(seq) FROM "{schema}".journal')
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


async def _capture(memory: shortterm.Memory, channel: str, user: str, text: str) -> None:
    turn = memory.turn(user_id=user, channel_id=channel, server_id=G)
    said = [Message("user", text, author_id=user, speaker=user, at=time.time())]
    await turn.capture(history=said, replies=[Reply("noted")])


def _serves(entry: shortterm.Entry | None, word: str) -> bool:
    return entry is not None and any(word in m.content for m in entry.messages)


async def _shows(memory: shortterm.Memory, word: str) -> bool:
    """Whether a read of this process serves the word: the scope, and another channel's
    recall of the server's and the user's memory."""
    if _serves(await memory.get(SECRET_KEY), word):
        return True
    turn = memory.turn(user_id=U, channel_id="elsewhere", server_id=G)
    return any(word in item.text for item in (await turn.context()).items)


async def _marks_current(admin: aioredis.Redis, memory: shortterm.Memory) -> bool:
    cache = memory.cache
    layout, known = cache.layout, cache._marks.known  # type: ignore[attr-defined]
    raws = await admin.mget([layout.base(k) + "fm" for k in range(layout.groups)])
    return all(raw is not None and raw.isdigit() and int(raw) >= known for raw in raws)


@pytest.mark.parametrize("wait_s", [keeper.REPAIR_WAIT_S, 0.05], ids=["default", "background"])
async def test_a_rollback_past_10000_forgets_is_replayed_in_bounded_steps(
    pg_url: str,
    schema: str,
    server: Server,
    monkeypatch: pytest.MonkeyPatch,
    wait_s: float,
) -> None:
    """``background``: the calls wait 0.05 s for the repair, so the replay certainly runs
    on while they read, and capture."""
    monkeypatch.setattr(keeper, "REPAIR_WAIT_S", wait_s)
    secret, kept = uuid.uuid4().hex, uuid.uuid4().hex
    memory = await _open(pg_url, schema, server.url)
    admin = aioredis.Redis.from_url(server.url, decode_responses=True)
    try:
        await _capture(memory, SECRET, U, f"the code is {secret}")
        await _capture(memory, KEPT, U, f"the boat is {kept}")
        for i in range(FILLER):
            await _capture(memory, f"ch-{i}", f"u-{i}", f"filler {i}")
        await server.admin("SAVE")  # the snapshot: every group's mark before the forgets
        head = await _journal_in_bulk(pg_url, schema, FORGETS)
        layout = memory.cache.layout  # type: ignore[attr-defined]
        await admin.mset({layout.base(k) + "fm": str(head) for k in range(layout.groups)})
        await memory.clear_channel(SECRET)  # the 10,001st, through the API
        assert not await _shows(memory, secret)

        server.kill()
        await server.start()  # the snapshot: 10,001 forgets gone from Redis, the secret back
        await admin.aclose()
        admin = aioredis.Redis.from_url(server.url, decode_responses=True)
        assert not await _marks_current(admin, memory)
        await admin.config_set("slowlog-log-slower-than", 50_000)  # microseconds
        await admin.slowlog_reset()

        started = time.monotonic()
        first = await memory.get(SECRET_KEY)
        answered = time.monotonic() - started
        assert not _serves(first, secret)
        reads = refused = 0
        captured: list[tuple[str, str]] = []
        while not await _marks_current(admin, memory):
            assert time.monotonic() - started < 300, "the replay never finished"
            assert not await _shows(memory, secret), "served a forgotten message mid-replay"
            reads += 1
            channel, word = f"new-{reads}", uuid.uuid4().hex
            try:  # a capture into a group still short is refused, never dropped in silence
                await _capture(memory, channel, U, f"later {word}")
                captured.append((channel, word))
            except CacheUnavailable:
                refused += 1
        replayed = time.monotonic() - started
        slow = await admin.slowlog_get(100)
        print(
            f"{FORGETS + 1} forgets lost, calls wait {wait_s} s: the first call answered in "
            f"{answered:.2f} s, the replay took {replayed:.2f} s; {reads} rounds of reads "
            f"during it, {refused} captures refused; commands over 50 ms: {len(slow)}"
        )
        assert answered < 2.0
        assert [(e["duration"], e["command"][:60]) for e in slow] == []
        assert not await _shows(memory, secret)
        assert _serves(await memory.get(KEPT_KEY), kept), "the kept channel is served again"
        for channel, word in captured:
            assert _serves(await memory.get(ScopeKey.server(G, channel, None)), word)
        if wait_s < 0.1:
            assert reads > 0, "the replay ended within the first call: nothing was read during it"
    finally:
        await admin.aclose()
        await memory.close()
