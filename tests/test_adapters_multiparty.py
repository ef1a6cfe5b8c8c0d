"""The Agents SDK session and the LangChain history in a channel several people talk in.

- ``pop_item`` removes only the caller's own messages and the bot's replies to them (a reply
  belongs to the user message before it), never another person's, in the live scope and in
  the caller's own scope.
- Two users' turns in one channel, answered at the same moment, both stay in the channel's
  memory, in one process and across processes (two memories on PostgreSQL + Redis): the
  adapters' captures append inside the hot tier's atomic write.

Real SDK ``Session`` / ``BaseChatMessageHistory`` objects, real tiers.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

import shortterm
from shortterm import ScopeKey
from shortterm.model.config import Config

pytest.importorskip("agents", reason="the OpenAI Agents SDK is absent: pip install -e '.[dev]'")
pytest.importorskip("langchain_core", reason="needs the [langchain] extra (langchain-core)")

from agents.memory import Session
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import AIMessage, HumanMessage

from shortterm.integrations.langchain import ShortTermChatHistory
from shortterm.integrations.openai_agents import ShortTermSession

SERVER, CHANNEL = "333", "222"
U1, U2 = "111", "999"
NAMES = {U1: "Ana", U2: "Bo"}
ROUNDS = 40


def session(memory: shortterm.Memory, user: str, channel: str = CHANNEL) -> ShortTermSession:
    s = ShortTermSession(
        memory,
        user_id=user,
        channel_id=channel,
        server_id=SERVER,
        user_name=NAMES[user],
        bot_name="Tomo",
    )
    assert isinstance(s, Session)  # the SDK's runtime-checkable protocol
    return s


def dm(memory: shortterm.Memory, user: str, channel: str) -> ShortTermSession:
    return ShortTermSession(memory, user_id=user, channel_id=channel, user_name=NAMES[user])


def history(memory: shortterm.Memory, user: str, channel: str) -> ShortTermChatHistory:
    h = ShortTermChatHistory(
        memory,
        user_id=user,
        channel_id=channel,
        server_id=SERVER,
        user_name=NAMES[user],
        bot_name="Tomo",
        has_tools=False,
    )
    assert isinstance(h, BaseChatMessageHistory)
    return h


async def turn(s: ShortTermSession, question: str, answer: str) -> None:
    """One run's items as the SDK hands them over: the user's message, then the answer."""
    await s.add_items([{"role": "user", "content": question}])
    await s.add_items([{"role": "assistant", "content": answer}])


async def contents(memory: shortterm.Memory, key: ScopeKey) -> list[str]:
    entry = await memory.get(key)
    return [m.content for m in entry.messages] if entry is not None else []


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[shortterm.Memory]:
    async with await shortterm.open(store=f"sqlite:///{tmp_path / 'stm.db'}") as memory:
        yield memory


# -- pop_item: the caller's own items only ----------------------------------------------------


async def test_pop_item_leaves_another_users_messages(memory: shortterm.Memory) -> None:
    """The issue's case: u2 popped twice and removed u1's newest answer and question."""
    ana, bo = session(memory, U1), session(memory, U2)
    await turn(ana, "U1 first question", "answer 1 to u1")
    await turn(bo, "U2 question", "answer to u2")
    await turn(ana, "U1LAST question", "answer to u1")
    live, bo_own = ScopeKey.server(SERVER, CHANNEL), ScopeKey.user(U2, CHANNEL)
    ana_own = await contents(memory, ScopeKey.user(U1, CHANNEL))

    assert await bo.pop_item() == {"role": "assistant", "content": "answer to u2"}
    assert await bo.pop_item() == {"role": "user", "content": "U2 question"}
    assert await bo.pop_item() is None  # nothing of Bo's is left
    assert await contents(memory, live) == [
        "U1 first question",
        "answer 1 to u1",
        "U1LAST question",
        "answer to u1",
    ]
    assert "U2 question" not in await contents(memory, bo_own)
    assert "answer to u2" not in await contents(memory, bo_own)
    assert await contents(memory, ScopeKey.user(U1, CHANNEL)) == ana_own  # Ana's untouched
    # Ana sees her own dialogue, unchanged, through a fresh session.
    assert await session(memory, U1).get_items() == [
        {"role": "user", "content": "U1 first question"},
        {"role": "assistant", "content": "answer 1 to u1"},
        {"role": "user", "content": "U1LAST question"},
        {"role": "assistant", "content": "answer to u1"},
    ]


async def test_pop_item_skips_newer_messages_of_others(memory: shortterm.Memory) -> None:
    """The caller's newest item is popped even when someone else spoke after it."""
    ana, bo = session(memory, U1), session(memory, U2)
    await turn(ana, "where do we meet?", "at the north gate")
    await turn(bo, "what time?", "at eight")
    assert await ana.pop_item() == {"role": "assistant", "content": "at the north gate"}
    assert await ana.pop_item() == {"role": "user", "content": "where do we meet?"}
    assert await ana.pop_item() is None
    live = ScopeKey.server(SERVER, CHANNEL)
    assert await contents(memory, live) == ["what time?", "at eight"]
    ana_own = await contents(memory, ScopeKey.user(U1, CHANNEL))
    assert "where do we meet?" not in ana_own
    assert "at the north gate" not in ana_own
    # Bo's turn is whole, in the channel and in his own scope.
    assert await session(memory, U2).get_items() == [
        {"role": "user", "content": "what time?"},
        {"role": "assistant", "content": "at eight"},
    ]
    bo_own = await contents(memory, ScopeKey.user(U2, CHANNEL))
    assert bo_own[-2:] == ["what time?", "at eight"]


async def test_a_reply_whose_question_fell_off_the_window_is_nobodys(tmp_path: Path) -> None:
    """Only the newest ``max_messages`` are kept: a reply at the head of the list has lost the
    question that tied it to a user, so no one else's pop takes it."""
    config = Config(max_messages=3)
    async with await shortterm.open(store=f"sqlite:///{tmp_path / 's.db'}", config=config) as mem:
        ana, bo = session(mem, U1), session(mem, U2)
        await turn(ana, "first?", "first answer")
        await turn(bo, "second?", "second answer")
        live = ScopeKey.server(SERVER, CHANNEL)
        assert await contents(mem, live) == ["first answer", "second?", "second answer"]
        assert await bo.pop_item() == {"role": "assistant", "content": "second answer"}
        assert await bo.pop_item() == {"role": "user", "content": "second?"}
        assert await bo.pop_item() is None
        assert await contents(mem, live) == ["first answer"]


async def test_pop_item_in_a_dm_takes_every_message_in_turn(memory: shortterm.Memory) -> None:
    """A DM's live scope is the user's own: everything in it is theirs."""
    s = dm(memory, U1, "dm-1")
    await turn(s, "one", "1")
    await turn(s, "two", "2")
    popped = [await s.pop_item() for _ in range(5)]
    assert popped == [
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": "two"},
        {"role": "assistant", "content": "1"},
        {"role": "user", "content": "one"},
        None,
    ]
    assert await contents(memory, ScopeKey.user(U1, "dm-1")) == []


async def test_pop_item_takes_held_items_first_and_then_the_stored_ones(
    memory: shortterm.Memory,
) -> None:
    ana, bo = session(memory, U1), session(memory, U2)
    await turn(ana, "mine", "yours")
    await turn(bo, "his", "reply to him")
    await ana.add_items([{"role": "user", "content": "not answered yet"}])
    assert await ana.pop_item() == {"role": "user", "content": "not answered yet"}
    assert await ana.pop_item() == {"role": "assistant", "content": "yours"}
    live = ScopeKey.server(SERVER, CHANNEL)
    assert await contents(memory, live) == ["mine", "his", "reply to him"]


async def test_a_tool_exchange_is_popped_item_by_item_by_its_owner_only(
    memory: shortterm.Memory,
) -> None:
    """Ana's run used a tool; Bo sees her items (her message under her name) but his pops
    take his own only; Ana's take her items one by one, newest first."""
    call = {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "c1", "output": "sunny"}
    answer = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "sunny", "annotations": []}],
    }
    ana, bo = session(memory, U1), session(memory, U2)
    await ana.add_items([{"role": "user", "content": "weather?"}])
    await ana.add_items([call, output])
    await ana.add_items([answer])
    await turn(bo, "and you?", "fine")
    assert await session(memory, U2).get_items() == [
        {"role": "user", "content": "Ana: weather?"},
        call,
        output,
        answer,
        {"role": "user", "content": "and you?"},
        {"role": "assistant", "content": "fine"},
    ]
    assert [await bo.pop_item() for _ in range(3)] == [
        {"role": "assistant", "content": "fine"},
        {"role": "user", "content": "and you?"},
        None,
    ]
    assert [await ana.pop_item() for _ in range(5)] == [
        answer,
        output,
        call,
        {"role": "user", "content": "weather?"},
        None,
    ]
    assert await contents(memory, ScopeKey.server(SERVER, CHANNEL)) == []


# -- two users' turns saved at the same moment -----------------------------------------------

Save = Callable[[shortterm.Memory, str, str, str, float], Awaitable[None]]


async def agents_pair(
    memory: shortterm.Memory, user: str, channel: str, text: str, delay: float
) -> None:
    """The SDK's order: the user's message, then (after the model) the answer."""
    s = session(memory, user, channel)
    await s.add_items([{"role": "user", "content": f"{text}?"}])
    await asyncio.sleep(delay)
    await s.add_items([{"role": "assistant", "content": f"{text}!"}])


async def langchain_pair(
    memory: shortterm.Memory, user: str, channel: str, text: str, delay: float
) -> None:
    """RunnableWithMessageHistory's order: the run's new messages in one call at its end."""
    h = history(memory, user, channel)
    await asyncio.sleep(delay)
    await h.aadd_messages([HumanMessage(f"{text}?"), AIMessage(f"{text}!")])


PAIRS = {"agents": agents_pair, "langchain": langchain_pair}


@pytest.fixture(
    params=[
        "sqlite+inprocess",
        "postgres+redis",
        "postgres+redis, two processes",
    ]
)
def deployment(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str, bool]:
    """(store URL, cache URL, two processes?): one process's default tiers, or PostgreSQL +
    Redis served by one process or by two."""
    if request.param == "sqlite+inprocess":
        return f"sqlite:///{tmp_path / 'stm.db'}", "memory://", False
    store, cache = request.getfixturevalue("scale_urls")
    return str(store), str(cache), request.param.endswith("two processes")


@pytest.fixture
async def memories(
    deployment: tuple[str, str, bool], monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[shortterm.Memory, shortterm.Memory]]:
    """The memories the two users' turns are served by: the same memory twice (one process)
    or two memories on the same PostgreSQL and Redis (two processes). Reads answer after a
    random 0-4 ms (a slow network), so the two turns' reads and writes interleave."""
    store, cache, two_processes = deployment
    rng = random.Random(43)
    async with AsyncExitStack() as stack:
        one = await stack.enter_async_context(await shortterm.open(store=store, cache=cache))
        two = one
        if two_processes:
            two = await stack.enter_async_context(await shortterm.open(store=store, cache=cache))
        for mem in {id(one): one, id(two): two}.values():
            monkeypatch.setattr(mem, "get", _slow(mem.get, rng))
        yield one, two


def _slow(
    read: Callable[[ScopeKey], Awaitable[shortterm.Entry | None]], rng: random.Random
) -> Callable[[ScopeKey], Awaitable[shortterm.Entry | None]]:
    async def slow_get(key: ScopeKey) -> shortterm.Entry | None:
        entry = await read(key)
        await asyncio.sleep(rng.uniform(0, 0.004))
        return entry

    return slow_get


@pytest.mark.parametrize("adapter", sorted(PAIRS))
async def test_two_users_turns_saved_at_once_are_both_kept(
    memories: tuple[shortterm.Memory, shortterm.Memory], adapter: str
) -> None:
    """Ana (on the first memory) and Bo (on the second) each finish a turn in the same
    channel at the same moment, 40 rounds with a random 0-3 ms between their saves: the
    channel keeps the earlier turn and both new ones, and each user's own scope keeps theirs."""
    one, two = memories
    save: Any = PAIRS[adapter]
    rng = random.Random(41)
    lost: list[str] = []  # one line per round that lost something
    for i in range(ROUNDS):
        channel = f"multi-{adapter}-{i}"
        await save(one, U1, channel, "earlier", 0.0)
        await asyncio.gather(
            save(one, U1, channel, f"ana {i}", rng.uniform(0, 0.003)),
            save(two, U2, channel, f"bo {i}", rng.uniform(0, 0.003)),
        )
        kept = await contents(one, ScopeKey.server(SERVER, channel))
        missing = [t for t in ("earlier", f"ana {i}", f"bo {i}") if not _kept(t, kept)]
        for user, text in ((U1, f"ana {i}"), (U2, f"bo {i}")):
            if not _kept(text, await contents(one, ScopeKey.user(user, channel))):
                missing.append(f"{text} in {NAMES[user]}'s own scope")
        if missing:
            lost.append(f"{channel} lost {missing} (the channel kept {kept})")
    assert not lost, f"{len(lost)} of {ROUNDS} rounds lost a turn: {lost[:3]}"


def _kept(text: str, contents: list[str]) -> bool:
    """Whether a turn (its question and its answer) is among ``contents``."""
    return f"{text}?" in contents and f"{text}!" in contents
