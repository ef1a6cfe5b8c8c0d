"""One suite, every durable backend: the Store contract in behaviour."""

from __future__ import annotations

import asyncio

import pytest

from shortterm.model import Category, Privacy, ScopeKey, ServerSettings, UserSettings
from shortterm.model.fence import WriteFence, turn_target
from shortterm.model.text import clean_text
from shortterm.store.base import LOAD_MANY_KEYS, DistilledWrite, ScopeMeta, ScopeRow
from tests.support import T0, StoreFactory

GUILD = ScopeMeta(
    server_id="g1", server_name="Guild", channel_name="general", persona_lineage_id="L1"
)
U = ScopeKey.user("u1", "c1", "p1")
S = ScopeKey.server("g1", "c1", "p1")
SUMMARY = DistilledWrite(summary="we planned a hike", set_summary=True)


async def test_touch_creates_rows_and_counts_only_the_live_scope(
    store_factory: StoreFactory,
) -> None:
    store = await store_factory()
    rows = await store.touch([(U, GUILD), (S, GUILD)], increment=S, now=T0)
    assert [r.key for r in rows] == [U, S]
    assert [r.turns_since_refresh for r in rows] == [0, 1]
    assert rows[0].meta == GUILD and rows[1].meta.persona_lineage_id == "L1"
    again = await store.touch([(U, GUILD), (S, GUILD)], increment=S, now=T0 + 5)
    assert [r.turns_since_refresh for r in again] == [0, 2]
    assert again[1].revision > rows[1].revision
    assert again[1].updated_at == T0 + 5
    loaded = await store.load(S)
    assert loaded is not None and loaded.turns_since_refresh == 2


async def test_persona_none_and_zero_are_different_scopes(store_factory: StoreFactory) -> None:
    store = await store_factory()
    none_key, zero_key = ScopeKey.user("u", "c"), ScopeKey.user("u", "c", "0")
    await store.touch([(none_key, GUILD)], increment=none_key, now=T0)
    await store.touch([(zero_key, GUILD)], increment=None, now=T0)
    a, b = await store.load(none_key), await store.load(zero_key)
    assert a is not None and b is not None
    assert (a.key.persona_id, a.turns_since_refresh) == (None, 1)
    assert (b.key.persona_id, b.turns_since_refresh) == ("0", 0)


async def test_ids_with_colons_round_trip(store_factory: StoreFactory) -> None:
    store = await store_factory()
    key = ScopeKey.user("@ana:matrix.org", "!room:matrix.org", "persona:1")
    await store.write_distilled([(key, None)], SUMMARY, reset_counter=None, now=T0)
    row = await store.load(key)
    assert row is not None and row.key == key and row.summary == "we planned a hike"
    assert [r.key for r in await store.load_owner("user", "@ana:matrix.org")] == [key]


async def test_summary_write_resets_only_the_live_counter(store_factory: StoreFactory) -> None:
    store = await store_factory()
    for _ in range(3):
        await store.touch([(U, GUILD), (S, GUILD)], increment=S, now=T0)
    rows = await store.write_distilled(
        [(U, GUILD), (S, GUILD)], SUMMARY, reset_counter=S, now=T0 + 9
    )
    user_row, server_row = rows
    assert user_row.summary == server_row.summary == "we planned a hike"
    assert user_row.summary_at == server_row.summary_at == T0 + 9
    assert server_row.turns_since_refresh == 0 and server_row.refresh_epoch == 1
    assert user_row.refresh_epoch == 0
    assert (await store.load(S)).turns_since_refresh == 0  # type: ignore[union-attr]


async def test_clearing_a_summary_clears_its_time(store_factory: StoreFactory) -> None:
    store = await store_factory()
    await store.write_distilled([(S, GUILD)], SUMMARY, reset_counter=None, now=T0)
    [row] = await store.write_distilled(
        [(S, GUILD)], DistilledWrite(summary=None, set_summary=True), reset_counter=None, now=T0 + 1
    )
    assert row.summary is None and row.summary_at is None


async def test_category_merge_changes_only_given_fields(store_factory: StoreFactory) -> None:
    store = await store_factory()
    first = DistilledWrite(categories={"mood": "calm", "topic": "hiking"})
    await store.write_distilled([(S, GUILD)], first, reset_counter=None, now=T0)
    [row] = await store.write_distilled(
        [(S, GUILD)], DistilledWrite(categories={"mood": "excited"}), reset_counter=None, now=T0 + 1
    )
    assert dict(row.categories) == {"mood": "excited", "topic": "hiking"}
    assert row.categories_at == T0 + 1
    [row] = await store.write_distilled(
        [(S, GUILD)], DistilledWrite(categories={"topic": None}), reset_counter=None, now=T0 + 2
    )
    assert dict(row.categories) == {"mood": "excited"}
    [row] = await store.write_distilled(
        [(S, GUILD)],
        DistilledWrite(categories={"plans": "Saturday"}, replace_categories=True),
        reset_counter=None,
        now=T0 + 3,
    )
    assert dict(row.categories) == {"plans": "Saturday"}
    [row] = await store.write_distilled(
        [(S, GUILD)], DistilledWrite(categories={"plans": None}), reset_counter=None, now=T0 + 4
    )
    assert dict(row.categories) == {} and row.categories_at is None
    assert row.summary is None  # category writes never touch the summary


async def test_unknown_meta_keeps_stored_meta_and_lineage_is_never_lost(
    store_factory: StoreFactory,
) -> None:
    store = await store_factory()
    await store.touch([(S, GUILD)], increment=S, now=T0)
    await store.write_distilled([(S, None)], SUMMARY, reset_counter=None, now=T0 + 1)
    # A later capture that does not know the lineage must not erase it (the reference's W6).
    anonymous = ScopeMeta(server_id="g1", channel_name="general")
    await store.touch([(S, anonymous)], increment=S, now=T0 + 2)
    row = await store.load(S)
    assert row is not None
    assert row.meta.persona_lineage_id == "L1" and row.meta.server_name == "Guild"
    assert row.summary == "we planned a hike" and row.turns_since_refresh == 2


async def test_private_flag_follows_the_latest_capture(store_factory: StoreFactory) -> None:
    store = await store_factory()
    private = ScopeMeta(server_id="g1", private=True, parent_channel_id="c0")
    await store.touch([(S, private)], increment=None, now=T0)
    row = await store.load(S)
    assert row is not None and row.meta.private and row.meta.parent_channel_id == "c0"
    await store.write_distilled([(S, None)], SUMMARY, reset_counter=None, now=T0 + 1)
    assert (await store.load(S)).meta.private  # type: ignore[union-attr]


async def test_load_owner_is_scoped_by_kind_and_owner(store_factory: StoreFactory) -> None:
    store = await store_factory()
    same_id_server = ScopeKey.server("u1", "c9")
    await store.touch([(U, GUILD), (S, GUILD), (same_id_server, GUILD)], increment=None, now=T0)
    await store.touch([(ScopeKey.user("u2", "c1"), GUILD)], increment=None, now=T0)
    assert [r.key for r in await store.load_owner("user", "u1")] == [U]
    assert {r.key for r in await store.load_owner("server", "u1")} == {same_id_server}
    assert await store.load(ScopeKey.user("nobody", "c1")) is None


async def test_load_many_answers_each_key_in_order(store_factory: StoreFactory) -> None:
    store = await store_factory()
    bare = ScopeKey.user("u1", "c1")  # no persona: not the same scope as persona "0"
    odd = ScopeKey.user("@ana:matrix.org", "!room'\"; --", "persona 👩‍👩‍👧 \u202e")
    await store.touch([(U, GUILD), (S, GUILD), (bare, GUILD), (odd, GUILD)], increment=S, now=T0)
    await store.write_distilled([(S, GUILD)], SUMMARY, reset_counter=None, now=T0 + 1)
    missing = ScopeKey.server("g1", "nowhere", "p1")
    keys = [S, missing, U, S, bare, ScopeKey.user("u1", "c1", "0"), odd]
    rows = await store.load_many(keys)
    assert [r.key if r else None for r in rows] == [S, None, U, S, bare, None, odd]
    assert rows == [await store.load(k) for k in keys]
    assert rows[0] is not None and rows[0].summary == "we planned a hike"
    assert await store.load_many([]) == []


async def test_load_many_reads_past_one_statement(store_factory: StoreFactory) -> None:
    """More keys than one statement reads: the rows on either side of the chunk's end come
    back, in order, among keys that have none."""
    store = await store_factory()
    stored = [ScopeKey.server("g1", f"c{i}", "p1") for i in range(40)]
    await store.touch([(k, GUILD) for k in stored], increment=None, now=T0)
    missing = [ScopeKey.server("g1", f"gone{i}", "p1") for i in range(LOAD_MANY_KEYS + 60)]
    keys = missing[: LOAD_MANY_KEYS - 20] + stored + missing[LOAD_MANY_KEYS - 20 :]
    rows = await store.load_many(keys)
    assert len(rows) == len(keys)
    assert [r.key for r in rows if r is not None] == stored
    assert [i for i, r in enumerate(rows) if r is not None] == list(
        range(LOAD_MANY_KEYS - 20, LOAD_MANY_KEYS + 20)
    )


async def test_iter_distilled_streams_only_live_distilled_rows(store_factory: StoreFactory) -> None:
    store = await store_factory()
    keys = [ScopeKey.server("g1", f"c{i}") for i in range(25)]
    for i, key in enumerate(keys):
        if i % 3 == 0:
            await store.write_distilled([(key, GUILD)], SUMMARY, reset_counter=None, now=T0 + i)
        elif i % 3 == 1:
            change = DistilledWrite(categories={"mood": "ok"})
            await store.write_distilled([(key, GUILD)], change, reset_counter=None, now=T0 + i)
        else:
            await store.touch([(key, GUILD)], increment=key, now=T0 + i)
    batches = [b async for b in store.iter_distilled(since=T0 + 3.5, batch_rows=4)]
    assert all(1 <= len(b) <= 4 for b in batches)
    got = {r.key.channel_id for b in batches for r in b}
    assert got == {f"c{i}" for i in range(4, 25) if i % 3 != 2}


async def test_deletes_remove_exactly_their_rows(store_factory: StoreFactory) -> None:
    store = await store_factory()
    other_persona = ScopeKey.server("g1", "c1", "p2")
    elsewhere = ScopeKey.user("u1", "c2", "p1")
    server_elsewhere = ScopeKey.server("g1", "c2", "p1")
    everything = [
        (U, GUILD),
        (S, GUILD),
        (other_persona, GUILD),
        (elsewhere, GUILD),
        (server_elsewhere, GUILD),
    ]
    await store.touch(everything, increment=None, now=T0)
    assert (await store.forget_server_channel("g1", "c1", "p2", now=T0)).rows == 1
    assert await store.load(other_persona) is None and await store.load(S) is not None
    assert (await store.forget_channel("c1", now=T0)).rows == 2
    assert await store.load(U) is None and await store.load(S) is None
    assert (await store.forget_user("u1", keep=None, now=T0)).rows == 1
    assert await store.load(elsewhere) is None
    assert await store.load(server_elsewhere) is not None
    assert (await store.forget_channel("c1", now=T0)).rows == 0


async def test_janitor_deletes_rows_untouched_since_the_cutoff(store_factory: StoreFactory) -> None:
    store = await store_factory()
    old, fresh = ScopeKey.server("g1", "old"), ScopeKey.server("g1", "fresh")
    await store.touch([(old, GUILD)], increment=None, now=T0)
    await store.touch([(fresh, GUILD)], increment=None, now=T0 + 100)
    assert await store.janitor(untouched_since=T0 + 50) == 1
    assert await store.load(old) is None and await store.load(fresh) is not None


async def test_settings_round_trip_in_order(store_factory: StoreFactory) -> None:
    store = await store_factory()
    settings = ServerSettings(
        refresh_cadence=7,
        render_mode="supersede",
        crude_message_count=3,
        nudge_depth=4,
        content_depth=0,
        tool_description="Keep notes for this channel.",
        nudge_text=None,
        categories=(Category("Mood", "How the room feels"), Category("Plans", "What is planned")),
        stm_enabled=False,
        private_channel_ids=frozenset({"c5", "c:6"}),
        privacy_bypass=True,
    )
    await store.save_server_settings("g1", settings, now=T0)
    await store.save_server_settings("g2", ServerSettings(), now=T0 + 10)
    assert await store.server_settings_since(0) == {"g1": settings, "g2": ServerSettings()}
    assert set(await store.server_settings_since(T0 + 5)) == {"g2"}
    changed = ServerSettings(categories=(Category("Plans", "What is planned"),))
    await store.save_server_settings("g1", changed, now=T0 + 20)
    assert (await store.server_settings_since(T0 + 20))["g1"] == changed

    await store.save_user_settings("u1", UserSettings(Privacy.FULL, True), now=T0)
    await store.save_user_settings("u1", UserSettings(Privacy.PARTIAL, False), now=T0 + 1)
    assert await store.user_settings_since(0) == {"u1": UserSettings(Privacy.PARTIAL, False)}
    assert await store.user_settings_since(T0 + 2) == {}


@pytest.mark.parametrize(
    "text",
    [
        "emoji 👩‍👩‍👧 and flags 🇯🇵 and RTL \u202eevil\u202c",
        "'; DROP TABLE scopes; --",
        "NUL\x00inside",
        "x" * 100_000,
    ],
)
async def test_hostile_text_is_stored_safely(store_factory: StoreFactory, text: str) -> None:
    store = await store_factory()
    change = DistilledWrite(summary=text, set_summary=True, categories={"note": text})
    await store.write_distilled([(S, GUILD)], change, reset_counter=None, now=T0)
    row = await store.load(S)
    assert row is not None
    assert row.summary in (text, clean_text(text))
    assert row.categories["note"] in (text, clean_text(text))


async def test_concurrent_increments_are_never_lost(store_factory: StoreFactory) -> None:
    store = await store_factory()
    keys = [ScopeKey.server("g1", f"c{i % 5}") for i in range(100)]
    await asyncio.gather(*(store.touch([(k, GUILD)], increment=k, now=T0) for k in keys))
    for i in range(5):
        row = await store.load(ScopeKey.server("g1", f"c{i}"))
        assert row is not None and row.turns_since_refresh == 20


async def test_rows_survive_reopening(store_factory: StoreFactory) -> None:
    first = await store_factory()
    await first.write_distilled([(U, GUILD), (S, GUILD)], SUMMARY, reset_counter=S, now=T0)
    await first.touch([(S, GUILD)], increment=S, now=T0 + 1)
    await first.save_user_settings("u1", UserSettings(cross_server_opt_in=True), now=T0)
    second = await store_factory()
    row = await second.load(S)
    assert row is not None and row.summary == "we planned a hike" and row.turns_since_refresh == 1
    assert (await second.user_settings_since(0))["u1"].cross_server_opt_in


async def test_migrate_is_idempotent(store_factory: StoreFactory) -> None:
    store = await store_factory()
    await store.touch([(S, GUILD)], increment=S, now=T0)
    await store.migrate()
    assert (await store.load(S)) is not None


async def test_migrate_reports_what_it_applied(store_factory: StoreFactory) -> None:
    store = await store_factory()  # migrated by the factory already
    assert await store.migrate() == []


async def test_load_channel_returns_every_scope_of_the_channel(
    store_factory: StoreFactory,
) -> None:
    store = await store_factory()
    in_c1 = [U, S, ScopeKey.user("u2", "c1"), ScopeKey.server("g1", "c1", "0")]
    elsewhere = [ScopeKey.user("u1", "c2", "p1"), ScopeKey.server("c1", "c9")]
    await store.touch([(k, GUILD) for k in in_c1 + elsewhere], increment=None, now=T0)
    assert {r.key for r in await store.load_channel("c1")} == set(in_c1)
    assert await store.load_channel("nowhere") == []


async def test_iter_rows_streams_every_row_once(store_factory: StoreFactory) -> None:
    store = await store_factory()
    keys = [ScopeKey.server("g1", f"c{i}") for i in range(11)] + [U]
    await store.touch([(k, GUILD) for k in keys], increment=None, now=T0)
    await store.write_distilled([(S, GUILD)], SUMMARY, reset_counter=None, now=T0 + 1)
    batches = [b async for b in store.iter_rows(batch_rows=4)]
    assert all(1 <= len(b) <= 4 for b in batches)
    got = [r.key for b in batches for r in b]
    assert sorted(got, key=str) == sorted([*keys, S], key=str)
    assert next(r for b in batches for r in b if r.key == S).summary == "we planned a hike"


async def test_put_rows_writes_whole_rows_as_given(store_factory: StoreFactory) -> None:
    store = await store_factory()
    await store.touch([(S, GUILD)], increment=S, now=T0)
    await store.write_distilled(
        [(S, GUILD)], DistilledWrite(categories={"old": "x"}), reset_counter=None, now=T0 + 1
    )
    before = await store.load(S)
    assert before is not None
    meta = ScopeMeta(server_id="g1", channel_name="plans", private=True, parent_channel_id="c0")
    imported = ScopeRow(
        key=S,
        meta=meta,
        summary="restored summary",
        summary_at=T0 - 50,
        categories={"mood": "calm"},
        categories_at=T0 - 40,
        turns_since_refresh=4,
        refresh_epoch=2,
        updated_at=T0 - 30,
    )
    fresh = ScopeRow(key=ScopeKey.user("u9", "c9", "0"), meta=ScopeMeta(), updated_at=T0 - 5)
    rows = await store.put_rows([imported, fresh])
    assert [r.key for r in rows] == [S, fresh.key]
    assert rows[0].revision > before.revision and rows[1].revision == 1
    for got in (rows[0], await store.load(S)):
        assert got is not None
        assert got.meta == meta
        assert (got.summary, got.summary_at) == ("restored summary", T0 - 50)
        assert (dict(got.categories), got.categories_at) == ({"mood": "calm"}, T0 - 40)
        assert (got.turns_since_refresh, got.refresh_epoch, got.updated_at) == (4, 2, T0 - 30)
    loaded = await store.load(fresh.key)
    assert loaded is not None and loaded.summary is None and dict(loaded.categories) == {}
    assert loaded.key.persona_id == "0" and loaded.updated_at == T0 - 5
    assert await store.put_rows([]) == []


def named(server_id: str, name: str | None) -> ScopeMeta:
    return ScopeMeta(server_id=server_id, server_name=name, channel_name="general")


async def test_list_servers_pages_by_id_and_counts_server_rows(
    store_factory: StoreFactory,
) -> None:
    store = await store_factory()
    assert await store.list_servers(after=None, limit=10) == []
    # "g10" sorts between "g1" and "g2": ids are strings, not numbers.
    for n, key in enumerate(
        [
            ScopeKey.server("g2", "c1"),
            ScopeKey.server("g10", "c1"),
            ScopeKey.server("g2", "c2", "p1"),
            ScopeKey.server("g1", "c1"),
            ScopeKey.server("g2", "c1", "0"),
        ]
    ):
        await store.touch([(key, named(key.owner_id, "Guild"))], increment=key, now=T0 + n)
    # User scopes are not servers, whatever their owner id or metadata says.
    for owner in ("g0", "g3", "u1"):
        user_key = ScopeKey.user(owner, "c1")
        await store.touch([(user_key, named("g9", "Other"))], increment=None, now=T0 + 50)

    listed = await store.list_servers(after=None, limit=10)
    assert [s.server_id for s in listed] == ["g1", "g10", "g2"]
    assert [s.entries for s in listed] == [1, 1, 3]
    assert [s.updated_at for s in listed] == [T0 + 3, T0 + 1, T0 + 4]
    assert all(s.server_name == "Guild" for s in listed)

    ids = lambda page: [s.server_id for s in page]  # noqa: E731
    assert ids(await store.list_servers(after=None, limit=2)) == ["g1", "g10"]
    assert ids(await store.list_servers(after="g10", limit=2)) == ["g2"]
    assert ids(await store.list_servers(after="g1", limit=1)) == ["g10"]
    assert ids(await store.list_servers(after="g15", limit=10)) == ["g2"]  # not a stored id
    assert ids(await store.list_servers(after="a", limit=10)) == ["g1", "g10", "g2"]
    assert await store.list_servers(after="g2", limit=10) == []
    walked, after = [], None
    while page := await store.list_servers(after=after, limit=1):
        walked += page
        after = page[-1].server_id
    assert walked == listed


async def test_list_servers_names_a_server_by_its_latest_named_row(
    store_factory: StoreFactory,
) -> None:
    store = await store_factory()
    old, new, bare = (ScopeKey.server("g1", c) for c in ("c1", "c2", "c3"))
    await store.touch([(old, named("g1", "Old name"))], increment=None, now=T0)
    await store.touch([(new, named("g1", "New name"))], increment=None, now=T0 + 5)
    # A newer row without a name (an admin edit creates one) does not hide the name.
    await store.write_distilled([(bare, None)], SUMMARY, reset_counter=None, now=T0 + 9)
    nameless = ScopeKey.server("g2", "c1")
    await store.write_distilled([(nameless, None)], SUMMARY, reset_counter=None, now=T0)
    [g1, g2] = await store.list_servers(after=None, limit=10)
    assert (g1.server_id, g1.server_name, g1.entries, g1.updated_at) == (
        "g1",
        "New name",
        3,
        T0 + 9,
    )
    assert (g2.server_id, g2.server_name, g2.entries, g2.updated_at) == ("g2", None, 1, T0)

    # A rename reaches the list with the next write of any of the server's rows.
    await store.touch([(old, named("g1", "Renamed"))], increment=None, now=T0 + 20)
    assert (await store.list_servers(after=None, limit=1))[0].server_name == "Renamed"
    # Rows written at the same time: the one created last names the server.
    tied = ScopeKey.server("g3", "c1"), ScopeKey.server("g3", "c2")
    await store.touch([(tied[1], named("g3", "First"))], increment=None, now=T0 + 30)
    await store.touch([(tied[0], named("g3", "Second"))], increment=None, now=T0 + 30)
    assert (await store.list_servers(after="g2", limit=1))[0].server_name == "Second"


async def test_list_servers_follows_deletions(store_factory: StoreFactory) -> None:
    store = await store_factory()
    keys = [ScopeKey.server("g1", "c1"), ScopeKey.server("g1", "c2", "p1")]
    keys += [ScopeKey.server("g2", "c1"), ScopeKey.server("g3", "c9")]
    await store.touch([(k, named(k.owner_id, "G")) for k in keys[:3]], increment=None, now=T0)
    await store.touch([(keys[3], named("g3", "G"))], increment=None, now=T0 + 100)

    async def counts() -> dict[str, int]:
        return {s.server_id: s.entries for s in await store.list_servers(after=None, limit=10)}

    assert await counts() == {"g1": 2, "g2": 1, "g3": 1}
    assert (await store.forget_server_channel("g1", "c2", "p1", now=T0)).rows == 1
    assert await counts() == {"g1": 1, "g2": 1, "g3": 1}
    assert (await store.forget_channel("c1", now=T0)).rows == 2
    assert await counts() == {"g3": 1}
    await store.touch([(keys[2], named("g2", "Back"))], increment=None, now=T0 + 200)
    assert await counts() == {"g2": 1, "g3": 1}
    assert await store.janitor(untouched_since=T0 + 150) == 1
    assert await counts() == {"g2": 1}
    # A second store on the same data sees the same list (SQL backends: the same database).
    again = await store_factory()
    assert [s.server_name for s in await again.list_servers(after=None, limit=10)] == ["Back"]


async def test_an_upgrade_taken_over_is_decided_once_and_fences_the_lapsed_write(
    store_factory: StoreFactory,
) -> None:
    store = await store_factory()
    since = await store.journal_head()
    dead, live = turn_target("turn1", "dead.1"), turn_target("turn1", "live.2")
    # Nothing of the lapsed owner's landed: its write is fenced off for good...
    seq = await store.fence_upgrade([U, S], since=since, targets=[dead], now=T0)
    assert seq is not None and seq > since
    theirs = WriteFence(since, "u1", extra_targets=(dead,))
    both = [(U, GUILD), (S, GUILD)]
    assert await store.write_distilled(both, SUMMARY, reset_counter=S, now=T0, fence=theirs) == []
    # ...while the taker's own write, begun before that entry, lands (and is journaled).
    ours = WriteFence(since, "u1", extra_targets=(live,))
    rows = await store.write_distilled(both, SUMMARY, reset_counter=S, now=T0, fence=ours)
    assert [r.key for r in rows] == [U, S]
    # A takeover from the taker finds its write and journals nothing; another scope's does.
    head = await store.journal_head()
    assert await store.fence_upgrade([S], since=seq, targets=[live], now=T0) is None
    assert await store.journal_head() == head
    other = ScopeKey.user("u2", "c1", "p1")
    assert await store.fence_upgrade([other], since=seq, targets=[live], now=T0) is not None
