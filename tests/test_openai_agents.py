"""ShortTermSession against the real OpenAI Agents SDK and a real model server.

``shortterm fake-model`` runs as its own OS process; the SDK's ``Runner`` talks to it over
loopback with the Chat Completions model, and the assertions read the fake's request log:
what the model was actually sent.
"""

from __future__ import annotations

import asyncio
import random
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="the OpenAI Agents SDK is absent: pip install -e '.[dev]'")

from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner
from agents.memory import Session, SessionSettings
from openai import AsyncOpenAI

import shortterm
from shortterm.integrations.openai_agents import ShortTermSession
from shortterm.model import ServerSettings
from shortterm.tool import texts
from tests.fake_model_process import FakeModelProcess, fake_model_process

ROOT = Path(__file__).resolve().parent.parent
SERVER, USER = "333", "111"
RUN = RunConfig(tracing_disabled=True)  # no network: nothing to upload traces to


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeModelProcess]:
    log = tmp_path_factory.mktemp("fake-model") / "requests.jsonl"
    with fake_model_process(log) as process:
        yield process


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[shortterm.Memory]:
    async with await shortterm.open(store=f"sqlite:///{tmp_path / 'stm.db'}") as memory:
        yield memory


@pytest.fixture
async def model(fake: FakeModelProcess) -> AsyncIterator[OpenAIChatCompletionsModel]:
    async with AsyncOpenAI(base_url=fake.url, api_key="unused", max_retries=0) as client:
        yield OpenAIChatCompletionsModel(model="shortterm-fake", openai_client=client)


def session(memory: shortterm.Memory, channel: str = "222", **kw: Any) -> ShortTermSession:
    return ShortTermSession(
        memory,
        user_id=kw.pop("user_id", USER),
        channel_id=channel,
        server_id=SERVER,
        user_name="Ana",
        bot_name="Tomo",
        **kw,
    )


async def run(
    model: OpenAIChatCompletionsModel, s: ShortTermSession, text: str, *, tool: bool = False
) -> str:
    agent = Agent(
        name="Tomo", instructions="You are Tomo.", model=model, tools=[s.tool()] if tool else []
    )
    result = await Runner.run(agent, text, session=s, run_config=RUN)
    return str(result.final_output)


def texts_of(request: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m["role"], m.get("content") or "") for m in request["messages"]]


def tool_names(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools") or []]


async def test_the_sdk_accepts_it_as_a_session(memory: shortterm.Memory) -> None:
    s = session(memory)
    assert isinstance(s, Session)  # the SDK's runtime-checkable protocol
    assert s.session_id == '["shortterm","server","333","222",null]'
    assert s.session_settings == SessionSettings()  # as the SDK's own sessions
    assert await s.get_items() == []
    assert await s.pop_item() is None


async def test_the_runner_keeps_two_turns_of_a_channel(
    memory: shortterm.Memory, model: OpenAIChatCompletionsModel, fake: FakeModelProcess
) -> None:
    first = await run(model, session(memory), "the lighthouse opens at nine")
    await run(model, session(memory), "and when does it close?")
    sent = texts_of(fake.chats()[-1])
    # Instructions, the first turn as dialogue, the new message: nothing recalled from
    # elsewhere, and no tool items.
    assert sent == [
        ("system", "You are Tomo."),
        ("user", "the lighthouse opens at nine"),
        ("assistant", first),
        ("user", "and when does it close?"),
    ]
    entry = await memory.get(shortterm.ScopeKey.server(SERVER, "222"))
    assert entry is not None
    assert [m.role for m in entry.messages] == ["user", "assistant", "user", "assistant"]
    assert entry.messages[0].author_id == USER


async def test_a_second_channel_is_sent_what_the_first_said(
    memory: shortterm.Memory, model: OpenAIChatCompletionsModel, fake: FakeModelProcess
) -> None:
    await run(model, session(memory, "plans"), "we meet at the north gate")
    reply = await run(model, session(memory, "general"), "ready?")
    sent = texts_of(fake.chats()[-1])
    assert sent[0] == ("system", "You are Tomo.")
    role, recalled = sent[1]
    assert role == "user"
    assert recalled.startswith("⟦Tomo's memory of other recent conversations")
    assert "│ Ana: we meet at the north gate" in recalled
    assert sent[-1] == ("user", "ready?")
    assert "we meet at the north gate" in reply  # the fake quotes what it was shown


async def test_the_memory_tool_writes_a_summary_once_per_turn(
    memory: shortterm.Memory, model: OpenAIChatCompletionsModel, fake: FakeModelProcess
) -> None:
    before = len(fake.chats())
    reply = await run(model, session(memory), "note that the boat leaves at 6", tool=True)
    run_requests = fake.chats()[before:]
    assert len(run_requests) == 2  # the tool call, then the answer after its result
    assert tool_names(run_requests[0]) == [texts.TOOL_NAME]
    assert tool_names(run_requests[1]) == []  # one upgrade per turn: hidden after it
    assert run_requests[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": run_requests[1]["messages"][-2]["tool_calls"][0]["id"],
        "content": texts.OK,
    }
    for key in (
        shortterm.ScopeKey.server(SERVER, "222"),
        shortterm.ScopeKey.user(USER, "222"),
    ):
        entry = await memory.get(key)
        assert entry is not None
        assert entry.summary is not None
        assert "the boat leaves at 6" in entry.summary
    # The tool exchange is not dialogue: the channel keeps the message and the answer.
    entry = await memory.get(shortterm.ScopeKey.server(SERVER, "222"))
    assert entry is not None
    assert [(m.role, m.content) for m in entry.messages] == [
        ("user", "note that the boat leaves at 6"),
        ("assistant", reply),
    ]


async def test_a_remember_forever_message_hides_the_tool(
    memory: shortterm.Memory, model: OpenAIChatCompletionsModel, fake: FakeModelProcess
) -> None:
    before = len(fake.chats())
    reply = await run(model, session(memory), "please remember that I am vegan", tool=True)
    (request,) = fake.chats()[before:]
    assert tool_names(request) == []
    assert "not offered" in reply
    assert await memory.get(shortterm.ScopeKey.server(SERVER, "222")) is not None
    entry = await memory.get(shortterm.ScopeKey.server(SERVER, "222"))
    assert entry is not None
    assert entry.summary is None


async def test_the_nudge_comes_with_the_tool_only(
    memory: shortterm.Memory, model: OpenAIChatCompletionsModel
) -> None:
    await memory.configure_server(SERVER, ServerSettings(refresh_cadence=1))
    await run(model, session(memory), "hello", tool=True)  # a turn that could use it counts
    plain = await session(memory).get_items()
    assert not any(texts.TOOL_NAME in str(item["content"]) for item in plain)
    with_tool = session(memory)
    with_tool.tool()
    items = await with_tool.get_items()
    nudges = [item for item in items if texts.TOOL_NAME in str(item["content"])]
    assert len(nudges) == 1
    assert len(items) == len(plain) + 1


async def test_add_items_keeps_every_item_and_captures_at_the_answer(
    memory: shortterm.Memory,
) -> None:
    s = session(memory)
    await s.add_items([{"role": "user", "content": "what is the plan?"}])
    # Held until the answer: visible to the session, not yet captured.
    assert await s.get_items() == [{"role": "user", "content": "what is the plan?"}]
    assert await memory.get(s.live_key) is None
    run = [
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "tool output"},
        {"role": "developer", "content": "operator words"},
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "status": "completed",
            "content": [{"type": "output_text", "text": "we hike", "annotations": []}],
        },
    ]
    await s.add_items(run)
    assert await s.get_items() == [{"role": "user", "content": "what is the plan?"}, *run]
    assert await s.get_items(limit=1) == run[-1:]
    assert await s.get_items(limit=0) == []
    # The channel's messages are its dialogue: what recall renders elsewhere.
    entry = await memory.get(s.live_key)
    assert entry is not None
    assert [(m.role, m.content) for m in entry.messages] == [
        ("user", "what is the plan?"),
        ("assistant", "we hike"),
    ]


async def test_get_items_shows_other_people_by_name(memory: shortterm.Memory) -> None:
    await session(memory, user_id="999").add_items(
        [{"role": "user", "content": "hi all"}, {"role": "assistant", "content": "hi Bo"}]
    )
    items = await session(memory).get_items()
    assert items == [
        {"role": "user", "content": "Ana: hi all"},  # Ana was the name that session gave
        {"role": "assistant", "content": "hi Bo"},
    ]


async def test_pop_item_removes_the_newest_message(memory: shortterm.Memory) -> None:
    s = session(memory)
    await s.add_items([{"role": "user", "content": "one"}, {"role": "assistant", "content": "1"}])
    await s.add_items([{"role": "user", "content": "two"}])
    assert await s.pop_item() == {"role": "user", "content": "two"}  # held, not yet captured
    assert await s.pop_item() == {"role": "assistant", "content": "1"}
    # Gone from both scopes of the turn, in a fresh session too.
    fresh = session(memory)
    assert await fresh.get_items() == [{"role": "user", "content": "one"}]
    personal = await memory.get(shortterm.ScopeKey.user(USER, "222"))
    assert personal is not None
    assert [m.content for m in personal.messages] == ["one"]
    assert await fresh.pop_item() == {"role": "user", "content": "one"}
    assert await fresh.pop_item() is None
    assert await fresh.get_items() == []


async def test_clear_session_forgets_the_channel_like_refresh(memory: shortterm.Memory) -> None:
    here, there = session(memory, "222"), session(memory, "other")
    bo = session(memory, "222", user_id="999")
    for s in (here, there, bo):
        await s.add_items(
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
        )
    await memory.set_summary(here.live_key, "a summary")
    await here.clear_session()
    (recalled,) = await here.get_items()  # only the other channel is left to recall
    assert "<#other>" in recalled["content"]
    assert "a summary" not in recalled["content"]
    for key in (
        shortterm.ScopeKey.server(SERVER, "222"),
        shortterm.ScopeKey.user(USER, "222"),
        shortterm.ScopeKey.user("999", "222"),
    ):
        assert await memory.get(key) is None
    assert await memory.get(there.live_key) is not None  # other channels stay


async def test_session_settings_limit_bounds_the_history_the_runner_sends(
    memory: shortterm.Memory, model: OpenAIChatCompletionsModel, fake: FakeModelProcess
) -> None:
    await run(model, session(memory), "first")
    await run(model, session(memory), "second")
    limited = session(memory, session_settings=SessionSettings(limit=1))
    await run(model, limited, "third")
    sent = texts_of(fake.chats()[-1])
    assert [role for role, _ in sent] == ["system", "assistant", "user"]
    assert sent[-1] == ("user", "third")


def test_bad_arguments_are_refused_at_construction(memory: shortterm.Memory) -> None:
    with pytest.raises(shortterm.InvalidInput, match="channel_id"):
        ShortTermSession(memory, user_id=USER, channel_id="")
    with pytest.raises(shortterm.InvalidInput, match="session_id"):
        ShortTermSession(memory, user_id=USER, channel_id="1", session_id="")


def test_without_the_sdk_the_error_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['agents'] = None\n"
        "try:\n"
        "    import shortterm.integrations.openai_agents\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert out.startswith("ExtraMissing")
    assert "pip install -e '.[openai-agents]'" in out


def test_the_example_runs_against_the_fake_model(fake: FakeModelProcess) -> None:
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "openai_agents_session.py"),
            "--base-url",
            fake.url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.splitlines()
    assert out[0].startswith("#plans  > Notes updated.")
    assert out[1].startswith('#general> You said: "ready?". From memory: "note that we hike')
    assert out[2] == "summary of #plans: note that we hike at 8 on Saturday"


async def test_the_docs_snippet_runs(
    memory: shortterm.Memory, model: OpenAIChatCompletionsModel, fake: FakeModelProcess
) -> None:
    page = (ROOT / "docs" / "openai-agents.md").read_text("utf-8")
    (snippet,) = [
        block
        for block in re.findall(r"```python\n(.*?)```", page, re.S)
        if "async def reply" in block
    ]
    scope: dict[str, Any] = {}
    exec(compile(snippet, "docs/openai-agents.md", "exec"), scope)
    reply = await scope["reply"](memory, model, "note that the cake is in the fridge")
    assert "Notes updated" in reply
    entry = await memory.get(shortterm.ScopeKey.server("guild-1", "general"))
    assert entry is not None
    assert entry.summary == "note that the cake is in the fridge"


async def test_a_clear_racing_the_capture_wins(
    tiers: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The capture reads the channel's stored messages to append the turn to them; a clear
    landing anywhere around that read must not bring them back. Reads answer after a random
    delay (a slow network), and the clear starts at a random moment."""
    store, cache = tiers
    rng = random.Random(31)
    async with await shortterm.open(store=store, cache=cache) as memory:
        read = memory.get

        async def slow_get(key: shortterm.ScopeKey) -> shortterm.Entry | None:
            entry = await read(key)
            await asyncio.sleep(rng.uniform(0, 0.004))
            return entry

        monkeypatch.setattr(memory, "get", slow_get)
        rounds, resurrected = 40, 0
        for i in range(rounds):
            resurrected += await _race(memory, f"race-{i}", rng.uniform(0, 0.006))
    assert resurrected == 0, (
        f"{resurrected} scopes in {rounds} rounds brought cleared messages back"
    )


async def _race(memory: shortterm.Memory, channel: str, clear_after_s: float) -> int:
    """One round: a held message answered while the channel is cleared. Returns how many of
    the two scopes show the messages stored before the clear."""
    s = session(memory, channel)
    await s.add_items(
        [{"role": "user", "content": "old"}, {"role": "assistant", "content": "old reply"}]
    )
    await s.add_items([{"role": "user", "content": "new"}])

    async def clear() -> None:
        await asyncio.sleep(clear_after_s)
        await memory.clear_channel(channel)

    await asyncio.gather(clear(), s.add_items([{"role": "assistant", "content": "new reply"}]))
    shown = 0
    for key in (shortterm.ScopeKey.server(SERVER, channel), shortterm.ScopeKey.user(USER, channel)):
        entry = await memory.get(key)
        contents = [m.content for m in entry.messages] if entry is not None else []
        shown += "old" in contents or "old reply" in contents
    return shown


async def test_capture_refuses_a_fence_it_did_not_issue(memory: shortterm.Memory) -> None:
    turn = memory.turn(user_id=USER, channel_id="222")
    with pytest.raises(shortterm.InvalidInput, match="fence"):
        await turn.capture(
            [shortterm.Message("user", "hi")],
            [shortterm.Reply("yo")],
            fence=7,  # type: ignore[arg-type]
        )


async def test_text_before_a_tool_call_waits_for_the_final_answer(
    memory: shortterm.Memory,
) -> None:
    s = session(memory)
    await s.add_items([{"role": "user", "content": "is the pool open?"}])
    await s.add_items(
        [
            {"role": "assistant", "content": "let me check"},
            {"type": "function_call", "call_id": "c1", "name": "hours", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "9-17"},
        ]
    )
    assert await memory.get(s.live_key) is None  # the run goes on: nothing captured yet
    await s.add_items([{"role": "assistant", "content": "open until five"}])
    entry = await memory.get(s.live_key)
    assert entry is not None
    assert [(m.role, m.content) for m in entry.messages] == [
        ("user", "is the pool open?"),
        ("assistant", "let me check"),
        ("assistant", "open until five"),
    ]
    assert entry.turns_since_refresh == 0  # one turn, and it could not use the tool
