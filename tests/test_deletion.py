"""Ownership: clears evict the hot tier and delete the durable rows, and stay deleted."""

from __future__ import annotations

from pathlib import Path

import pytest

import shortterm
from shortterm import Config, Message, Privacy, Reply, ScopeKey, StoreUnavailable, UserSettings
from shortterm.store.base import Forgotten
from shortterm.store.reference import ReferenceStore
from shortterm.store.sqlite import SQLiteStore
from tests.support import FakeClock

G, P = "g1", "p1"


def cfg() -> Config:
    return Config(sweep_interval_s=0)


async def chat(memory: shortterm.Memory, user: str, channel: str, *others: str) -> None:
    history = [Message("user", f"{who} in {channel}", author_id=who) for who in (*others, user)]
    turn = memory.turn(user_id=user, channel_id=channel, server_id=G, persona_id=P)
    await turn.capture(history=history, replies=[Reply("noted", persona_id=P)])


async def test_clear_channel_removes_every_scope_of_it_for_good(
    db_url: str, clock: FakeClock
) -> None:
    async with shortterm.open(store=db_url, clock=clock, config=cfg()) as memory:
        await chat(memory, "ana", "c1")
        await chat(memory, "ben", "c1")
        await memory.turn(user_id="ana", channel_id="c1", server_id=G, persona_id="p2").capture(
            history=[Message("user", "x", author_id="ana")], replies=[Reply("y")]
        )
        await chat(memory, "ana", "c2")
        await memory.set_summary(ScopeKey.server(G, "c1", P), "to be forgotten")
        assert await memory.clear_channel("c1") == 5
        for key in (ScopeKey.user("ana", "c1", P), ScopeKey.server(G, "c1", P)):
            assert await memory.get(key) is None
        assert await memory.get(ScopeKey.server(G, "c2", P)) is not None
    async with shortterm.open(store=db_url, clock=clock, config=cfg()) as memory:
        assert await memory.get(ScopeKey.server(G, "c1", P)) is None  # not resurrected
        assert await memory.store.load(ScopeKey.server(G, "c1", P)) is None


async def test_clear_user_scrubs_their_messages_from_every_other_entry(
    memory: shortterm.Memory,
) -> None:
    await chat(memory, "ben", "c1", "ana")  # ana spoke in ben's turn
    await chat(memory, "ana", "c2")
    await chat(memory, "carl", "c3")
    removed = await memory.clear_user("ana")
    assert removed == 1 + 2  # ana's own user scope, plus two entries scrubbed of her words
    assert await memory.get(ScopeKey.user("ana", "c2", P)) is None
    for key in (ScopeKey.server(G, "c1", P), ScopeKey.user("ben", "c1", P)):
        entry = await memory.get(key)
        assert entry is not None
        assert all(m.author_id != "ana" for m in entry.messages)
        assert "ana in c1" not in [m.content for m in entry.messages]
    # Ana's c2 turn held her line and the bot's answer to her: both are gone.
    assert await memory.get(ScopeKey.server(G, "c2", P)) is None
    server_c1 = await memory.get(ScopeKey.server(G, "c1", P))
    assert server_c1 is not None and [m.content for m in server_c1.messages] == [
        "ben in c1",
        "noted",  # the bot's answer to Ben stays
    ]
    assert await memory.get(ScopeKey.user("carl", "c3", P)) is not None
    assert [r.key for r in await memory.store.load_owner("user", "ana")] == []


async def test_choosing_full_privacy_forgets_the_past(memory: shortterm.Memory) -> None:
    await chat(memory, "ana", "c1", "ben")
    await memory.configure_user("ben", UserSettings(privacy=Privacy.FULL))
    entry = await memory.get(ScopeKey.server(G, "c1", P))
    assert entry is not None and all(m.author_id != "ben" for m in entry.messages)


async def test_clear_server_channel_removes_one_persona(memory: shortterm.Memory) -> None:
    await chat(memory, "ana", "c1")
    await memory.turn(user_id="ana", channel_id="c1", server_id=G, persona_id="p2").capture(
        history=[Message("user", "x", author_id="ana")], replies=[Reply("y")]
    )
    assert await memory.clear_server_channel(G, "c1", P) == 1
    assert await memory.get(ScopeKey.server(G, "c1", P)) is None
    assert await memory.get(ScopeKey.server(G, "c1", "p2")) is not None
    assert await memory.get(ScopeKey.user("ana", "c1", P)) is not None
    assert await memory.clear_server_channel(G, "c1", P) == 0


async def test_janitor_and_sweep(db_url: str, clock: FakeClock) -> None:
    async with shortterm.open(store=db_url, clock=clock, config=cfg()) as memory:
        await chat(memory, "ana", "old")
        clock.advance(13 * 3600)
        await chat(memory, "ana", "new")
        assert await memory.sweep() == 2  # the old user + server entries expired
        assert memory.stats()["entries"] == 2
        assert await memory.janitor(retention_days=0) == 2  # rows untouched since now
        clock.advance(10 * 86400)
        assert await memory.janitor() == 0  # 90 days by default


class FailingStore(ReferenceStore):
    fail = False

    async def forget_channel(
        self, channel_id: str, *, now: float, horizon: float | None = None
    ) -> Forgotten:
        if self.fail:
            raise StoreUnavailable("the database is down")
        return await super().forget_channel(channel_id, now=now, horizon=horizon)


async def test_a_failed_durable_clear_still_evicts_and_says_so(clock: FakeClock) -> None:
    store = FailingStore()
    async with shortterm.open(store=store, clock=clock, config=cfg()) as memory:
        await chat(memory, "ana", "c1")
        store.fail = True
        with pytest.raises(StoreUnavailable):
            await memory.clear_channel("c1")
        assert memory.stats()["entries"] == 0


async def test_the_sweeper_runs_in_the_background_and_stops_on_close(db_url: str) -> None:
    memory = await shortterm.open(store=db_url, config=Config(sweep_interval_s=3600))
    sweeper = memory._sweeper
    assert sweeper is not None and not sweeper.done()
    await memory.close()
    assert sweeper.cancelled()
    await memory.close()  # closing twice is harmless


async def test_a_purged_user_leaves_no_bytes_in_the_sqlite_files(
    tmp_path: Path, clock: FakeClock
) -> None:
    db = tmp_path / "audit.db"
    async with shortterm.open(store=f"sqlite:///{db}", clock=clock, config=cfg()) as memory:
        for channel in ("c1", "c2", "c3"):
            await chat(memory, "purge-me-4242", channel, "keeper-7777")
            await memory.set_summary(
                ScopeKey.user("purge-me-4242", channel, P), "secret-summary-4242"
            )
        await memory.set_summary(ScopeKey.server(G, "c1", P), "kept-summary-1111")
        await memory.clear_user("purge-me-4242")
        store = memory.store
        assert isinstance(store, SQLiteStore)
        store.checkpoint()
        rows = await store.load_owner("user", "purge-me-4242")
        assert rows == []
    files = _read_all(tmp_path)
    assert all(b"purge-me-4242" not in data for data in files.values()), files.keys()
    assert all(b"secret-summary-4242" not in data for data in files.values())
    assert b"kept-summary-1111" in files["audit.db"]  # the audit does see what is still there


def _read_all(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in folder.iterdir()}


class SlowTouchStore(ReferenceStore):
    """A store whose capture write yields to the loop, as a networked store does."""

    async def touch(self, scopes, *, increment, now, fence=None):  # type: ignore[no-untyped-def]
        import asyncio

        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return await super().touch(scopes, increment=increment, now=now, fence=fence)


async def test_a_clear_during_an_in_flight_capture_wins(clock: FakeClock) -> None:
    import asyncio

    async with shortterm.open(store=SlowTouchStore(), clock=clock, config=cfg()) as memory:
        capture = asyncio.ensure_future(chat(memory, "ana", "c1"))
        await asyncio.sleep(0)  # the capture is now waiting on its durable write
        await memory.clear_channel("c1")
        await capture
        assert await memory.get(ScopeKey.server(G, "c1", P)) is None
        assert await memory.get(ScopeKey.user("ana", "c1", P)) is None
