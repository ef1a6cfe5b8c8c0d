"""A replay of the forgets a Redis group lost runs in steps (``cache/redis/lua/replay.lua``):
each moves the group's mark through what it applied, atomically with it, and no further.
Here every step is cut as early as it can be (two entries a step, no time budget: one
eviction each), and every mark a step leaves is checked against what the group still holds.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any
from urllib.parse import quote

import pytest

from shortterm.cache.redis import RedisCache
from shortterm.cache.redis import repair as redis_repair
from shortterm.cache.redis.codec import member
from shortterm.model import Message, ScopeKey
from shortterm.model.config import Config
from shortterm.model.fence import EVERY_TARGET, JournalEntry, WriteFence, channel_target
from shortterm.store.base import ScopeMeta
from tests.support import T0, with_query

META = ScopeMeta(server_id="g1", channel_name="general")
CHANNELS = [f"c{i}" for i in range(12)]


class Journal:
    """The journal a repair reads, as a list."""

    def __init__(self) -> None:
        self.entries: list[JournalEntry] = []

    def add(self, kind: str, subject: tuple[str, ...], targets: tuple[str, ...]) -> int:
        seq = len(self.entries) + 1
        self.entries.append(JournalEntry(seq, kind, subject, targets))  # type: ignore[arg-type]
        return seq

    async def journal_head(self) -> int:
        return len(self.entries)

    async def journal_since(
        self, seq: int, *, limit: int = 1000, forgets_only: bool = False
    ) -> list[JournalEntry]:
        return [e for e in self.entries if e.seq > seq][:limit]


@pytest.fixture
async def cache(redis_url: str, prefix: str) -> AsyncIterator[RedisCache]:
    opened = RedisCache.from_url(with_query(redis_url, prefix=quote(prefix)), Config())
    yield opened
    await opened.close()


@pytest.fixture(autouse=True)
def smallest_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_repair, "STEP_ENTRIES", 2)
    monkeypatch.setattr(redis_repair, "STEP_BUDGET_MS", 0)


def _said(text: str) -> tuple[Message, ...]:
    return (Message("user", text, author_id="u1", at=T0),)


async def _capture(
    cache: RedisCache, channel: str, text: str, position: int
) -> tuple[ScopeKey, ScopeKey]:
    """A turn's two scopes (the server's and the user's): a clear evicts both."""
    keys = ScopeKey.server("g1", channel, None), ScopeKey.user("u1", channel, None)
    scopes = [(key, _said(text), None) for key in keys]
    assert await cache.capture_scopes(scopes, META, T0, WriteFence(position)) == 2
    return keys


def _watch_steps(cache: RedisCache, check: Any) -> list[int]:
    """Run ``check(marks)`` after every replay step, with the marks Redis holds then."""
    g = cache._g
    batch = g.batch
    seen: list[int] = []

    async def watched(what: str, build: Any, **kwargs: Any) -> list[Any]:
        replies = await batch(what, build, **kwargs)
        if what == "forget replay":
            marks = await batch("test", lambda p: [p.get(g.layout.base(k) + "fm") for k in g.all])
            seen.append(len(replies))
            await check([int(m) for m in marks])
        return replies

    g.batch = watched  # type: ignore[method-assign]
    return seen


async def test_each_step_moves_the_mark_only_through_what_it_evicted(cache: RedisCache) -> None:
    journal = Journal()
    await cache.repair(journal, T0)  # every group marked at the journal's start (0)
    keys = {c: await _capture(cache, c, f"before {c}", 0) for c in CHANNELS}
    cleared: dict[int, str] = {}  # seq: the channel it cleared
    for i, channel in enumerate(CHANNELS):
        journal.add("channel", (f"empty-{i}",), (channel_target(f"empty-{i}"),))
        cleared[journal.add("channel", (channel,), (channel_target(channel),))] = channel
    head = await journal.journal_head()
    kept = await _capture(cache, "fresh", "after every clear", head)  # new data: stays

    async def check(marks: Sequence[int]) -> None:
        for seq, channel in cleared.items():
            group = cache.group_of(channel)
            if marks[group] >= seq:  # the group claims the clear: its records must be gone
                records = [cache.layout.record(key, member(key)) for key in keys[channel]]
                held = await cache.client.exists(*records)
                assert not held, f"group {group} at {marks[group]} still holds {channel}"

    steps = _watch_steps(cache, check)
    assert await cache.repair(journal, T0, to=head) == head  # as after a forget of ours
    cache.followed(head)
    assert len(steps) > len(journal.entries) // 2  # cut into many steps
    assert not cache.journal_due(head)
    for key in kept:
        entry = await cache.get(key, T0)
        assert entry is not None and [m.content for m in entry.messages] == ["after every clear"]
    for channel in CHANNELS:
        for key in keys[channel]:
            assert await cache.get(key, T0) is None


async def test_a_prune_met_after_earlier_steps_moved_the_mark_still_drops_the_group(
    cache: RedisCache,
) -> None:
    """The group went back before entries that were pruned since (its mark below the prune's
    ``through``). Earlier steps replay the entries kept after them and move its mark past
    ``through``; the prune, met later, still drops every record the group held, as it is
    checked against where the group's replay began."""
    journal = Journal()
    await cache.repair(journal, T0)
    keys = [key for c in CHANNELS for key in await _capture(cache, c, f"before {c}", 0)]
    for i in range(8):  # entries 1-8: forgets of things the records are not (then pruned)
        journal.add("channel", (f"gone-{i}",), (channel_target(f"gone-{i}"),))
    for i in range(8):  # 9-16: kept
        journal.add("channel", (f"empty-{i}",), (channel_target(f"empty-{i}"),))
    head = journal.add("pruned", ("8",), (EVERY_TARGET,))
    journal.entries = journal.entries[8:]  # entries up to 8 deleted
    assert await cache.repair(journal, T0, to=head) == head  # as after a forget of ours
    cache.followed(head)
    for key in keys:
        assert await cache.get(key, T0) is None, "a record from before the prune is served"
    assert await cache.client.keys(cache.layout.base(0) + "fo") == []  # the replay ended
