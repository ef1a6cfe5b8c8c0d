"""ShortTermSession against the Agents SDK's session contract, on both kinds of tiers.

Written from the SDK's documented ``Session`` protocol (``agents/memory/session.py``) and
what its own ``SQLiteSession`` does: ``get_items(limit)`` gives the latest ``limit`` items
oldest first (``session_settings.limit`` when no limit is passed), ``add_items`` appends,
``pop_item`` removes and returns the newest item, ``clear_session`` empties; items come back
as they were added. shortterm adds its own bounds: the window of ``max_messages`` messages,
and ``max_item_chars`` per message. Real SDK objects (``Runner``, ``ScriptedModel``), real
tiers: SQLite + in-process, PostgreSQL + Redis.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="the OpenAI Agents SDK is absent: pip install -e '.[dev]'")

from agents import Agent, RunConfig, Runner, function_tool
from agents.memory import SessionSettings
from agents.testing import ScriptedModel, assistant_message, function_call

import shortterm
from shortterm.integrations.home_loop import OtherLoop
from shortterm.integrations.openai_agents import ShortTermSession
from shortterm.model.config import Config

SERVER, CHANNEL, USER = "333", "222", "111"
RUN = RunConfig(tracing_disabled=True)

Q1 = {"role": "user", "content": "where do we meet?"}
A1 = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "at the north gate", "annotations": []}],
}
RS = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "hm"}]}
FC = {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": '{"d":1}'}
FCO = {"type": "function_call_output", "call_id": "c1", "output": "sunny"}
Q2 = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and then?"}]}
A2 = {"role": "assistant", "content": "we hike"}


@pytest.fixture(params=["sqlite+inprocess", "postgres+redis"])
def urls(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    if request.param == "sqlite+inprocess":
        return f"sqlite:///{tmp_path / 'stm.db'}", "memory://"
    store, cache = request.getfixturevalue("scale_urls")
    return str(store), str(cache)


@pytest.fixture
async def memory(urls: tuple[str, str]) -> AsyncIterator[shortterm.Memory]:
    store, cache = urls
    async with await shortterm.open(store=store, cache=cache) as memory:
        yield memory


def session(memory: shortterm.Memory, user: str = USER, **kw: Any) -> ShortTermSession:
    return ShortTermSession(
        memory, user_id=user, channel_id=CHANNEL, server_id=SERVER, user_name="Ana", **kw
    )


# -- order and shape ------------------------------------------------------------------------


async def test_a_batch_of_two_turns_reads_back_in_order(memory: shortterm.Memory) -> None:
    s = session(memory)
    await s.add_items(
        [Q1, A2, {"role": "user", "content": "ok"}, {"role": "assistant", "content": "k"}]
    )
    expected = [Q1, A2, {"role": "user", "content": "ok"}, {"role": "assistant", "content": "k"}]
    assert await s.get_items() == expected
    assert await session(memory).get_items() == expected  # stored, not only held


async def test_an_answer_followed_by_a_question_is_kept_at_once(memory: shortterm.Memory) -> None:
    s = session(memory)
    await s.add_items([Q1, A2, {"role": "user", "content": "and then?"}])
    assert await s.get_items() == [Q1, A2, {"role": "user", "content": "and then?"}]
    # The answered turn is in memory now: another session of the channel sees it.
    assert await session(memory).get_items() == [Q1, A2]


async def test_every_item_comes_back_in_the_shape_added(memory: shortterm.Memory) -> None:
    run = [[Q1], [RS, FC, FCO], [A1], [Q2], [A2]]  # batches as a runner hands them over
    s = session(memory)
    for batch in run:
        await s.add_items(copy.deepcopy(batch))
    flat = [item for batch in run for item in batch]
    assert await s.get_items() == flat
    assert await session(memory).get_items() == flat
    # Recall and the stored messages hold the text only.
    entry = await memory.get(s.live_key)
    assert entry is not None
    assert [m.content for m in entry.messages] == [
        "where do we meet?", "at the north gate", "and then?", "we hike",
    ]  # fmt: skip
    elsewhere = memory.turn(user_id=USER, channel_id="other", server_id=SERVER)
    block = "\n".join(item.text for item in (await elsewhere.context()).items)
    assert "at the north gate" in block
    assert "sunny" not in block
    assert "function_call" not in block


async def test_items_read_back_are_copies(memory: shortterm.Memory) -> None:
    s = session(memory)
    await s.add_items([{"role": "user", "content": "mine"}])
    (got,) = await s.get_items()
    got["content"] = "changed"
    assert await s.get_items() == [{"role": "user", "content": "mine"}]


async def test_what_json_cannot_hold_is_refused_whole(memory: shortterm.Memory) -> None:
    s = session(memory)
    with pytest.raises(TypeError):
        await s.add_items([Q1, {"role": "user", "content": object()}])
    with pytest.raises(shortterm.InvalidInput, match="items"):
        await s.add_items(["not an item"])  # type: ignore[list-item]
    assert await s.get_items() == []


# -- limits and settings --------------------------------------------------------------------


async def test_get_items_limit_counts_items(memory: shortterm.Memory) -> None:
    s = session(memory)
    await s.add_items(
        [Q1, A2, {"role": "user", "content": "u2"}, {"role": "assistant", "content": "a2"}]
    )
    assert await s.get_items(limit=2) == [
        {"role": "user", "content": "u2"},
        {"role": "assistant", "content": "a2"},
    ]
    assert await s.get_items(limit=10) == await s.get_items()
    assert await s.get_items(limit=0) == []
    assert len(await s.get_items(limit=-1)) == 4  # as SQLiteSession: a negative limit is none


async def test_session_settings_limit_is_the_default_limit(memory: shortterm.Memory) -> None:
    s = session(memory, session_settings=SessionSettings(limit=1))
    await s.add_items([Q1, A2])
    assert await s.get_items() == [A2]
    assert await s.get_items(limit=2) == [Q1, A2]  # an explicit limit wins
    as_dict = session(memory, session_settings={"limit": 1})
    assert as_dict.session_settings == SessionSettings(limit=1)
    assert await as_dict.get_items() == [A2]


def test_session_settings_are_checked_when_the_session_is_made(memory: shortterm.Memory) -> None:
    with pytest.raises(TypeError, match="limitt"):
        session(memory, session_settings={"limitt": 1})
    with pytest.raises(TypeError):
        session(memory, session_settings=5)
    assert session(memory).session_settings == SessionSettings()


async def test_a_limit_inside_a_tool_exchange_is_left_to_the_runner(
    memory: shortterm.Memory,
) -> None:
    """The limit cuts items, not messages: the runner drops an output whose call was cut."""
    s = session(memory)
    await s.add_items([Q1, FC, FCO, A1])
    assert await s.get_items(limit=2) == [FCO, A1]
    model = ScriptedModel()
    model.enqueue([assistant_message("bye")])
    limited = RunConfig(tracing_disabled=True, session_settings=SessionSettings(limit=2))
    await Runner.run(Agent(name="t", model=model), "next", session=s, run_config=limited)
    assert model.calls[-1].input == [A1, {"role": "user", "content": "next"}]


# -- pop and clear --------------------------------------------------------------------------


async def test_pop_item_takes_the_newest_item_each_time(memory: shortterm.Memory) -> None:
    s = session(memory)
    await s.add_items([Q1, FC, FCO, A1, {"role": "user", "content": "held"}])
    for expected in ({"role": "user", "content": "held"}, A1, FCO, FC, Q1):
        assert await s.pop_item() == expected
        assert (await session(memory).get_items())[-1:] != [expected]
    assert await s.pop_item() is None
    assert await s.get_items() == []
    personal = await memory.get(shortterm.ScopeKey.user(USER, CHANNEL))
    assert personal is None or personal.messages == ()


async def test_clear_session_forgets_every_item(memory: shortterm.Memory) -> None:
    s = session(memory)
    await s.add_items([Q1, FC, FCO, A1, {"role": "user", "content": "held"}])
    await s.clear_session()
    assert await s.get_items() == []
    assert await session(memory).get_items() == []


# -- bounds and forgets ---------------------------------------------------------------------


async def test_the_window_keeps_whole_messages_with_their_items(urls: tuple[str, str]) -> None:
    store, cache = urls
    async with await shortterm.open(store=store, cache=cache, config=Config(max_messages=3)) as m:
        s = session(m)
        await s.add_items([Q1, FC, FCO, A1])
        await s.add_items([Q2, RS, A2])
        # Three messages stay: Q1 went, and its tool exchange with it.
        assert await s.get_items() == [A1, Q2, RS, A2]
        for i in range(5):  # held without an answer: bounded the same way
            await s.add_items([{"role": "user", "content": f"u{i}"}])
        held = await s.get_items()
        assert held[-3:] == [{"role": "user", "content": f"u{i}"} for i in (2, 3, 4)]


async def test_a_message_over_max_item_chars_keeps_its_text(memory: shortterm.Memory) -> None:
    s = session(memory, max_item_chars=300)
    big = {"type": "function_call_output", "call_id": "c1", "output": "x" * 400}
    await s.add_items([Q1, FC, big, A1])
    # The tool exchange was too large: call and output both dropped, the text kept.
    assert await s.get_items() == [Q1, A1]
    with pytest.raises(shortterm.InvalidInput, match="max_item_chars"):
        session(memory, max_item_chars=0)


async def test_forgets_drop_the_items_with_their_messages(memory: shortterm.Memory) -> None:
    await session(memory).add_items([Q1, FC, FCO, A1])
    await session(memory, user="999").add_items([{"role": "user", "content": "bo"}, A2])
    await memory.clear_user(USER)  # Ana's messages and the bot's answers to her go
    assert await session(memory, user="999").get_items() == [{"role": "user", "content": "bo"}, A2]
    await memory.clear_channel(CHANNEL)
    assert await session(memory).get_items() == []


async def test_captured_messages_carry_the_time_they_were_added(urls: tuple[str, str]) -> None:
    """A forget's horizon drops what is older than it, so an item is as old as its add."""
    store, cache = urls
    now = [time.time()]
    async with await shortterm.open(store=store, cache=cache, clock=lambda: now[0]) as m:
        s = session(m)
        t0 = now[0]
        await s.add_items([Q1])
        now[0] += 30
        await s.add_items([A2])
        entry = await m.get(s.live_key)
        assert entry is not None
        assert [msg.at for msg in entry.messages] == [t0, t0 + 30]


# -- the runner, its loops and its tools ----------------------------------------------------


def _run_sync_in_a_thread(agent: Agent[Any], text: str, s: ShortTermSession) -> str:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)  # what run_sync uses: this thread's default loop
    try:
        return str(Runner.run_sync(agent, text, session=s, run_config=RUN).final_output)
    finally:
        loop.close()


async def test_run_sync_from_a_loop_of_its_own(memory: shortterm.Memory) -> None:
    model = ScriptedModel()
    agent = Agent(name="t", model=model)
    s = session(memory)
    model.enqueue([assistant_message("first answer")])
    await asyncio.to_thread(_run_sync_in_a_thread, agent, "first", s)
    model.enqueue([assistant_message("second answer")])
    await asyncio.to_thread(_run_sync_in_a_thread, agent, "second", s)
    assert [i.get("content") for i in model.calls[-1].input][::2] == ["first", "second"]
    assert len(await session(memory).get_items()) == 4


async def test_an_agent_sees_the_tool_it_used_last_turn(memory: shortterm.Memory) -> None:
    @function_tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    model = ScriptedModel()
    agent = Agent(name="t", model=model, tools=[weather])
    model.enqueue([function_call("weather", {"city": "Oslo"}, call_id="c9")])
    model.enqueue([assistant_message("It is sunny")])
    await Runner.run(agent, "weather?", session=session(memory), run_config=RUN)
    model.enqueue([assistant_message("you asked about Oslo")])
    await Runner.run(agent, "what did you look up?", session=session(memory), run_config=RUN)
    sent = model.calls[-1].input
    kinds = [i.get("type", "message") for i in sent]
    assert kinds == ["message", "function_call", "function_call_output", "message", "message"]
    assert sent[2]["output"] == "sunny in Oslo"
    assert sent[3]["content"][0]["type"] == "output_text"  # the answer as the model gave it


async def test_a_memory_whose_loop_is_idle_says_so(urls: tuple[str, str]) -> None:
    """A memory opened on a loop that is not running, used from another: on PostgreSQL +
    Redis that cannot work, and the error says what to do."""
    store, cache = urls
    if store.startswith("sqlite"):
        pytest.skip("an in-process memory on SQLite serves any loop")

    def scenario() -> BaseException | None:
        idle = asyncio.new_event_loop()
        try:
            memory = idle.run_until_complete(shortterm.open(store=store, cache=cache))

            async def use() -> None:
                s = ShortTermSession(memory, user_id=USER, channel_id=CHANNEL, loop=idle)
                await s.add_items([Q1, A2])

            try:
                asyncio.run(use())
            except BaseException as exc:
                return exc
            finally:
                idle.run_until_complete(memory.close())
            return None
        finally:
            idle.close()

    error = await asyncio.to_thread(scenario)
    assert isinstance(error, OtherLoop), error
    assert "loop=" in str(error)
    assert len(str(error)) <= 300
