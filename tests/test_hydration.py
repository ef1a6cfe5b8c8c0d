"""Restarts: what survives, what is hydrated, and reads through the durable tier."""

from __future__ import annotations

import gc

import shortterm
from shortterm import Config, Message, Reply, ScopeKey
from shortterm.cache.inprocess import InProcessCache
from shortterm.store.sqlite import SQLiteStore
from tests.support import FakeClock

G, C, U, P = "g1", "c1", "u1", "p1"
HOUR = 3600.0


def cfg(**kw: int) -> Config:
    return Config(sweep_interval_s=0, **kw)


async def chat(memory: shortterm.Memory, channel: str = C, user: str = U) -> None:
    turn = memory.turn(user_id=user, channel_id=channel, server_id=G, persona_id=P)
    await turn.capture(
        history=[Message("user", f"hi from {user}", author_id=user)],
        replies=[Reply("hello", persona_id=P)],
    )


async def test_summaries_and_counters_survive_a_restart_messages_do_not(
    db_url: str, clock: FakeClock
) -> None:
    key = ScopeKey.server(G, C, P)
    async with shortterm.open(store=db_url, clock=clock, config=cfg()) as memory:
        await chat(memory)
        await chat(memory)
        await memory.set_summary(key, "hike on Saturday")
    clock.advance(60)
    async with shortterm.open(store=db_url, clock=clock, config=cfg()) as memory:
        assert memory.stats()["hydrated_rows"] == 1
        entry = await memory.get(key)
        assert entry is not None
        assert entry.summary == "hike on Saturday" and entry.messages == ()
        assert entry.turns_since_refresh == 2
        await chat(memory)  # messages refill as turns occur; the summary stays
        entry = await memory.get(key)
        assert (
            entry is not None and len(entry.messages) == 2 and entry.summary == "hike on Saturday"
        )
        assert entry.turns_since_refresh == 3


async def test_rows_without_live_values_are_not_hydrated(db_url: str, clock: FakeClock) -> None:
    async with shortterm.open(store=db_url, clock=clock, config=cfg()) as memory:
        await chat(memory, channel="only-chatter")
        await memory.set_summary(ScopeKey.server(G, "old"), "stale")
        clock.advance(25 * HOUR)
        await memory.set_summary(ScopeKey.server(G, "new"), "fresh")
    async with shortterm.open(store=db_url, clock=clock, config=cfg()) as memory:
        assert memory.stats()["hydrated_rows"] == 1
        assert await memory.get(ScopeKey.server(G, "old")) is None
        assert (await memory.get(ScopeKey.server(G, "new"))).summary == "fresh"  # type: ignore[union-attr]
        assert await memory.get(ScopeKey.server(G, "only-chatter", P)) is None


async def test_hydration_streams_in_bounded_batches(db_url: str, clock: FakeClock) -> None:
    async with shortterm.open(store=db_url, clock=clock, config=cfg()) as memory:
        for i in range(120):
            await memory.set_summary(ScopeKey.server(G, f"c{i}"), f"summary {i}")
    seen: list[int] = []
    store = SQLiteStore(db_url.removeprefix("sqlite:///"))
    original = store.iter_hydration

    def spy(*, since: float, batch_rows: int):  # type: ignore[no-untyped-def]
        async def run():  # type: ignore[no-untyped-def]
            async for batch in original(since=since, batch_rows=batch_rows):
                seen.append(len(batch))
                yield batch

        return run()

    store.iter_hydration = spy  # type: ignore[method-assign]
    async with shortterm.open(
        store=store, clock=clock, config=cfg(hydrate_batch_rows=50)
    ) as memory:
        assert seen == [50, 50, 20]
        assert memory.stats()["entries"] == 120


async def test_capture_on_a_cold_key_never_masks_the_durable_summary(
    db_url: str, clock: FakeClock
) -> None:
    key = ScopeKey.user(U, C, P)
    async with shortterm.open(store=db_url, clock=clock, config=cfg()) as memory:
        await memory.set_summary(key, "follows the user")
    async with shortterm.open(store=db_url, clock=clock, config=cfg(max_entries=2)) as memory:
        await memory.set_summary(ScopeKey.server(G, "other1"), "pushes")
        await memory.set_summary(ScopeKey.server(G, "other2"), "the user row out")
        assert await memory.cache.counter(key, clock()) is None  # evicted: cold
        await chat(memory)  # the capture's own upsert returns the durable row
        reads = memory.stats()["read_through"]
        entry = await memory.get(key)
        assert entry is not None and entry.summary == "follows the user"
        assert len(entry.messages) == 2
        assert memory.stats()["read_through"] == reads


async def test_evicted_entries_read_through(db_url: str, clock: FakeClock) -> None:
    async with shortterm.open(store=db_url, clock=clock, config=cfg(max_entries=3)) as memory:
        for i in range(6):
            await memory.set_summary(ScopeKey.server(G, f"c{i}"), f"s{i}")
        assert memory.stats()["entries"] == 3
        entry = await memory.get(ScopeKey.server(G, "c0"))
        assert entry is not None and entry.summary == "s0"
        assert memory.stats()["read_through"] >= 1
        entries = await memory.owner_entries("server", G)
        assert sorted(e.summary or "" for e in entries)[-1] == "s5"


async def test_a_complete_hot_tier_answers_misses_without_a_query(
    db_url: str, clock: FakeClock
) -> None:
    async with shortterm.open(store=db_url, clock=clock, config=cfg()) as memory:
        for _ in range(5):
            assert await memory.get(ScopeKey.server(G, "never-seen")) is None
        assert memory.stats()["read_through"] == 0
        assert memory.cache.complete


async def test_idle_expired_rows_are_not_queried_every_turn(db_url: str, clock: FakeClock) -> None:
    key = ScopeKey.server(G, C, P)
    async with shortterm.open(store=db_url, clock=clock, config=cfg(max_entries=1)) as memory:
        await chat(memory)  # a row with a counter but no summary
        await memory.set_summary(ScopeKey.server(G, "x"), "evicts the first")
        reads = memory.stats()["read_through"]
        for _ in range(5):
            assert await memory.get(key) is None
        # One read-through caches the counter-only row; the next misses are answered locally.
        assert memory.stats()["read_through"] - reads <= 2


async def test_memory_store_forgets_on_close(clock: FakeClock) -> None:
    async with shortterm.open(store="memory://", clock=clock, config=cfg()) as memory:
        await chat(memory)
        assert await memory.get(ScopeKey.server(G, C, P)) is not None
    async with shortterm.open(store="memory://", clock=clock, config=cfg()) as memory:
        assert await memory.get(ScopeKey.server(G, C, P)) is None


async def test_the_loaded_rows_skip_the_young_collections(db_url: str, clock: FakeClock) -> None:
    """What the open loaded goes straight to the collector's oldest generation: no young
    collection walks a million records after the load. An application's own frozen objects
    stay frozen."""
    async with shortterm.open(store=db_url, clock=clock, config=cfg()) as memory:
        for i in range(30):
            await memory.set_summary(ScopeKey.server(G, f"c{i}"), f"summary {i}")
    async with shortterm.open(store=db_url, clock=clock, config=cfg()) as memory:
        cache = memory.cache
        assert isinstance(cache, InProcessCache)
        records = {id(rec) for rec in cache._entries.values()}
        assert len(records) == 30
        oldest = {id(o) for o in gc.get_objects(generation=2)}
        assert records <= oldest
        assert gc.get_freeze_count() == 0
    gc.freeze()
    frozen = gc.get_freeze_count()
    try:
        async with shortterm.open(store=db_url, clock=clock, config=cfg()) as memory:
            assert memory.stats()["hydrated_rows"] == 30
            assert gc.get_freeze_count() > frozen // 2  # not handed back by the load
    finally:
        gc.unfreeze()
