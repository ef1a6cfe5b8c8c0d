"""The admin surface of the facade: listing rows, export, import, opening without hydration."""

from __future__ import annotations

import pytest

import shortterm
from shortterm import Message, Privacy, Reply, ScopeKey, UserSettings
from shortterm.store.base import ScopeMeta, ScopeRow
from tests.support import FakeClock


async def _chat(memory: shortterm.Memory, user: str, channel: str, persona: str | None) -> None:
    turn = memory.turn(user_id=user, channel_id=channel, server_id="g1", persona_id=persona)
    said = Message("user", f"hello from {user}", author_id=user)
    await turn.capture(history=[said], replies=[Reply("hi!", persona_id=persona)])


@pytest.fixture
async def memory(db_url: str, clock: FakeClock) -> shortterm.Memory:
    async with shortterm.open(db_url, clock=clock) as m:
        for user, channel, persona in [
            ("u1", "c1", None),
            ("u1", "c1", "0"),
            ("u2", "c1", None),
            ("u1", "c2", None),
        ]:
            await _chat(m, user, channel, persona)
        await m.set_summary(ScopeKey.server("g1", "c1"), "we planned a hike")
    async with shortterm.open(db_url, clock=clock, hydrate=False) as m:
        yield m


def _keys(rows: list[ScopeRow]) -> list[tuple[str, str, str, str | None]]:
    return [r.key.astuple for r in rows]


async def test_find_rows_by_user_channel_and_server(memory: shortterm.Memory) -> None:
    assert _keys(await memory.find_rows(user_id="u1")) == [
        ("user", "u1", "c1", None),
        ("user", "u1", "c1", "0"),
        ("user", "u1", "c2", None),
    ]
    assert _keys(await memory.find_rows(channel_id="c1", kind="server")) == [
        ("server", "g1", "c1", None),
        ("server", "g1", "c1", "0"),
    ]
    assert len(await memory.find_rows(channel_id="c1")) == 5
    assert _keys(await memory.find_rows(server_id="g1", persona_id="0")) == [
        ("server", "g1", "c1", "0")
    ]
    no_persona = await memory.find_rows(user_id="u1", channel_id="c1", persona_id=None)
    assert _keys(no_persona) == [("user", "u1", "c1", None)]
    server_rows = await memory.find_rows(server_id="g1", channel_id="c1", kind="user")
    assert {r.key.owner_id for r in server_rows} == {"u1", "u2"}
    assert await memory.find_rows(server_id="elsewhere") == []
    [summarised] = await memory.find_rows(
        server_id="g1", persona_id=None, channel_id="c1", kind="server"
    )
    assert summarised.summary == "we planned a hike"


@pytest.mark.parametrize(
    ("filters", "field"),
    [
        ({}, "filters"),
        ({"user_id": "u1", "kind": "server"}, "kind"),
        ({"server_id": "g1", "kind": "user"}, "kind"),
        ({"channel_id": "c1", "kind": "guild"}, "kind"),
        ({"channel_id": ""}, "channel_id"),
        ({"user_id": "u1", "persona_id": 7}, "persona_id"),
    ],
)
async def test_find_rows_refuses_what_it_cannot_answer_cheaply(
    memory: shortterm.Memory, filters: dict[str, object], field: str
) -> None:
    with pytest.raises(shortterm.InvalidInput) as caught:
        await memory.find_rows(**filters)  # type: ignore[arg-type]
    assert caught.value.field == field


async def test_servers_lists_servers_with_shared_rows(memory: shortterm.Memory) -> None:
    [g1] = await memory.servers()
    assert (g1.server_id, g1.server_name, g1.entries) == ("g1", None, 3)  # no name was given
    for server, name in [("g0", "Zero"), ("g2", "Two"), ("g3", None)]:
        turn = memory.turn(user_id="u9", channel_id="c9", server_id=server, server_name=name)
        await turn.capture(history=[Message("user", "hi", author_id="u9")], replies=[Reply("yo")])
    listed = await memory.servers()
    assert [(s.server_id, s.server_name) for s in listed] == [
        ("g0", "Zero"),
        ("g1", None),
        ("g2", "Two"),
        ("g3", None),
    ]
    assert all(isinstance(s, shortterm.ServerSummary) for s in listed)
    assert await memory.servers(limit=2) == listed[:2]
    assert await memory.servers(after="g1", limit=1) == listed[2:3]
    assert await memory.servers(after="g3") == []
    await memory.clear_server_channel("g2", "c9", None)
    assert [s.server_id for s in await memory.servers(after="g1")] == ["g3"]


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"limit": -1}, "limit"),
        ({"limit": True}, "limit"),
        ({"limit": 10.0}, "limit"),
        ({"limit": "10"}, "limit"),
        ({"limit": None}, "limit"),
        ({"after": ""}, "after"),
        ({"after": 333}, "after"),
        ({"after": "a\x00b"}, "after"),
        ({"after": "x" * 257}, "after"),
    ],
)
async def test_servers_checks_its_input(
    memory: shortterm.Memory, arguments: dict[str, object], field: str
) -> None:
    with pytest.raises(shortterm.InvalidInput) as caught:
        await memory.servers(**arguments)  # type: ignore[arg-type]
    assert caught.value.field == field


async def test_servers_takes_the_bounds_of_a_page(memory: shortterm.Memory) -> None:
    assert len(await memory.servers(limit=1)) == len(await memory.servers(limit=1000)) == 1
    assert await memory.servers(after="x" * 256) == []


async def test_opening_without_hydration_reads_through(memory: shortterm.Memory) -> None:
    assert memory.stats()["hydrated_rows"] == 0
    entry = await memory.get(ScopeKey.server("g1", "c1"))
    assert entry is not None and entry.summary == "we planned a hike"
    with pytest.raises(shortterm.InvalidInput):
        shortterm.open("memory://", hydrate="no")  # type: ignore[arg-type]


async def test_export_rows_streams_every_row(memory: shortterm.Memory) -> None:
    batches = [b async for b in memory.export_rows(batch_rows=3)]
    assert [len(b) for b in batches] == [3, 3, 1]  # 4 user + 3 server rows
    with pytest.raises(shortterm.InvalidInput):
        memory.export_rows(batch_rows=0)


async def test_import_rows_replaces_rows_and_updates_the_hot_tier(
    memory: shortterm.Memory, clock: FakeClock
) -> None:
    key = ScopeKey.server("g1", "c1")
    assert (await memory.get(key)) is not None  # cached now: the import must replace it
    restored = ScopeRow(
        key=key,
        meta=ScopeMeta(server_id="g1", channel_name="plans"),
        summary="restored from a backup",
        summary_at=clock.now - 60,
        updated_at=clock.now - 60,
        turns_since_refresh=2,
    )
    new = ScopeRow(key=ScopeKey.user("u9", "c9"), meta=ScopeMeta(), updated_at=clock.now)
    written = await memory.import_rows([restored, new])
    assert [r.key for r in written] == [key, new.key]
    entry = await memory.get(key)
    assert entry is not None and entry.summary == "restored from a backup"
    assert entry.channel_name == "plans" and entry.turns_since_refresh == 2
    row = await memory.store.load(key)
    assert row is not None and row.summary == "restored from a backup"


async def test_import_rows_leaves_out_personal_rows_of_private_users(
    memory: shortterm.Memory, clock: FakeClock
) -> None:
    await memory.configure_user("u7", UserSettings(privacy=Privacy.PARTIAL))
    rows = [
        ScopeRow(key=ScopeKey.user("u7", "c1"), meta=ScopeMeta(), updated_at=clock.now),
        ScopeRow(key=ScopeKey.server("g1", "c7"), meta=ScopeMeta(), updated_at=clock.now),
    ]
    written = await memory.import_rows(rows)
    assert [r.key.kind for r in written] == ["server"]
    assert await memory.store.load(ScopeKey.user("u7", "c1")) is None


async def test_import_rows_checks_its_input(memory: shortterm.Memory, clock: FakeClock) -> None:
    row = ScopeRow(key=ScopeKey.user("u1", "c1"), meta=ScopeMeta(), updated_at=clock.now)
    with pytest.raises(shortterm.InvalidInput, match="once"):
        await memory.import_rows([row, row])
    with pytest.raises(shortterm.InvalidInput, match=r"rows\[0\]"):
        await memory.import_rows(["not a row"])  # type: ignore[list-item]
    with pytest.raises(shortterm.InvalidInput):
        await memory.import_rows("rows")  # type: ignore[arg-type]
    assert await memory.import_rows([]) == []
