"""Forgets through the adapters: the Agents SDK session and the LangChain history, in a channel
two people talk in, on SQLite + in-process and on PostgreSQL + Redis.

- A purge (``clear_user``) takes the purged user's messages and the bot's answers to them
  (which often retell them) from the channel's shared memory, and keeps the answers to the
  other user; what she says after it is new, and kept.
- After a clear of the channel, what is said next is kept (the adapters' items are new data,
  stamped with the memory's clock, later than the clear).

Real SDK ``Session`` / ``BaseChatMessageHistory`` objects, real tiers, the real clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

import shortterm
from shortterm import ScopeKey

pytest.importorskip("agents", reason="the OpenAI Agents SDK is absent: pip install -e '.[dev]'")
pytest.importorskip("langchain_core", reason="needs the [langchain] extra (langchain-core)")

from langchain_core.messages import AIMessage, HumanMessage

from shortterm.integrations.langchain import ShortTermChatHistory
from shortterm.integrations.openai_agents import ShortTermSession

SERVER, CHANNEL = "333", "222"
ANA, BEN = "111", "999"
NAMES = {ANA: "Ana", BEN: "Ben"}
LIVE = ScopeKey.server(SERVER, CHANNEL)

Say = Callable[[str, str, str], Awaitable[None]]
Seen = Callable[[str], Awaitable[list[str]]]


class Agents:
    """One ``ShortTermSession`` per run, as in a multi-party chat: the user's message, then
    (after the model) the answer."""

    def __init__(self, memory: shortterm.Memory) -> None:
        self.memory = memory

    def session(self, user: str) -> ShortTermSession:
        return ShortTermSession(
            self.memory,
            user_id=user,
            channel_id=CHANNEL,
            server_id=SERVER,
            user_name=NAMES[user],
            bot_name="Tomo",
        )

    async def say(self, user: str, question: str, answer: str) -> None:
        s = self.session(user)
        await s.add_items([{"role": "user", "content": question}])
        await s.add_items([{"role": "assistant", "content": answer}])

    async def seen(self, user: str) -> list[str]:
        return [str(item.get("content")) for item in await self.session(user).get_items()]

    async def clear(self) -> None:
        await self.session(ANA).clear_session()


class LangChain:
    """One ``ShortTermChatHistory`` per user, as ``RunnableWithMessageHistory`` saves a turn."""

    def __init__(self, memory: shortterm.Memory) -> None:
        self.memory = memory
        self.histories = {
            user: ShortTermChatHistory(
                memory,
                user_id=user,
                channel_id=CHANNEL,
                server_id=SERVER,
                user_name=NAMES[user],
                bot_name="Tomo",
                has_tools=False,
            )
            for user in (ANA, BEN)
        }

    async def say(self, user: str, question: str, answer: str) -> None:
        await self.histories[user].aadd_messages([HumanMessage(question), AIMessage(answer)])

    async def seen(self, user: str) -> list[str]:
        return [str(m.content) for m in await self.histories[user].aget_messages()]

    async def clear(self) -> None:
        await self.histories[ANA].aclear()


Adapter = Agents | LangChain


@pytest.fixture(params=["sqlite+inprocess", "postgres+redis"])
def urls(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(store, cache): one process's default, and the tiers several processes share."""
    if request.param == "sqlite+inprocess":
        return f"sqlite:///{tmp_path / 'stm.db'}", "memory://"
    store, cache = request.getfixturevalue("scale_urls")
    return str(store), str(cache)


@pytest.fixture
async def memory(urls: tuple[str, str]) -> AsyncIterator[shortterm.Memory]:
    store, cache = urls
    async with shortterm.open(store=store, cache=cache) as opened:
        yield opened


def adapter(name: str, memory: shortterm.Memory) -> Adapter:
    return Agents(memory) if name == "agents" else LangChain(memory)


async def contents(memory: shortterm.Memory, key: ScopeKey) -> list[str]:
    entry = await memory.get(key)
    return [] if entry is None else [m.content for m in entry.messages]


async def _purged(chat: Adapter, memory: shortterm.Memory) -> None:
    """Ben and Ana talk in the channel; Ben is purged."""
    await chat.say(BEN, "my door code is 4411", "Noted: 4411.")
    await chat.say(ANA, "hike on Saturday?", "Saturday at 8.")
    await chat.say(BEN, "I bring snacks", "Snacks are on Ben.")
    assert "Noted: 4411." in await contents(memory, LIVE)
    await memory.clear_user(BEN)


@pytest.mark.parametrize("name", ["agents", "langchain"])
async def test_a_purge_takes_the_answers_to_her_and_keeps_the_answers_to_others(
    name: str, memory: shortterm.Memory
) -> None:
    chat = adapter(name, memory)
    await _purged(chat, memory)
    assert await contents(memory, LIVE) == ["hike on Saturday?", "Saturday at 8."]
    assert await contents(memory, ScopeKey.user(BEN, CHANNEL)) == []
    assert await contents(memory, ScopeKey.user(ANA, CHANNEL)) == [
        "hike on Saturday?",
        "Saturday at 8.",
    ]
    seen = "\n".join(await chat.seen(ANA))  # what the adapter gives the model for Ana
    assert "4411" not in seen
    assert "Snacks" not in seen
    assert "Saturday at 8." in seen
    # The channel goes on: Ana's next turn is kept beside her earlier one.
    await chat.say(ANA, "and the map?", "Ana brings the map.")
    assert await contents(memory, LIVE) == [
        "hike on Saturday?",
        "Saturday at 8.",
        "and the map?",
        "Ana brings the map.",
    ]


@pytest.mark.parametrize("name", ["agents", "langchain"])
async def test_what_a_purged_user_says_after_the_purge_is_kept(
    name: str, memory: shortterm.Memory
) -> None:
    chat = adapter(name, memory)
    await _purged(chat, memory)
    await chat.say(BEN, "I am back", "Welcome back, Ben.")
    assert await contents(memory, LIVE) == [
        "hike on Saturday?",
        "Saturday at 8.",
        "I am back",
        "Welcome back, Ben.",
    ]
    assert await contents(memory, ScopeKey.user(BEN, CHANNEL)) == [
        "I am back",
        "Welcome back, Ben.",
    ]


@pytest.mark.parametrize("name", ["agents", "langchain"])
async def test_after_a_clear_the_new_items_are_kept(name: str, memory: shortterm.Memory) -> None:
    chat = adapter(name, memory)
    await chat.say(ANA, "old plan: 7am", "7 it is.")
    await chat.say(BEN, "old snack list", "Noted.")
    await chat.clear()  # clear_session / aclear: memory.clear_channel
    assert await contents(memory, LIVE) == []
    await chat.say(BEN, "new plan: 9am", "9 it is.")
    await chat.say(ANA, "who brings the map?", "Ben does.")
    new = ["new plan: 9am", "9 it is.", "who brings the map?", "Ben does."]
    assert await contents(memory, LIVE) == new
    seen = "\n".join(await chat.seen(ANA))
    assert "old plan" not in seen
    assert "Ben does." in seen
