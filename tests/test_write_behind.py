"""The write-behind of a capture's durable part (SQLite + in-process): when it applies, when it
flushes, what a flush writes and what a failed one loses. Real SQLite files."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

import pytest

import shortterm
from shortterm import Message, Reply, ScopeKey
from shortterm.tool import texts
from tests.support import FakeClock, clear_redis_prefix, service_url, with_query

G, C, U, P = "g1", "c1", "u1", "p1"
LIVE = ScopeKey.server(G, C, P)
CONFIG = shortterm.Config(sweep_interval_s=0)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "wb.db"


@pytest.fixture
async def memory(db: Path) -> AsyncIterator[shortterm.Memory]:
    async with shortterm.open(store=f"sqlite:///{db}", config=CONFIG) as m:
        yield m


def counter(db: Path, key: ScopeKey = LIVE) -> int | None:
    """The durable counter as a second connection sees it (None: no row)."""
    conn = sqlite3.connect(db)
    try:
        found = conn.execute(
            "SELECT turns_since_refresh FROM scopes WHERE kind = ? AND owner_id = ? "
            "AND channel_id = ? AND COALESCE(persona_id, '') = COALESCE(?, '')",
            key.astuple,
        ).fetchone()
    finally:
        conn.close()
    return None if found is None else int(found[0])


async def capture(memory: shortterm.Memory, user: str = U, channel: str = C) -> None:
    turn = memory.turn(user_id=user, channel_id=channel, server_id=G, persona_id=P)
    await turn.capture(
        history=[Message("user", "hello", author_id=user)], replies=[Reply("hi", persona_id=P)]
    )


async def test_captures_are_buffered_and_close_flushes_every_step(db: Path) -> None:
    async with shortterm.open(store=f"sqlite:///{db}", config=CONFIG) as memory:
        assert memory.write_behind is not None
        for _ in range(7):
            await capture(memory)
        # Nothing is written yet, not even the rows of the first capture: the hot tier is
        # complete and no other connection wrote, so these new scopes have no row to read.
        assert counter(db) is None
        assert memory.stats()["write_behind_pending"] == 2  # user + server scope, coalesced
        entry = await memory.get(LIVE)
        assert entry is not None and entry.turns_since_refresh == 7  # the hot tier stepped
    assert counter(db) == 7
    assert counter(db, ScopeKey.user(U, C, P)) == 0
    async with shortterm.open(store=f"sqlite:///{db}", config=CONFIG) as memory:
        row = await memory.store.load(LIVE)
        assert row is not None and row.turns_since_refresh == 7


async def test_a_tool_call_flushes_first_and_no_later_flush_resurrects_older_steps(
    memory: shortterm.Memory, db: Path
) -> None:
    for _ in range(3):
        await capture(memory)
    turn = memory.turn(user_id=U, channel_id=C, server_id=G, persona_id=P)
    result = await turn.call_tool(texts.TOOL_NAME, {"summary": "plans for Saturday"})
    assert result.ok
    assert counter(db) == 0  # the buffered steps landed before the reset, not after it
    await capture(memory)
    await memory.flush()
    assert counter(db) == 1
    entry = await memory.get(LIVE)
    assert entry is not None and entry.turns_since_refresh == 1
    assert entry.summary == "plans for Saturday"


async def test_a_step_is_durable_within_the_window(db: Path) -> None:
    window_ms = 50
    config = CONFIG.replace(write_behind_ms=window_ms)
    async with shortterm.open(store=f"sqlite:///{db}", config=config) as memory:
        await capture(memory)  # a new scope: buffered
        await capture(memory)  # held: buffered
        started = time.monotonic()
        assert counter(db) is None  # no await since: the timer cannot have fired
        while counter(db) is None:
            assert time.monotonic() - started < window_ms / 1000 + 2.0, "never flushed"
            await asyncio.sleep(0.005)
        took = time.monotonic() - started
    # The timer fires after the window; slack for a loaded machine, not for a missing timer.
    assert window_ms / 1000 * 0.8 <= took < window_ms / 1000 + 1.0, took


async def test_the_turn_bound_flushes_without_waiting(db: Path) -> None:
    config = CONFIG.replace(write_behind_ms=10_000, write_behind_turns=5)
    async with shortterm.open(store=f"sqlite:///{db}", config=config) as memory:
        for _ in range(4):
            await capture(memory)  # buffered
        assert counter(db) is None
        await capture(memory)  # the fifth buffered: this capture pays for the flush
        assert counter(db) == 5
        assert memory.stats()["write_behind_flushes"] == 1


@pytest.mark.parametrize(
    "read",
    ["find_rows", "servers", "export_rows", "janitor", "clear_user", "configure_server"],
)
async def test_durable_reads_and_acknowledged_writes_flush_first(
    memory: shortterm.Memory, db: Path, read: str
) -> None:
    await capture(memory, user="u2")
    await capture(memory)
    await capture(memory)
    assert memory.stats()["write_behind_pending"] == 4  # coalesced per scope and triggerer
    if read == "find_rows":
        rows = await memory.find_rows(channel_id=C)
        assert {r.key.owner_id for r in rows} == {G, U, "u2"}
    elif read == "servers":
        assert [s.server_id for s in await memory.servers()] == [G]
    elif read == "export_rows":
        exported = [r async for batch in memory.export_rows() for r in batch]
        assert len(exported) == 3
    elif read == "janitor":
        assert await memory.janitor(retention_days=1) == 0  # the rows are fresh: kept
    elif read == "clear_user":
        await memory.clear_user("u2")
    else:
        await memory.configure_server(G, shortterm.ServerSettings())
    assert memory.stats()["write_behind_pending"] == 0
    assert counter(db) == 3


async def test_off_awaits_every_capture(db: Path) -> None:
    config = CONFIG.replace(write_behind_ms=0)
    async with shortterm.open(store=f"sqlite:///{db}", config=config) as memory:
        assert memory.write_behind is None
        await capture(memory)
        assert counter(db) == 1


async def test_a_cold_scope_is_written_through_once_another_connection_committed(
    db: Path,
) -> None:
    url = f"sqlite:///{db}"
    async with (
        shortterm.open(store=url, config=CONFIG) as a,
        shortterm.open(store=url, config=CONFIG) as b,
    ):
        await capture(a, user="u2")
        assert counter(db, ScopeKey.user("u2", C, P)) is None  # deferred: nobody else wrote
        await b.configure_server("g9", shortterm.ServerSettings())  # any commit of b's
        await capture(a)  # its user scope is cold: b may have written its row
        assert counter(db, ScopeKey.user(U, C, P)) == 0  # awaited, and the server scope
        assert counter(db) == 1  # with it (one statement); the first step is still buffered
        await capture(a)  # both held now: buffered
        assert counter(db) == 1
        await a.flush()
        assert counter(db) == 3


async def test_a_cold_scope_whose_row_was_private_is_written_through(db: Path) -> None:
    """The row of a channel that was private keeps its flag after a restart (it has no
    summary, so the open did not load it): a public capture of it must read it back."""
    url = f"sqlite:///{db}"
    private = shortterm.ServerSettings(private_channel_ids=frozenset({C}))
    async with shortterm.open(store=url, config=CONFIG) as memory:
        await memory.configure_server(G, private)
        await capture(memory)
    async with shortterm.open(store=url, config=CONFIG) as memory:
        await memory.configure_server(G, shortterm.ServerSettings())
        await capture(memory)
        assert counter(db) == 2  # written through
        entry = await memory.get(LIVE)
        assert entry is not None and entry.private


async def test_a_private_write_of_this_process_is_remembered_past_the_hot_entry(
    db: Path,
) -> None:
    clock = FakeClock()
    private = shortterm.ServerSettings(private_channel_ids=frozenset({C}))
    url = f"sqlite:///{db}"
    async with shortterm.open(store=url, config=CONFIG, clock=clock) as memory:
        await memory.configure_server(G, private)
        await capture(memory)  # a new private scope: buffered, private in both tiers
        await memory.configure_server(G, shortterm.ServerSettings())
        clock.advance(CONFIG.crude_ttl_s + 1)
        await memory.sweep()  # the hot entry is gone; its durable row stays private
        assert await memory.get(LIVE) is None
        await capture(memory)
        assert counter(db) == 2  # written through: the row's flag came back with it
        entry = await memory.get(LIVE)
        assert entry is not None and entry.private


async def test_a_deferred_cold_scope_gets_its_stored_counter_with_the_flush(db: Path) -> None:
    url = f"sqlite:///{db}"
    async with shortterm.open(store=url, config=CONFIG) as memory:
        for _ in range(3):
            await capture(memory)
    async with shortterm.open(store=url, config=CONFIG) as memory:
        assert memory.cache.complete and await memory.get(LIVE) is None  # not loaded
        await capture(memory, user="u9", channel="c9")
        await memory.flush()  # a first batch (which returns every row it wrote)
        await capture(memory)  # cold, not private, nobody else wrote: deferred
        assert counter(db) == 3
        await memory.flush()
        assert counter(db) == 4
        entry = await memory.get(LIVE)
        assert entry is not None and entry.turns_since_refresh == 4  # the stored count


async def test_without_a_hydration_a_cold_scope_is_written_through(db: Path) -> None:
    async with shortterm.open(store=f"sqlite:///{db}", config=CONFIG, hydrate=False) as m:
        assert not m.cache.complete
        await capture(m)
        assert counter(db) == 1


async def test_only_sqlite_under_an_unshared_tier_gets_one(tmp_path: Path) -> None:
    async with shortterm.open(store="memory://", config=CONFIG) as memory:
        assert memory.write_behind is None
    redis_url = service_url("SHORTTERM_TEST_REDIS_URL", "Redis")
    prefix = f"stm-test:wb-{tmp_path.name[-8:]}:"
    cache = with_query(redis_url, prefix=quote(prefix))
    try:
        store = f"sqlite:///{tmp_path / 'r.db'}"
        async with shortterm.open(store=store, cache=cache, config=CONFIG) as memory:
            assert memory.write_behind is None  # a shared tier sees every step at once
            await capture(memory)
            assert counter(tmp_path / "r.db") == 1
    finally:
        await clear_redis_prefix(redis_url, prefix)


async def test_a_failed_flush_is_counted_and_logged_and_loses_only_the_steps(
    memory: shortterm.Memory, db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await capture(memory)
    turn = memory.turn(user_id=U, channel_id=C, server_id=G, persona_id=P)
    assert (await turn.call_tool(texts.TOOL_NAME, {"summary": "kept"})).ok
    for _ in range(3):
        await capture(memory)
    store = memory.store
    real = store.touch_batch  # type: ignore[attr-defined]

    async def failing(touches: object) -> object:
        raise shortterm.StoreUnavailable("disk gone")

    store.touch_batch = failing  # type: ignore[attr-defined]
    with caplog.at_level(logging.WARNING, logger="shortterm"):
        await memory.flush()
    stats = memory.stats()
    assert stats["lost_counter_steps"] == 3
    assert stats["degraded"] and stats["store_errors"] == 1
    assert "lost 3 buffered counter steps" in caplog.text
    store.touch_batch = real  # type: ignore[attr-defined]
    await capture(memory)
    await memory.flush()
    assert not memory.stats()["degraded"]
    row = await memory.store.load(LIVE)
    assert row is not None and row.summary == "kept"  # the acknowledged write stays
    assert row.turns_since_refresh == 1  # only the lost steps are missing


async def test_a_flush_refuses_what_a_later_forget_covers(
    memory: shortterm.Memory, db: Path
) -> None:
    """A capture buffered at a position before a forget is refused by the flush, although
    the forget's own flush ran before it (the capture was in flight then)."""
    await capture(memory)
    await memory.flush()
    fence = await memory.begin_write(U)  # a capture that began before the forget ...
    await memory.clear_channel(C)
    assert counter(db) is None
    scopes = [(ScopeKey.user(U, C, P), ()), (LIVE, ())]
    meta = memory.scope_meta((G, None, None, None, False, None))
    assert memory.write_behind is not None
    memory.write_behind.add([k for k, _ in scopes], meta, LIVE, fence, memory.clock())
    await memory.flush()  # ... and is flushed after it
    assert counter(db) is None and counter(db, ScopeKey.user(U, C, P)) is None
    assert memory.stats()["fenced_writes"] >= 1
    await capture(memory)  # a capture that began after the forget is new data
    await memory.flush()
    assert counter(db) == 1


async def test_a_flush_mirrors_the_rows_when_another_process_wrote(db: Path) -> None:
    """Two memories on one file are two connections, as two processes would be: the steps
    the other one made reach this hot tier at this one's next flush."""
    url = f"sqlite:///{db}"
    async with (
        shortterm.open(store=url, config=CONFIG) as a,
        shortterm.open(store=url, config=CONFIG) as b,
    ):
        await capture(a)  # new scopes, nobody else wrote: buffered
        await capture(a)  # buffered
        await a.flush()  # nobody else wrote: nothing to mirror (durable 2)
        await capture(b)  # cold for b, and a committed: written through (durable 3)
        await capture(a)  # buffered (a's hot counter: 3)
        await a.flush()  # b committed since: the rows come back and are mirrored
        entry = await a.get(LIVE)
        assert entry is not None and entry.turns_since_refresh == 4
        assert counter(db) == 4
