"""The Discord example's turn against a scripted OpenAI-compatible server on loopback.

Discord objects are real discord.py objects built from gateway payloads (no Discord network);
the model speaks the real chat-completions wire format, tool calls included.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType

import pytest
from openai import AsyncOpenAI

import shortterm
from shortterm.integrations.discord import MemoryCog
from shortterm.integrations.discord_offline import (
    ANA_ID,
    BEN_ID,
    BOT_ID,
    GENERAL_ID,
    GUILD_ID,
    MANAGE_MESSAGES,
    PLANS_ID,
    T0,
    World,
    make_world,
    recording,
)
from shortterm.tool import texts
from tests.fake_model_process import fake_model_process
from tests.support import FakeClock
from tests.test_example_tool_loop import ScriptedModel, text, tool_call

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "discord_bot.py"
SUMMARY = "Ana, Ben and Tomo hike the ridge trail on Saturday, leaving at 8."
NOW = T0.timestamp() + 600


@pytest.fixture(scope="module")
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("discord_bot", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def world() -> World:
    return make_world()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "bot.db"


@pytest.fixture
async def memory(db: Path) -> AsyncIterator[shortterm.Memory]:
    async with shortterm.open(store=f"sqlite:///{db}", clock=FakeClock(NOW)) as opened:
        yield opened


class Channel:
    """Where the example's ``send`` puts the reply: a list, instead of Discord."""

    def __init__(self, fail: bool = False) -> None:
        self.pieces: list[str] = []
        self.fail = fail

    async def send(self, piece: str) -> None:
        if self.fail:
            raise RuntimeError("Discord refused the message")
        self.pieces.append(piece)


async def _plans_were_discussed(memory: shortterm.Memory, world: World) -> None:
    """An earlier turn in #plans, so #general has another channel to recall."""
    plans = world.channel(PLANS_ID)
    said = world.message(plans, ANA_ID, "Pack list: water, rain jacket, snacks")
    from shortterm.integrations.discord import convert_history, turn_kwargs

    turn = memory.turn(**turn_kwargs(said))
    await turn.capture(
        history=convert_history([said], bot_id=BOT_ID), replies=[shortterm.Reply("Got it!")]
    )


async def test_a_turn_recalls_calls_the_tool_replies_and_captures(
    example: ModuleType, world: World, memory: shortterm.Memory, db: Path
) -> None:
    await _plans_were_discussed(memory, world)
    general = world.channel(GENERAL_ID)
    earlier = world.message(general, BEN_ID, "who's in for saturday?", minutes=1)
    message = world.message(
        general, ANA_ID, f"<@{BOT_ID}> we still on for 8?", minutes=2, mentions=[BOT_ID]
    )
    answers = [tool_call(json.dumps({"summary": SUMMARY})), text("Yes! 8am at the car park.")]
    channel = Channel()
    with ScriptedModel(answers) as model:
        async with AsyncOpenAI(base_url=model.base_url, api_key="test") as llm:
            reply = await example.respond(
                memory, llm, message, [earlier], bot_id=BOT_ID, model="m", send=channel.send
            )
    assert reply == "Yes! 8am at the car park."
    assert channel.pieces == [reply]

    first, second = model.requests
    assert [t["function"]["name"] for t in first["tools"]] == ["update_short_term_memory"]
    sent = first["messages"]
    assert sent[0]["role"] == "system"
    assert "You are Tomo" in sent[0]["content"]
    assert "#general" in sent[0]["content"]
    # The other channel's memory, anchored right after the system prompt, quoted as data.
    assert sent[1]["role"] == "user"
    assert "#plans in this server" in sent[1]["content"]
    assert "│ Ana B.: Pack list: water, rain jacket, snacks" in sent[1]["content"]
    assert sent[-2:] == [
        {"role": "user", "content": "ben: who's in for saturday?"},
        {"role": "user", "content": "Ana B.: @Tomo we still on for 8?"},
    ]
    assert "tools" not in second  # one upgrade per turn
    assert second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": texts.OK,
    }

    key = shortterm.ScopeKey.server(str(GUILD_ID), str(GENERAL_ID))
    entry = await memory.get(key)
    assert entry is not None
    assert [(m.role, m.speaker, m.content) for m in entry.messages] == [
        ("user", "ben", "who's in for saturday?"),
        ("user", "Ana B.", "@Tomo we still on for 8?"),
        ("assistant", "Tomo", "Yes! 8am at the car park."),
    ]
    assert entry.summary == SUMMARY
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT kind, summary FROM scopes WHERE channel_id = ?", (str(GENERAL_ID),)
        ).fetchall()
    conn.close()
    assert sorted(rows) == [("server", SUMMARY), ("user", SUMMARY)]


async def test_the_next_turn_sees_the_summary(
    example: ModuleType, world: World, memory: shortterm.Memory
) -> None:
    general = world.channel(GENERAL_ID)
    first = world.message(general, ANA_ID, "hike at 8", minutes=1)
    second = world.message(general, ANA_ID, "when again?", minutes=3)
    answers = [tool_call(json.dumps({"summary": SUMMARY})), text("Noted."), text("At 8.")]
    channel = Channel()
    with ScriptedModel(answers) as model:
        async with AsyncOpenAI(base_url=model.base_url, api_key="test") as llm:
            await example.respond(
                memory, llm, first, [], bot_id=BOT_ID, model="m", send=channel.send
            )
            await example.respond(
                memory, llm, second, [first], bot_id=BOT_ID, model="m", send=channel.send
            )
    same_channel = model.requests[2]["messages"][1]
    assert same_channel["role"] == "user"
    assert "working memory of this conversation" in same_channel["content"]
    assert SUMMARY in same_channel["content"]


async def test_messages_before_a_refresh_are_not_captured_again(
    example: ModuleType, world: World, db: Path
) -> None:
    """The example passes the channel's history as Discord keeps it; after a /refresh (here
    in a process that then stopped) its next turn captures only what came after."""
    general = world.channel(GENERAL_ID)
    forgotten = world.message(general, BEN_ID, "secret plan", minutes=1)
    async with shortterm.open(store=f"sqlite:///{db}", clock=FakeClock(NOW)) as before:
        cog = MemoryCog(before)
        with recording():
            await cog.refresh_command.callback(
                cog, world.interaction("refresh", permissions=MANAGE_MESSAGES, minutes=5)
            )
    message = world.message(general, ANA_ID, "fresh start", minutes=6)
    earlier = [m async for m in general.history(limit=20, before=message)]
    assert [m.id for m in earlier] == [forgotten.id]  # Discord still holds it
    channel = Channel()
    async with shortterm.open(store=f"sqlite:///{db}", clock=FakeClock(NOW)) as memory:
        with ScriptedModel([text("Hi!")]) as model:
            async with AsyncOpenAI(base_url=model.base_url, api_key="test") as llm:
                await example.respond(
                    memory, llm, message, earlier, bot_id=BOT_ID, model="m", send=channel.send
                )
        entry = await memory.get(shortterm.ScopeKey.server(str(GUILD_ID), str(GENERAL_ID)))
    assert entry is not None
    assert [m.content for m in entry.messages] == ["fresh start", "Hi!"]


async def test_an_undelivered_or_empty_reply_is_not_remembered(
    example: ModuleType, world: World, memory: shortterm.Memory
) -> None:
    general = world.channel(GENERAL_ID)
    message = world.message(general, ANA_ID, "hello?", minutes=1)
    with ScriptedModel([text("Hi!"), text("   ")]) as model:
        async with AsyncOpenAI(base_url=model.base_url, api_key="test") as llm:
            with pytest.raises(RuntimeError, match="refused"):
                await example.respond(
                    memory, llm, message, [], bot_id=BOT_ID, model="m", send=Channel(True).send
                )
            quiet = Channel()
            assert (
                await example.respond(
                    memory, llm, message, [], bot_id=BOT_ID, model="m", send=quiet.send
                )
                is None
            )
    assert quiet.pieces == []
    assert await memory.get(shortterm.ScopeKey.server(str(GUILD_ID), str(GENERAL_ID))) is None


def test_long_replies_are_split_for_discord(example: ModuleType) -> None:
    reply = "\n".join(f"line {i} " + "word " * 30 for i in range(40))
    pieces = example.split_message(reply)
    assert len(pieces) > 1
    assert all(0 < len(p) <= 2000 for p in pieces)
    assert " ".join(" ".join(p.split()) for p in pieces) == " ".join(reply.split())
    assert example.split_message("x" * 4500) == ["x" * 2000, "x" * 2000, "x" * 500]


async def test_the_bot_answers_mentions_replies_and_dms_only(
    example: ModuleType, memory: shortterm.Memory
) -> None:
    async with AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="test") as llm:
        bot = example.MemoryBot(memory, llm, model="m")
        world = make_world(bot)
    general = world.channel(GENERAL_ID)
    mine = world.message(general, BOT_ID, "Saturday at 8?")
    assert bot.addressed(world.message(general, ANA_ID, f"<@{BOT_ID}> hi", mentions=[BOT_ID]))
    assert bot.addressed(world.message(general, ANA_ID, "sure", reply_to=mine))
    assert bot.addressed(world.message(world.dm(), ANA_ID, "hello"))
    assert not bot.addressed(world.message(general, ANA_ID, "just chatting"))
    assert not bot.addressed(
        world.message(general, BEN_ID, "ok", reply_to=world.message(general, ANA_ID, "x"))
    )
    assert not bot.addressed(mine)  # never itself
    assert bot.intents.message_content
    assert not bot.allowed_mentions.everyone
    assert not bot.allowed_mentions.roles


# -- offline, as docs/discord.md runs it ---------------------------------------------------------

OFFLINE = EXAMPLE.parent / "discord_offline.py"
DOCS = EXAMPLE.parent.parent / "docs" / "discord.md"


def documented_scene() -> list[str]:
    """The transcript docs/discord.md shows under "Try it offline"."""
    section = DOCS.read_text("utf-8").split("## Try it offline", 1)[1]
    return section.split("```text\n", 1)[1].split("```", 1)[0].splitlines()


def test_the_offline_example_recalls_plans_in_general(tmp_path: Path) -> None:
    """`shortterm fake-model` and examples/discord_offline.py, each a process of its own: the
    note taken in #plans is in the prompt of the turn in #general, and in its reply."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHORTTERM_")}
    with fake_model_process(tmp_path / "prompts.jsonl") as model:
        proc = subprocess.run(
            [sys.executable, str(OFFLINE), "--base-url", model.url],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        sent = model.chats()
    assert proc.returncode == 0, proc.stderr
    note = "@Tomo note that we hike the ridge trail on Saturday at 8, Ben brings the map"
    lines = proc.stdout.splitlines()
    assert lines[:3] == [
        "#plans ben: who's bringing what on Saturday?",
        f"#plans Ana B.: {note}",
        f'#plans Tomo: Notes updated. You said: "Ana B.: {note}". My memory is empty here.',
    ]
    assert lines[5].startswith('#general Tomo: You said: "Ana B.: @Tomo are we still on')
    assert f'"Ana B.: {note}"' in lines[5]
    assert lines == documented_scene()  # docs/discord.md shows this very output
    assert ["tools" in request for request in sent] == [True, False, True]
    recalled = sent[-1]["messages"][1]  # anchored right after the system prompt
    assert recalled["role"] == "user"
    assert "⟦#plans in this server · summary written" in recalled["content"]
    assert f"│ Ana B.: {note}" in recalled["content"].splitlines()


def test_the_offline_objects_name_the_extra_without_discord_py() -> None:
    code = (
        "import sys; sys.modules['discord'] = None\n"
        "try:\n"
        "    import shortterm.integrations.discord_offline\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("ExtraMissing ")
    assert ".[discord]" in out.stdout


def test_the_offline_world_refuses_an_unknown_channel() -> None:
    with pytest.raises(shortterm.InvalidInput, match="channel_id"):
        make_world().channel(12345)
