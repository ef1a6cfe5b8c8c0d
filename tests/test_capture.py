"""Write path 1: passive capture through the public API."""

from __future__ import annotations

import asyncio

import pytest

import shortterm
from shortterm import Message, Privacy, Reply, ScopeKey, ServerSettings, UserSettings
from tests.support import FakeClock

G, C, U, P = "g1", "c1", "u1", "p1"


def said(text: str, author: str = U, **kw: object) -> Message:
    return Message("user", text, author_id=author, speaker=author, **kw)  # type: ignore[arg-type]


def reply(text: str = "ok", persona: str | None = P, **kw: object) -> Reply:
    return Reply(text, persona_id=persona, persona_name="Tomo", **kw)  # type: ignore[arg-type]


async def test_guild_turn_writes_user_and_server_scope(memory: shortterm.Memory) -> None:
    turn = memory.turn(user_id=U, channel_id=C, server_id=G, persona_id=P, bot_name="Tomo")
    await turn.capture(history=[said("hi")], replies=[reply("hello!")])
    for key in (ScopeKey.user(U, C, P), ScopeKey.server(G, C, P)):
        entry = await memory.get(key)
        assert entry is not None
        assert [(m.role, m.content) for m in entry.messages] == [
            ("user", "hi"),
            ("assistant", "hello!"),
        ]
        assert entry.messages[-1].speaker == "Tomo"
    assert (await memory.get(ScopeKey.server(G, C, P))).turns_since_refresh == 1  # type: ignore[union-attr]
    assert (await memory.get(ScopeKey.user(U, C, P))).turns_since_refresh == 0  # type: ignore[union-attr]


async def test_dm_writes_the_user_scope_only_and_counts_there(memory: shortterm.Memory) -> None:
    turn = memory.turn(user_id=U, channel_id="dm1", persona_id=P)
    await turn.capture(history=[said("secret")], replies=[reply()])
    entry = await memory.get(ScopeKey.user(U, "dm1", P))
    assert entry is not None and entry.turns_since_refresh == 1 and entry.server_id is None
    assert memory.stats()["entries"] == 1


async def test_keeps_the_newest_messages_in_order(
    memory: shortterm.Memory, clock: FakeClock
) -> None:
    history = [said(f"m{i}", at=clock() + i) for i in range(15)]
    turn = memory.turn(user_id=U, channel_id=C, server_id=G)
    await turn.capture(history=history, replies=[reply("r", persona=None)])
    entry = await memory.get(ScopeKey.server(G, C))
    assert entry is not None
    assert [m.content for m in entry.messages] == [f"m{i}" for i in range(6, 15)] + ["r"]


async def test_capture_replaces_rather_than_appends(memory: shortterm.Memory) -> None:
    turn = memory.turn(user_id=U, channel_id=C, server_id=G)
    await turn.capture(history=[said("a")], replies=[reply("b", persona=None)])
    await turn.capture(history=[said("a"), said("c")], replies=[reply("d", persona=None)])
    entry = await memory.get(ScopeKey.server(G, C))
    assert entry is not None and [m.content for m in entry.messages] == ["a", "c", "d"]
    assert entry.turns_since_refresh == 2


@pytest.mark.parametrize(
    ("kwargs", "replies"),
    [
        ({"stopped": True}, [Reply("x")]),
        ({}, []),
        ({}, [Reply("   ")]),
    ],
)
async def test_skipped_turns_write_nothing(
    memory: shortterm.Memory, kwargs: dict[str, bool], replies: list[Reply]
) -> None:
    turn = memory.turn(user_id=U, channel_id=C, server_id=G)
    await turn.capture(history=[said("hi")], replies=replies, **kwargs)
    assert memory.stats()["entries"] == 0
    assert await memory.store.load(ScopeKey.server(G, C)) is None
    assert memory.stats()["captures_skipped"] == 1


async def test_full_privacy_triggerer_never_reaches_any_store(memory: shortterm.Memory) -> None:
    await memory.turn(user_id=U, channel_id=C, server_id=G, privacy=Privacy.FULL).capture(
        history=[said("hide me")], replies=[reply()]
    )
    await memory.configure_user("u2", UserSettings(privacy=Privacy.FULL))
    await memory.turn(user_id="u2", channel_id=C, server_id=G).capture(
        history=[said("me too", author="u2")], replies=[reply()]
    )
    assert memory.stats()["entries"] == 0
    assert await memory.store.load(ScopeKey.server(G, C, P)) is None


async def test_full_privacy_participants_are_dropped(memory: shortterm.Memory) -> None:
    await memory.configure_user("stored-full", UserSettings(privacy=Privacy.FULL))
    history = [
        said("visible"),
        said("flagged", author="u9", privacy=Privacy.FULL),
        said("configured", author="stored-full"),
    ]
    await memory.turn(user_id=U, channel_id=C, server_id=G).capture(
        history=history, replies=[reply()]
    )
    entry = await memory.get(ScopeKey.server(G, C, P))
    assert entry is not None and [m.content for m in entry.messages] == ["visible", "ok"]


async def test_user_scope_keeps_only_the_users_and_the_bots_messages(
    memory: shortterm.Memory,
) -> None:
    history = [said("mine"), said("theirs", author="u2"), Message("user", "unattributed")]
    await memory.turn(user_id=U, channel_id=C, server_id=G).capture(
        history=history, replies=[reply()]
    )
    mine = await memory.get(ScopeKey.user(U, C, P))
    shared = await memory.get(ScopeKey.server(G, C, P))
    assert mine is not None and shared is not None
    assert [m.content for m in mine.messages] == ["mine", "unattributed", "ok"]
    assert [m.content for m in shared.messages] == ["mine", "theirs", "unattributed", "ok"]


async def test_partial_privacy_keeps_no_personal_scope(memory: shortterm.Memory) -> None:
    await memory.turn(user_id=U, channel_id=C, server_id=G, privacy=Privacy.PARTIAL).capture(
        history=[said("hi")], replies=[reply()]
    )
    assert await memory.get(ScopeKey.user(U, C, P)) is None
    assert await memory.get(ScopeKey.server(G, C, P)) is not None
    await memory.turn(user_id=U, channel_id="dm", privacy=Privacy.PARTIAL).capture(
        history=[said("hi")], replies=[reply()]
    )
    assert await memory.get(ScopeKey.user(U, "dm", P)) is None


async def test_one_entry_per_reply_persona(memory: shortterm.Memory) -> None:
    replies = [
        Reply("from tomo", persona_id="1", persona_lineage_id="L1"),
        Reply("from kai", persona_id="2", persona_lineage_id="L2"),
        Reply("tomo again", persona_id="1"),
    ]
    await memory.turn(user_id=U, channel_id=C, server_id=G).capture(
        history=[said("hi")], replies=replies
    )
    for persona, lineage in (("1", "L1"), ("2", "L2")):
        entry = await memory.get(ScopeKey.server(G, C, persona))
        assert entry is not None and entry.persona_lineage_id == lineage
        assert [m.content for m in entry.messages] == ["hi", "from tomo", "from kai", "tomo again"]
        assert entry.turns_since_refresh == 1
    assert await memory.get(ScopeKey.server(G, C)) is None


async def test_persona_zero_is_a_real_persona(memory: shortterm.Memory) -> None:
    await memory.turn(user_id=U, channel_id=C, server_id=G, persona_id="0").capture(
        history=[said("zero")], replies=[Reply("r")]
    )
    assert await memory.get(ScopeKey.server(G, C, "0")) is not None
    assert await memory.get(ScopeKey.server(G, C)) is None


async def test_capture_preserves_a_durable_summary(memory: shortterm.Memory) -> None:
    key = ScopeKey.server(G, C, P)
    await memory.set_summary(key, "we planned a hike")
    await memory.turn(user_id=U, channel_id=C, server_id=G, persona_id=P).capture(
        history=[said("and then?")], replies=[reply()]
    )
    entry = await memory.get(key)
    assert entry is not None and entry.summary == "we planned a hike" and len(entry.messages) == 2


async def test_counter_does_not_grow_where_the_tool_can_never_be_offered(
    memory: shortterm.Memory,
) -> None:
    await memory.configure_server("off", ServerSettings(stm_enabled=False))
    turns = [
        memory.turn(user_id=U, channel_id="a", server_id=G, provider="NovelAI"),
        memory.turn(user_id=U, channel_id="b", server_id=G, has_tools=False),
        memory.turn(user_id=U, channel_id="c", server_id="off"),
    ]
    for turn in turns:
        await turn.capture(history=[said("hi")], replies=[Reply("r")])
        entry = await memory.get(turn.live_key)
        assert entry is not None and entry.turns_since_refresh == 0


async def test_private_channel_is_recorded_at_capture(memory: shortterm.Memory) -> None:
    await memory.configure_server(G, ServerSettings(private_channel_ids=frozenset({"secret"})))
    await memory.turn(
        user_id=U, channel_id="thread", server_id=G, parent_channel_id="secret"
    ).capture(history=[said("psst")], replies=[Reply("ok")])
    entry = await memory.get(ScopeKey.server(G, "thread"))
    assert entry is not None and entry.private and entry.parent_channel_id == "secret"
    await memory.flush()  # the capture's row is buffered (write-behind)
    row = await memory.store.load(ScopeKey.server(G, "thread"))
    assert row is not None and row.meta.private


async def test_messages_are_stamped_and_capped(db_url: str, clock: FakeClock) -> None:
    config = shortterm.Config(sweep_interval_s=0, max_message_chars=100)
    async with shortterm.open(store=db_url, clock=clock, config=config) as memory:
        await memory.turn(user_id=U, channel_id=C, server_id=G).capture(
            history=[said("x" * 1_000_000)], replies=[Reply("y" * 500)]
        )
        entry = await memory.get(ScopeKey.server(G, C))
        assert entry is not None
        assert [len(m.content) for m in entry.messages] == [100, 100]
        assert all(m.at == clock() for m in entry.messages)


async def test_concurrent_captures_leave_exact_counters(memory: shortterm.Memory) -> None:
    async def one(i: int) -> None:
        turn = memory.turn(user_id=f"u{i % 7}", channel_id=f"c{i % 5}", server_id=G, persona_id=P)
        await turn.capture(history=[said(f"m{i}", author=f"u{i % 7}")], replies=[reply()])

    await asyncio.gather(*(one(i) for i in range(100)))
    await memory.flush()  # the counter steps are buffered (write-behind)
    for ch in range(5):
        key = ScopeKey.server(G, f"c{ch}", P)
        entry = await memory.get(key)
        row = await memory.store.load(key)
        assert entry is not None and row is not None
        assert entry.turns_since_refresh == row.turns_since_refresh == 20


async def test_a_turn_without_the_channel_name_leaves_the_recalled_name(
    memory: shortterm.Memory,
) -> None:
    """A surface that names the channel once (the first turn) and not later (an adapter, a
    retry) still shows ``#plans`` in the recall of other channels, not its id."""
    said = [Message("user", "Pack list?", author_id="111", speaker="Ana")]
    replies = [Reply("Water and snacks.")]
    named = memory.turn(user_id="111", channel_id="98765", server_id="333", channel_name="plans")
    await named.capture(history=said, replies=replies)
    unnamed = memory.turn(user_id="111", channel_id="98765", server_id="333")
    await unnamed.capture(history=said, replies=replies)
    ctx = await memory.turn(user_id="111", channel_id="general", server_id="333").context()
    text = "\n".join(item.text for item in ctx.items)
    assert "#plans in this server" in text, text
    assert "<#98765>" not in text


async def test_user_scope_keeps_only_the_bots_answers_to_the_user(
    memory: shortterm.Memory,
) -> None:
    """The bot's answers to someone else, in the history, stay in the channel's scope: they
    may retell what that person said, and the user's scope follows the user elsewhere."""
    bot = shortterm.Message  # an earlier answer of the bot, as the platform shows it
    history = [
        bot("assistant", "an answer whose question scrolled away"),
        said("mine"),
        bot("assistant", "answer to mine"),
        said("theirs: my address is 12 Elm St", author="u2"),
        bot("assistant", "noted, 12 Elm St"),
        said("and now?"),
    ]
    await memory.turn(user_id=U, channel_id=C, server_id=G).capture(
        history=history, replies=[reply()]
    )
    mine = await memory.get(ScopeKey.user(U, C, P))
    shared = await memory.get(ScopeKey.server(G, C, P))
    assert mine is not None and shared is not None
    assert [m.content for m in mine.messages] == ["mine", "answer to mine", "and now?", "ok"]
    assert len(shared.messages) == 7
