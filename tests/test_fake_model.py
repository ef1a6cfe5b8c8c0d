"""``shortterm fake-model`` as a user runs it: a real process on loopback, spoken to by the
official ``openai`` client (and raw ``httpx`` for what that client will not send)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from openai import AsyncOpenAI

import shortterm
from shortterm import fake_model
from shortterm.cli import EXIT_EXTRA_MISSING, EXIT_INVALID, main
from shortterm.model import Category, ServerSettings
from shortterm.tool import texts
from tests.fake_model_process import FakeModelProcess, fake_model_process

CATEGORIES = (
    Category("Plans", "what the group is planning"),
    Category("Mood", "how people feel"),
)


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeModelProcess]:
    log = tmp_path_factory.mktemp("fake-model") / "requests.jsonl"
    with fake_model_process(log) as running:
        yield running


@pytest.fixture
async def client(fake: FakeModelProcess) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(base_url=fake.url, api_key="anything", max_retries=0) as opened:
        yield opened


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[shortterm.Memory]:
    async with shortterm.open(store=f"sqlite:///{tmp_path / 'bot.db'}") as opened:
        yield opened


def turn_of(memory: shortterm.Memory, said: str, channel: str = "222") -> shortterm.Turn:
    return memory.turn(
        user_id="111",
        channel_id=channel,
        channel_name=channel,
        server_id="333",
        user_message=said,
        user_name="Ana",
        bot_name="Tomo",
        provider="openai",
    )


async def prompt_of(turn: shortterm.Turn, said: str) -> list[dict[str, Any]]:
    system = [{"role": "system", "content": "You are Tomo."}]
    return shortterm.inject(
        [*system, {"role": "user", "content": f"Ana: {said}"}], await turn.context()
    )


async def tool_round(
    client: AsyncOpenAI, turn: shortterm.Turn, messages: list[dict[str, Any]]
) -> tuple[dict[str, Any], shortterm.ToolResult, str]:
    """One call of the memory tool, then the answer after it: (arguments, result, reply)."""
    tools = turn.tools("openai")
    first = await client.chat.completions.create(
        model="m",
        messages=messages,
        tools=tools,
    )
    message = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls"
    assert message.tool_calls is not None
    (call,) = message.tool_calls
    assert call.type == "function"
    assert call.function.name == texts.TOOL_NAME
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, tools[0]["function"]["parameters"])
    result = await turn.call_tool(call.function.name, call.function.arguments)
    messages = [
        *messages,
        message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": result.message},
    ]
    second = await client.chat.completions.create(model="m", messages=messages)
    assert second.choices[0].finish_reason == "stop"
    return arguments, result, second.choices[0].message.content or ""


async def test_it_lists_one_model(client: AsyncOpenAI) -> None:
    models = [m.id async for m in client.models.list()]
    assert models == ["shortterm-fake"]


async def test_a_plain_turn_echoes_and_quotes_memory_deterministically(
    client: AsyncOpenAI, memory: shortterm.Memory
) -> None:
    earlier = turn_of(memory, "pack list?", channel="plans")
    await earlier.capture(
        history=[shortterm.Message("user", "pack list?", author_id="111", speaker="Ana")],
        replies=[shortterm.Reply("water and snacks")],
    )
    turn = turn_of(memory, "ready?")
    messages = await prompt_of(turn, "ready?")
    assert any("#plans in this server" in (m["content"] or "") for m in messages)

    answers = [
        await client.chat.completions.create(model="any-name", messages=messages) for _ in range(2)
    ]
    reply = answers[0].choices[0].message.content
    assert (
        reply
        == 'You said: "Ana: ready?". From memory: "Ana: pack list?"; "Tomo: water and snacks".'
    )
    assert answers[0].model == "any-name"
    assert answers[0].model_dump() == answers[1].model_dump()  # the same request, the same answer


async def test_a_tool_round_writes_the_summary_then_answers(
    client: AsyncOpenAI, memory: shortterm.Memory, fake: FakeModelProcess
) -> None:
    said = "note that we hike on Saturday at 8 and Ben brings a kettle"
    turn = turn_of(memory, said)
    arguments, result, reply = await tool_round(client, turn, await prompt_of(turn, said))
    assert arguments == {"summary": f"Ana: {said}"}
    assert result.ok, result.message
    assert reply == f'Notes updated. You said: "Ana: {said}". My memory is empty here.'
    entry = await memory.get(shortterm.ScopeKey.server("333", "222"))
    assert entry is not None
    assert entry.summary == f"Ana: {said}"
    # stderr says what happened, never what was said
    assert any(f"a call of {texts.TOOL_NAME}" in line for line in fake.stderr)
    assert not any("kettle" in line for line in fake.stderr)


async def test_category_mode_arguments_fit_the_offered_schema(
    client: AsyncOpenAI, memory: shortterm.Memory
) -> None:
    await memory.configure_server("333", ServerSettings(categories=CATEGORIES))
    said = "keep in mind that Ben is bringing the map"
    turn = turn_of(memory, said)
    arguments, result, _ = await tool_round(client, turn, await prompt_of(turn, said))
    assert arguments == {"plans": f"Ana: {said}", "mood": None}  # null: unchanged
    assert result.ok, result.message
    entry = await memory.get(shortterm.ScopeKey.server("333", "222"))
    assert entry is not None
    assert dict(entry.categories) == {"plans": f"Ana: {said}"}


async def test_the_nudge_alone_brings_a_tool_call(
    client: AsyncOpenAI, memory: shortterm.Memory
) -> None:
    await memory.configure_server("333", ServerSettings(refresh_cadence=1))
    first = turn_of(memory, "hello")
    await first.capture(
        history=[shortterm.Message("user", "hello", author_id="111", speaker="Ana")],
        replies=[shortterm.Reply("hi!")],
    )
    turn = turn_of(memory, "what's up?")
    ctx = await turn.context()
    assert ctx.nudge is not None  # the cadence is reached: shortterm asks for a summary
    _, result, _ = await tool_round(client, turn, await prompt_of(turn, "what's up?"))
    assert result.ok, result.message


async def test_the_tool_named_in_a_reply_or_a_memory_is_no_nudge(
    client: AsyncOpenAI, memory: shortterm.Memory
) -> None:
    """Only the operator's or shortterm's words ask for the tool: an earlier reply, or a
    recalled line, that names it must not make every later turn call it."""
    turn = turn_of(memory, "and now?")
    named = f"I would call {texts.TOOL_NAME} here."
    memory_block = (
        f"⟦Tomo's memory of other recent conversations.⟧\n│ Tomo: {named}\n⟦end of memory⟧"
    )
    messages = [
        {"role": "system", "content": "You are Tomo."},
        {"role": "user", "content": memory_block},
        {"role": "user", "content": "Ana: hi"},
        {"role": "assistant", "content": named},
        {"role": "user", "content": "Ana: and now?"},
    ]
    answer = await client.chat.completions.create(
        model="m",
        messages=messages,
        tools=turn.tools("openai"),
    )
    assert answer.choices[0].finish_reason == "stop"
    assert answer.choices[0].message.content == (
        f'You said: "Ana: and now?". From memory: "Tomo: {named}".'
    )


async def test_no_tool_call_when_the_tool_is_not_offered(client: AsyncOpenAI) -> None:
    messages = [{"role": "user", "content": "please remember that I like tea"}]
    answer = await client.chat.completions.create(model="m", messages=messages)
    assert answer.choices[0].finish_reason == "stop"
    assert "memory tool was not offered" in (answer.choices[0].message.content or "")


async def test_each_request_is_logged_with_its_answer(
    client: AsyncOpenAI, fake: FakeModelProcess
) -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "log me"}]
    answer = await client.chat.completions.create(model="logged", messages=messages)
    record = fake.logged()[-1]
    assert record["path"] == "/v1/chat/completions"
    assert record["status"] == 200
    assert record["request"]["messages"] == messages
    assert (
        record["response"]["choices"][0]["message"]["content"] == answer.choices[0].message.content
    )


async def test_a_stream_carries_the_same_answer(client: AsyncOpenAI) -> None:
    messages = [{"role": "user", "content": "stream me"}]
    whole = await client.chat.completions.create(model="m", messages=messages)
    stream = await client.chat.completions.create(
        model="m",
        messages=messages,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices] == [None, "stop"]
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == whole.usage.total_tokens


async def test_a_streamed_tool_call_is_the_same_call(
    client: AsyncOpenAI, memory: shortterm.Memory
) -> None:
    said = "note that the stream works"
    turn = turn_of(memory, said)
    messages = await prompt_of(turn, said)
    tools = turn.tools("openai")
    whole = await client.chat.completions.create(model="m", messages=messages, tools=tools)
    stream = await client.chat.completions.create(
        model="m",
        messages=messages,
        tools=tools,
        stream=True,
    )
    chunks = [chunk async for chunk in stream]
    calls = [call for c in chunks for call in c.choices[0].delta.tool_calls or []]
    (expected,) = whole.choices[0].message.tool_calls or []
    assert [(c.index, c.id, c.function.name, c.function.arguments) for c in calls] == [
        (0, expected.id, texts.TOOL_NAME, expected.function.arguments)
    ]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


CHAT = "/v1/chat/completions"
USER = [{"role": "user", "content": "note that x"}]  # asks for the tool, when one is offered


def chat(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def memory_tool(**parameters: object) -> dict[str, object]:
    function = {"name": texts.TOOL_NAME, "parameters": {"type": "object", **parameters}}
    return {"type": "function", "function": function}


BAD = [
    ("POST", CHAT, b"not json", 400, None),
    ("POST", CHAT, b"", 400, None),
    ("POST", CHAT, b"[1, 2]", 400, None),
    ("POST", CHAT, b"[" * 100_000, 400, None),  # nested too deep for the decoder
    ("POST", CHAT, b" " * (8 * 1024 * 1024 + 1), 413, None),
    ("POST", CHAT, chat(model="m"), 400, "messages"),
    ("POST", CHAT, chat(model="m", messages=[]), 400, "messages"),
    ("POST", CHAT, chat(messages=USER), 400, "model"),
    ("POST", CHAT, chat(model="m", messages=[{"role": "cat"}]), 400, "messages[0].role"),
    ("POST", CHAT, chat(model="m", messages=["hi"]), 400, "messages[0]"),
    ("POST", CHAT, chat(model="m", messages=[{"role": "user", "content": 7}]), 400, "messages[0]"),
    (
        "POST",
        CHAT,
        chat(model="m", messages=[{"role": "user", "content": [{"type": "text", "text": 1}]}]),
        400,
        "messages[0]",
    ),
    ("POST", CHAT, chat(model="m", messages=USER, tools={}), 400, "tools"),
    (
        "POST",
        CHAT,
        chat(model="m", messages=USER, tools=[{"type": "function"}]),
        400,
        "tools[0].function",
    ),
    ("POST", CHAT, chat(model="m", messages=USER, n=3), 400, "n"),
    (
        "POST",
        CHAT,
        chat(model="m", messages=USER, tools=[memory_tool(properties=[])]),
        400,
        "tools[0].function.parameters.properties",
    ),
    (
        "POST",
        CHAT,
        chat(model="m", messages=USER, tools=[memory_tool(properties={"summary": 1})]),
        400,
        "tools[0].function.parameters.properties.summary",
    ),
    (
        "POST",
        CHAT,
        chat(model="m", messages=USER, tools=[memory_tool(required="summary")]),
        400,
        "tools[0].function.parameters.required",
    ),
    ("POST", CHAT, chat(model="m", messages=USER, stream="yes"), 400, "stream"),
    (
        "POST",
        CHAT,
        chat(model="m", messages=USER, stream=True, stream_options=[]),
        400,
        "stream_options",
    ),
    ("GET", CHAT, b"", 405, None),
    ("POST", "/v1/models", b"", 405, None),
    ("GET", "/v1/embeddings", b"", 404, None),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "param"), BAD)
def test_bad_input_gets_a_4xx_in_openai_shape(
    fake: FakeModelProcess, method: str, path: str, body: bytes, status: int, param: str | None
) -> None:
    root = fake.url.removesuffix("/v1")
    response = httpx.request(method, root + path, content=body, timeout=30)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert httpx.get(fake.url + "/models", timeout=30).status_code == 200  # still serving


def test_a_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = CliRunner().invoke(main, ["fake-model", "--port", str(port)])
    assert result.exit_code == EXIT_INVALID, result.output
    assert f"cannot listen on 127.0.0.1:{port}" in result.output
    assert "--port" in result.output


def test_an_unwritable_log_is_refused_before_serving(tmp_path: Path) -> None:
    log = tmp_path / "missing-dir" / "requests.jsonl"
    result = CliRunner().invoke(main, ["fake-model", "--port", "0", "--log-requests", str(log)])
    assert result.exit_code == EXIT_INVALID, result.output
    assert f"--log-requests {log}: cannot write there" in result.output


def test_without_the_sidecar_extra_it_says_what_to_install() -> None:
    # A fresh interpreter where uvicorn cannot be imported, as in an install without [sidecar].
    code = (
        "import sys; sys.modules['uvicorn'] = None\n"
        "from shortterm.cli import main\n"
        "main(['fake-model', '--port', '0'])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == EXIT_EXTRA_MISSING, proc.stderr
    assert ".[sidecar]" in proc.stderr


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool", "system"])},
    optional={
        "content": st.sampled_from(["note that x", "hi"]) | st.text(max_size=40) | JSON,
        "tool_calls": JSON,
    },
) | st.dictionaries(st.sampled_from(["role", "content", "tool_calls"]), JSON)
PROPERTY = st.fixed_dictionaries(
    {}, optional={"type": st.sampled_from(["string", "null", "STRING"]) | JSON, "maxLength": JSON}
)
PARAMETERS = st.fixed_dictionaries(
    {},
    optional={
        "properties": st.dictionaries(st.text(max_size=8), PROPERTY | JSON, max_size=3)
        | st.lists(JSON, min_size=1, max_size=2)
        | JSON,
        "required": st.lists(st.text(max_size=8), max_size=3) | JSON,
        "description": JSON,
    },
)
TOOL = st.builds(lambda parameters: memory_tool(**parameters), PARAMETERS) | JSON
# Mostly well-formed at the top, so the checks deep inside (tools, schemas) are reached too.
BODY = st.fixed_dictionaries(
    {
        "model": st.just("m"),
        "messages": st.lists(MESSAGE, max_size=3).map(lambda m: [*m, *USER]) | st.lists(MESSAGE),
    },
    optional={
        "tools": st.lists(TOOL, max_size=2) | JSON,
        "tool_choice": st.sampled_from(["auto", "none", "required"]) | JSON,
        "stream": st.booleans() | JSON,
        "stream_options": JSON,
        "n": JSON,
    },
) | st.dictionaries(st.sampled_from(["model", "messages", "tools", "stream", "n"]), JSON)


@settings(max_examples=1000, deadline=None)
@given(body=BODY | JSON)
def test_any_json_is_answered_or_refused_never_a_crash(body: object) -> None:
    """complete() is what the route runs: anything else it raised would be a 500."""
    try:
        answer = fake_model.complete(body)
    except fake_model.BadRequest as exc:
        refused: fake_model.BadRequest | None = exc
    else:
        refused = None
    if refused is not None:
        assert 400 <= refused.status < 500
        assert refused.message
        return
    assert answer["choices"][0]["finish_reason"] in ("stop", "tool_calls")
    json.dumps(answer)
    fake_model.stream_events(answer, usage=True)
