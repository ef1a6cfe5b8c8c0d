"""ShortTermChatHistory against what LangChain documents for a chat history, on both kinds of
tiers: the messages added come back, oldest first, in the order and shape they were added
(ids, metadata, tool calls and their results), within the window of ``max_messages``; a turn
is captured at the answer that ends it; captured messages carry the time they were added.
SQLite + in-process, PostgreSQL + Redis.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

pytest.importorskip("langchain_core", reason="needs the [langchain] extra (langchain-core)")

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

import shortterm
from shortterm.integrations.langchain import ShortTermChatHistory
from shortterm.model.config import Config

SERVER, CHANNEL, USER = "333", "222", "111"
CALL = {"name": "weather", "args": {"city": "Oslo"}, "id": "call_1", "type": "tool_call"}


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


def history(memory: shortterm.Memory, user: str = USER, **kw: object) -> ShortTermChatHistory:
    return ShortTermChatHistory(
        memory, user_id=user, channel_id=CHANNEL, server_id=SERVER, user_name="Ana",
        has_tools=False, **kw,
    )  # fmt: skip


def turn_with_a_tool() -> list[BaseMessage]:
    return [
        HumanMessage("weather in Oslo?", id="h1"),
        AIMessage("let me look", tool_calls=[CALL], id="a1"),
        ToolMessage("sunny", tool_call_id="call_1", id="t1"),
        AIMessage("Sunny.", id="a2", response_metadata={"model_name": "m"}),
    ]


async def test_messages_come_back_in_the_shape_added(memory: shortterm.Memory) -> None:
    added = turn_with_a_tool()
    h = history(memory)
    await h.aadd_messages(added)
    assert await h.aget_messages() == added
    assert await history(memory).aget_messages() == added  # stored, not only held
    entry = await memory.get(h.turn.live_key)
    assert entry is not None
    assert [(m.role, m.content) for m in entry.messages] == [
        ("user", "weather in Oslo?"),
        ("assistant", "let me look"),
        ("assistant", "Sunny."),
    ]


async def test_text_with_a_tool_call_waits_for_the_final_answer(
    memory: shortterm.Memory,
) -> None:
    h = history(memory)
    *run, answer = turn_with_a_tool()
    await h.aadd_messages(run)
    assert await memory.get(h.turn.live_key) is None  # the run goes on
    await h.aadd_messages([answer])
    entry = await memory.get(h.turn.live_key)
    assert entry is not None
    assert [m.content for m in entry.messages] == ["weather in Oslo?", "let me look", "Sunny."]
    assert entry.turns_since_refresh == 0  # one turn, and it could not use the tool


async def test_an_answer_followed_by_a_question_is_kept_at_once(memory: shortterm.Memory) -> None:
    h = history(memory)
    await h.aadd_messages([HumanMessage("one"), AIMessage("1"), HumanMessage("two")])
    assert [m.content for m in await h.aget_messages()] == ["one", "1", "two"]
    assert [m.content for m in await history(memory).aget_messages()] == ["one", "1"]


async def test_captured_messages_carry_the_time_they_were_added(urls: tuple[str, str]) -> None:
    """A forget's horizon drops what is older than it, so a message is as old as its add."""
    store, cache = urls
    now = [time.time()]
    async with await shortterm.open(store=store, cache=cache, clock=lambda: now[0]) as m:
        h = history(m)
        t0 = now[0]
        await h.aadd_messages([HumanMessage("one")])
        now[0] += 30
        await h.aadd_messages([AIMessage("1"), HumanMessage("two")])
        now[0] += 30
        await h.aadd_messages([AIMessage("2")])
        entry = await m.get(h.turn.live_key)
        assert entry is not None
        assert [msg.at for msg in entry.messages] == [t0, t0 + 30, t0 + 30, t0 + 60]


async def test_the_window_keeps_whole_messages(urls: tuple[str, str]) -> None:
    store, cache = urls
    async with await shortterm.open(store=store, cache=cache, config=Config(max_messages=3)) as m:
        h = history(m)
        first = turn_with_a_tool()
        await h.aadd_messages(first)
        await h.aadd_messages([HumanMessage("and tomorrow?"), AIMessage("rain")])
        # Three messages stay; the first went, and the messages riding on it did not stay
        # without it (the tool call rode on "let me look", which went too).
        assert await h.aget_messages() == [
            first[3],
            HumanMessage("and tomorrow?"),
            AIMessage("rain"),
        ]


async def test_another_person_is_named_whatever_the_shape(memory: shortterm.Memory) -> None:
    blocks = HumanMessage([{"type": "text", "text": "hi all"}], id="b1")
    await history(memory, "999").aadd_messages([blocks, AIMessage("hi Bo")])
    got = await history(memory).aget_messages()
    assert [m.content for m in got][1] == "hi Bo"
    first = got[0].content
    text = first if isinstance(first, str) else first[0]["text"]  # type: ignore[index]
    assert text == "Ana: hi all"  # Ana: the name that history gives its user


async def test_a_session_of_the_agents_sdk_reads_the_text(memory: shortterm.Memory) -> None:
    """Another adapter's items in the same channel are not its own: it reads the text."""
    pytest.importorskip("agents", reason="the OpenAI Agents SDK is absent")
    from shortterm.integrations.openai_agents import ShortTermSession

    await history(memory).aadd_messages(turn_with_a_tool())
    s = ShortTermSession(memory, user_id=USER, channel_id=CHANNEL, server_id=SERVER)
    assert await s.get_items() == [
        {"role": "user", "content": "weather in Oslo?"},
        {"role": "assistant", "content": "let me look"},
        {"role": "assistant", "content": "Sunny."},
    ]
    await s.add_items(
        [{"role": "user", "content": "thanks"}, {"role": "assistant", "content": "np"}]
    )
    got = await history(memory).aget_messages()
    assert [m.content for m in got[-2:]] == ["thanks", "np"]


async def test_a_message_json_cannot_hold_is_refused(memory: shortterm.Memory) -> None:
    h = history(memory)
    with pytest.raises(TypeError):
        await h.aadd_messages([HumanMessage("x", additional_kwargs={"o": object()})])
    with pytest.raises(shortterm.InvalidInput, match="max_item_chars"):
        history(memory, max_item_chars=0)
    assert await h.aget_messages() == []
