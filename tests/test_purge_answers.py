"""A purge takes the purged user's messages *and the bot's answers to them* (which may retell
them), wherever a list of messages is scrubbed: the hot tiers' scrub, a follower's purge by
digest, a capture in flight when the purge lands (``capture.lua`` on Redis), a replay after
Redis went back in time. Answers to everyone else stay. The rule is ``model.dialogue``'s."""

from __future__ import annotations

import asyncio
import uuid
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shortterm
from shortterm import Message, Privacy, Reply, ScopeKey, UserSettings
from shortterm.cache.inprocess import InProcessCache
from shortterm.cache.redis import RedisCache
from shortterm.cache.redis.codec import authors_json, member
from shortterm.model import ScopeMeta
from shortterm.model.config import Config
from shortterm.model.dialogue import addressees, without_authors
from shortterm.model.fence import WriteFence, user_target
from shortterm.store.reference import ReferenceStore
from tests.support import T0, clear_redis_prefix, with_query

G, C, P = "g1", "c1", "p1"
META = ScopeMeta(server_id=G, channel_name="general")


def said(role: str, text: str, author: str | None) -> Message:
    return Message(role, text, author_id=author)  # type: ignore[arg-type]


# -- the rule -------------------------------------------------------------------------------


def test_a_bot_message_belongs_to_the_nearest_user_message_before_it() -> None:
    talk = (
        said("assistant", "welcome", "bot"),  # before any user message: no one
        said("user", "hi", "ana"),
        said("assistant", "hi Ana", "bot"),
        said("user", "my code is 4512", "dana"),
        said("assistant", "your code is 4512", "bot"),
        said("assistant", "anything else?", None),
        said("user", "who am I?", None),  # an unattributed question: its answer is no one's
        said("assistant", "someone new", "bot"),
    )
    assert addressees(talk) == [None, "ana", "ana", "dana", "dana", "dana", None, None]
    kept = without_authors(talk, {"dana"})
    assert [m.content for m in kept] == ["welcome", "hi", "hi Ana", "who am I?", "someone new"]
    assert without_authors(talk, set()) is talk
    assert without_authors(talk, {"nobody"}) is talk


# -- the Lua script agrees with the rule ----------------------------------------------------

AUTHORS = ("ana", "dana", "bo", "bot")
TEXTS = st.sampled_from(['["user",', '"]', "\\", "é ✓", "\u2028", "", "x]},["]) | st.text(
    max_size=12
)
MESSAGES = st.lists(
    st.builds(
        said,
        st.sampled_from(["user", "assistant"]),
        TEXTS,
        st.sampled_from([*AUTHORS, None]),
    ),
    max_size=12,
).map(tuple)
PURGED = st.sets(st.sampled_from(AUTHORS), min_size=1)


def test_the_redis_scripts_and_the_in_process_tier_apply_the_rule(redis_url: str) -> None:
    """On random dialogues and purges, against a real Redis: a capture in flight when the
    purge lands (capture.lua drops what it must itself) and a scrub (one author at a time)
    keep exactly ``without_authors``, and list exactly the authors left in the record (the
    index a later purge reads); the in-process tier keeps the same."""
    loop = asyncio.new_event_loop()
    prefix = f"stm-test:{uuid.uuid4().hex[:16]}:"
    redis = RedisCache.from_url(with_query(redis_url, prefix=quote(prefix)), Config())
    local = InProcessCache(
        crude_ttl_s=3600, summary_ttl_s=3600, max_entries=10**6, max_bytes=1 << 40
    )
    run = loop.run_until_complete
    run(redis.repair(ReferenceStore(), T0))  # marked at the journal's start: takes fences
    count = {"seq": 0}

    async def au(key: ScopeKey) -> str | None:
        raw = await redis.client.hget(redis.layout.record(key, member(key)), "au")
        return None if raw is None else raw.decode() if isinstance(raw, bytes) else str(raw)

    async def example(talk: tuple[Message, ...], purged: set[str]) -> None:
        count["seq"] += 1
        seq, expected = count["seq"], without_authors(talk, purged)
        in_flight, scrubbed = (ScopeKey.server(G, f"{side}{seq}", P) for side in "fs")
        targets = [user_target(a) for a in sorted(purged)]
        for tier in (redis, local):
            await tier.record_forget(seq, targets, T0)
            assert await tier.capture(in_flight, talk, META, None, T0, WriteFence(seq - 1))
            await tier.capture(scrubbed, talk, META, None, T0)  # landed before the purge
            for author in sorted(purged):
                await tier.scrub_author(author, T0)
            for key in (in_flight, scrubbed):
                entry = await tier.get(key, T0)
                assert (entry.messages if entry is not None else ()) == expected, (tier, key)
        for key in (in_flight, scrubbed):
            assert await au(key) == authors_json(expected), key

    @settings(max_examples=150, deadline=None)
    @given(talk=MESSAGES, purged=PURGED)
    def check(talk: tuple[Message, ...], purged: set[str]) -> None:
        run(example(talk, purged))

    try:
        check()
    finally:
        run(redis.close())
        run(clear_redis_prefix(redis_url, prefix))
        loop.close()


# -- a replay after Redis went back in time -------------------------------------------------


async def test_a_replayed_purge_drops_the_records_holding_her_whole(
    redis_url: str, prefix: str
) -> None:
    """A purge Redis lost (a snapshot from before it) is replayed from the journal: the
    records holding her messages go whole, answers to her with them; a record without her
    stays as it was."""
    cache = RedisCache.from_url(with_query(redis_url, prefix=quote(prefix)), Config())
    store = ReferenceStore()
    try:
        await cache.repair(store, T0)
        seq = (await store.forget_user("dana", keep=None, now=T0)).seq  # never applied here
        holding = ScopeKey.server(G, C, P)
        elsewhere = ScopeKey.server(G, "c2", P)
        talk = (
            said("user", "my code is 4512", "dana"),
            said("assistant", "your code is 4512", "bot"),
            said("user", "hi", "ana"),
        )
        await cache.capture(holding, talk, META, None, T0, WriteFence(seq - 1))
        await cache.capture(elsewhere, talk[2:], META, None, T0, WriteFence(seq - 1))
        assert "your code is 4512" in texts(await cache.get(holding, T0))  # Redis holds her
        assert await cache.repair(store, T0, to=seq) == seq  # the journal's purge, replayed
        assert await cache.get(holding, T0) is None
        kept = await cache.get(elsewhere, T0)
        assert kept is not None and [m.content for m in kept.messages] == ["hi"]
    finally:
        await cache.close()


# -- through the library --------------------------------------------------------------------

HISTORY = [
    Message("user", "hi all", author_id="ana", speaker="Ana"),
    Message("assistant", "hi Ana"),
    Message("user", "my door code is 4512", author_id="dana", speaker="Dana"),
    Message("assistant", "noted: your door code is 4512"),
    Message("user", "lunch at noon?", author_id="ana", speaker="Ana"),
]


async def forget_dana(memory: shortterm.Memory, how: str) -> None:
    if how == "clear_user":
        await memory.clear_user("dana")
    else:
        await memory.configure_user("dana", UserSettings(privacy=Privacy.FULL))


def texts(entry: shortterm.Entry | None) -> list[str]:
    return [m.content for m in entry.messages] if entry is not None else []


@pytest.mark.parametrize("how", ["clear_user", "full"])
async def test_a_purge_takes_the_bots_answers_to_her_from_the_channel(
    tiers: tuple[str, str], how: str
) -> None:
    """Ana's turn in a channel where Dana spoke and the bot answered both; Dana is purged
    (clear_user, or FULL) by another process on the same memory. The channel's shared scope
    keeps Ana's lines and the bot's answers to Ana only, in both processes."""
    store, cache = tiers
    async with (
        await shortterm.open(store=store, cache=cache) as bot,
        await shortterm.open(store=store, cache=cache) as admin,
    ):
        turn = bot.turn(user_id="ana", channel_id=C, server_id=G, persona_id=P)
        await turn.capture(history=HISTORY, replies=[Reply("noon it is, Ana", persona_id=P)])
        shared = ScopeKey.server(G, C, P)
        assert "noted: your door code is 4512" in texts(await bot.get(shared))
        await forget_dana(admin, how)
        kept = ["hi all", "hi Ana", "lunch at noon?", "noon it is, Ana"]
        assert texts(await bot.get(shared)) == kept  # the bot's process followed the purge
        if cache != "memory://":
            assert texts(await admin.get(shared)) == kept
        assert texts(await bot.get(ScopeKey.user("ana", C, P))) == kept
