"""A durable tier that fails during context() degrades the context; it never fails the turn."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import shortterm
from shortterm import Config, ScopeKey, ServerSettings, StoreUnavailable
from shortterm.model import ScopeKind
from shortterm.model.fence import JournalEntry
from shortterm.store.base import ScopeRow
from shortterm.store.sqlite import SQLiteStore
from tests.read.helpers import block, context_of, say, upgrade
from tests.support import FakeClock


class FlakyStore(SQLiteStore):
    """SQLite whose reads fail while ``down`` is set."""

    down = False

    def _check(self) -> None:
        if self.down:
            raise StoreUnavailable("simulated outage")

    async def load(self, key: ScopeKey) -> ScopeRow | None:
        self._check()
        return await super().load(key)

    async def load_owner(self, kind: ScopeKind, owner_id: str) -> list[ScopeRow]:
        self._check()
        return await super().load_owner(kind, owner_id)

    async def server_settings_since(self, since: float) -> dict[str, ServerSettings]:
        self._check()
        return await super().server_settings_since(since)

    async def journal_since(
        self, seq: int, *, limit: int = 1000, forgets_only: bool = False
    ) -> list[JournalEntry]:
        self._check()
        return await super().journal_since(seq, limit=limit, forgets_only=forgets_only)


async def test_an_outage_renders_what_the_hot_tier_holds(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    store = FlakyStore(tmp_path / "flaky.db")
    # A small hot tier: evictions make owners incomplete, so context() must read through.
    config = Config(sweep_interval_s=0, max_entries=4)
    async with shortterm.open(store=store, clock=clock, config=config) as memory:
        await say(memory, channel="evicted")
        await upgrade(memory, ScopeKey.server("g1", "evicted", "p1"), "durable summary")
        for n in range(3):
            await say(memory, channel=f"c{n}", text=f"hot {n}")
        await say(memory, channel="here")
        await upgrade(memory, ScopeKey.server("g1", "here", "p1"), "live summary")
        healthy = await context_of(memory, channel="here")
        assert "durable summary" in block(healthy, "other_channels")  # read through the store
        # two more turns (two scopes each) push everything older out of the 4-entry hot tier
        await say(memory, channel="c9", text="hot 9")
        await say(memory, channel="c10", text="hot 10")
        store.down = True
        clock.advance(config.settings_refresh_s + 1)  # the settings refresh fails too
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="shortterm"):
            degraded = await context_of(memory, channel="here")
            again = await context_of(memory, channel="here")
        assert "hot 9" in block(degraded, "other_channels")
        assert "hot 10" in block(degraded, "other_channels")
        assert "durable summary" not in block(degraded, "other_channels")
        assert block(degraded, "same_channel") == ""  # evicted, and the store is down
        stats = memory.stats()
        assert stats["degraded_contexts"] == 2 and stats["degraded"] is True
        assert stats["store_errors"] >= 2
        assert [r.getMessage() for r in caplog.records].count(
            "shortterm durable tier failed during context: simulated outage"
        ) == 1  # logged once, counted every time
        assert again.items == degraded.items
        store.down = False
        recovered = await context_of(memory, channel="here")
        assert "live summary" in block(recovered, "same_channel")
        assert memory.stats()["degraded_contexts"] == 2
        assert memory.stats()["degraded"] is False  # a read that reached the store clears it


async def test_a_healthy_context_is_not_counted_as_degraded(memory: shortterm.Memory) -> None:
    await say(memory, channel="c1")
    await context_of(memory, channel="c2")
    assert memory.stats()["degraded_contexts"] == 0
