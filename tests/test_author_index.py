"""The hot tier's author index: compact lists that may hold stale keys, never missing one."""

from __future__ import annotations

import random

import pytest

from shortterm import Message, ScopeKey
from shortterm.cache import inprocess_records
from shortterm.cache.inprocess import InProcessCache
from shortterm.model.rows import ScopeMeta
from tests.support import T0

META = ScopeMeta(server_id="g")


def check(cache: InProcessCache) -> None:
    holders: dict[str, set[tuple[str, str, str, str | None]]] = {}
    for kt, rec in cache._entries.items():
        for m in rec.messages:
            if m.author_id is not None:
                holders.setdefault(m.author_id, set()).add(kt)
    assert set(cache._by_author) == set(holders)
    assert cache._author_live == {a: len(k) for a, k in holders.items()}
    for author, keys in cache._by_author.items():
        assert holders[author] <= set(keys)  # complete: what a forget relies on
        if isinstance(keys, set):
            assert keys == holders[author]
        else:
            assert len(keys) <= 2 * len(holders[author]) + 8


@pytest.mark.parametrize("list_max", [3, 1024])
async def test_author_index_stays_complete_and_bounded_under_churn(
    monkeypatch: pytest.MonkeyPatch, list_max: int
) -> None:
    """Hundreds of random captures (authors joining and leaving records), evictions and
    scrubs; after each, every record holding an author is indexed under them, and a scrub
    leaves none of their messages anywhere."""
    monkeypatch.setattr(inprocess_records, "_AUTHOR_LIST_MAX", list_max)
    rng = random.Random(5)
    for _round in range(20):
        cache = InProcessCache(
            crude_ttl_s=3600, summary_ttl_s=3600, max_entries=rng.choice([5, 12, 40]),
            max_bytes=1 << 40,
        )  # fmt: skip
        for _step in range(200):
            if rng.random() < 0.1:
                author = f"a{rng.randrange(6)}"
                await cache.scrub_author(author, T0)
                for rec in cache._entries.values():
                    assert all(m.author_id != author for m in rec.messages)
            else:
                key = ScopeKey.server("g", f"c{rng.randrange(50)}")
                authors = rng.sample([f"a{i}" for i in range(6)] + [None], rng.randrange(4))  # type: ignore[list-item]
                messages = tuple(Message("user", "hi", author_id=a, at=T0) for a in authors)
                await cache.capture(key, messages, META, None, T0)
            check(cache)
