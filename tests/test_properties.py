"""Hypothesis properties of the hot tier, capture and the stores."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import shortterm
from shortterm import Message, Reply, ScopeKey
from shortterm.cache.inprocess import InProcessCache, _channel_keys
from shortterm.model import Entry
from shortterm.model.text import clean_text, truncate
from shortterm.store.base import DistilledWrite, ScopeMeta
from shortterm.store.reference import ReferenceStore
from shortterm.store.sqlite import SQLiteStore
from tests.support import T0, FakeClock

ids = st.sampled_from(["a", "b", "c", "0", "x:y"])
texts = st.text(max_size=300)
META = ScopeMeta(server_id="g")


class HotTierBounds(RuleBasedStateMachine):
    """Whatever happens, the tier stays inside its bounds and its indexes agree with it."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.now = T0
        self.cache = InProcessCache(
            crude_ttl_s=100, summary_ttl_s=300, max_entries=8, max_bytes=1 << 16
        )

    def run(self, coro):  # type: ignore[no-untyped-def]
        return self.loop.run_until_complete(coro)

    @rule(
        kind=st.sampled_from(["user", "server"]),
        owner=ids,
        channel=ids,
        persona=st.none() | ids,
        body=st.lists(texts, max_size=12),
        author=ids,
    )
    def capture(
        self, kind: str, owner: str, channel: str, persona: str | None, body: list[str], author: str
    ) -> None:
        key = ScopeKey(kind, owner, channel, persona)  # type: ignore[arg-type]
        msgs = tuple(Message("user", t, author_id=author) for t in body[-10:])
        self.run(self.cache.capture(key, msgs, META, None, self.now))

    @rule(owner=ids, channel=ids, text=texts)
    def summary(self, owner: str, channel: str, text: str) -> None:
        key = ScopeKey.server(owner, channel)
        rows = self.run(
            ReferenceStore().write_distilled(
                [(key, META)],
                DistilledWrite(summary=text, set_summary=True),
                reset_counter=None,
                now=self.now,
            )
        )
        self.run(self.cache.apply_rows(rows, self.now))

    @rule(seconds=st.floats(0, 400))
    def advance(self, seconds: float) -> None:
        self.now += seconds

    @rule(channel=ids)
    def clear_channel(self, channel: str) -> None:
        self.run(self.cache.delete_channel(channel))

    @rule(author=ids)
    def scrub(self, author: str) -> None:
        self.run(self.cache.scrub_author(author, self.now))
        for kt in self.cache._entries:
            assert all(m.author_id != author for m in self.cache._entries[kt].messages)

    @rule()
    def sweep(self) -> None:
        self.run(self.cache.sweep(self.now))
        assert all(r.expires_at > self.now for r in self.cache._entries.values())

    @invariant()
    def bounded_and_consistent(self) -> None:
        c = self.cache
        assert len(c._entries) <= c.max_entries
        assert c._bytes <= c.max_bytes
        assert c._bytes == sum(r.size for r in c._entries.values())
        indexed = set().union(*c._by_owner.values()) if c._by_owner else set()
        assert indexed == set(c._entries)
        by_channel = [kt for ch in c._by_channel for kt in _channel_keys(c._by_channel, ch)]
        assert sorted(by_channel, key=repr) == sorted(c._entries, key=repr)  # each key once
        assert all(kt[2] == ch for ch in c._by_channel for kt in _channel_keys(c._by_channel, ch))
        # The author index may keep stale keys, but never misses one and stays bounded.
        holders: dict[str, int] = {}
        for kt, rec in c._entries.items():
            for author in {m.author_id for m in rec.messages} - {None}:
                assert kt in c._by_author[author]  # type: ignore[index]
                holders[author] = holders.get(author, 0) + 1  # type: ignore[index]
        assert c._author_live == holders
        assert set(c._by_author) == set(holders)
        for author, kts in c._by_author.items():
            if isinstance(kts, set):  # an author of many records: exact
                assert len(kts) == holders[author]
            else:
                assert len(kts) <= 2 * holders[author] + 8

    def teardown(self) -> None:
        self.loop.close()


TestHotTierBounds = HotTierBounds.TestCase
TestHotTierBounds.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=st.lists(texts, max_size=30),
    replies=st.lists(texts.filter(str.strip), min_size=1, max_size=3),
)
def test_capture_keeps_the_newest_messages_in_order(history: list[str], replies: list[str]) -> None:
    async def scenario() -> Entry | None:
        async with shortterm.open(
            store="memory://", clock=FakeClock(), config=shortterm.Config(sweep_interval_s=0)
        ) as memory:
            turn = memory.turn(user_id="u", channel_id="c", server_id="g")
            await turn.capture(
                history=[Message("user", t, author_id="u") for t in history],
                replies=[Reply(r) for r in replies],
            )
            return await memory.get(ScopeKey.server("g", "c"))

    entry = asyncio.run(scenario())
    expected = [clean_text(t) for t in history if t.strip()] + [clean_text(r) for r in replies]
    assert entry is not None
    assert [m.content for m in entry.messages] == expected[-10:]


@settings(max_examples=40, deadline=None)
@given(
    summary=st.text(max_size=2000),
    cats=st.dictionaries(st.text("abcdef_", min_size=1, max_size=8), texts, max_size=5),
    owner=st.text(min_size=1, max_size=20).filter(lambda s: "\x00" not in s and s == clean_text(s)),
)
def test_sqlite_round_trips_what_memory_store_holds(
    summary: str, cats: dict[str, str], owner: str
) -> None:
    async def scenario() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            sqlite = SQLiteStore(Path(tmp) / "p.db")
            await sqlite.migrate()
            ref = ReferenceStore()
            key = ScopeKey.user(owner, "c")
            change = DistilledWrite(
                summary=clean_text(summary),
                set_summary=True,
                categories={k: clean_text(v) for k, v in cats.items()},
            )
            for store in (sqlite, ref):
                await store.write_distilled([(key, META)], change, reset_counter=key, now=T0)
            a, b = await sqlite.load(key), await ref.load(key)
            assert a is not None and b is not None
            assert (
                a.key,
                a.summary,
                dict(a.categories),
                a.turns_since_refresh,
                a.refresh_epoch,
            ) == (b.key, b.summary, dict(b.categories), b.turns_since_refresh, b.refresh_epoch)
            await sqlite.close()

    asyncio.run(scenario())


@given(text=st.text(max_size=200), limit=st.integers(0, 200))
def test_truncate_never_exceeds_and_is_a_prefix(text: str, limit: int) -> None:
    out = truncate(text, limit)
    assert len(out) <= limit
    assert text.startswith(out)
    if len(text) <= limit:
        assert out == text


def test_truncate_keeps_clusters_whole() -> None:
    family = "👩\u200d👩\u200d👧"
    assert truncate("ab" + family, 4) == "ab"
    assert truncate("e\u0301e\u0301", 3) == "e\u0301"
    assert truncate("🇯🇵🇫🇷", 3) == "🇯🇵"
    assert truncate("👍🏽ok", 1) == ""
    assert truncate("plain text", 5) == "plain"
