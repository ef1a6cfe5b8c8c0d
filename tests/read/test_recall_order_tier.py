"""The in-process tier's recall order against its owner index, whatever happens to the tier:
an owner's entries read newest first (``recent``) are its live entries (``owner_entries``),
sorted by time, entries of the same time in the owner index's order. Captures, mirrored
rows, bulk loads (which add records behind the order's back), evictions, scrubs, deletes,
expiry and sweeps all move records in or out of it."""

from __future__ import annotations

import asyncio
from operator import attrgetter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from shortterm import Message, ScopeKey
from shortterm.cache.inprocess import InProcessCache
from shortterm.model import Entry
from shortterm.store.base import DistilledWrite, ScopeMeta
from shortterm.store.reference import ReferenceStore
from tests.support import T0

OWNERS = [("server", "g1"), ("server", "g2"), ("user", "u1")]
channels = st.sampled_from(["a", "b", "c", "d", "e", "f"])
owners = st.sampled_from(OWNERS)
personas = st.sampled_from([None, "p"])
_newest = attrgetter("_newest")


class RecallOrderAgreesWithTheOwnerIndex(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.now = T0
        self.cache = InProcessCache(
            crude_ttl_s=100, summary_ttl_s=300, max_entries=10, max_bytes=1 << 20
        )
        self.store = ReferenceStore()

    def run(self, coro):  # type: ignore[no-untyped-def]
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.loop.close()

    @rule(owner=owners, channel=channels, persona=personas, author=st.sampled_from(["x", "y"]))
    def capture(
        self, owner: tuple[str, str], channel: str, persona: str | None, author: str
    ) -> None:
        key = ScopeKey(owner[0], owner[1], channel, persona)  # type: ignore[arg-type]
        said = (Message("user", f"hi {channel}", author_id=author),)
        self.run(self.cache.capture(key, said, ScopeMeta(server_id="g1"), None, self.now))

    @rule(owner=owners, channel=channels, persona=personas, text=st.sampled_from(["s", "t", ""]))
    def summary(self, owner: tuple[str, str], channel: str, persona: str | None, text: str) -> None:
        key = ScopeKey(owner[0], owner[1], channel, persona)  # type: ignore[arg-type]
        change = DistilledWrite(summary=text or None, set_summary=True)
        rows = self.run(
            self.store.write_distilled([(key, None)], change, reset_counter=None, now=self.now)
        )
        self.run(self.cache.apply_rows(rows, self.now))

    @rule(owner=owners, first=st.integers(0, 5), count=st.integers(1, 4), age=st.floats(0, 250))
    def bulk_load(self, owner: tuple[str, str], first: int, count: int, age: float) -> None:
        """Rows loaded in bulk (a hydration): records added without the recall order."""
        rows = [
            (
                owner[0], owner[1], f"h{first + i}", None, "g1", None, None, None, 0, None,
                f"loaded {i}", self.now - age, None, None, 0, 1,
            )
            for i in range(count)
        ]  # fmt: skip
        self.run(self.cache.apply_hydration(rows, self.now))

    @rule(seconds=st.sampled_from([0.0, 0.0, 1.0, 30.0, 120.0, 400.0]))
    def advance(self, seconds: float) -> None:
        self.now += seconds

    @rule(channel=channels)
    def delete_channel(self, channel: str) -> None:
        self.run(self.cache.delete_channel(channel))

    @rule(owner=owners)
    def delete_owner(self, owner: tuple[str, str]) -> None:
        self.run(self.cache.delete_owner(owner[0], owner[1]))  # type: ignore[arg-type]

    @rule(author=st.sampled_from(["x", "y"]))
    def scrub(self, author: str) -> None:
        self.run(self.cache.scrub_author(author, self.now))

    @rule()
    def sweep(self) -> None:
        self.run(self.cache.sweep(self.now))

    @rule(owners=st.lists(owners, min_size=1, max_size=3, unique=True))
    def read_partly(self, owners: list[tuple[str, str]]) -> None:
        """A read that stops after the first entry (the rest left unread)."""
        recent = self.run(self.cache.recent(owners, self.now, page=1))  # type: ignore[arg-type]
        self.run(_first(recent))

    @invariant()
    def newest_first(self) -> None:
        for owner in OWNERS:
            held, _ = self.run(self.cache.owner_entries(owner[0], owner[1], self.now))  # type: ignore[arg-type]
            expected = sorted(held, key=_newest, reverse=True)  # stable: the index's order
            recent = self.run(self.cache.recent([owner], self.now, page=3))  # type: ignore[list-item]
            assert self.run(_all(recent)) == expected
        both: list[Entry] = []
        for owner in OWNERS[:1] + OWNERS[2:]:
            both += self.run(self.cache.owner_entries(owner[0], owner[1], self.now))[0]  # type: ignore[arg-type]
        merged = self.run(self.cache.recent([OWNERS[0], OWNERS[2]], self.now, page=3))  # type: ignore[list-item]
        assert self.run(_all(merged)) == sorted(both, key=_newest, reverse=True)


async def _all(recent) -> list[Entry]:  # type: ignore[no-untyped-def]
    return [entry async for entry in recent]


async def _first(recent) -> None:  # type: ignore[no-untyped-def]
    async for _ in recent:
        break


TestRecallOrder = RecallOrderAgreesWithTheOwnerIndex.TestCase
TestRecallOrder.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
