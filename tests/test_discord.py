"""The discord.py helpers against real discord.py objects built from gateway payloads.

No network: see ``shortterm.integrations.discord_offline`` for how the objects are made and for
the one stand-in (the adapter that records interaction answers instead of posting them).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import shortterm
from shortterm import ExtraMissing
from shortterm.integrations.discord import (
    MAX_DISCORD_CHARS,
    REFRESH_REFUSED,
    MemoryCog,
    convert_history,
    convert_message,
    format_memory,
    turn_kwargs,
)
from shortterm.integrations.discord_offline import (
    ANA_ID,
    BEN_ID,
    BOT_ID,
    CAL_ID,
    DM_ID,
    GENERAL_ID,
    GUILD_ID,
    MANAGE_MESSAGES,
    ORGANISERS_ID,
    PLANS_ID,
    T0,
    THREAD_ID,
    WEBHOOK_ID,
    World,
    make_world,
    recording,
    webhook_author,
)
from tests.support import FakeClock

NOW = T0.timestamp() + 600  # ten minutes after the first message


@pytest.fixture
def world() -> World:
    return make_world()


@pytest.fixture
async def memory(tmp_path: Path):  # type: ignore[no-untyped-def]
    async with shortterm.open(
        store=f"sqlite:///{tmp_path / 'bot.db'}", clock=FakeClock(NOW)
    ) as opened:
        yield opened


# -- conversion -----------------------------------------------------------------------------


def test_mentions_become_names(world: World) -> None:
    general = world.channel(GENERAL_ID)
    message = world.message(
        general,
        ANA_ID,
        f"<@{BOT_ID}> can <@!{BEN_ID}> and <@&{ORGANISERS_ID}> check <#{PLANS_ID}> "
        f"and <#{THREAD_ID}>?",
        mentions=[BOT_ID, BEN_ID],
        mention_roles=[ORGANISERS_ID],
    )
    converted = convert_message(message, bot_id=BOT_ID)
    assert converted is not None
    assert converted.content == "@Tomo can @ben and @Organisers check #plans and #saturday-hike?"
    assert converted.role == "user"
    assert converted.author_id == str(ANA_ID)
    assert converted.speaker == "Ana B."  # the server nickname
    assert converted.message_id == str(message.id)
    assert converted.at == message.created_at.timestamp()


def test_unresolvable_references_never_leak_raw_ids(world: World) -> None:
    message = world.message(
        world.channel(GENERAL_ID),
        BEN_ID,
        f"ask <@{CAL_ID}> in <#123456789012345678> about <@&765432109876543210>",
    )
    converted = convert_message(message, bot_id=BOT_ID)
    assert converted is not None
    assert converted.content == "ask @unknown-user in #unknown-channel about @unknown-role"
    assert converted.speaker == "ben"


def test_emoji_timestamps_and_command_mentions(world: World) -> None:
    message = world.message(
        world.channel(GENERAL_ID),
        ANA_ID,
        "<:blob_wave:123456789012345678> meet <t:1700000000:R>, use </refresh:98765432109876543>",
    )
    converted = convert_message(message, bot_id=BOT_ID)
    assert converted is not None
    assert converted.content == ":blob_wave: meet 2023-11-14 22:13 UTC, use /refresh"


def test_attachments_stickers_and_embeds_become_notes(world: World) -> None:
    message = world.message(
        world.channel(GENERAL_ID),
        ANA_ID,
        "the map https://maps.example/ridge",
        attachments=["ridge.png", "elevation.pdf"],
        stickers=["wave"],
        embeds=[
            {"type": "link", "title": "Ridge trail map", "url": "https://maps.example/ridge"},
            {"type": "rich", "title": "Weather", "description": "Sunny, 18°C"},
        ],
    )
    converted = convert_message(message, bot_id=BOT_ID)
    assert converted is not None
    text, notes = converted.content.split("\n")
    assert text == "the map https://maps.example/ridge"
    assert notes == (
        "[attachment: ridge.png] [attachment: elevation.pdf] [sticker: wave] "
        "[embed: Weather — Sunny, 18°C]"
    )  # the link preview is not repeated


def test_a_message_that_is_only_a_picture_is_kept_as_a_note(world: World) -> None:
    message = world.message(world.channel(GENERAL_ID), BEN_ID, "", attachments=["summit.jpg"])
    converted = convert_message(message, bot_id=BOT_ID)
    assert converted is not None
    assert converted.content == "[attachment: summit.jpg]"


def test_many_attachments_are_counted_not_listed(world: World) -> None:
    names = [f"photo{i}.jpg" for i in range(8)]
    message = world.message(world.channel(GENERAL_ID), BEN_ID, "", attachments=names)
    converted = convert_message(message, bot_id=BOT_ID)
    assert converted is not None
    assert converted.content.count("[attachment:") == 5
    assert converted.content.endswith("[+3 more attachments]")


def test_voice_messages_are_noted_without_their_file(world: World) -> None:
    message = world.message(
        world.channel(GENERAL_ID), ANA_ID, "", attachments=["voice-message.ogg"], flags=1 << 13
    )
    converted = convert_message(message, bot_id=BOT_ID)
    assert converted is not None
    assert converted.content == "[voice message]"


def test_system_and_empty_messages_are_dropped(world: World) -> None:
    general = world.channel(GENERAL_ID)
    joined = world.message(general, CAL_ID, "", message_type=7)  # "Cal joined the server"
    pinned = world.message(general, ANA_ID, "", message_type=6)
    blank = world.message(general, ANA_ID, "   \n ")
    assert convert_message(joined, bot_id=BOT_ID) is None
    assert convert_message(pinned, bot_id=BOT_ID) is None
    assert convert_message(blank, bot_id=BOT_ID) is None


def test_roles_come_from_authorship(world: World) -> None:
    general = world.channel(GENERAL_ID)
    own = world.message(general, BOT_ID, "Saturday it is.")
    persona = world.message(general, 0, "I can bring snacks.", webhook=webhook_author("Luna"))
    other_bot = world.message(general, 0, "Level up!", webhook=webhook_author("Levels"))
    converted = convert_message(own, bot_id=BOT_ID)
    assert converted is not None
    assert (converted.role, converted.speaker) == ("assistant", "Tomo")
    as_persona = convert_message(persona, bot_id=BOT_ID, assistant_ids={WEBHOOK_ID})
    assert as_persona is not None
    assert (as_persona.role, as_persona.speaker) == ("assistant", "Luna")
    # The same webhook without being declared is someone else speaking.
    foreign = convert_message(other_bot, bot_id=BOT_ID)
    assert foreign is not None
    assert foreign.role == "user"


def test_history_is_oldest_first_and_starts_after_a_cutoff(world: World) -> None:
    general = world.channel(GENERAL_ID)
    first = world.message(general, ANA_ID, "hike?", minutes=0)
    second = world.message(general, BOT_ID, "yes!", minutes=1)
    joined = world.message(general, CAL_ID, "", minutes=2, message_type=7)
    third = world.message(general, BEN_ID, "count me in", minutes=3)
    newest_first = [third, joined, second, first]  # as channel.history() yields them
    history = convert_history(newest_first, bot_id=BOT_ID)
    assert [m.content for m in history] == ["hike?", "yes!", "count me in"]
    assert [m.role for m in history] == ["user", "assistant", "user"]
    after = convert_history(newest_first, bot_id=BOT_ID, after=second.id)
    assert [m.content for m in after] == ["count me in"]


# -- turn arguments ---------------------------------------------------------------------------


def test_turn_kwargs_in_a_channel(world: World) -> None:
    message = world.message(world.channel(GENERAL_ID), ANA_ID, f"hi <@{BOT_ID}>", mentions=[BOT_ID])
    kwargs = turn_kwargs(message, provider="openai", persona_id="7")
    assert kwargs == {
        "user_id": str(ANA_ID),
        "channel_id": str(GENERAL_ID),
        "server_id": str(GUILD_ID),
        "server_name": "Hikers",
        "channel_name": "general",
        "user_name": "Ana B.",
        "bot_name": "Tomo",
        "user_message": "hi @Tomo",
        "provider": "openai",
        "persona_id": "7",
    }


def test_turn_kwargs_in_a_thread_name_the_parent(world: World) -> None:
    message = world.message(world.channel(THREAD_ID), BEN_ID, "8am works")
    kwargs = turn_kwargs(message)
    assert kwargs["channel_id"] == str(THREAD_ID)
    assert kwargs["parent_channel_id"] == str(GENERAL_ID)
    assert kwargs["channel_name"] == "saturday-hike"


def test_turn_kwargs_in_a_dm(world: World) -> None:
    message = world.message(world.dm(), ANA_ID, "just us")
    kwargs = turn_kwargs(message)
    assert kwargs["server_id"] is None
    assert kwargs["channel_id"] == str(DM_ID)
    assert "channel_name" not in kwargs
    assert "server_name" not in kwargs
    assert kwargs["user_name"] == "Ana"  # no nickname outside a server: the global name
    assert kwargs["bot_name"] == "tomo-bot"


async def test_a_turn_from_discord_objects_is_captured(
    world: World, memory: shortterm.Memory
) -> None:
    thread = world.channel(THREAD_ID)
    earlier = world.message(thread, BEN_ID, "who brings the map?", minutes=1)
    message = world.message(
        thread, ANA_ID, f"<@{BOT_ID}> do you have it?", minutes=2, mentions=[BOT_ID]
    )
    turn = memory.turn(**turn_kwargs(message))
    history = convert_history([message, earlier], bot_id=BOT_ID)
    await turn.capture(history=history, replies=[shortterm.Reply("I do!")])
    entry = await memory.get(shortterm.ScopeKey.server(str(GUILD_ID), str(THREAD_ID)))
    assert entry is not None
    assert [(m.speaker, m.content) for m in entry.messages] == [
        ("ben", "who brings the map?"),
        ("Ana B.", "@Tomo do you have it?"),
        ("Tomo", "I do!"),
    ]
    assert entry.parent_channel_id == str(GENERAL_ID)
    assert entry.channel_name == "saturday-hike"
    assert entry.messages[0].at == earlier.created_at.timestamp()


# -- the cog ----------------------------------------------------------------------------------


async def _remembered(memory: shortterm.Memory, world: World) -> shortterm.ScopeKey:
    message = world.message(world.channel(GENERAL_ID), ANA_ID, "Saturday, ridge trail, 8am")
    turn = memory.turn(**turn_kwargs(message))
    await turn.capture(
        history=convert_history([message], bot_id=BOT_ID),
        replies=[shortterm.Reply("Noted!", persona_name="Tomo")],
    )
    key = shortterm.ScopeKey.server(str(GUILD_ID), str(GENERAL_ID))
    await memory.set_summary(key, "Hike on Saturday: ridge trail, 8am.")
    return key


async def test_the_cog_registers_both_commands_and_hides_refresh_by_default(
    world: World, memory: shortterm.Memory
) -> None:
    await world.bot.add_cog(MemoryCog(memory))
    tree = world.bot.tree
    assert sorted(c.name for c in tree.get_commands()) == ["memory", "refresh"]
    refresh = tree.get_command("refresh")
    assert refresh is not None
    assert refresh.to_dict(tree)["default_member_permissions"] == MANAGE_MESSAGES
    view = tree.get_command("memory")
    assert view is not None
    assert view.to_dict(tree)["default_member_permissions"] is None


async def test_refresh_without_manage_messages_is_refused_and_clears_nothing(
    world: World, memory: shortterm.Memory
) -> None:
    key = await _remembered(memory, world)
    cog = MemoryCog(memory)
    with recording() as sent:
        await cog.refresh_command.callback(cog, world.interaction("refresh"))
    [answer] = sent
    assert answer.ephemeral
    assert answer.content == REFRESH_REFUSED
    assert answer.path == "/interactions/{webhook_id}/{webhook_token}/callback"
    entry = await memory.get(key)
    assert entry is not None
    assert entry.summary == "Hike on Saturday: ridge trail, 8am."


async def test_refresh_with_manage_messages_clears_the_channel_durably(
    world: World, memory: shortterm.Memory, tmp_path: Path
) -> None:
    key = await _remembered(memory, world)
    cog = MemoryCog(memory)
    interaction = world.interaction("refresh", permissions=MANAGE_MESSAGES)
    with recording() as sent:
        await cog.refresh_command.callback(cog, interaction)
    [answer] = sent
    assert answer.ephemeral
    assert answer.content.startswith("Done: I forgot this channel's recent conversation")
    assert await memory.get(key) is None
    assert await memory.get(shortterm.ScopeKey.user(str(ANA_ID), str(GENERAL_ID))) is None
    async with shortterm.open(store=f"sqlite:///{tmp_path / 'bot.db'}") as reopened:
        assert await reopened.get(key) is None


async def test_history_after_still_answers_for_one_release_and_warns(
    world: World, memory: shortterm.Memory
) -> None:
    cog = MemoryCog(memory)
    with pytest.warns(DeprecationWarning, match="every process and after a restart"):
        assert cog.history_after(GENERAL_ID) is None
    interaction = world.interaction("refresh", permissions=MANAGE_MESSAGES, minutes=9)
    with recording():
        await cog.refresh_command.callback(cog, interaction)
    with pytest.warns(DeprecationWarning, match="deprecated"):
        assert cog.history_after(GENERAL_ID) == interaction.id


async def test_refresh_in_a_dm_needs_no_permission(world: World, memory: shortterm.Memory) -> None:
    message = world.message(world.dm(), ANA_ID, "remember the hike?")
    turn = memory.turn(**turn_kwargs(message))
    await turn.capture(
        history=convert_history([message], bot_id=BOT_ID), replies=[shortterm.Reply("Yes")]
    )
    key = shortterm.ScopeKey.user(str(ANA_ID), str(DM_ID))
    assert await memory.get(key) is not None
    cog = MemoryCog(memory)
    with recording() as sent:
        await cog.refresh_command.callback(cog, world.interaction("refresh", dm=True))
    assert sent[0].ephemeral
    assert sent[0].content.startswith("Done")
    assert await memory.get(key) is None


async def test_memory_shows_summary_and_recent_messages_with_their_age(
    world: World, memory: shortterm.Memory
) -> None:
    await _remembered(memory, world)
    cog = MemoryCog(memory)
    with recording() as sent:
        await cog.memory_command.callback(cog, world.interaction("memory"))
    [answer] = sent
    assert answer.ephemeral
    assert answer.payload is not None
    assert answer.payload["data"]["allowed_mentions"] == {"parse": []}
    text = answer.content
    assert len(text) <= MAX_DISCORD_CHARS
    assert "**Summary** · written just now" in text
    assert "> Hike on Saturday: ridge trail, 8am." in text
    assert "> `10 minutes ago` **Ana B.**: Saturday, ridge trail, 8am" in text
    assert "> `just now` **Tomo**: Noted!" in text


async def test_memory_shows_category_labels_of_the_server(
    world: World, memory: shortterm.Memory
) -> None:
    await memory.configure_server(
        str(GUILD_ID),
        shortterm.ServerSettings(categories=[shortterm.Category("Travel plans", "Trips")]),
    )
    key = shortterm.ScopeKey.server(str(GUILD_ID), str(GENERAL_ID))
    await memory.set_categories(key, {"travel_plans": "Ridge trail on Saturday"})
    cog = MemoryCog(memory)
    with recording() as sent:
        await cog.memory_command.callback(cog, world.interaction("memory"))
    assert "> Travel plans: Ridge trail on Saturday" in sent[0].content


async def test_memory_in_an_empty_channel(world: World, memory: shortterm.Memory) -> None:
    cog = MemoryCog(memory)
    with recording() as sent:
        await cog.memory_command.callback(cog, world.interaction("memory", dm=True))
    assert sent[0].content == "**What I remember of this conversation**\nNothing yet."


def test_the_view_fits_discord_and_cannot_ping_or_format() -> None:
    key = shortterm.ScopeKey.server("1", "2")
    messages = tuple(
        shortterm.Message(
            "user", f"@everyone **look** {'x' * 3000}", speaker=f"User{i}", at=NOW - 60 * i
        )
        for i in range(10)
    )
    entry = shortterm.Entry(key, messages=messages, summary="s" * 5000, summary_at=NOW)
    text = format_memory(entry, now=NOW, where="#general")
    assert len(text) <= MAX_DISCORD_CHARS
    assert "@everyone" not in text  # escaped with a zero-width space
    assert "**look**" not in text
    assert "older not shown" in text


# -- packaging --------------------------------------------------------------------------------


def test_import_shortterm_does_not_import_discord() -> None:
    code = "import sys, shortterm, shortterm.integrations; print('discord' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_missing_discord_py_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['discord'] = None\n"
        "try:\n"
        "    import shortterm.integrations.discord\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ("ExtraMissing " + str(ExtraMissing("discord", "discord.py")))
