"""Server and user settings: validation, defaults, durability, and no queries on warm turns."""

from __future__ import annotations

from typing import Any

import pytest

import shortterm
from shortterm import Category, Config, InvalidInput, Privacy, ServerSettings, UserSettings
from shortterm.store.sqlite import SQLiteStore
from tests.read.helpers import say
from tests.support import FakeClock


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("refresh_cadence", 0),
        ("refresh_cadence", 101),
        ("refresh_cadence", 2.5),
        ("refresh_cadence", True),
        ("crude_message_count", 0),
        ("nudge_depth", -1),
        ("nudge_depth", 21),
        ("content_depth", -2),
        ("content_depth", 21),
        ("render_mode", "summary_only"),
        ("stm_enabled", "yes"),
        ("private_channel_ids", "c1"),
    ],
)
def test_out_of_range_settings_name_field_value_and_range(field: str, value: Any) -> None:
    with pytest.raises(InvalidInput) as err:
        ServerSettings(**{field: value})
    assert err.value.field == field and err.value.value == value
    assert field in str(err.value) and repr(value)[:10] in str(err.value)


@pytest.mark.parametrize(
    ("field", "value"),
    [("refresh_cadence", 1), ("refresh_cadence", 100), ("nudge_depth", 0), ("nudge_depth", 20),
     ("content_depth", -1), ("content_depth", 20), ("render_mode", "supersede"),
     ("crude_message_count", 1)],
)  # fmt: skip
def test_range_edges_are_accepted(field: str, value: Any) -> None:
    assert getattr(ServerSettings(**{field: value}), field) == value


async def test_limits_that_depend_on_the_config(memory: shortterm.Memory) -> None:
    with pytest.raises(InvalidInput, match=r"crude_message_count=11 .*max_messages \(10\)"):
        await memory.configure_server("g1", ServerSettings(crude_message_count=11))
    await memory.configure_server("g1", ServerSettings(crude_message_count=10))
    six = tuple(Category(f"Field {n}", "d") for n in range(6))
    with pytest.raises(InvalidInput, match=r"categories=.*max_categories \(5\)"):
        await memory.configure_server("g1", ServerSettings(categories=six))
    await memory.configure_server("g1", ServerSettings(categories=six[:5]))


async def test_category_labels_must_give_distinct_fields(memory: shortterm.Memory) -> None:
    twins = (Category("Open questions", "d"), Category("open-questions!", "d"))
    with pytest.raises(InvalidInput, match="open_questions") as err:
        await memory.configure_server("g1", ServerSettings(categories=twins))
    assert err.value.field == "categories"
    assert (await memory.server_settings("g1")).categories == ()  # nothing was saved


async def test_defaults_when_never_configured(memory: shortterm.Memory) -> None:
    s = await memory.server_settings("never")
    assert (s.refresh_cadence, s.render_mode, s.crude_message_count) == (5, "crude_summary", 6)
    assert (s.nudge_depth, s.content_depth, s.nudge_text, s.categories) == (2, -1, None, ())
    assert s.stm_enabled and not s.privacy_bypass and s.private_channel_ids == frozenset()
    u = await memory.user_settings("nobody")
    assert u.privacy is Privacy.NONE and u.cross_server_opt_in is False


async def test_settings_survive_a_restart(db_url: str, clock: FakeClock, config: Config) -> None:
    chosen = ServerSettings(
        refresh_cadence=9,
        render_mode="supersede",
        crude_message_count=3,
        nudge_depth=0,
        content_depth=4,
        tool_description="describe it",
        nudge_text="nudge {category_labels}",
        categories=(Category("Plans", "next"), Category("Mood", "feel")),
        stm_enabled=False,
        private_channel_ids=frozenset({"vip", "@room:matrix.org"}),
        privacy_bypass=True,
    )
    async with shortterm.open(store=db_url, clock=clock, config=config) as memory:
        await memory.configure_server("g1", chosen)
        await memory.configure_user("u1", UserSettings(Privacy.PARTIAL, cross_server_opt_in=True))
    async with shortterm.open(store=db_url, clock=clock, config=config) as memory:
        assert await memory.server_settings("g1") == chosen
        assert [c.label for c in (await memory.server_settings("g1")).categories] == [
            "Plans",
            "Mood",
        ]
        assert await memory.user_settings("u1") == UserSettings(Privacy.PARTIAL, True)


class CountingStore(SQLiteStore):
    """A real SQLite store that records the name of every contract method called."""

    calls: list[str]

    def __getattribute__(self, name: str) -> Any:
        attr = super().__getattribute__(name)
        # journal_moved is the per-call data_version check (no query, see its benchmark).
        if not name.startswith("_") and callable(attr) and name not in ("calls", "journal_moved"):
            super().__getattribute__("calls").append(name)
        return attr


def counting_store(path: str) -> CountingStore:
    store = CountingStore(path)
    store.calls = []
    return store


async def test_a_warm_turn_costs_no_store_query(
    tmp_path: Any, clock: FakeClock, config: Config
) -> None:
    store = counting_store(str(tmp_path / "count.db"))
    async with shortterm.open(store=store, clock=clock, config=config) as memory:
        await memory.configure_server("g1", ServerSettings(refresh_cadence=2))
        await memory.configure_user("u1", UserSettings(cross_server_opt_in=True))
        await say(memory, channel="c1")
        await say(memory, channel="c2", server="g2")
        store.calls.clear()
        turn = memory.turn(user_id="u1", channel_id="c3", server_id="g1", persona_id="p1")
        for _ in range(3):
            ctx = await turn.context()
            assert ctx.items  # it did read both servers' memory
        assert store.calls == []
        clock.advance(config.settings_refresh_s + 1)
        await turn.context()
        assert sorted(store.calls) == ["server_settings_since", "user_settings_since"]


async def test_settings_changed_elsewhere_arrive_before_the_next_call(
    db_url: str, clock: FakeClock, config: Config
) -> None:
    async with (
        shortterm.open(store=db_url, clock=clock, config=config) as here,
        shortterm.open(store=db_url, clock=clock, config=config) as there,
    ):
        await say(here, channel="c1")
        await there.configure_server("g1", ServerSettings(render_mode="supersede", nudge_depth=7))

        def turn() -> shortterm.Turn:
            return here.turn(user_id="u1", channel_id="c2", server_id="g1")

        # The journal carries the change: no waiting for settings_refresh_s.
        assert (await turn().context()).nudge_depth == 7
