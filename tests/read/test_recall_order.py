"""Other-channel recall read from the hot tier's recall order gives what reading every entry of
the server and the user, then sorting them, gave: the same context, on both tiers and on a
Redis Cluster, whatever was said, summarised, evicted, expired, made private or forgotten.

The full read is the hot tier with its order hidden (``FullScan``): the read path then gathers
every entry of the owners and sorts them, as it did before the order existed. Hypothesis plays
random sequences of turns and settings, and every context is read both ways.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shortterm
from shortterm import Config, Message, Privacy, Reply, ScopeKey, ServerSettings, UserSettings
from shortterm.cache.base import RecentOrder
from tests.cluster_support import Cluster
from tests.support import FakeClock, clear_redis_prefix, service_url, with_query


class FullScan:
    """A hot tier with its recall order hidden: a context reads every entry and sorts."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "recent":
            raise AttributeError(name)
        return getattr(self._inner, name)


SERVER_CHANNELS = ["c0", "c1", "c2", "c3", "c4"]
DM_CHANNELS = ["d0", "d1"]
USERS = ["u1", "u2", "u3"]
PERSONAS = [None, "p1", "p2"]
LINEAGES = [None, "L1"]
WAITS = [0.0, 0.5, 40.0, 3600.0]
LONG_WAITS = [13 * 3600.0, 25 * 3600.0]  # past the messages' life, past the summaries' too

where = st.one_of(
    st.tuples(st.sampled_from(["g1", "g2"]), st.sampled_from(SERVER_CHANNELS)),
    st.tuples(st.none(), st.sampled_from(DM_CHANNELS)),
)
say = st.tuples(
    st.just("say"),
    where,
    st.sampled_from(USERS),
    st.sampled_from(PERSONAS),
    st.sampled_from(LINEAGES),
    st.sampled_from([None, *USERS]),  # someone who spoke before the user
)
summary = st.tuples(st.just("summary"), where, st.sampled_from(USERS), st.sampled_from(PERSONAS))
context = st.tuples(
    st.just("context"),
    where,
    st.sampled_from(USERS),
    st.sampled_from(PERSONAS),
    st.sampled_from(LINEAGES),
)
rare = st.one_of(
    st.tuples(st.just("wait"), st.sampled_from(LONG_WAITS)),
    st.tuples(st.just("private"), st.sampled_from(SERVER_CHANNELS)),
    st.tuples(st.just("opt_in"), st.sampled_from(USERS), st.booleans()),
    st.tuples(st.just("privacy"), st.sampled_from(USERS), st.sampled_from(list(Privacy))),
    st.tuples(st.just("clear"), st.sampled_from(SERVER_CHANNELS + DM_CHANNELS)),
    st.tuples(st.just("clear_user"), st.sampled_from(USERS)),
    st.tuples(st.just("reopen")),
)
# Several turns in a row (many channels, users, personas), so that contexts have plenty to
# choose from: (count, seed of the choices).
burst = st.tuples(st.just("burst"), st.integers(3, 15), st.integers(0, 2**16))
OPS = st.lists(
    st.one_of(
        burst,
        say,
        say,
        say,
        say,
        summary,
        context,
        context,
        st.tuples(st.just("wait"), st.sampled_from(WAITS)),
        rare,
    ),
    min_size=10,
    max_size=60,
)
CONFIG = Config(sweep_interval_s=0)
HYPOTHESIS = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _turn(memory: shortterm.Memory, op: tuple[Any, ...]) -> shortterm.Turn:
    (server, channel), user, persona, lineage = op[1], op[2], op[3], op[4]
    return memory.turn(
        user_id=user,
        channel_id=channel,
        server_id=server,
        persona_id=persona,
        persona_lineage_id=lineage,
        user_name=f"name-{user}",
        bot_name="Tomo",
        channel_name=f"#{channel}",
    )


async def _both(memory: shortterm.Memory, op: tuple[Any, ...]) -> None:
    """One context read from the recall order, then by the full read: the same."""
    assert isinstance(memory.cache, RecentOrder)
    paged = await _turn(memory, op).context()
    inner = memory.cache
    memory.cache = FullScan(inner)  # type: ignore[assignment]
    try:
        full = await _turn(memory, op).context()
    finally:
        memory.cache = inner
    assert paged == full, op


async def _say(memory: shortterm.Memory, clock: FakeClock, op: tuple[Any, ...]) -> None:
    """A captured turn; with someone who spoke just before the user."""
    channel, user, other = op[1][1], op[2], op[5]
    history = []
    if other is not None and other != user:
        history.append(Message("user", f"{other} here", author_id=other, at=clock.now - 0.0005))
    history.append(Message("user", f"{user} in {channel}", author_id=user))
    await _turn(memory, op).capture(history, [Reply(f"to {user}")])


async def play(tiers: tuple[str, str], ops: list[tuple[Any, ...]], limit: int, ties: bool) -> None:
    """Run ``ops``; ``ties``: writes may share a time (else each write is 1 ms after the
    last: Redis breaks ties by key where the full read broke them by listing time)."""
    clock = FakeClock()
    config = Config(sweep_interval_s=0, max_other_channels=limit)
    private: set[str] = set()
    memory = await shortterm.open(*tiers, config=config, clock=clock).__aenter__()
    try:
        for op in ops:
            kind = op[0]
            if kind in ("say", "summary") and not ties:
                clock.advance(0.001)
            if kind == "burst":
                rng = random.Random(op[2])
                for _ in range(op[1]):
                    if not ties:
                        clock.advance(0.001)
                    server = rng.choice(["g1", "g1", "g2", None])
                    channel = rng.choice(DM_CHANNELS if server is None else SERVER_CHANNELS)
                    said = (
                        "say",
                        (server, channel),
                        rng.choice(USERS),
                        rng.choice(PERSONAS),
                        rng.choice(LINEAGES),
                        rng.choice([None, *USERS]),
                    )
                    await _say(memory, clock, said)
                    clock.advance(rng.choice(WAITS))
            elif kind == "say":
                await _say(memory, clock, op)
            elif kind == "summary":
                (server, channel), user, persona = op[1], op[2], op[3]
                key = (
                    ScopeKey.server(server, channel, persona)
                    if server is not None
                    else ScopeKey.user(user, channel, persona)
                )
                await memory.set_summary(key, f"summary of {channel} at {clock.now:.3f}")
            elif kind == "context":
                await _both(memory, op)
            elif kind == "wait":
                clock.advance(op[1])
            elif kind == "private":
                private ^= {op[1]}
                await memory.configure_server(
                    "g1", ServerSettings(private_channel_ids=frozenset(private))
                )
            elif kind == "opt_in":
                await memory.configure_user(op[1], UserSettings(cross_server_opt_in=op[2]))
            elif kind == "privacy":
                await memory.configure_user(op[1], UserSettings(op[2], cross_server_opt_in=True))
            elif kind == "clear":
                await memory.clear_channel(op[1])
            elif kind == "clear_user":
                await memory.clear_user(op[1])
            elif kind == "reopen":
                await memory.__aexit__(None, None, None)
                memory = await shortterm.open(*tiers, config=config, clock=clock).__aenter__()
        # Every turn there could be, once more at the end.
        for server, channels in (("g1", SERVER_CHANNELS), ("g2", SERVER_CHANNELS[:2])):
            for channel in channels:
                for user in USERS:
                    await _both(memory, ("context", (server, channel), user, "p1", None))
        for user in USERS:
            await _both(memory, ("context", (None, "d0"), user, None, None))
    finally:
        await memory.__aexit__(None, None, None)


def _run(store_dir: Path, cache: str, ops: list[tuple[Any, ...]], limit: int, ties: bool) -> None:
    store = f"sqlite:///{store_dir / f'{uuid.uuid4().hex[:8]}.db'}"
    asyncio.run(play((store, cache), ops, limit, ties))


@HYPOTHESIS
@given(ops=OPS, limit=st.integers(1, 4))
def test_in_process_recall_order_gives_the_full_read(ops: list[Any], limit: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _run(Path(tmp), "memory://", ops, limit, ties=True)


@settings(HYPOTHESIS, max_examples=25)
@given(ops=OPS, limit=st.integers(1, 4))
def test_redis_recall_order_gives_the_full_read(ops: list[Any], limit: int) -> None:
    url = service_url("SHORTTERM_TEST_REDIS_URL", "Redis")
    prefix = f"stm-test:{uuid.uuid4().hex[:16]}:"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            _run(Path(tmp), with_query(url, prefix=quote(prefix), groups=4), ops, limit, False)
    finally:
        asyncio.run(clear_redis_prefix(url, prefix))


@settings(HYPOTHESIS, max_examples=10)
@given(ops=OPS, limit=st.integers(1, 4))
def test_cluster_recall_order_gives_the_full_read(
    redis_cluster: Cluster, ops: list[Any], limit: int
) -> None:
    prefix = f"stm-test:{uuid.uuid4().hex[:16]}:"
    cache = with_query(redis_cluster.url, prefix=quote(prefix))
    with tempfile.TemporaryDirectory() as tmp:
        _run(Path(tmp), cache, ops, limit, ties=False)


async def test_hidden_channels_are_read_past(tiers: tuple[str, str], clock: FakeClock) -> None:
    """The 150 newest channels are private: the read goes on past them, page after page,
    to the three newest the turn may see."""
    private = frozenset(f"v{i}" for i in range(150))
    async with shortterm.open(*tiers, config=Config(sweep_interval_s=0), clock=clock) as memory:
        await memory.configure_server("g1", ServerSettings(private_channel_ids=private))
        channels = [f"o{i}" for i in range(6)] + sorted(private)
        for channel in channels:  # the private ones last: the newest
            clock.advance(1)
            await _say(memory, clock, ("say", ("g1", channel), "u1", None, None, "u2"))
        op = ("context", ("g1", "here"), "u1", None, None)
        await _both(memory, op)
        await _both(memory, op)  # again: what the first read needed comes with the first trip
        text = (await _turn(memory, op).context()).items[0].text
        assert [c for c in channels if f"#{c} " in text] == ["o3", "o4", "o5"]


async def test_an_owner_the_tier_dropped_is_read_from_the_durable_tier(
    db_url: str, clock: FakeClock
) -> None:
    """Entries evicted from a bounded in-process tier come back from the durable tier (their
    summaries: messages live in the hot tier only) before the recall order is read."""
    config = Config(sweep_interval_s=0, max_entries=8)
    async with shortterm.open(db_url, config=config, clock=clock) as memory:
        for i in range(4):
            clock.advance(1)
            await memory.set_summary(ScopeKey.server("g1", f"c{i}"), f"plans of c{i}")
        for i in range(8):  # another server's turns push g1's records out
            clock.advance(1)
            await _say(memory, clock, ("say", ("g2", f"c{i}"), "u1", None, None, None))
        op = ("context", ("g1", "c0"), "u1", None, None)
        text = (await _turn(memory, op).context()).items[0].text
        assert all(f"plans of c{i}" in text for i in (1, 2, 3)), text
        await _both(memory, op)


async def test_redis_scores_each_key_by_the_newest_time_it_holds(
    scale_urls: tuple[str, str], clock: FakeClock
) -> None:
    """Every write scores its key, in its group's index of its owner, by exactly the entry's
    ``updated_at`` (the double Python has: a recall order a rounding off would break), and a
    value that expires leaves the score where it was (the most the entry can be worth)."""
    from shortterm.cache.redis.codec import member

    async def scores(cache: Any, keys: list[ScopeKey]) -> list[tuple[float | None, float]]:
        out = []
        for key in keys:
            entry = await cache.get(key, clock.now)
            index = cache.layout.owner_index(cache.layout.key_group(key), key.kind, key.owner_id)
            score = await cache.client.zscore(index, member(key))
            out.append((entry.updated_at if entry is not None else None, score))
        return out

    async with shortterm.open(*scale_urls, config=CONFIG, clock=clock) as m:
        keys = [ScopeKey.server("g1", channel) for channel in "abcd"]
        for i, key in enumerate(keys):
            clock.advance(0.1234567891 * (i + 1))
            await _say(m, clock, ("say", ("g1", key.channel_id), "u1", None, None, None))
        clock.advance(1 / 3)
        await m.set_summary(keys[1], "newer than its messages")
        clock.advance(1 / 7)
        await m.set_categories(keys[2], {"plans": "a trip"})
        assert all(at is not None and at == score for at, score in await scores(m.cache, keys))
        clock.advance(13 * 3600)  # the messages expire
        await m.set_summary(keys[3], "written after the messages expired")
        (gone, gone_score), *live = await scores(m.cache, keys)
        assert gone is None and gone_score > 0  # nothing live: its place stays until swept
        assert all(at is not None and at == score for at, score in live)
    # Another Redis loads the durable rows later (a hydration): each by the time it holds.
    store, cache = scale_urls
    again = cache.replace("prefix=", "prefix=again")
    clock.advance(60)
    try:
        async with shortterm.open(store, again, config=CONFIG, clock=clock) as m:
            loaded = await scores(m.cache, keys[1:])
            assert all(at is not None and at == score for at, score in loaded), loaded
    finally:
        await clear_redis_prefix(again.split("?")[0], unquote(again.split("prefix=")[1]))
