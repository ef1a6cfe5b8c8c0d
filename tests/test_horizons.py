"""Forget horizons: after a clear, a purge or a FULL choice, the next turn passes the
platform's history again (the platform keeps it), and none of what the forget covered is
captured, in this process, in another one sharing the memory, and after a restart."""

from __future__ import annotations

import pytest

import shortterm
from shortterm import Config, InvalidInput, Message, Privacy, Reply, ScopeKey, UserSettings
from tests.support import T0, FakeClock

G, C, P = "g1", "c1", "p1"


def cfg(**changes: object) -> Config:
    return Config(sweep_interval_s=0, write_behind_ms=0).replace(**changes)


class Platform:
    """A channel as the platform keeps it: every message ever written, each with its time;
    a bot passes the newest ten to every capture."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.said: list[Message] = []

    def say(self, who: str, text: str) -> None:
        self.clock.advance(1)
        self.said.append(Message("user", text, author_id=who, at=self.clock()))

    def answer(self, text: str) -> None:
        self.clock.advance(1)
        self.said.append(Message("assistant", text, speaker="bot", at=self.clock()))

    async def turn(self, memory: shortterm.Memory, user: str, reply: str = "ok") -> None:
        self.clock.advance(1)
        turn = memory.turn(user_id=user, channel_id=C, server_id=G, persona_id=P)
        await turn.capture(history=self.said[-10:], replies=[Reply(reply, persona_id=P)])
        self.answer(reply)


async def shown(memory: shortterm.Memory, key: ScopeKey) -> list[str]:
    entry = await memory.get(key)
    return [] if entry is None else [m.content for m in entry.messages]


SERVER = ScopeKey.server(G, C, P)


async def test_a_cleared_channel_does_not_come_back_with_the_platforms_history(
    tiers: tuple[str, str], clock: FakeClock
) -> None:
    store, cache = tiers
    platform = Platform(clock)
    async with shortterm.open(store=store, cache=cache, clock=clock, config=cfg()) as memory:
        platform.say("ana", "old secret")
        await platform.turn(memory, "ana", "old answer")
        assert "old secret" in await shown(memory, SERVER)
        await memory.clear_channel(C)
        platform.say("ben", "new question")
        await platform.turn(memory, "ben", "new answer")
        assert await shown(memory, SERVER) == ["new question", "new answer"]
    # Another process on the same memory, opened after the clear (a restart): the same.
    async with shortterm.open(store=store, cache=cache, clock=clock, config=cfg()) as other:
        platform.say("ana", "later")
        await platform.turn(other, "ana", "later answer")
        assert await shown(other, SERVER) == [
            "new question",
            "new answer",
            "later",
            "later answer",
        ]


async def test_a_purged_user_and_the_bots_answers_to_her_stay_out(
    tiers: tuple[str, str], clock: FakeClock
) -> None:
    store, cache = tiers
    platform = Platform(clock)
    async with shortterm.open(store=store, cache=cache, clock=clock, config=cfg()) as memory:
        platform.say("dana", "my address is 12 Elm St")
        await platform.turn(memory, "dana", "noted, 12 Elm St")
        platform.say("ana", "hello")
        await platform.turn(memory, "ana", "hi Ana")
        await memory.clear_user("dana")
        platform.say("ben", "what did dana say?")
        await platform.turn(memory, "ben", "nothing I keep")
        kept = await shown(memory, SERVER)
        assert "my address is 12 Elm St" not in kept
        assert "noted, 12 Elm St" not in kept  # the bot's answer to her retold it
        assert kept == ["hello", "hi Ana", "what did dana say?", "nothing I keep"]
        # She may speak again: what she writes after the purge is new.
        platform.say("dana", "I am back")
        await platform.turn(memory, "dana", "welcome back")
        assert (await shown(memory, SERVER))[-2:] == ["I am back", "welcome back"]
        assert await shown(memory, ScopeKey.user("dana", C, P)) == ["I am back", "welcome back"]


async def test_a_full_choice_keeps_the_past_out_after_it_is_lifted(
    tiers: tuple[str, str], clock: FakeClock
) -> None:
    store, cache = tiers
    platform = Platform(clock)
    async with shortterm.open(store=store, cache=cache, clock=clock, config=cfg()) as memory:
        platform.say("dana", "before the choice")
        await platform.turn(memory, "dana", "answered before")
        await memory.configure_user("dana", UserSettings(privacy=Privacy.FULL))
        await memory.configure_user("dana", UserSettings(privacy=Privacy.NONE))
        platform.say("dana", "after the choice")
        await platform.turn(memory, "dana", "answered after")
        assert await shown(memory, SERVER) == ["after the choice", "answered after"]


async def test_a_forget_in_one_process_holds_in_another_already_open(
    tiers: tuple[str, str], clock: FakeClock
) -> None:
    store, cache = tiers
    platform = Platform(clock)
    config = cfg()
    async with (
        shortterm.open(store=store, cache=cache, clock=clock, config=config) as one,
        shortterm.open(store=store, cache=cache, clock=clock, config=config) as two,
    ):
        platform.say("dana", "dana's words")
        platform.say("ana", "ana's words")
        await platform.turn(two, "ana")
        await one.clear_user("dana")
        await platform.turn(two, "ana", "again")
        assert "dana's words" not in await shown(two, SERVER)
        await one.clear_channel(C)
        await platform.turn(two, "ana", "after the clear")
        assert await shown(two, SERVER) == ["after the clear"]


async def test_the_platforms_time_of_the_command_is_the_horizon(
    memory: shortterm.Memory, clock: FakeClock
) -> None:
    platform = Platform(clock)
    platform.say("ana", "before")
    command_at = clock()
    platform.say("ana", "sent while the command travelled")
    clock.advance(5)  # the forget reaches the memory later than the platform ran it
    await memory.clear_channel(C, at=command_at + 0.5)
    await platform.turn(memory, "ana")
    assert await shown(memory, SERVER) == ["sent while the command travelled", "ok"]


async def test_a_message_the_memory_cannot_place_is_taken_as_old(
    memory: shortterm.Memory, clock: FakeClock
) -> None:
    await memory.clear_channel(C)
    clock.advance(10)
    turn = memory.turn(user_id="ana", channel_id=C, server_id=G, persona_id=P)
    untimed = Message("user", "no time given", author_id="ana")
    timed = Message("user", "timed", author_id="ana", at=clock())
    await turn.capture(history=[untimed, timed], replies=[Reply("ok")])
    assert await shown(memory, SERVER) == ["timed", "ok"]
    assert memory.stats()["horizon_dropped"] == 1


async def test_discord_ids_place_a_message_without_a_time(db_url: str, clock: FakeClock) -> None:
    def snowflake(at: float) -> str:
        return str((int(at * 1000) - 1_420_070_400_000) << 22)

    config = cfg(message_ids="discord")
    async with shortterm.open(store=db_url, clock=clock, config=config) as memory:
        await memory.clear_channel(C)
        old = Message("user", "old", author_id="ana", message_id=snowflake(clock() - 60))
        new = Message("user", "new", author_id="ana", message_id=snowflake(clock() + 1))
        clock.advance(2)
        turn = memory.turn(user_id="ana", channel_id=C, server_id=G, persona_id=P)
        await turn.capture(history=[old, new], replies=[Reply("ok")])
        entry = await memory.get(SERVER)
        assert entry is not None and [m.content for m in entry.messages] == ["new", "ok"]
        assert entry.messages[0].at == pytest.approx(T0 + 1, abs=0.001)  # the id's time


async def test_a_horizon_far_ahead_of_the_clock_is_refused(memory: shortterm.Memory) -> None:
    with pytest.raises(InvalidInput, match="ahead"):
        await memory.clear_channel(C, at=T0 + 3600)
    with pytest.raises(InvalidInput, match="at"):
        await memory.clear_user("dana", at=float("nan"))
    await memory.clear_channel(C, at=T0 + 60)  # within a platform clock's skew


async def test_horizons_are_kept_past_the_journals_retention(db_url: str, clock: FakeClock) -> None:
    platform = Platform(clock)
    async with shortterm.open(store=db_url, clock=clock, config=cfg()) as memory:
        platform.say("ana", "from long ago")
        await memory.clear_channel(C)
    clock.advance(30 * 86400)  # a quiet channel: a month later its history is the same
    async with shortterm.open(store=db_url, clock=clock, config=cfg()) as memory:
        await memory.janitor()
        await platform.turn(memory, "ana")
        assert await shown(memory, SERVER) == ["ok"]


async def test_an_answer_whose_question_is_out_of_sight_is_kept_only_when_newer(
    memory: shortterm.Memory, clock: FakeClock
) -> None:
    platform = Platform(clock)
    platform.say("ben", "my pin is 4411")
    platform.answer("noted: 4411")
    await memory.clear_user("ben")
    platform.say("ana", "hi")
    turn = memory.turn(user_id="ana", channel_id=C, server_id=G, persona_id=P)
    # The platform's window starts at the bot's answer: Ben's question fell out of it.
    await turn.capture(history=platform.said[1:], replies=[Reply("hello", persona_id=P)])
    assert await shown(memory, SERVER) == ["hi", "hello"]
    platform.answer("hello")
    platform.say("ana", "and now?")
    turn = memory.turn(user_id="ana", channel_id=C, server_id=G, persona_id=P)
    await turn.capture(history=platform.said[3:], replies=[Reply("still here", persona_id=P)])
    # An answer out of sight but newer than every forget is new data.
    assert await shown(memory, SERVER) == ["hello", "and now?", "still here"]


async def test_the_bots_answers_to_a_full_privacy_user_are_not_captured(
    memory: shortterm.Memory, clock: FakeClock
) -> None:
    platform = Platform(clock)
    await memory.configure_user("dana", UserSettings(privacy=Privacy.FULL))
    platform.say("ana", "hi")
    platform.answer("hi Ana")
    platform.say("dana", "my code is 4512")
    platform.answer("noted, your code is 4512")
    platform.say("ana", "lunch?")
    await platform.turn(memory, "ana", "sure")
    assert await shown(memory, SERVER) == ["hi", "hi Ana", "lunch?", "sure"]
