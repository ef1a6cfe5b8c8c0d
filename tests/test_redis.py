"""Redis specifics beyond the conformance suite: sharing between instances, key encoding,
TTL safety nets, owner completeness markers, and connections that fail."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import quote

import pytest
import redis.asyncio as aioredis

import shortterm
from shortterm.cache.redis import RedisCache
from shortterm.cache.redis.directory import REFRESH_S as LISTING_REFRESH_S
from shortterm.cache.redis.layout import Layout
from shortterm.model import Message, ScopeKey
from shortterm.model.config import Config
from shortterm.model.errors import ConfigError, StoreUnavailable
from shortterm.store.base import DistilledWrite, ScopeMeta
from shortterm.store.reference import ReferenceStore
from tests.support import T0, FakeClock, with_query

META = ScopeMeta(server_id="g1", channel_name="general")
S = ScopeKey.server("g1", "c1", "p1")
HOUR = 3600.0
POLL_S, POLL_LIMIT = 0.02, 250

Opener = Callable[..., Awaitable[RedisCache]]


def msgs(*texts: str, author: str = "u1", at: float = T0) -> tuple[Message, ...]:
    return tuple(Message("user", t, author_id=author, at=at) for t in texts)


@pytest.fixture
async def open_cache(redis_url: str, prefix: str) -> AsyncIterator[Opener]:
    """Opens caches on the test's prefix: several of them share one state, like processes."""
    opened: list[RedisCache] = []

    async def make(query: str = "", **overrides: int) -> RedisCache:
        cfg = Config().replace(**overrides) if overrides else Config()
        url = with_query(redis_url, prefix=quote(prefix)) + (f"&{query}" if query else "")
        cache = RedisCache.from_url(url, cfg)
        opened.append(cache)
        return cache

    yield make
    for cache in opened:
        await cache.close()


async def test_instances_on_one_prefix_share_state_and_revisions(open_cache: Opener) -> None:
    one, two = await open_cache(), await open_cache()
    store = ReferenceStore()
    [old] = await store.touch([(S, META)], increment=S, now=T0)
    [new] = await store.touch([(S, META)], increment=S, now=T0 + 1)
    await one.capture(S, msgs("newer"), META, new, T0 + 1)
    await two.capture(S, msgs("older"), META, old, T0 + 2)  # another process, finished late
    await two.apply_rows([old], T0 + 2)
    entry = await two.get(S, T0 + 2)
    assert entry is not None and [m.content for m in entry.messages] == ["newer"]
    assert entry.turns_since_refresh == 2
    assert await one.delete_channel("c1") == 1
    assert await two.get(S, T0 + 2) is None


async def test_prefixes_do_not_see_each_other(open_cache: Opener, redis_url: str) -> None:
    mine = await open_cache()
    theirs = RedisCache.from_url(
        with_query(redis_url, prefix=f"stm-test:{uuid.uuid4().hex}:"), Config()
    )
    try:
        await mine.capture(S, msgs("hi"), META, None, T0)
        assert await theirs.get(S, T0) is None
        assert await theirs.delete_channel("c1") == 0
        assert await mine.get(S, T0) is not None
    finally:
        await theirs.clear_prefix()
        await theirs.close()


async def test_awkward_ids_and_texts_round_trip(open_cache: Opener) -> None:
    cache = await open_cache()
    keys = [
        ScopeKey.user("@ana:matrix.org", "!room:matrix.org"),
        ScopeKey.user("@ana:matrix.org", "!room:matrix.org", "0"),
        ScopeKey.server('g"1', "c*[?]\\", "p:1"),
        ScopeKey.server("g", "c", "\u202eevil"),
    ]
    texts = ["emoji 👩‍👩‍👧 🇯🇵", "quotes \" ' and ]] == ]]", "lua ]==] --[[ ", "x" * 50_000]
    for i, key in enumerate(keys):
        author = f"a:{i}\u00e9"
        await cache.capture(key, msgs(*texts, author=author, at=T0 + 0.123456), META, None, T0)
    for key in keys:
        entry = await cache.get(key, T0)
        assert entry is not None and entry.key == key
        assert [m.content for m in entry.messages] == texts
        assert entry.messages[0].at == T0 + 0.123456  # full float precision
    assert await cache.delete_channel("!room:matrix.org") == 2
    assert await cache.scrub_author("a:2\u00e9", T0) == 1
    entry = await cache.get(keys[2], T0)
    assert entry is None  # its only author was scrubbed and nothing else is live


async def test_every_key_has_a_safety_ttl_beyond_its_logical_life(
    open_cache: Opener, admin: aioredis.Redis, prefix: str
) -> None:
    cache = await open_cache("safety_margin_s=600", crude_ttl_s=100)
    now = time.time() + 10 * 365 * 86400  # a clock far from real time changes nothing
    await cache.capture(S, msgs("hi", at=now), META, None, now)
    names = [name async for name in admin.scan_iter(match=f"{prefix}*")]
    ttls = {_kind(name[len(prefix) :]): await admin.pttl(name) for name in names}
    assert 650_000 < ttls["e"] <= 700_000  # 100 s of life + 600 s of margin
    for kind in ("o", "c", "a", "directory"):  # indexes outlive the records they list
        assert ttls[kind] >= ttls["e"] - 1000
    assert ttls["x"] == -1 and ttls["n"] == -1  # shared bookkeeping, cleaned by sweep


def _kind(name: str) -> str:
    """What a key under the prefix is: ``e`` for ``{g3}e:...``, ``directory`` for an owner's
    ``{o:server:g1}``."""
    tag, rest = name[1:].split("}", 1)
    if tag.startswith("o:"):
        return "directory" if not rest else "marker"
    return rest.split(":", 1)[0]


async def test_owners_are_complete_only_while_a_marker_says_so(open_cache: Opener) -> None:
    cache = await open_cache("owner_complete_ttl_s=0.2")
    await cache.capture(S, msgs("hi"), META, None, T0)
    cache.set_complete(True)  # one process's hydration proves nothing about a shared tier
    assert cache.complete is False
    entries, complete = await cache.owner_entries("server", "g1", T0)
    assert len(entries) == 1 and complete is False
    await cache.mark_complete("server", "g1")
    assert (await cache.owner_entries("server", "g1", T0))[1] is True
    assert (await cache.owner_entries("server", "g2", T0))[1] is False
    await cache.delete_owner("server", "g1")
    assert (await cache.owner_entries("server", "g1", T0))[1] is False
    await cache.mark_complete("server", "g1")
    for _ in range(POLL_LIMIT):  # the marker expires on Redis's own clock
        if not (await cache.owner_entries("server", "g1", T0))[1]:
            break
        await asyncio.sleep(POLL_S)
    else:
        raise AssertionError("the owner marker never expired")


async def test_records_lost_behind_our_back_leave_no_ghosts(
    open_cache: Opener, admin: aioredis.Redis, prefix: str
) -> None:
    cache = await open_cache()
    gone, kept = ScopeKey.server("g1", "c1"), ScopeKey.server("g1", "c2")
    await cache.capture(gone, msgs("a"), META, None, T0)
    await cache.capture(kept, msgs("b"), META, None, T0)
    record = Layout(prefix).record(gone, '["server","g1","c1",null]')
    assert await admin.delete(record) == 1  # as an eviction or an expired safety TTL would
    entries, _ = await cache.owner_entries("server", "g1", T0)
    assert [e.key for e in entries] == [kept]
    assert await cache.delete_channel("c1") == 0
    assert await cache.sweep(T0 + 13 * HOUR) == 1


async def test_summary_rows_mirror_and_expire_on_their_own_clock(open_cache: Opener) -> None:
    cache = await open_cache(summary_ttl_s=1000, crude_ttl_s=100)
    change = DistilledWrite(summary="plan", set_summary=True, categories={"mood": "calm"})
    rows = await ReferenceStore().write_distilled([(S, META)], change, reset_counter=None, now=T0)
    await cache.apply_rows(rows * 3, T0)  # a pipelined batch; repeats are no-ops
    await cache.capture(S, msgs("m"), META, None, T0 + 950)
    entry = await cache.get(S, T0 + 999)
    assert entry is not None and entry.summary == "plan" and dict(entry.categories)
    entry = await cache.get(S, T0 + 1000)
    assert entry is not None and entry.summary is None and not entry.categories
    assert entry.messages
    assert await cache.sweep(T0 + 1049) == 0
    assert await cache.sweep(T0 + 1050) == 1


async def test_a_closed_port_is_store_unavailable() -> None:
    cache = RedisCache.from_url("redis://127.0.0.1:9/0?socket_connect_timeout=1", Config())
    try:
        with pytest.raises(StoreUnavailable, match="Redis read failed"):
            await cache.get(S, T0)
        with pytest.raises(StoreUnavailable, match="Redis capture failed"):
            await cache.capture(S, msgs("hi"), META, None, T0)
    finally:
        await cache.close()
    with pytest.raises(StoreUnavailable, match="closed"):
        await cache.get(S, T0)


async def _kill(admin: aioredis.Redis, name: str) -> None:
    clients = [c for c in await admin.client_list() if c.get("name") == name]
    assert clients, "the cache has no connection to kill"
    for c in clients:
        await admin.client_kill_filter(_id=c["id"])


async def test_a_killed_connection_fails_loudly_without_retries(
    open_cache: Opener, admin: aioredis.Redis
) -> None:
    name = f"stm-{uuid.uuid4().hex[:12]}"
    cache = await open_cache(f"retries=0&client_name={name}")
    await cache.capture(S, msgs("before"), META, None, T0)
    # The kill must land while the script is in flight: killed before it is sent, the client
    # may notice the closed socket when it takes the connection and simply open a new one.
    # A write pause holds the script on the server (EVALSHA may write) until the kill.
    await admin.execute_command("CLIENT", "PAUSE", "5000", "WRITE")
    try:
        lost = asyncio.ensure_future(cache.capture(S, msgs("lost"), META, None, T0 + 1))
        await asyncio.sleep(0.2)
        assert not lost.done(), "the pause did not hold the capture"
        await _kill(admin, name)
        with pytest.raises(StoreUnavailable):
            await lost
    finally:
        await admin.execute_command("CLIENT", "UNPAUSE")
    entry = await cache.get(S, T0 + 1)  # reconnected
    assert entry is not None and [m.content for m in entry.messages] == ["before"]


async def test_a_killed_connection_is_replaced_by_the_default_retry(
    open_cache: Opener, admin: aioredis.Redis
) -> None:
    name = f"stm-{uuid.uuid4().hex[:12]}"
    cache = await open_cache(f"client_name={name}")
    await cache.capture(S, msgs("before"), META, None, T0)
    await _kill(admin, name)
    await cache.capture(S, msgs("after"), META, None, T0 + 1)  # safe to repeat, so repeated
    entry = await cache.get(S, T0 + 1)
    assert entry is not None and [m.content for m in entry.messages] == ["after"]


@pytest.mark.parametrize(
    "query", ["retries=many", "owner_complete_ttl_s=-1", "safety_margin_s=nan", "max_connections=x"]
)
def test_bad_url_options_are_config_errors(redis_url: str, query: str) -> None:
    with pytest.raises(ConfigError):
        RedisCache.from_url(with_query(redis_url, **dict([query.split("=")])), Config())


def test_other_schemes_are_refused() -> None:
    with pytest.raises(ConfigError, match="not a Redis URL"):
        RedisCache.from_url("memcached://localhost", Config())


async def test_the_facade_on_postgres_and_redis_keeps_messages_across_restarts(
    scale_urls: tuple[str, str], clock: FakeClock
) -> None:
    store_url, cache_url = scale_urls
    config = shortterm.Config(sweep_interval_s=0)
    key = ScopeKey.server("333", "222", "7")
    async with shortterm.open(store=store_url, cache=cache_url, clock=clock, config=config) as m:
        turn = m.turn(user_id="111", channel_id="222", server_id="333", persona_id="7")
        await turn.capture(
            history=[shortterm.Message("user", "Hike on Saturday?", author_id="111")],
            replies=[shortterm.Reply("Ridge trail, 8am.", persona_id="7")],
        )
    clock.advance(60)
    async with shortterm.open(store=store_url, cache=cache_url, clock=clock, config=config) as m:
        entry = await m.get(key)  # the shared tier outlives a bot process
        assert entry is not None and entry.turns_since_refresh == 1
        assert [msg.content for msg in entry.messages] == ["Hike on Saturday?", "Ridge trail, 8am."]
        clock.advance(12 * HOUR)
        assert await m.get(key) is None
        assert await m.sweep() == 2


# -- fewer round trips: riders and the owner directory's listings --------------------------------

_SET_LUA = "#!lua\nredis.call('SET', KEYS[1], ARGV[1])\nreturn ARGV[1]"


def _count_round_trips(cache: RedisCache, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the pipelines the tier sends (one round trip each, on one node)."""
    sent = [0]
    send = cache._g._send

    async def counted(what: str, commands: list[Any]) -> list[Any]:
        sent[0] += 1
        return await send(what, commands)

    monkeypatch.setattr(cache._g, "_send", counted)
    return sent


async def test_a_ride_goes_with_the_next_pipeline_or_alone(
    open_cache: Opener, admin: aioredis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = await open_cache()
    sent = _count_round_trips(cache, monkeypatch)
    key = prefix + "{g0}ride"
    ride = cache.ride("test", _SET_LUA, [key], ["carried"])
    assert await admin.get(key) is None  # queued, not sent
    await cache.owner_entries("server", "g1", T0)  # one pipeline, carrying it
    assert sent == [1] and await admin.get(key) == "carried"
    assert await ride.result() == "carried" and sent == [1]  # no round trip of its own

    alone = cache.ride("test", _SET_LUA, [key], ["alone"])
    assert await alone.result() == "alone" and sent == [2]

    dropped = cache.ride("test", _SET_LUA, [key], ["dropped"])
    dropped.drop()
    await cache.owner_entries("server", "g1", T0)
    assert await admin.get(key) == "alone"  # a dropped ride is never sent


async def test_a_ride_waits_for_a_pipeline_of_its_own_task(
    open_cache: Opener, admin: aioredis.Redis, prefix: str
) -> None:
    cache = await open_cache()
    key = prefix + "{g0}ride"
    ride = cache.ride("test", _SET_LUA, [key], ["mine"])
    await asyncio.create_task(cache.owner_entries("server", "g1", T0))  # another request's
    assert await admin.get(key) is None
    assert await ride.result() == "mine"


async def test_a_ride_fails_with_its_pipeline(open_cache: Opener, prefix: str) -> None:
    cache = await open_cache()
    ride = cache.ride("test", _SET_LUA, [prefix + "{g0}ride"], ["x"])
    await cache.close()  # the pipeline that would carry it cannot be sent
    with pytest.raises(StoreUnavailable):
        await cache.owner_entries("server", "g1", T0)
    with pytest.raises(StoreUnavailable):
        await ride.result()


async def test_an_owner_read_fetches_known_records_with_the_directory(
    open_cache: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, theirs = await open_cache(), await open_cache()
    keys = [ScopeKey.server("g1", f"c{i}", "p1") for i in range(5)]
    for key in keys[:3]:
        await mine.capture(key, msgs(f"in {key.channel_id}"), META, None, T0)
    sent = _count_round_trips(mine, monkeypatch)
    entries, _ = await mine.owner_entries("server", "g1", T0)
    assert len(entries) == 3 and sent == [1]  # our own writes were known listed
    for key in keys[3:]:  # another process lists two more
        await theirs.capture(key, msgs(f"in {key.channel_id}"), META, None, T0)
    entries, _ = await mine.owner_entries("server", "g1", T0)
    assert len(entries) == 5 and sent == [3]  # the new ones in a second round trip
    entries, _ = await mine.owner_entries("server", "g1", T0)
    assert len(entries) == 5 and sent == [4]  # and now known


async def test_a_lost_listing_is_renewed_within_the_refresh_bound(open_cache: Opener) -> None:
    mine, theirs = await open_cache(), await open_cache()
    key = ScopeKey.server("g1", "c1", "p1")
    await mine.capture(key, msgs("first"), META, None, T0)
    await theirs.delete_owner("server", "g1")  # another process forgets the owner
    await mine.capture(key, msgs("again"), META, None, T0 + 1)
    # Our listing is recent, so this write did not list the key again: only our next owner
    # read, or the refresh bound, does.
    assert (await theirs.owner_entries("server", "g1", T0 + 1))[0] == []
    await mine.capture(key, msgs("later"), META, None, T0 + 1 + LISTING_REFRESH_S)
    [entry] = (await theirs.owner_entries("server", "g1", T0 + 2 + LISTING_REFRESH_S))[0]
    assert [m.content for m in entry.messages][-1] == "later"


async def test_our_own_forget_makes_the_next_write_list_its_key(open_cache: Opener) -> None:
    mine, theirs = await open_cache(), await open_cache()
    key = ScopeKey.server("g1", "c1", "p1")
    await mine.capture(key, msgs("first"), META, None, T0)
    await mine.delete_owner("server", "g1")
    await mine.capture(key, msgs("again"), META, None, T0 + 1)
    [entry] = (await theirs.owner_entries("server", "g1", T0 + 1))[0]
    assert [m.content for m in entry.messages] == ["again"]


async def test_a_replayed_forget_evicts_what_predates_it_and_keeps_what_began_after(
    open_cache: Opener,
) -> None:
    """A forget the tier never applied (its process died after committing, or Redis went
    back in time) is replayed from the journal when a process knows of it: the write that
    began before it goes, the one that began after it (new data) stays. The read that finds
    the group short repairs it and reads again."""
    from shortterm.model.fence import WriteFence

    cache = await open_cache()
    store = ReferenceStore()
    assert isinstance(cache, RedisCache)
    await cache.repair(store, T0)  # every group marked at the journal's start
    seq = (await store.forget_channel("c1", now=T0)).seq  # never applied to this tier
    older, newer = ScopeKey.server("g1", "c1", "p1"), ScopeKey.user("u1", "c1", "p1")
    await cache.capture(older, msgs("before the clear"), META, None, T0, WriteFence(seq - 1))
    await cache.capture(newer, msgs("after the clear"), META, None, T0, WriteFence(seq))
    cache.followed(seq)
    kept = await cache.get(newer, T0)  # the group is short of the clear: repaired, read again
    assert kept is not None and [m.content for m in kept.messages] == ["after the clear"]
    assert not cache.journal_due(seq)
    assert await cache.get(older, T0) is None


async def test_an_appended_record_keeps_the_oldest_write_a_replayed_forget_compares(
    open_cache: Opener,
) -> None:
    """Messages appended after a forget join messages written before it: the record is as
    old as its oldest write, so a replay of that forget still evicts it; a record appended
    to only by writes after the forget stays."""
    from shortterm.model.fence import WriteFence

    cache = await open_cache()
    store = ReferenceStore()
    assert isinstance(cache, RedisCache)
    await cache.repair(store, T0)
    seq = (await store.forget_channel("c1", now=T0)).seq  # never applied to this tier
    mixed, fresh = ScopeKey.server("g1", "c1", "p1"), ScopeKey.user("u1", "c1", "p1")
    await cache.capture(mixed, msgs("before the clear"), META, None, T0, WriteFence(seq - 1))
    await cache.capture(fresh, msgs("after, first"), META, None, T0, WriteFence(seq))
    for key in (mixed, fresh):
        added = msgs("after, appended")
        fence = WriteFence(seq)
        assert await cache.capture_scopes([(key, added, None)], META, T0, fence, append=10)
    cache.followed(seq)
    kept = await cache.get(fresh, T0)  # the group is short of the clear: repaired, read again
    assert await cache.get(mixed, T0) is None
    assert kept is not None
    assert [m.content for m in kept.messages] == ["after, first", "after, appended"]


async def test_a_capture_into_a_group_behind_a_known_forget_waits_for_the_repair(
    open_cache: Opener,
) -> None:
    """A group gone back before a forget still holds what the forget evicted (here: a record
    of a newer revision). A capture begun after the forget is refused there until the group
    is repaired, then written again: it neither loses to the old record nor goes with it."""
    from shortterm.model.fence import WriteFence

    cache = await open_cache()
    store = ReferenceStore()
    await cache.repair(store, T0)
    key = ScopeKey.server("g1", "c1", "p1")
    [old] = await store.touch([(key, META)], increment=key, now=T0)
    [old] = await store.touch([(key, META)], increment=key, now=T0)  # revision 2
    await cache.capture(key, msgs("before the clear"), META, old, T0, WriteFence(0))
    seq = (await store.forget_channel("c1", now=T0)).seq  # never applied to this tier
    cache.followed(seq)
    [new] = await store.touch([(key, META)], increment=key, now=T0 + 1)  # revision 1 again
    written = await cache.capture_scopes(
        [(key, msgs("after the clear", at=T0 + 1), new)], META, T0 + 1, WriteFence(seq)
    )
    assert written == 1
    entry = await cache.get(key, T0 + 1)
    assert entry is not None and [m.content for m in entry.messages] == ["after the clear"]


async def test_a_capture_refused_for_a_lost_mark_is_written_after_the_reset(
    open_cache: Opener,
) -> None:
    from shortterm.model.fence import WriteFence

    cache = await open_cache()
    store = ReferenceStore()
    await cache.repair(store, T0)
    await cache.clear_prefix()  # Redis lost everything, the marks with it
    key = ScopeKey.server("g1", "c1", "p1")
    fence = WriteFence(await store.journal_head())
    assert await cache.capture_scopes([(key, msgs("after"), None)], META, T0, fence) == 1
    entry = await cache.get(key, T0)
    assert entry is not None and [m.content for m in entry.messages] == ["after"]


async def test_a_capture_no_group_can_vouch_for_is_an_error_not_silence(
    open_cache: Opener,
) -> None:
    """A tier that could never be repaired (no journal to repair from) refuses a fenced
    capture; the caller is told its messages were not kept."""
    from shortterm.model.errors import CacheUnavailable
    from shortterm.model.fence import WriteFence

    cache = await open_cache()
    key = ScopeKey.server("g1", "c1", "p1")
    with pytest.raises(CacheUnavailable, match="messages were not kept"):
        await cache.capture_scopes([(key, msgs("lost?"), None)], META, T0, WriteFence(1))
