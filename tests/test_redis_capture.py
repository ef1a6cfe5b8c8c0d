"""The Redis capture of a turn: every scope in one script call (one round trip), landing
exactly as the one-scope script it replaced would have landed them one call at a time.

The oracle is that earlier script (``tests/redis_capture_one_scope.lua``) driven the way the
cache drove it: one call per scope, and a second call without the messages of authors it
answered as purged and the bot's answers to them (``model.dialogue``). Both run on their own
prefix of one Redis; after every step the two prefixes must hold the same keys, values and
(within a few seconds) TTLs.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
import redis.asyncio as aioredis
from benchmarks.bench_backends import Relay, _via

from shortterm.cache.redis import RedisCache
from shortterm.cache.redis.codec import durable_json
from shortterm.cache.redis.sources import lua_source
from shortterm.model import Message, Privacy, ScopeKey, ScopeMeta, ScopeRow
from shortterm.model.config import Config
from shortterm.model.dialogue import without_authors
from shortterm.model.fence import (
    WriteFence,
    author_targets,
    channel_target,
    private_target,
    scope_targets,
    server_channel_target,
    user_target,
)
from shortterm.store.reference import ReferenceStore
from tests.support import T0, clear_redis_prefix, with_query

CFG = Config()
GUILD = ScopeMeta(server_id="g1", server_name="Guild", channel_name="general")
ONE_SCOPE_LUA = (Path(__file__).parent / "redis_capture_one_scope.lua").read_text("utf-8")
PRELUDE_LUA = lua_source("prelude")


def msgs(*texts: str, author: str | None = "u1", at: float = T0) -> tuple[Message, ...]:
    return tuple(Message("user", t, author_id=author, at=at) for t in texts)


def turn(user: str, channel: str) -> tuple[ScopeKey, ScopeKey]:
    return ScopeKey.user(user, channel, "p1"), ScopeKey.server("g1", channel, "p1")


def row(key: ScopeKey, revision: int, meta: ScopeMeta = GUILD, counter: int = 0) -> ScopeRow:
    return ScopeRow(
        key=key,
        meta=meta,
        summary=f"summary {revision}",
        summary_at=T0,
        turns_since_refresh=counter,
        revision=revision,
    )


@pytest.fixture
async def prefixes(redis_url: str) -> AsyncIterator[list[str]]:
    """Two private prefixes: the cache under test writes one, the oracle the other."""
    names = [f"stm-test:{uuid.uuid4().hex[:16]}:" for _ in range(2)]
    yield names
    for name in names:
        await clear_redis_prefix(redis_url, name)


async def open_cache(redis_url: str, prefix: str) -> RedisCache:
    """A tier as a process opens it: its groups marked (an empty journal), so it takes
    fenced writes."""
    cache = RedisCache.from_url(with_query(redis_url, prefix=quote(prefix)), CFG)
    await cache.repair(ReferenceStore(), T0)
    return cache


@dataclass
class OneScopeOracle:
    """The cache's capture as it was: the one-scope script, one call per scope."""

    cache: RedisCache
    script: Any = None
    counts: dict[str, int] = field(default_factory=lambda: {"stores": 0, "fenced": 0})

    def __post_init__(self) -> None:
        self.script = self.cache.client.register_script(PRELUDE_LUA + ONE_SCOPE_LUA)

    async def capture_scopes(
        self,
        scopes: list[tuple[ScopeKey, tuple[Message, ...], ScopeRow | None]],
        meta: ScopeMeta,
        now: float,
        fence: WriteFence | None,
    ) -> int:
        applied = 0
        for key, messages, durable in scopes:
            applied += await self._capture(key, messages, meta, durable, now, fence)
        return applied

    async def _capture(
        self,
        key: ScopeKey,
        messages: tuple[Message, ...],
        meta: ScopeMeta,
        durable: ScopeRow | None,
        now: float,
        fence: WriteFence | None,
    ) -> bool:
        c = self.cache
        d, vexp = durable_json(durable, c.summary_ttl_s) if durable is not None else ("", "")
        group = c.layout.key_group(key)
        position, targets = "", "[]"
        if fence is not None:
            position = str(fence.position)
            targets = _dumps(
                scope_targets(key, meta.server_id, meta.parent_channel_id, fence.triggerer)
            )
        for _attempt in range(3):
            named = sorted({m.author_id for m in messages if m.author_id is not None})
            m_json = _dumps([now, [_message(m) for m in messages]])
            args = [
                c.layout.base(group),
                _dumps([key.kind, key.owner_id, key.channel_id, key.persona_id]),
                c.layout.owner_index(group, key.kind, key.owner_id),
                c.layout.channel_index(key.channel_id),
                str(durable.revision) if durable is not None else "",
                _meta(durable.meta if durable is not None else meta),
                d,
                vexp,
                m_json,
                repr(now + c.crude_ttl_s) if messages else "",
                _dumps([user_target(a) for a in named]),
                repr(now),
                repr(now + c.crude_ttl_s),
                c._margin_ms,
                position,
                targets,
                _dumps([[a, t] for a, t in author_targets(named).items()]),
            ]
            reply = await self.script(args=args)
            pipe = c.client.pipeline(transaction=False)  # listed as the tier lists it
            listed = c._directories.list_keys(pipe, [key], now)
            await pipe.execute()
            c._directories.noted(listed, now)
            outcome = int(reply[0])
            if outcome == -2:
                # capture.lua drops the bot's answers to a purged author too; so must this.
                messages = without_authors(messages, set(json.loads(reply[4])))
                continue
            if outcome == -1:
                self.counts["fenced"] += 1
                return False
            self.counts["stores"] += 1
            return outcome == 1
        raise AssertionError("purges cannot land during a test's capture")


def _dumps(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _message(m: Message) -> list[object]:
    return [m.role, m.content, m.author_id, m.speaker, m.at, m.message_id, m.privacy.value]


def _meta(m: ScopeMeta) -> str:
    fields = [m.server_id, m.server_name, m.channel_name, m.parent_channel_id, m.private]
    return _dumps([*fields, m.persona_lineage_id])


async def state(client: aioredis.Redis, prefix: str) -> dict[str, tuple[str, Any, int]]:
    """Every key under ``prefix`` (named without it): its type, value and TTL in ms."""
    out: dict[str, tuple[str, Any, int]] = {}
    async for found in client.scan_iter(match=prefix + "*", count=1000):
        name = str(found)
        kind = str(await client.type(name))
        value: Any
        if kind == "hash":
            raw = await client.hgetall(name)
            value = {k: str(v).replace(prefix, "<P>") for k, v in raw.items()}
        elif kind == "zset":
            value = await client.zrange(name, 0, -1, withscores=True)
        elif kind == "set":
            value = sorted(await client.smembers(name))
        else:
            value = await client.get(name)
        out[name[len(prefix) :]] = (kind, value, await client.pttl(name))
    return out


def assert_same_state(mine: dict[str, Any], oracle: dict[str, Any]) -> None:
    assert sorted(mine) == sorted(oracle)
    for name, (kind, value, ttl) in mine.items():
        o_kind, o_value, o_ttl = oracle[name]
        assert (name, kind, value) == (name, o_kind, o_value)
        # Both were computed from the same `now`; only the time between the writes differs.
        assert (ttl == -1) == (o_ttl == -1) and abs(ttl - o_ttl) < 5000, name


# -- the same state as one call per scope ---------------------------------------------------


async def test_both_scopes_in_one_call_land_as_two_single_captures(
    redis_url: str, prefixes: list[str], admin: aioredis.Redis
) -> None:
    mine = await open_cache(redis_url, prefixes[0])
    theirs = await open_cache(redis_url, prefixes[1])
    oracle = OneScopeOracle(theirs)
    user, server = turn("u1", "c1")
    private = ScopeMeta(server_id="g1", channel_name="general", private=True)
    steps: list[tuple[list[Any], ScopeMeta, float]] = [
        ([(user, msgs("hi", "there"), row(user, 1)), (server, msgs("hi"), row(server, 1))],
         GUILD, T0),
        ([(user, msgs("é ✓ \u2028 / \"q\""), None), (server, (), row(server, 2, private))],
         private, T0 + 1),
        ([(user, msgs("later", author=None), row(user, 3)), (server, msgs("x"), row(server, 3))],
         GUILD, T0 + 2),  # the server scope stays private: the flag is sticky
    ]  # fmt: skip
    try:
        for scopes, meta, now in steps:
            fence = WriteFence(0, "u1")
            assert await mine.capture_scopes(scopes, meta, now, fence) == len(scopes)
            assert await oracle.capture_scopes(scopes, meta, now, fence) == len(scopes)
            assert_same_state(await state(admin, prefixes[0]), await state(admin, prefixes[1]))
        entry = await mine.get(server, T0 + 2)
        assert entry is not None and entry.private
        assert mine.stats()["stores"] == oracle.counts["stores"] == 6
    finally:
        await mine.close()
        await theirs.close()


async def test_a_fenced_scope_among_two_is_refused_alone(
    redis_url: str, prefixes: list[str]
) -> None:
    cache = await open_cache(redis_url, prefixes[0])
    user, server = turn("u1", "c1")
    try:
        # Forget 1 cleared the server channel after the write began at position 0.
        await cache.record_forget(1, [server_channel_target("g1", "c1", "p1")], T0)
        scopes = [(user, msgs("mine"), row(user, 1)), (server, msgs("ours"), row(server, 1))]
        assert await cache.capture_scopes(scopes, GUILD, T0, WriteFence(0, "u1")) == 1
        assert await cache.get(server, T0) is None
        entry = await cache.get(user, T0)
        assert entry is not None and [m.content for m in entry.messages] == ["mine"]
        assert (cache.stats()["fenced"], cache.stats()["stores"]) == (1, 1)
        # A write that began after the forget is not covered by it.
        assert await cache.capture_scopes(scopes, GUILD, T0, WriteFence(1, "u1")) == 2
    finally:
        await cache.close()


async def test_purged_authors_are_dropped_from_each_scope_in_the_same_call(
    redis_url: str, prefixes: list[str], admin: aioredis.Redis
) -> None:
    cache = await open_cache(redis_url, prefixes[0])
    user, server = turn("u1", "c1")
    mixed = msgs("from u1") + msgs("from u2", author="u2") + msgs("system", author=None)
    scopes = [(user, mixed, row(user, 1)), (server, msgs("only u2", author="u2"), None)]
    try:
        await cache.record_forget(1, [user_target("u2")], T0)
        assert await cache.capture_scopes(scopes, GUILD, T0, WriteFence(0, "u1")) == 2
        user_entry = await cache.get(user, T0)
        assert user_entry is not None
        assert [m.content for m in user_entry.messages] == ["from u1", "system"]
        # The server scope lost its only message; its durable mirror was never cached.
        assert await cache.get(server, T0) is None
        layout = cache.layout
        u2_index = layout.author_index(layout.key_group(user), user_target("u2"))
        assert await admin.smembers(u2_index) == set()
        raw = await admin.hget(layout.record(user, _dumps(["user", "u1", "c1", "p1"])), "au")
        assert raw == _dumps([user_target("u1")])
    finally:
        await cache.close()


async def test_an_older_row_is_ignored_per_scope(redis_url: str, prefixes: list[str]) -> None:
    cache = await open_cache(redis_url, prefixes[0])
    user, server = turn("u1", "c1")
    try:
        await cache.capture_scopes(
            [(user, msgs("new"), row(user, 5)), (server, msgs("new"), row(server, 5))], GUILD, T0
        )
        # A slower writer finishes late: its user row is older, its server row newer.
        late = [(user, msgs("old"), row(user, 4)), (server, msgs("newer"), row(server, 6))]
        assert await cache.capture_scopes(late, GUILD, T0 + 1) == 1
        u, s = await cache.get(user, T0 + 1), await cache.get(server, T0 + 1)
        assert u is not None and s is not None
        assert (u.messages[0].content, u.summary) == ("new", "summary 5")
        assert (s.messages[0].content, s.summary) == ("newer", "summary 6")
        assert cache.stats()["stores"] == 4  # an ignored older row still counts as stored
        # Without a row (the durable tier was down) the messages always land.
        assert await cache.capture_scopes([(user, msgs("down"), None)], GUILD, T0 + 2) == 1
    finally:
        await cache.close()


async def test_a_step_is_refused_and_no_scopes_cost_nothing(
    redis_url: str, prefixes: list[str]
) -> None:
    cache = await open_cache(redis_url, prefixes[0])
    user, _server = turn("u1", "c1")
    try:
        with pytest.raises(ValueError, match="no deferred counter step"):
            await cache.capture_scopes([(user, msgs("x"), None)], GUILD, T0, step=user)
        assert await cache.capture_scopes([], GUILD, T0) == 0
        assert cache.stats()["stores"] == 0
    finally:
        await cache.close()


# -- one round trip -------------------------------------------------------------------------


async def test_a_capture_of_both_scopes_is_one_round_trip(
    redis_url: str, prefixes: list[str]
) -> None:
    """Counted by the relay bench_backends.py counts with (each change of direction)."""
    target = urlsplit(redis_url)
    relay = Relay(target.hostname or "127.0.0.1", target.port or 6379)
    cache = await open_cache(_via(redis_url, await relay.start()), prefixes[0])
    try:
        await cache.record_forget(1, [user_target("u9")], T0)  # a purge the checks must read
        for i in range(5):  # warm-up: the connection is open and the script loaded
            user, server = turn(f"u{i}", "c1")
            await cache.capture_scopes(
                [(user, msgs("a"), None), (server, msgs("b"), None)], GUILD, T0, WriteFence(0)
            )
        before = relay.round_trips
        for i in range(50):
            user, server = turn(f"u{i % 7}", f"c{i % 3}")
            scopes = [
                (user, msgs("mine"), row(user, i + 1)),
                (server, msgs("ours") + msgs("gone", author="u9"), row(server, i + 1)),
            ]
            await cache.capture_scopes(scopes, GUILD, T0, WriteFence(0, f"u{i % 7}"))
        assert relay.round_trips - before == 50
    finally:
        await cache.close()
        await relay.close()


# -- randomized: any mix of rows, fences, forgets, privacy and authors ----------------------

USERS = ("u1", "u2", "u3")
CHANNELS = ("c1", "c2")


def random_messages(rng: random.Random, now: float) -> tuple[Message, ...]:
    out = []
    for i in range(rng.randrange(0, 5)):
        author = rng.choice((*USERS, None))
        text = rng.choice(("hi", "é ✓", '"quoted" \\ /', "\u2028", "x" * 40)) + f" {i}"
        privacy = rng.choice(list(Privacy))
        at = now - rng.random() * 100
        out.append(
            Message(rng.choice(("user", "assistant")), text, author_id=author, at=at,
                    message_id=rng.choice((None, f"m{i}")), privacy=privacy)
        )  # fmt: skip
    return tuple(out)


def random_targets(rng: random.Random) -> list[str]:
    pool = [user_target(u) for u in USERS]
    pool += [channel_target(c) for c in CHANNELS]
    pool += [server_channel_target("g1", c, "p1") for c in CHANNELS]
    pool += [private_target("g1", c) for c in CHANNELS]
    return rng.sample(pool, rng.randrange(1, 3))


@pytest.mark.parametrize("seed", range(4))
async def test_random_turns_land_as_one_call_per_scope_would(
    redis_url: str, prefixes: list[str], admin: aioredis.Redis, seed: int
) -> None:
    rng = random.Random(seed)
    mine = await open_cache(redis_url, prefixes[0])
    theirs = await open_cache(redis_url, prefixes[1])
    oracle = OneScopeOracle(theirs)
    revisions: dict[ScopeKey, int] = {}
    seq = 0
    try:
        for step in range(60):
            now = T0 + step
            if rng.random() < 0.2:
                seq += 1
                targets = random_targets(rng)
                await mine.record_forget(seq, targets, now)
                await theirs.record_forget(seq, targets, now)
                continue
            user, server = turn(rng.choice(USERS), rng.choice(CHANNELS))
            meta = ScopeMeta(
                server_id="g1",
                channel_name=rng.choice(("general", None)),
                parent_channel_id=rng.choice((None, "c1")),
                private=rng.random() < 0.2,
            )
            scopes: list[tuple[ScopeKey, tuple[Message, ...], ScopeRow | None]] = []
            for key in rng.sample([user, server], rng.choice((1, 2, 2))):
                durable = None
                if rng.random() < 0.8:
                    revisions[key] = revisions.get(key, 0) + 1
                    rev = max(1, revisions[key] - rng.choice((0, 0, 0, 2)))  # some arrive late
                    durable = row(key, rev, meta, counter=rng.randrange(5))
                scopes.append((key, random_messages(rng, now), durable))
            fence = None
            if rng.random() < 0.9:
                fence = WriteFence(rng.randrange(0, seq + 1), rng.choice((*USERS, None)))
            got = await mine.capture_scopes(scopes, meta, now, fence)
            assert got == await oracle.capture_scopes(scopes, meta, now, fence), step
            assert_same_state(await state(admin, prefixes[0]), await state(admin, prefixes[1]))
        stats = mine.stats()
        assert (stats["stores"], stats["fenced"]) == (
            oracle.counts["stores"],
            oracle.counts["fenced"],
        )
        assert stats["fenced"] > 0 and stats["stores"] > 0  # both outcomes were exercised
    finally:
        await mine.close()
        await theirs.close()
