"""Hydration from plain tuples: the same entries as the ScopeRow path, and fenced the same."""

from __future__ import annotations

import itertools
import random
import shutil
import uuid
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import shortterm
from shortterm import Config, Message, ScopeKey
from shortterm.cache.inprocess import InProcessCache, _channel_keys
from shortterm.cache.inprocess_records import Record
from shortterm.memory.facade import Memory
from shortterm.model.fence import WriteFence, channel_target, user_target
from shortterm.model.rows import DistilledWrite, HydrationRow, ScopeMeta
from shortterm.store.postgres import PostgresStore
from shortterm.store.sqlite import SQLiteStore
from tests.support import T0, drop_postgres_schema, service_url

G = "g1"
NOW = T0 + 600
ROUNDS = 200


def new_cache(max_entries: int = 10_000) -> InProcessCache:
    return InProcessCache(
        crude_ttl_s=3600, summary_ttl_s=86400, max_entries=max_entries, max_bytes=1 << 40
    )


TupleStore = SQLiteStore | PostgresStore


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TupleStore]:
    """A migrated store of a backend that hydrates as tuples, holding :func:`varied_rows`."""
    opened: TupleStore
    if request.param == "sqlite":
        opened = SQLiteStore(tmp_path / "h.db")
    else:
        url = service_url("SHORTTERM_TEST_POSTGRES_URL", "PostgreSQL")
        schema = f"t_{uuid.uuid4().hex[:16]}"
        opened = PostgresStore.from_url(url, schema=schema)
    await opened.migrate()
    await varied_rows(opened)
    yield opened
    await opened.close()
    if request.param == "postgres":
        await drop_postgres_schema(url, schema)


async def write(store: TupleStore, key: ScopeKey, meta: ScopeMeta | None, **kw: Any) -> None:
    await store.write_distilled([(key, meta)], DistilledWrite(**kw), reset_counter=None, now=T0)


async def varied_rows(store: TupleStore) -> list[ScopeKey]:
    """Rows with every shape hydration meets: summary only, categories only, both, none live,
    user and server kinds, no persona, private, thread parents, lineage, later revisions."""
    keys = []
    for i in range(23):
        key = varied_key(i)
        meta = ScopeMeta(
            server_id=G if i % 6 else None,
            server_name="Guild" if i % 3 else None,
            channel_name=f"#c{i % 5}",
            parent_channel_id="thread-parent" if i % 5 == 1 else None,
            private=i % 7 == 0,
            persona_lineage_id="line" if i % 4 == 1 else None,
        )
        if i % 3 != 1:
            await write(store, key, meta, summary=f"summary {i} " * i, set_summary=True)
        if i % 3 != 0:
            await write(store, key, None, categories={"plan": f"p{i}", "mood": "ok" * i})
        if i % 5 == 0:
            await write(store, key, meta, summary=f"rewritten {i}", set_summary=True)
        keys.append(key)
    stale = ScopeKey.server(G, "stale")  # written two days ago: nothing live, not loaded
    change = DistilledWrite(summary="old", set_summary=True)
    await store.write_distilled([(stale, None)], change, reset_counter=None, now=T0 - 172800)
    await step_counters(store)
    return keys


def varied_key(i: int) -> ScopeKey:
    channel, persona = f"c{i % 5}", (None if i % 4 == 0 else f"p{i % 3}")
    if i % 2:
        return ScopeKey.user(f"u{i % 3}", channel, persona)
    return ScopeKey.server(G, channel, persona)


async def step_counters(store: TupleStore) -> None:
    """Counters as turns would have stepped them."""
    if isinstance(store, SQLiteStore):
        store._db.execute("UPDATE scopes SET turns_since_refresh = rowid % 7")
        store._db.commit()
        return
    async with store._conn("test update") as conn:
        await conn.execute(f"UPDATE {store._t}scopes SET turns_since_refresh = id % 7")


def all_keys() -> list[ScopeKey]:
    return [varied_key(i) for i in range(23)]


def snapshot(cache: InProcessCache) -> dict[str, Any]:
    """Everything the tier keeps about its records, seq numbers of the heap aside."""
    records = {
        kt: (
            r.key,
            r.meta,
            r.messages,
            r.messages_at,
            r.summary,
            r.summary_at,
            dict(r.categories),
            r.categories_at,
            r.turns,
            r.revision,
            r.touched_at,
            r.expires_at,
            r.size,
        )
        for kt, r in cache._entries.items()
    }
    channels = {
        ch: sorted(_channel_keys(cache._by_channel, ch), key=repr) for ch in cache._by_channel
    }
    live_heap = sorted(
        ((e, kt) for e, _s, kt in cache._heap if cache._entries[kt].expires_at == e), key=repr
    )
    return {
        "records": records,
        "order": list(cache._entries),
        "owners": {o: set(k) for o, k in cache._by_owner.items()},
        "channels": channels,
        "authors": dict(cache._author_live),
        "heap": live_heap,
        "stats": cache.stats(),
        "everything": {
            name: plain(value)
            for name, value in vars(cache).items()
            if name not in UNCOMPARED and not isinstance(value, itertools.count)
        },
    }


# Sequence numbers (heap ties, orders) and the hydration's shared metas differ by path.
UNCOMPARED = {"_heap", "_metas"}


def plain(value: Any) -> Any:
    """Any index of the tier as plain values, records by their key: a new index the bulk
    load forgets to fill shows up here."""
    if isinstance(value, Record):
        return ("record", value.key.astuple)
    if isinstance(value, OrderedDict):
        return [(plain(k), plain(v)) for k, v in value.items()]
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return frozenset(plain(v) for v in value)
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    if isinstance(value, (list, deque)):
        return [plain(v) for v in value]
    return value


async def hydrate_rows(cache: InProcessCache, store: TupleStore, fence: WriteFence | None) -> None:
    async for batch in store.iter_distilled(since=NOW - 86400, batch_rows=4):
        await cache.apply_rows(batch, NOW, fence)


async def hydrate_tuples(
    cache: InProcessCache, store: TupleStore, fence: WriteFence | None
) -> None:
    async for plain in store.iter_hydration(since=NOW - 86400, batch_rows=4):
        await cache.apply_hydration(plain, NOW, fence)


async def test_tuples_build_exactly_the_entries_rows_build(store: TupleStore) -> None:
    keys = all_keys()
    by_rows, by_tuples = new_cache(), new_cache()
    await hydrate_rows(by_rows, store, None)
    await hydrate_tuples(by_tuples, store, None)
    assert snapshot(by_tuples) == snapshot(by_rows)
    assert len(by_tuples._entries) == len({k.astuple for k in keys})
    for key in keys:
        assert await by_tuples.get(key, NOW) == await by_rows.get(key, NOW)
    # And the views stay equal once values expire.
    for key in keys:
        assert await by_tuples.get(key, NOW + 86400) == await by_rows.get(key, NOW + 86400)


async def test_tuples_meet_existing_records_as_rows_do(store: TupleStore) -> None:
    """A scope already cached (messages captured, an older or a newer revision mirrored) gets
    the same treatment from both paths: newer rows win, messages stay, older rows lose."""
    keys = all_keys()
    caches = new_cache(), new_cache()
    for cache in caches:
        for i, key in enumerate(keys[::3]):
            message = Message("user", f"hello {i}", author_id=f"a{i % 2}", at=T0)
            await cache.capture(key, (message,), ScopeMeta(server_id=G), None, T0)
        async for batch in store.iter_distilled(since=NOW - 86400, batch_rows=100):
            newest = {r.key.astuple: r for r in batch}
            for row in list(newest.values())[::2]:  # some already at this revision
                await cache.apply_rows([row], T0)
    await hydrate_rows(caches[0], store, None)
    await hydrate_tuples(caches[1], store, None)
    assert snapshot(caches[1]) == snapshot(caches[0])


@pytest.mark.parametrize("forget", ["channel", "user", "server_channel"])
async def test_a_forget_recorded_before_the_load_is_fenced_alike(
    store: TupleStore, forget: str
) -> None:
    target = {
        "channel": [channel_target("c1")],
        "user": [user_target("u1")],
        "server_channel": [channel_target("c2")],
    }[forget]
    caches = new_cache(), new_cache()
    for cache in caches:
        await cache.record_forget(7, target, NOW)
    await hydrate_rows(caches[0], store, WriteFence(6))
    await hydrate_tuples(caches[1], store, WriteFence(6))
    assert snapshot(caches[1]) == snapshot(caches[0])
    assert caches[1].stats()["entries"] < (await count_rows(store))
    kts = set(caches[1]._entries)
    if forget == "user":
        assert not any(kt[0] == "user" and kt[1] == "u1" for kt in kts)
    else:
        gone = "c1" if forget == "channel" else "c2"
        assert not any(kt[2] == gone for kt in kts)
    # A fence taken after the forget lets every row in.
    later = new_cache()
    await later.record_forget(7, target, NOW)
    await hydrate_tuples(later, store, WriteFence(7))
    assert later.stats()["entries"] == await count_rows(store)


async def count_rows(store: TupleStore) -> int:
    return sum([len(b) async for b in store.iter_hydration(since=NOW - 86400, batch_rows=1000)])


class ForgetMidway(SQLiteStore):
    """Hydrates in small batches and, at one boundary, runs ``act`` (a forget by another
    handle on the same file) while this store's reading cursor still sees the rows that
    forget deleted."""

    def __init__(self, path: Path, at_batch: int, act: Any) -> None:
        super().__init__(path)
        self.at_batch, self.act = at_batch, act

    async def iter_hydration(
        self, *, since: float, batch_rows: int
    ) -> AsyncIterator[list[HydrationRow]]:
        n = 0
        async for plain in super().iter_hydration(since=since, batch_rows=batch_rows):
            if n == self.at_batch:
                await self.act()
            n += 1
            yield plain
        if n <= self.at_batch:
            await self.act()


def forgotten(kts: set[Any], kind: str, subject: str) -> list[Any]:
    if kind == "channel":
        return [kt for kt in kts if kt[2] == subject]
    return [kt for kt in kts if kt[0] == "user" and kt[1] == subject]


async def test_a_forget_landing_while_hydrating_wins(tmp_path: Path) -> None:
    """Hundreds of randomized interleavings: another handle forgets a channel or a user at a
    random batch boundary of the load, and this process's follower applies the journal entry
    at once (as it can on PostgreSQL, whose pages see new commits; SQLite's reading cursor
    pins its snapshot, so there the follower sees it after the load). No later batch may
    bring a forgotten scope back, and after the follower's catch-up none is left."""
    template = tmp_path / "template.db"
    seed = SQLiteStore(template)
    await seed.migrate()
    await varied_rows(seed)
    await seed.close()
    rng = random.Random(17)
    for i in range(ROUNDS):
        path = tmp_path / f"h{i}.db"
        shutil.copy(template, path)
        kind = rng.choice(["channel", "user"])
        subjects = ["c0", "c1", "c2", "c3", "c4"] if kind == "channel" else ["u0", "u1", "u2"]
        subject = rng.choice(subjects)
        box: list[Memory] = []

        async def act(
            path: Path = path, kind: str = kind, subject: str = subject, box: list[Memory] = box
        ) -> None:
            config = Config(sweep_interval_s=0)
            url = f"sqlite:///{path}?busy_timeout_ms=1"  # the WAL stays pinned by the load
            async with shortterm.open(store=url, config=config, clock=lambda: NOW) as other:
                if kind == "channel":
                    await other.clear_channel(subject)
                else:
                    await other.clear_user(subject)
                entries = await other.store.journal_since(0, limit=100)
            for entry in entries:
                await box[0].journal._apply(entry, NOW)

        memory = Memory(
            store=ForgetMidway(path, rng.randrange(8), act),
            cache=new_cache(),
            config=Config(sweep_interval_s=0, hydrate_batch_rows=rng.choice([1, 2, 3, 5])),
            clock=lambda: NOW,
        )
        box.append(memory)
        await memory.start()
        cache = memory.cache
        assert isinstance(cache, InProcessCache)
        assert forgotten(set(cache._entries), kind, subject) == [], (i, kind, subject)
        await memory.journal.catch_up()
        assert forgotten(set(cache._entries), kind, subject) == [], (i, kind, subject)
        await memory.close()


async def test_a_big_load_in_any_batch_size_builds_what_rows_build(tmp_path: Path) -> None:
    """The bulk load at scale: hundreds of scopes over shared and single-scope channels,
    owners spread over batches, some with categories, some private, in batch sizes from one
    row to all of them: every index equal to the row-by-row path's."""
    store = SQLiteStore(tmp_path / "big.db")
    await store.migrate()
    rng = random.Random(5)
    for i in range(400):
        channel = f"solo{i}" if i % 3 else f"shared{i % 7}"
        key = (
            ScopeKey.server(f"g{i % 9}", channel, rng.choice([None, "p1", "p2"]))
            if i % 2
            else ScopeKey.user(f"u{i % 13}", channel, rng.choice([None, "p1"]))
        )
        meta = ScopeMeta(
            server_id=f"g{i % 9}" if i % 5 else None,
            channel_name=rng.choice([None, f"#{channel}"]),
            private=i % 11 == 0,
        )
        change = DistilledWrite(summary=f"summary {i}", set_summary=True)
        if i % 4 == 0:
            change = DistilledWrite(categories={"plan": f"p{i}"})
        await store.write_distilled([(key, meta)], change, reset_counter=None, now=T0 + i)
    for batch_rows in (1, 7, 64, 1000):
        by_rows, by_tuples = new_cache(), new_cache()
        async for batch in store.iter_distilled(since=NOW - 86400, batch_rows=batch_rows):
            await by_rows.apply_rows(batch, NOW)
        async for plain_rows in store.iter_hydration(since=NOW - 86400, batch_rows=batch_rows):
            await by_tuples.apply_hydration(plain_rows, NOW)
        assert snapshot(by_tuples) == snapshot(by_rows), batch_rows
        assert by_tuples.stats()["entries"] > 300
    await store.close()
