"""One suite, every hot tier: the HotTier contract in behaviour (TTLs, indexes, revisions)."""

from __future__ import annotations

from shortterm.cache.base import ScopeLister
from shortterm.model import Message, ScopeKey
from shortterm.model.fence import WriteFence, user_target
from shortterm.store.base import DistilledWrite, ScopeMeta, ScopeRow
from shortterm.store.reference import ReferenceStore
from tests.support import T0, CacheFactory

META = ScopeMeta(server_id="g1", channel_name="general", persona_lineage_id="L1")
S = ScopeKey.server("g1", "c1", "p1")
U = ScopeKey.user("u1", "c1", "p1")
HOUR = 3600.0


def msgs(*texts: str, author: str = "u1") -> tuple[Message, ...]:
    return tuple(Message("user", t, author_id=author, speaker="Ana", at=T0) for t in texts)


async def summary_row(key: ScopeKey, text: str, now: float) -> ScopeRow:
    store = ReferenceStore()
    change = DistilledWrite(summary=text, set_summary=True)
    [row] = await store.write_distilled([(key, META)], change, reset_counter=None, now=now)
    return row


async def test_miss_then_capture_then_hit(cache_factory: CacheFactory) -> None:
    cache = await cache_factory()
    assert await cache.get(S, T0) is None
    await cache.capture(S, msgs("hello", "there"), META, None, T0)
    entry = await cache.get(S, T0 + 1)
    assert entry is not None
    assert [m.content for m in entry.messages] == ["hello", "there"]
    assert entry.messages_at == T0
    assert entry.persona_lineage_id == "L1"
    assert entry.server_id == "g1"
    assert entry.key == S


async def test_capture_replaces_messages_and_keeps_the_mirrored_summary(
    cache_factory: CacheFactory,
) -> None:
    cache = await cache_factory()
    row = await summary_row(S, "the plan", T0)
    await cache.apply_rows([row], T0)
    await cache.capture(S, msgs("one"), META, None, T0 + 1)
    await cache.capture(S, msgs("two", "three"), META, None, T0 + 2)
    entry = await cache.get(S, T0 + 2)
    assert entry is not None
    assert [m.content for m in entry.messages] == ["two", "three"]
    assert entry.summary == "the plan"
    assert entry.summary_at == T0


async def test_older_revisions_never_overwrite_newer_ones(cache_factory: CacheFactory) -> None:
    cache = await cache_factory()
    store = ReferenceStore()
    [old] = await store.touch([(S, META)], increment=S, now=T0)
    [new] = await store.touch([(S, META)], increment=S, now=T0 + 1)
    await cache.capture(S, msgs("newer"), META, new, T0 + 1)
    await cache.capture(S, msgs("older"), META, old, T0 + 2)  # finished late: ignored
    await cache.apply_rows([old], T0 + 2)
    entry = await cache.get(S, T0 + 2)
    assert entry is not None
    assert [m.content for m in entry.messages] == ["newer"]
    assert entry.turns_since_refresh == 2
    assert await cache.counter(S, T0 + 2) == 2


async def test_crude_messages_expire_after_the_last_capture(cache_factory: CacheFactory) -> None:
    cache = await cache_factory(crude_ttl_s=12 * 3600)
    await cache.capture(S, msgs("a"), META, None, T0)
    await cache.capture(S, msgs("b"), META, None, T0 + 6 * HOUR)  # refreshes the crude clock
    assert await cache.get(S, T0 + 17 * HOUR) is not None
    assert await cache.get(S, T0 + 18 * HOUR) is None


async def test_summary_expires_by_its_own_write_time_not_by_captures(
    cache_factory: CacheFactory,
) -> None:
    cache = await cache_factory(crude_ttl_s=12 * 3600, summary_ttl_s=24 * 3600)
    await cache.apply_rows([await summary_row(S, "old plan", T0)], T0)
    for hour in range(0, 30, 2):  # captures every two hours never refresh the summary
        await cache.capture(S, msgs(f"m{hour}"), META, None, T0 + hour * HOUR)
    before = await cache.get(S, T0 + 23.9 * HOUR)
    after = await cache.get(S, T0 + 24 * HOUR)
    assert before is not None and before.summary == "old plan"
    assert after is not None and after.summary is None and after.summary_at is None
    assert after.messages  # the messages are still live


async def test_categories_expire_on_the_summary_clock(cache_factory: CacheFactory) -> None:
    cache = await cache_factory(crude_ttl_s=12 * 3600, summary_ttl_s=24 * 3600)
    store = ReferenceStore()
    change = DistilledWrite(categories={"mood": "calm"})
    rows = await store.write_distilled([(S, META)], change, reset_counter=None, now=T0)
    await cache.apply_rows(rows, T0)
    entry = await cache.get(S, T0 + 20 * HOUR)  # past the 12 h crude clock
    assert entry is not None and dict(entry.categories) == {"mood": "calm"}
    assert await cache.get(S, T0 + 24 * HOUR) is None


async def test_counter_only_records_are_cached_but_not_live(cache_factory: CacheFactory) -> None:
    cache = await cache_factory()
    [row] = await ReferenceStore().touch([(S, META)], increment=S, now=T0)
    await cache.apply_rows([row], T0)
    assert await cache.get(S, T0) is None
    assert await cache.counter(S, T0) == 1
    assert await cache.counter(U, T0) is None


async def test_owner_entries_are_per_owner_and_live_only(cache_factory: CacheFactory) -> None:
    cache = await cache_factory()
    for ch in ("c1", "c2", "c3"):
        await cache.capture(ScopeKey.server("g1", ch, "p1"), msgs(ch), META, None, T0)
    await cache.capture(ScopeKey.server("g2", "c9", "p1"), msgs("x"), META, None, T0)
    await cache.capture(ScopeKey.user("g1", "c4", "p1"), msgs("y"), META, None, T0)
    entries, _ = await cache.owner_entries("server", "g1", T0)
    assert sorted(e.key.channel_id for e in entries) == ["c1", "c2", "c3"]
    later, _ = await cache.owner_entries("server", "g1", T0 + 13 * HOUR)
    assert later == []


async def test_deletes_by_key_channel_and_owner(cache_factory: CacheFactory) -> None:
    cache = await cache_factory()
    keys = [
        ScopeKey.server("g1", "c1", "p1"),
        ScopeKey.server("g1", "c1", None),
        ScopeKey.user("u1", "c1", "p1"),
        ScopeKey.user("u1", "c2", "p1"),
        ScopeKey.server("g1", "c2", "p1"),
    ]
    for key in keys:
        await cache.capture(key, msgs("hi"), META, None, T0)
    assert await cache.delete_channel("c1") == 3
    assert await cache.get(keys[0], T0) is None
    assert await cache.get(keys[3], T0) is not None
    assert await cache.delete_owner("user", "u1") == 1
    assert await cache.get(keys[3], T0) is None
    assert await cache.delete(keys[4]) is True
    assert await cache.delete(keys[4]) is False
    assert (await cache.owner_entries("server", "g1", T0))[0] == []


async def test_scrub_author_removes_their_messages_everywhere(cache_factory: CacheFactory) -> None:
    cache = await cache_factory()
    mixed = (
        Message("user", "from ana", author_id="ana", at=T0),
        Message("user", "from ben", author_id="ben", at=T0),
        Message("assistant", "from bot", at=T0),
    )
    await cache.capture(S, mixed, META, None, T0)
    await cache.capture(ScopeKey.user("ben", "c1"), mixed, META, None, T0)
    await cache.capture(
        ScopeKey.server("g1", "c7"), msgs("no ana here", author="ben"), META, None, T0
    )
    assert await cache.scrub_author("ana", T0) == 2
    for key in (S, ScopeKey.user("ben", "c1")):
        entry = await cache.get(key, T0)
        assert entry is not None
        assert [m.content for m in entry.messages] == ["from ben", "from bot"]
    assert await cache.scrub_author("ana", T0) == 0


# A channel's dialogue: the bot greets (answering no one), answers Ana, then Dana (twice: the
# second answer still answers her), then Ana again, then someone whose id it does not know.
TALK = (
    Message("assistant", "welcome, everyone", author_id="bot", at=T0),
    Message("user", "hi all", author_id="ana", at=T0),
    Message("assistant", "hi Ana", author_id="bot", at=T0),
    Message("user", "my door code is 4512", author_id="dana", at=T0),
    Message("assistant", "noted: your code is 4512", author_id="bot", at=T0),
    Message("assistant", "anything else, Dana?", at=T0),
    Message("user", "lunch at noon?", author_id="ana", at=T0),
    Message("assistant", "noon it is, Ana", author_id="bot", at=T0),
    Message("user", "who am I?", at=T0),
    Message("assistant", "someone new", author_id="bot", at=T0),
)
WITHOUT_DANA = [
    "welcome, everyone",
    "hi all",
    "hi Ana",
    "lunch at noon?",
    "noon it is, Ana",
    "who am I?",
    "someone new",
]


async def test_a_purge_takes_the_bots_answers_to_the_user_and_keeps_the_others(
    cache_factory: CacheFactory,
) -> None:
    """A bot message answers the nearest user message before it; the scrub of Dana takes her
    lines and the bot's answers to her, from the shared scope and another user's alike."""
    cache = await cache_factory()
    ana = ScopeKey.user("ana", "c1", "p1")
    await cache.capture(S, TALK, META, None, T0)
    await cache.capture(ana, TALK, META, None, T0)  # a list holding her, whoever's it is
    only_answer = ScopeKey.server("g1", "c2", "p1")  # her question and its answer: both go
    await cache.capture(only_answer, TALK[3:6], META, None, T0)
    assert await cache.scrub_author("dana", T0) == 3
    for key in (S, ana):
        entry = await cache.get(key, T0)
        assert entry is not None
        assert [m.content for m in entry.messages] == WITHOUT_DANA
    assert await cache.get(only_answer, T0) is None
    # The bot's lines left in the shared scope are still found when its own id is scrubbed.
    assert await cache.scrub_author("bot", T0) == 2
    entry = await cache.get(S, T0)
    assert entry is not None
    assert [m.content for m in entry.messages] == ["hi all", "lunch at noon?", "who am I?"]


async def test_a_capture_in_flight_when_a_purge_lands_loses_the_answers_to_the_user(
    cache_factory: CacheFactory,
) -> None:
    """A capture that began before Dana's purge lands after it: her lines and the bot's
    answers to her are dropped from it, the rest is written."""
    cache = await cache_factory()
    await cache.repair(ReferenceStore(), T0)  # marked at the journal's start: takes fences
    await cache.record_forget(1, [user_target("dana")], T0)
    assert await cache.capture(S, TALK, META, None, T0, WriteFence(0))
    entry = await cache.get(S, T0)
    assert entry is not None
    assert [m.content for m in entry.messages] == WITHOUT_DANA
    # The bot's answers to her were the only messages of an author: not indexed under it.
    lone = ScopeKey.server("g1", "c2", "p1")
    assert await cache.capture(lone, TALK[3:6], META, None, T0, WriteFence(0))
    assert await cache.get(lone, T0) is None
    assert await cache.scrub_author("bot", T0) == 1


async def test_sweep_removes_only_expired_entries(cache_factory: CacheFactory) -> None:
    cache = await cache_factory(crude_ttl_s=100, summary_ttl_s=1000)
    await cache.capture(ScopeKey.server("g1", "a"), msgs("a"), META, None, T0)
    await cache.capture(ScopeKey.server("g1", "b"), msgs("b"), META, None, T0 + 50)
    await cache.apply_rows([await summary_row(ScopeKey.server("g1", "c"), "s", T0)], T0)
    assert await cache.sweep(T0 + 120) == 1
    assert cache.stats()["entries"] == 2
    assert await cache.sweep(T0 + 200) == 1
    assert await cache.sweep(T0 + 1001) == 1
    assert cache.stats()["entries"] == 0
    assert cache.stats()["expirations"] >= 3


async def test_stats_count_hits_misses_and_bytes(cache_factory: CacheFactory) -> None:
    cache = await cache_factory()
    await cache.get(S, T0)
    await cache.capture(S, msgs("x" * 1000), META, None, T0)
    await cache.get(S, T0)
    stats = cache.stats()
    assert stats["hits"] == 1 and stats["misses"] == 1 and stats["entries"] == 1
    assert stats["bytes"] >= 1000
    await cache.delete(S)
    assert cache.stats()["bytes"] == 0


async def test_scope_keys_lists_every_held_key_in_batches(cache_factory: CacheFactory) -> None:
    cache = await cache_factory()
    assert isinstance(cache, ScopeLister)
    keys = {ScopeKey.server("g1", f"c{i}", None) for i in range(7)} | {U}
    for key in keys:
        await cache.capture(key, msgs("hi"), META, None, T0)
    await cache.delete(ScopeKey.server("g1", "c0", None))
    seen: list[ScopeKey] = []
    async for batch in cache.scope_keys(batch=3):
        assert batch
        seen.extend(batch)
    assert set(seen) == keys - {ScopeKey.server("g1", "c0", None)}


# -- appending captures (the adapters': only a turn's new messages) ----------------------------

TRICKY = ['say "]"', "back\\slash]", 'both \\"]",[', "emoji 🙂 ] [", ""]


def said(*texts: str, author: str = "u1", at: float = T0) -> tuple[Message, ...]:
    return tuple(
        Message("user", t or " ", author_id=author, speaker="Ana", at=at, message_id=f"id-{t}")
        for t in texts
    )


async def test_an_appending_capture_follows_the_stored_messages_byte_for_byte(
    cache_factory: CacheFactory,
) -> None:
    """Stored messages whose text holds quotes, brackets and backslashes come back exactly,
    the new ones after them, times unchanged (a Redis script joins the stored texts)."""
    cache = await cache_factory()
    first = (*said(*TRICKY), *msgs("no id"))
    await cache.capture(S, first, META, None, T0)
    new = said("next", at=T0 + 0.123456)
    assert await cache.capture_scopes([(S, new, None)], META, T0 + 1, append=10) == 1
    entry = await cache.get(S, T0 + 1)
    assert entry is not None
    assert entry.messages == (*first, *new)
    assert entry.messages_at == T0 + 1


async def test_an_appending_capture_replaces_a_stored_message_by_id_and_keeps_the_newest(
    cache_factory: CacheFactory,
) -> None:
    cache = await cache_factory()
    await cache.capture(S, said("a", "b", "c"), META, None, T0)
    await cache.capture_scopes([(S, said("b", "d"), None)], META, T0 + 1, append=3)
    entry = await cache.get(S, T0 + 1)
    assert entry is not None
    assert [m.content for m in entry.messages] == ["c", "b", "d"]


async def test_an_appending_capture_with_an_older_row_still_adds_its_messages(
    cache_factory: CacheFactory,
) -> None:
    """Two turns appending at once: the one whose durable row is older lands second; its
    messages are added, its older mirror is not (the counter stays the newer row's)."""
    cache = await cache_factory()
    store = ReferenceStore()
    [old] = await store.touch([(S, META)], increment=S, now=T0)
    [new] = await store.touch([(S, META)], increment=S, now=T0 + 1)
    await cache.capture_scopes([(S, said("bo"), new)], META, T0 + 1, append=10)
    await cache.capture_scopes([(S, said("ana"), old)], META, T0 + 2, append=10)
    entry = await cache.get(S, T0 + 2)
    assert entry is not None
    assert [m.content for m in entry.messages] == ["bo", "ana"]
    assert entry.turns_since_refresh == 2
    # A replacing capture keeps its rule: an older row's write is ignored whole.
    await cache.capture(S, said("late"), META, old, T0 + 3)
    assert [m.content for m in (await cache.get(S, T0 + 3) or entry).messages] == ["bo", "ana"]


async def test_an_appending_capture_does_not_revive_expired_messages(
    cache_factory: CacheFactory,
) -> None:
    cache = await cache_factory(crude_ttl_s=3600)
    await cache.capture(S, said("old"), META, None, T0)
    await cache.capture_scopes([(S, said("new"), None)], META, T0 + 2 * HOUR, append=10)
    entry = await cache.get(S, T0 + 2 * HOUR)
    assert entry is not None
    assert [m.content for m in entry.messages] == ["new"]


async def test_an_appended_author_is_indexed_for_a_purge(cache_factory: CacheFactory) -> None:
    cache = await cache_factory()
    await cache.capture(S, said("from u1"), META, None, T0)
    await cache.capture_scopes([(S, said("from u2", author="u2"), None)], META, T0, append=10)
    assert await cache.scrub_author("u2", T0) == 1
    entry = await cache.get(S, T0)
    assert entry is not None
    assert [m.content for m in entry.messages] == ["from u1"]


async def test_a_capture_that_does_not_know_a_name_keeps_the_known_one(
    cache_factory: CacheFactory,
) -> None:
    """Metadata a capture lacks (``None``) keeps the stored value and the private flag is
    sticky, as in the durable upserts: a turn without a channel name does not unname it."""
    cache = await cache_factory()
    named = ScopeMeta(server_id="g1", server_name="Hikers", channel_name="plans", private=True)
    await cache.capture(S, msgs("one"), named, None, T0)
    await cache.capture(S, msgs("two"), ScopeMeta(server_id="g1"), None, T0 + 1)
    entry = await cache.get(S, T0 + 1)
    assert entry is not None
    assert (entry.channel_name, entry.server_name, entry.private) == ("plans", "Hikers", True)
    renamed = ScopeMeta(server_id="g1", channel_name="trips")
    await cache.capture(S, msgs("three"), renamed, None, T0 + 2)
    entry = await cache.get(S, T0 + 2)
    assert entry is not None and entry.channel_name == "trips"
