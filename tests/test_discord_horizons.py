"""A /refresh and a purge hold against Discord's own history, on a freshly started cog.

Discord keeps every message of a channel, and the bot passes the channel's recent history to
every turn (``channel.history()``, answered here from the messages the offline world built).
After a forget, a bot that restarted (a new process: new memory, new bot, new cog) or another
process already running passes that history again: none of what the forget covered may be
captured, and everything written after it must be.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from pathlib import Path

import pytest

import shortterm
from shortterm import Privacy, ScopeKey, UserSettings
from shortterm.integrations.discord import MemoryCog, convert_history, turn_kwargs
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
from shortterm.model.horizons import HORIZON_AHEAD_S
from tests.support import FakeClock

SERVER = ScopeKey.server(str(GUILD_ID), str(GENERAL_ID))
COMMAND_AT = 60  # minutes after T0: the forget; the scene's old messages are before it


def minute(m: float) -> float:
    return (T0 + timedelta(minutes=m)).timestamp()


def mention(text: str) -> str:
    return f"<@{BOT_ID}> {text}"


class Scene:
    """#general on Discord (the world keeps its messages across bot restarts) and the bot's
    turn as ``examples/discord_bot.py`` takes it."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.world = make_world()

    def restart(self) -> None:
        """A new bot process: a new discord.py client; Discord still holds the channel."""
        fresh = make_world()
        fresh.payloads.update(self.world.payloads)
        fresh.messages = self.world.messages
        self.world = fresh

    def say(self, author_id: int, text: str, at: float) -> None:
        self.clock.now = minute(at)
        self.world.message(self.world.channel(GENERAL_ID), author_id, text, minutes=at)

    async def turn(
        self, memory: shortterm.Memory, author_id: int, text: str, reply: str, at: float
    ) -> list[str]:
        """``author_id`` asks the bot at minute ``at``; the bot passes the channel's last 20
        messages, captures, and posts ``reply``. Returns the history it passed."""
        self.clock.now = minute(at)
        world, general = self.world, self.world.channel(GENERAL_ID)
        message = world.message(general, author_id, mention(text), minutes=at, mentions=[BOT_ID])
        earlier = [m async for m in general.history(limit=20, before=message)]
        history = convert_history([*earlier, message], bot_id=BOT_ID)
        turn = memory.turn(**turn_kwargs(message))
        await turn.capture(history=history, replies=[shortterm.Reply(reply)])
        world.message(general, BOT_ID, reply, minutes=at + 0.5)
        return [m.content for m in history]


async def shown(memory: shortterm.Memory, key: ScopeKey) -> list[str]:
    entry = await memory.get(key)
    return [] if entry is None else [m.content for m in entry.messages]


Opened = Callable[[], AbstractAsyncContextManager[shortterm.Memory]]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(minute(0))


@pytest.fixture
def open_memory(tmp_path: Path, clock: FakeClock) -> Opened:
    @asynccontextmanager
    async def opened() -> AsyncIterator[shortterm.Memory]:
        async with shortterm.open(store=f"sqlite:///{tmp_path / 'bot.db'}", clock=clock) as m:
            yield m

    return opened


async def _old_conversation(scene: Scene, memory: shortterm.Memory) -> None:
    scene.say(BEN_ID, "my door code is 4411", at=1)
    await scene.turn(memory, BEN_ID, "remember my code", "Noted: 4411.", at=2)
    await scene.turn(memory, ANA_ID, "hike on Saturday?", "Saturday at 8.", at=3)
    assert "my door code is 4411" in await shown(memory, SERVER)


async def _refresh(memory: shortterm.Memory, world: World, channel_id: int = GENERAL_ID) -> str:
    cog = MemoryCog(memory)
    interaction = world.interaction(
        "refresh", channel_id=channel_id, permissions=MANAGE_MESSAGES, minutes=COMMAND_AT
    )
    with recording() as sent:
        await cog.refresh_command.callback(cog, interaction)
    return sent[0].content


async def _memory_view(memory: shortterm.Memory, world: World) -> str:
    """What the freshly started cog's ``/memory`` shows of #general."""
    cog = MemoryCog(memory)
    with recording() as sent:
        await cog.memory_command.callback(cog, world.interaction("memory", minutes=70))
    return sent[0].content


@pytest.mark.parametrize("after", ["restart", "other process"])
async def test_after_refresh_the_next_turn_captures_only_what_came_after(
    after: str, open_memory: Opened, clock: FakeClock
) -> None:
    scene = Scene(clock)
    async with open_memory() as first, open_memory() as other:
        await _old_conversation(scene, first)
        clock.now = minute(COMMAND_AT) + 2  # the command reaches the bot after Discord ran it
        done = await _refresh(first, scene.world)
        assert done.startswith("Done: I forgot this channel's recent conversation")
        if after == "other process":
            await _after_the_refresh(scene, other)
            return
    scene.restart()
    async with open_memory() as fresh:
        await _after_the_refresh(scene, fresh)


async def _after_the_refresh(scene: Scene, memory: shortterm.Memory) -> None:
    # Written a moment before the command reached the bot, after Discord ran it: new data.
    scene.say(ANA_ID, "typed while the refresh ran", at=COMMAND_AT + 0.01)
    scene.say(BEN_ID, "new plan: 9am", at=COMMAND_AT + 1)
    passed = await scene.turn(memory, ANA_ID, "9 then?", "9 it is.", at=COMMAND_AT + 2)
    assert "my door code is 4411" in passed  # Discord still holds the old messages
    new = ["typed while the refresh ran", "new plan: 9am", "@Tomo 9 then?", "9 it is."]
    assert await shown(memory, SERVER) == new
    anas = ["typed while the refresh ran", "@Tomo 9 then?", "9 it is."]  # hers and answers
    assert await shown(memory, ScopeKey.user(str(ANA_ID), str(GENERAL_ID))) == anas
    assert await shown(memory, ScopeKey.user(str(BEN_ID), str(GENERAL_ID))) == []
    view = await _memory_view(memory, scene.world)
    assert "4411" not in view
    assert "Saturday" not in view
    assert "9 it is" in view


Purge = Callable[[shortterm.Memory, float], Awaitable[object]]


async def _clear_user(memory: shortterm.Memory, at: float) -> None:
    await memory.clear_user(str(BEN_ID), at=at)


async def _full_then_lifted(memory: shortterm.Memory, at: float) -> None:
    await memory.configure_user(str(BEN_ID), UserSettings(privacy=Privacy.FULL), at=at)
    await memory.configure_user(str(BEN_ID), UserSettings(privacy=Privacy.NONE))


@pytest.mark.parametrize("purge", [_clear_user, _full_then_lifted], ids=["clear_user", "full"])
@pytest.mark.parametrize("after", ["restart", "other process"])
async def test_after_a_purge_the_next_turn_captures_none_of_theirs_before_it(
    purge: Purge, after: str, open_memory: Opened, clock: FakeClock
) -> None:
    scene = Scene(clock)
    async with open_memory() as first, open_memory() as other:
        await _old_conversation(scene, first)
        # A bot's own privacy command passes the time Discord ran it, as /refresh does.
        clock.now = minute(COMMAND_AT) + 2
        command = scene.world.interaction("forget-me", user_id=BEN_ID, minutes=COMMAND_AT)
        await purge(first, MemoryCog(first).platform_time(command))
        if after == "other process":
            await _after_the_purge(scene, other)
            return
    scene.restart()
    async with open_memory() as fresh:
        await _after_the_purge(scene, fresh)


async def _after_the_purge(scene: Scene, memory: shortterm.Memory) -> None:
    passed = await scene.turn(memory, BEN_ID, "I'm back", "Welcome back.", at=COMMAND_AT + 1)
    assert "my door code is 4411" in passed and "Noted: 4411." in passed
    # Ana's conversation stays, with the bot's answer to her; Ben's old words and the bot's
    # answer to them (which retold them) do not come back; what he wrote after is new.
    assert await shown(memory, SERVER) == [
        "@Tomo hike on Saturday?",
        "Saturday at 8.",
        "@Tomo I'm back",
        "Welcome back.",
    ]
    assert await shown(memory, ScopeKey.user(str(BEN_ID), str(GENERAL_ID))) == [
        "@Tomo I'm back",
        "Welcome back.",
    ]


async def test_refresh_passes_the_time_discord_ran_it(
    open_memory: Opened, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    world = make_world()
    async with open_memory() as memory:
        clock.now = minute(COMMAND_AT) + 2
        await _refresh(memory, world)
        assert memory.journal.horizons.channel(str(GENERAL_ID)) == minute(COMMAND_AT)
        # A host clock far behind Discord's: the horizon is held to the most a forget takes
        # (the command still works), and the log says why.
        clock.now = minute(COMMAND_AT) - 3600
        with caplog.at_level(logging.WARNING, "shortterm.discord"):
            assert (await _refresh(memory, world, PLANS_ID)).startswith("Done")
        assert "clock is 3600 s behind Discord's" in caplog.text
        held = clock() + HORIZON_AHEAD_S
        assert memory.journal.horizons.channel(str(PLANS_ID)) == held
        assert MemoryCog(memory).platform_time(world.interaction("x", minutes=COMMAND_AT)) == held
