"""ShortTermChatHistory and the memory tool against the real langchain-core and langchain-openai,
and `shortterm fake-model` as a real process behind ``ChatOpenAI``."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

import shortterm
from shortterm import ExtraMissing, ScopeKey

pytest.importorskip("langchain_core", reason="needs the [langchain] extra (langchain-core)")
pytest.importorskip("langchain_openai", reason="needs langchain-openai (the dev extra has it)")

from langchain_core.messages import (
    AIMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    get_buffer_string,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory
from langchain_openai import ChatOpenAI

from shortterm.integrations.langchain import ShortTermChatHistory, SyncInsideLoop
from shortterm.tool import texts
from tests.fake_model_process import FakeModelProcess, fake_model_process

# RunnableWithMessageHistory warns on construction since langchain-core 1.3.3; it still works
# and is what the brief asks us to support.
DEPRECATED = pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")


@pytest.fixture(scope="module")
def fake_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeModelProcess]:
    """One fake-model process for the module: starting one costs more than the tests."""
    with fake_model_process(tmp_path_factory.mktemp("fake") / "prompts.jsonl") as model:
        yield model


@pytest.fixture
async def chat_model(fake_model: FakeModelProcess) -> AsyncIterator[ChatOpenAI]:
    """ChatOpenAI on an HTTP client of this test's loop: its default client is cached per
    process and would outlive the loop of the test that created it."""
    async with openai.DefaultAsyncHttpxClient() as http:
        yield ChatOpenAI(
            base_url=fake_model.url,
            api_key="x",  # type: ignore[arg-type]
            model="shortterm-fake",
            max_retries=0,
            http_async_client=http,
        )


def history_for(memory: shortterm.Memory, channel_id: str, **options: Any) -> ShortTermChatHistory:
    options.setdefault("user_name", "Ana")
    options.setdefault("bot_name", "Tomo")
    return ShortTermChatHistory(
        memory, user_id="111", channel_id=channel_id, server_id="333", **options
    )


# -- LangChain's BaseChatMessageHistory contract ---------------------------------------------


async def test_the_documented_contract_async(memory: shortterm.Memory) -> None:
    """What langchain-core documents for a history: messages added are returned, oldest
    first, in one bulk call; clear removes them."""
    history = history_for(memory, "c1")
    assert await history.aget_messages() == []
    await history.aadd_messages([HumanMessage("hi"), AIMessage("hello Ana")])
    await history.aadd_messages([HumanMessage("how are you?"), AIMessage("fine")])
    got = await history.aget_messages()
    assert [(type(m), m.content) for m in got] == [
        (HumanMessage, "hi"),
        (AIMessage, "hello Ana"),
        (HumanMessage, "how are you?"),
        (AIMessage, "fine"),
    ]
    # Another object for the same conversation sees the same (it is stored, not held).
    assert [m.content for m in await history_for(memory, "c1").aget_messages()] == [
        "hi",
        "hello Ana",
        "how are you?",
        "fine",
    ]
    await history.aclear()
    assert await history.aget_messages() == []
    assert await history_for(memory, "c1").aget_messages() == []


async def test_a_question_waits_for_its_answer(memory: shortterm.Memory) -> None:
    """add_user_message alone is shown at once, and captured with the answer that follows."""
    history = history_for(memory, "c1")
    await history.aadd_messages([HumanMessage("first?")])
    assert [m.content for m in await history.aget_messages()] == ["first?"]
    assert await memory.get(history.turn.live_key) is None  # not captured yet
    await history.aadd_messages([AIMessage("yes")])
    entry = await memory.get(history.turn.live_key)
    assert entry is not None
    assert [(m.role, m.content, m.author_id) for m in entry.messages] == [
        ("user", "first?", "111"),
        ("assistant", "yes", None),
    ]


def test_the_sync_methods_outside_a_loop(tmp_path: Path) -> None:
    """The sync API (``messages``, ``add_user_message``, ``clear``, ``str``) from a thread with
    no loop, the memory serving on a loop in another thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    opening = shortterm.open(store=f"sqlite:///{tmp_path / 'stm.db'}")
    memory = asyncio.run_coroutine_threadsafe(opening.__aenter__(), loop).result(30)
    try:
        history = history_for(memory, "c1", loop=loop)
        history.add_user_message("hi")
        history.add_ai_message("hello Ana")
        history.add_messages([HumanMessage("bye"), AIMessage("see you")])
        assert [m.content for m in history.messages] == ["hi", "hello Ana", "bye", "see you"]
        assert str(history) == get_buffer_string(history.messages)
        assert history.tools()[0].invoke({"summary": "Ana says bye."}) == texts.OK
        history.clear()
        assert history.messages == []
    finally:
        asyncio.run_coroutine_threadsafe(opening.__aexit__(None, None, None), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


def test_the_sync_methods_on_an_idle_runner(tmp_path: Path) -> None:
    with asyncio.Runner() as runner:
        opening = shortterm.open(store=f"sqlite:///{tmp_path / 'stm.db'}")
        memory = runner.run(opening.__aenter__())
        history = history_for(memory, "c1", loop=runner.get_loop())
        history.add_messages([HumanMessage("hi"), AIMessage("hello")])
        assert [m.content for m in history.messages] == ["hi", "hello"]
        runner.run(opening.__aexit__(None, None, None))


async def test_the_sync_methods_inside_a_loop_say_what_to_use(memory: shortterm.Memory) -> None:
    history = history_for(memory, "c1")
    with pytest.raises(SyncInsideLoop, match=r"await history\.aget_messages\(\)"):
        _ = history.messages
    with pytest.raises(SyncInsideLoop, match=r"await history\.aadd_messages"):
        history.add_messages([HumanMessage("hi"), AIMessage("hello")])
    with pytest.raises(SyncInsideLoop, match=r"await history\.aclear\(\)"):
        history.clear()
    with pytest.raises(SyncInsideLoop, match=r"^the update_short_term_memory tool.*await tool"):
        history.tools()[0].invoke({"summary": "x"})
    assert await history.aget_messages() == []  # nothing half-done


def test_sync_without_a_loop_says_to_pass_one(tmp_path: Path) -> None:
    with asyncio.Runner() as runner:
        opening = shortterm.open(store=f"sqlite:///{tmp_path / 'stm.db'}")
        memory = runner.run(opening.__aenter__())
        history = history_for(memory, "c1")  # created outside any loop, no loop= given
        with pytest.raises(RuntimeError, match=r"pass loop=\.\.\."):
            _ = history.messages
        runner.run(opening.__aexit__(None, None, None))


# -- what the history holds -----------------------------------------------------------------


async def test_other_channels_come_first_as_one_system_message(memory: shortterm.Memory) -> None:
    await history_for(memory, "plans").aadd_messages(
        [HumanMessage("we hike the ridge trail on Saturday"), AIMessage("great, 8 am?")]
    )
    other = history_for(memory, "general")
    got = await other.aget_messages()
    assert len(got) == 1
    assert isinstance(got[0], SystemMessage)
    assert "│ Ana: we hike the ridge trail on Saturday" in got[0].content
    assert "│ Tomo: great, 8 am?" in got[0].content
    # Clearing #general forgets #general only, like /refresh; #plans is still recalled.
    await other.aadd_messages([HumanMessage("ready?"), AIMessage("yes")])
    await other.aclear()
    after = await other.aget_messages()
    assert [type(m) for m in after] == [SystemMessage]
    assert await memory.get(ScopeKey.server("333", "general")) is None
    assert await memory.get(ScopeKey.user("111", "general")) is None
    assert await memory.get(ScopeKey.server("333", "plans")) is not None


async def test_two_bot_processes_on_shared_tiers(scale_urls: tuple[str, str]) -> None:
    """PostgreSQL and Redis shared by two memories, as two bot processes share them: what one
    captured in #plans is recalled, raw messages included, by the other in #general, and the
    other's clear of #plans reaches the first."""
    store, cache = scale_urls
    async with (
        shortterm.open(store=store, cache=cache) as one,
        shortterm.open(store=store, cache=cache) as two,
    ):
        await history_for(one, "plans").aadd_messages(
            [HumanMessage("pack the blue tent"), AIMessage("noted, the blue one")]
        )
        recalled = await history_for(two, "general").aget_messages()
        assert "│ Ana: pack the blue tent" in recalled[0].content
        await history_for(two, "plans").aclear()
        assert await history_for(one, "plans").aget_messages() == []


async def test_another_persons_message_carries_their_name(memory: shortterm.Memory) -> None:
    await history_for(memory, "c1").aadd_messages([HumanMessage("hi all"), AIMessage("hi Ana")])
    bo = ShortTermChatHistory(memory, user_id="222", channel_id="c1", server_id="333")
    assert [m.content for m in await bo.aget_messages()] == ["Ana: hi all", "hi Ana"]


async def test_tool_and_system_messages_come_back_in_order(memory: shortterm.Memory) -> None:
    history = history_for(memory, "c1")
    call = {"name": "lookup", "args": {}, "id": "call_1", "type": "tool_call"}
    added = [
        SystemMessage("You are Tomo."),
        HumanMessage("weather?"),
        AIMessage("", tool_calls=[call]),
        ToolMessage("sunny, 24 °C", tool_call_id="call_1"),
        AIMessage("Sunny today.", id="run-9"),
    ]
    await history.aadd_messages(added)
    assert await history.aget_messages() == added
    # The channel's messages are its dialogue: what recall renders elsewhere.
    entry = await memory.get(history.turn.live_key)
    assert entry is not None
    assert [m.content for m in entry.messages] == ["weather?", "Sunny today."]


async def test_a_clear_racing_the_capture_wins(
    tiers: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A capture reads the channel's stored messages and writes them back with the turn; a
    clear landing anywhere around that read must not bring them back. Reads answer after a
    random delay, and the clear starts at a random moment: 40 rounds per pair of tiers."""
    store, cache = tiers
    rng = random.Random(37)
    async with await shortterm.open(store=store, cache=cache) as memory:
        read = memory.get

        async def slow_get(key: ScopeKey) -> shortterm.Entry | None:
            entry = await read(key)
            await asyncio.sleep(rng.uniform(0, 0.004))
            return entry

        monkeypatch.setattr(memory, "get", slow_get)
        resurrected = 0
        for i in range(40):
            channel = f"race-{i}"
            history = history_for(memory, channel)
            await history.aadd_messages([HumanMessage("old"), AIMessage("old reply")])

            async def clear(channel: str = channel, after: float = rng.uniform(0, 0.006)) -> None:
                await asyncio.sleep(after)
                await memory.clear_channel(channel)

            await asyncio.gather(
                clear(), history.aadd_messages([HumanMessage("new"), AIMessage("new reply")])
            )
            for key in (ScopeKey.server("333", channel), ScopeKey.user("111", channel)):
                entry = await read(key)
                said = [m.content for m in entry.messages] if entry is not None else []
                resurrected += "old" in said or "old reply" in said
    assert resurrected == 0, f"{resurrected} scopes brought cleared messages back"


async def test_bad_input_is_refused(memory: shortterm.Memory) -> None:
    history = history_for(memory, "c1")
    with pytest.raises(shortterm.InvalidInput, match=r"messages\[1\]"):
        await history.aadd_messages([HumanMessage("hi"), "hello"])  # type: ignore[list-item]
    with pytest.raises(shortterm.InvalidInput, match="channel_id"):
        ShortTermChatHistory(memory, user_id="1", channel_id="")
    with pytest.raises(shortterm.InvalidInput, match="max_tokens"):
        ShortTermChatHistory(memory, user_id="1", channel_id="c1", max_tokens="many")
    with pytest.raises(shortterm.InvalidInput, match="sync_timeout_s"):
        ShortTermChatHistory(memory, user_id="1", channel_id="c1", sync_timeout_s="1")


# -- against a real model server ------------------------------------------------------------


@DEPRECATED
async def test_runnable_with_message_history_recalls_another_channel(
    memory: shortterm.Memory, fake_model: FakeModelProcess, chat_model: ChatOpenAI
) -> None:
    """A prompt | ChatOpenAI chain wrapped in RunnableWithMessageHistory, two turns in #plans
    and one in #general: the second #plans request carries the first turn as dialogue, and the
    #general request carries what #plans said, in the system message."""
    prompt = ChatPromptTemplate.from_messages(
        [("system", "You are Tomo."), MessagesPlaceholder("history"), ("human", "{input}")]
    )
    chain = RunnableWithMessageHistory(
        prompt | chat_model,
        lambda session_id: history_for(memory, session_id),
        input_messages_key="input",
        history_messages_key="history",
    )
    seen = len(fake_model.chats())

    async def ask(channel: str, text: str) -> Any:
        config: Any = {"configurable": {"session_id": channel}}
        return await chain.ainvoke({"input": text}, config=config)

    await ask("plans", "we hike the ridge trail on Saturday at 8")
    second = await ask("plans", "what should I pack?")
    third = await ask("general", "ready?")
    sent = fake_model.chats()[seen:]
    assert len(sent) == 3
    roles = [m["role"] for m in sent[1]["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
    assert sent[1]["messages"][1]["content"] == "we hike the ridge trail on Saturday at 8"
    assert second.content.startswith('You said: "what should I pack?"')
    general = sent[2]["messages"]
    assert [m["role"] for m in general] == ["system", "system", "user"]
    assert "in this server" in general[1]["content"]
    assert "│ Ana: we hike the ridge trail on Saturday at 8" in general[1]["content"]
    assert "From memory" in third.content


@DEPRECATED
async def test_runnable_around_a_bare_model_keeps_each_turn_once(
    memory: shortterm.Memory, fake_model: FakeModelProcess, chat_model: ChatOpenAI
) -> None:
    """Without a history key, RunnableWithMessageHistory tells new messages from old by
    counting the history: the memory SystemMessage must not make it keep a message twice or
    drop one."""
    await history_for(memory, "plans").aadd_messages(
        [HumanMessage("we hike on Saturday"), AIMessage("at 8?")]
    )
    chain = RunnableWithMessageHistory(
        chat_model, lambda session_id: history_for(memory, session_id)
    )
    config: Any = {"configurable": {"session_id": "general"}}
    seen = len(fake_model.chats())
    await chain.ainvoke([HumanMessage("ready?")], config=config)
    await chain.ainvoke([HumanMessage("and the tent?")], config=config)
    sent = fake_model.chats()[seen:]
    assert [m["role"] for m in sent[1]["messages"]] == ["system", "user", "assistant", "user"]
    assert "│ Ana: we hike on Saturday" in sent[1]["messages"][0]["content"]
    entry = await memory.get(ScopeKey.server("333", "general"))
    assert entry is not None
    assert [(m.role, m.content) for m in entry.messages if m.role == "user"] == [
        ("user", "ready?"),
        ("user", "and the tent?"),
    ]
    assert len(entry.messages) == 4


async def test_the_tool_round_trip_writes_a_summary(
    memory: shortterm.Memory, chat_model: ChatOpenAI
) -> None:
    """ChatOpenAI bound to the LangChain tool: the model calls it, the tool writes the summary
    through Turn.call_tool, a second call in the same turn is refused, and the next turn of
    another channel reads the summary."""
    said = "note that we hike the ridge trail on Saturday at 8"
    history = history_for(memory, "plans", user_message=said)
    tools = history.tools()
    assert [t.name for t in tools] == [texts.TOOL_NAME]
    model = chat_model.bind_tools(tools)
    question = HumanMessage(said)
    dialogue = [*await history.aget_messages(), question]
    call = await model.ainvoke(dialogue)
    assert [c["name"] for c in call.tool_calls] == [texts.TOOL_NAME]
    result = await tools[0].ainvoke(call.tool_calls[0])
    assert isinstance(result, ToolMessage)
    assert result.content == texts.OK
    again = await tools[0].ainvoke(call.tool_calls[0])
    assert again.content == texts.ALREADY  # one update per turn, shortterm's guard
    assert history.tools() == []
    answer = await model.ainvoke([*dialogue, call, result])
    await history.aadd_messages([question, call, result, answer])

    entry = await memory.get(ScopeKey.server("333", "plans"))
    assert entry is not None
    assert entry.summary is not None
    assert "ridge trail" in entry.summary
    assert [m.role for m in entry.messages] == ["user", "assistant"]  # no tool traffic
    assert history.tools() != []  # a new turn after the capture
    recalled = await history_for(memory, "general").aget_messages()
    assert "ridge trail" in recalled[0].content
    assert "summary written" in recalled[0].content


async def test_the_tool_honours_the_guards(memory: shortterm.Memory) -> None:
    """A turn that may not update memory offers no tool, and a tool kept from before is refused
    with shortterm's reason."""
    history = history_for(memory, "c1")
    tool = history.tools()[0]
    history.turn.upgraded = True
    out = await tool.ainvoke({"summary": "x"})
    assert out == texts.ALREADY
    dm = ShortTermChatHistory(memory, user_id="1", channel_id="d1", has_tools=False)
    assert dm.tools() == []
    bad = await history_for(memory, "c2").tools()[0].ainvoke({"summary": ""})
    assert bad != texts.OK
    assert await memory.get(ScopeKey.server("333", "c2")) is None


# -- packaging -------------------------------------------------------------------------------


def test_import_shortterm_does_not_import_langchain() -> None:
    code = "import sys, shortterm, shortterm.integrations; print('langchain_core' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_missing_langchain_core_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['langchain_core'] = None\n"
        "try:\n"
        "    import shortterm.integrations.langchain\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == (
        "ExtraMissing " + str(ExtraMissing("langchain", "langchain-core"))
    )


# -- the example ---------------------------------------------------------------------------

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "langchain_history.py"


def run_example(model: FakeModelProcess, store: str, said: str, *flags: str) -> str:
    """Run the example as a user would, in a process of its own; its stdout (the reply)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHORTTERM_")}
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--base-url", model.url, "--store", store, *flags, said],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_the_example_notes_in_one_channel_and_recalls_in_another(
    tmp_path: Path, fake_model: FakeModelProcess
) -> None:
    """docs/langchain.md's commands: the tool writes the #plans summary, and #general's turn,
    a process of its own, gets it back in the SystemMessage."""
    store = f"sqlite:///{tmp_path / 'bot.db'}"
    said = "note that we hike the ridge trail on Saturday at 8"
    seen = len(fake_model.chats())
    first = run_example(fake_model, store, said, "--channel-id", "plans")
    second = run_example(fake_model, store, "ready?", "--channel-id", "general")
    sent = fake_model.chats()[seen:]
    assert first == f'Notes updated. You said: "{said}". My memory is empty here.'
    assert second == f'You said: "ready?". From memory: "{said}".'
    # #plans: the tool offered and called, then the answer without it (one update per turn).
    assert ["tools" in request for request in sent] == [True, False, True]
    memory_block = sent[-1]["messages"][1]
    assert memory_block["role"] == "system"
    assert "in this server · summary written" in memory_block["content"]
