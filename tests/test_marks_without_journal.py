"""A store knows the journal entries it wrote, and a forget moves a shared hot tier's marks
without reading the journal back.

The entries a store keeps (``own_entry``) must be the journal's own, field by field: the
Redis repair replays them as if it had read them. A forget or settings change that committed
just as PostgreSQL went away used to leave every Redis group short of it (moving the marks
read the entry back, and that read failed), so until PostgreSQL was back the groups served
nothing and refused every capture.
"""

from __future__ import annotations

from typing import Any

import pytest

import shortterm
from shortterm import Message, Reply, ScopeKey, ServerSettings, UserSettings
from shortterm.model import Privacy
from shortterm.model.errors import CacheUnavailable, StoreUnavailable
from tests.support import T0

from .conftest import StoreFactory


async def _journaled(store: Any, seq: int) -> Any:
    page = await store.journal_since(seq - 1, limit=1)
    assert page and page[0].seq == seq
    return page[0]


async def test_a_store_keeps_the_entries_it_journaled_as_the_journal_has_them(
    store_factory: StoreFactory,
) -> None:
    store = await store_factory()
    key = ScopeKey.server("g1", "c2", "p1")
    private = ServerSettings(private_channel_ids=frozenset({"c9"}))
    seqs = [
        (await store.forget_channel("c1", now=T0, horizon=T0 - 5)).seq,
        (await store.forget_user("u1", keep=None, now=T0 + 1, horizon=T0 - 5)).seq,
        (await store.forget_user("u2", keep=UserSettings(Privacy.FULL), now=T0 + 2)).seq,
        (await store.forget_server_channel(*key.astuple[1:], now=T0 + 3)).seq,
        await store.save_server_settings("g1", private, now=T0 + 4),
        await store.save_user_settings("u3", UserSettings(Privacy.PARTIAL), now=T0 + 5),
    ]
    fenced = await store.fence_upgrade([key], since=0, targets=["t1"], now=T0 + 6)
    assert fenced is not None
    seqs.append(fenced)
    for seq in seqs:
        kept, read = store.own_entry(seq), await _journaled(store, seq)
        assert kept is not None, seq
        assert (kept.seq, kept.kind, kept.subject, kept.targets, kept.horizon) == (
            read.seq,
            read.kind,
            read.subject,
            read.targets,
            read.horizon,
        )
    assert store.own_entry(max(seqs) + 1) is None


def _cut_journal(memory: shortterm.Memory) -> None:
    """From now on the durable tier's journal cannot be read: PostgreSQL went away just
    after the forget committed."""

    async def down(*_args: Any, **_kwargs: Any) -> Any:
        raise StoreUnavailable("PostgreSQL journal read: the server is unreachable")

    store = memory.store
    store.journal_since = down  # type: ignore[method-assign]
    store.journal_head = down  # type: ignore[method-assign]


def _cut_after(memory: shortterm.Memory, name: str) -> None:
    """The store's method ``name`` commits, then the journal cannot be read any more."""
    durable = memory.store
    original = getattr(durable, name)

    async def then_gone(*args: Any, **kwargs: Any) -> Any:
        done = await original(*args, **kwargs)
        _cut_journal(memory)
        return done

    setattr(durable, name, then_gone)


@pytest.mark.parametrize("tiers", ["postgres+redis", "postgres+cluster"], indirect=True)
@pytest.mark.parametrize("forget", ["clear", "settings"])
async def test_a_forget_committed_as_the_store_went_away_still_moves_the_marks(
    tiers: tuple[str, str], forget: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _forget_then_capture(tiers, forget, monkeypatch, break_it=False)


@pytest.mark.parametrize("tiers", ["postgres+redis"], indirect=True)
async def test_the_marks_test_fails_when_the_store_keeps_nothing(
    tiers: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test above, with the kept entries switched off, fails as the code before did."""
    with pytest.raises(CacheUnavailable):
        await _forget_then_capture(tiers, "clear", monkeypatch, break_it=True)


async def _forget_then_capture(
    tiers: tuple[str, str], forget: str, monkeypatch: pytest.MonkeyPatch, *, break_it: bool
) -> None:
    store, cache = tiers
    async with shortterm.open(store=store, cache=cache) as memory:
        if break_it:  # the store forgets what it wrote: the marks need the journal again
            monkeypatch.setattr(type(memory.store), "own_entry", lambda self, seq: None)
        turn = memory.turn(user_id="u1", channel_id="c1", server_id="g1", persona_id="p1")
        await turn.capture(
            history=[Message("user", "before", author_id="u1", at=memory.clock())],
            replies=[Reply("ok")],
        )
        _cut_after(memory, "forget_channel" if forget == "clear" else "save_server_settings")
        if forget == "clear":
            await memory.clear_channel("c0")
        else:
            private = ServerSettings(private_channel_ids=frozenset({"c8"}))
            await memory.configure_server("g1", private)
        # Redis vouches for the forget: captures and reads go on from the hot tier.
        later = memory.turn(user_id="u1", channel_id="c1", server_id="g1", persona_id="p1")
        await later.capture(
            history=[Message("user", "during", author_id="u1", at=memory.clock())],
            replies=[Reply("noted")],
        )
        entry = await memory.get(ScopeKey.server("g1", "c1", "p1"))
        assert entry is not None and "during" in [m.content for m in entry.messages]
