"""``POST /v1/turns`` with the bot's own ``messages``: the answer carries them spliced exactly as
``shortterm.inject`` splices them, for every provider shape; bad shapes are a 422 naming the
index and field; a huge prompt is bound by the body limit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shortterm
from shortterm import Context, ContextItem
from shortterm.model.config import Config
from tests.sidecar.live import serving_in_thread

Msg = dict[str, Any]
GENERAL = {
    "user_id": "111",
    "channel_id": "general",
    "server_id": "333",
    "channel_name": "general",
    "bot_name": "Tomo",
}
CAPTURE = {
    "history": [{"role": "user", "content": "Saturday?", "author_id": "111", "speaker": "Ana"}],
    "replies": [{"text": "Ridge trail at 8.", "persona_name": "Tomo"}],
}


def seed(client: httpx.Client, **server_settings: Any) -> None:
    """Memory from #plans, a summary of #general, and a cadence of 1: every shape of item."""
    put = client.put("/v1/servers/333/settings", json={"refresh_cadence": 1, **server_settings})
    assert put.status_code == 200, put.text
    for channel in ("plans", "general"):
        turn = client.post("/v1/turns", json={**GENERAL, "channel_id": channel}).json()
        done = client.post(f"/v1/turns/{turn['turn_id']}/capture", json=CAPTURE)
        assert done.status_code == 204
    summary = {"summary": "Ana and Tomo chose the ridge trail."}
    assert client.put("/v1/servers/333/channels/general/entry/summary", json=summary).is_success


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    db: Path = tmp_path_factory.mktemp("splice") / "stm.db"

    def open_memory() -> Any:
        return shortterm.open(store=f"sqlite:///{db}", config=Config(sweep_interval_s=0))

    with serving_in_thread(open_memory) as url, httpx.Client(base_url=url, timeout=10) as client:
        seed(client, content_depth=1, nudge_depth=0)
        yield client


def start(client: httpx.Client, **fields: Any) -> dict[str, Any]:
    response = client.post("/v1/turns", json={**GENERAL, **fields})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def library_context(body: dict[str, Any]) -> Context:
    def item(raw: dict[str, Any]) -> ContextItem:
        return ContextItem(raw["role"], text=raw["text"], kind=raw["kind"])

    ctx = body["context"]
    nudge = None if ctx["nudge"] is None else item(ctx["nudge"])
    return Context([item(i) for i in ctx["items"]], nudge, ctx["memory_depth"], ctx["nudge_depth"])


# -- one golden splice per shape -----------------------------------------------------------------

CHAT: list[Msg] = [
    {"role": "system", "content": "You are Tomo."},
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
]
RESPONSES: list[Msg] = [
    {"role": "developer", "content": "You are Tomo."},
    {"role": "user", "content": "weather?"},
    {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
]
ANTHROPIC: list[Msg] = [
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "w", "input": {}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
]
GEMINI: list[Msg] = [
    {"role": "user", "parts": [{"text": "weather?"}]},
    {"role": "model", "parts": [{"functionCall": {"name": "w", "args": {}}}]},
    {"role": "user", "parts": [{"functionResponse": {"name": "w", "response": {}}}]},
]


def as_chat(text: str) -> Msg:
    return {"role": "user", "content": text}


def as_gemini(text: str) -> Msg:
    return {"role": "user", "parts": [{"text": text}]}


@pytest.mark.parametrize(
    ("fmt", "dialogue", "lead", "wrap", "tool_key"),
    [
        ("openai", CHAT, 2, as_chat, "function"),
        ("openai-responses", RESPONSES, 2, as_chat, "parameters"),
        ("anthropic", ANTHROPIC, 1, as_chat, "input_schema"),
        ("gemini", GEMINI, 1, as_gemini, "parameters"),
    ],
)
def test_each_shape_is_spliced_around_its_tool_exchange(
    sidecar: httpx.Client, fmt: str, dialogue: list[Msg], lead: int, wrap: Any, tool_key: str
) -> None:
    body = start(sidecar, messages=dialogue, messages_format=fmt)
    ctx = body["context"]
    assert (ctx["memory_depth"], ctx["nudge_depth"]) == (1, 0)
    kinds = [i["kind"] for i in ctx["items"]]
    assert kinds == ["other_channels", "same_channel"] and ctx["nudge"] is not None
    items = [wrap(i["text"]) for i in ctx["items"]]
    # Depth 1 falls between the call and its result: the items move up before the call.
    expected = [*dialogue[:lead], *items, *dialogue[lead:], wrap(ctx["nudge"]["text"])]
    assert body["messages"] == expected
    assert body["tools"] and tool_key in body["tools"][0]  # tools follow messages_format


def test_tools_format_still_wins_and_no_messages_means_no_messages_field(
    sidecar: httpx.Client,
) -> None:
    body = start(sidecar, messages=ANTHROPIC, messages_format="anthropic", tools_format="mcp")
    assert "inputSchema" in body["tools"][0]
    plain = start(sidecar)
    assert "messages" not in plain and "function" in plain["tools"][0]
    empty = start(sidecar, messages=[])
    assert [m["content"] for m in empty["messages"]] == [
        *(i["text"] for i in empty["context"]["items"]),
        empty["context"]["nudge"]["text"],
    ]


# -- the HTTP splice is the library splice --------------------------------------------------------


@st.composite
def dialogues(draw: st.DrawFn, fmt: str) -> list[Msg]:
    text = st.text(max_size=8)
    out: list[Msg] = []
    if fmt in ("openai", "openai-responses") and draw(st.booleans()):
        out.append({"role": draw(st.sampled_from(["system", "developer"])), "content": "rules"})
    for i in range(draw(st.integers(0, 10))):
        exchange = draw(st.booleans())
        results = draw(st.integers(1, 3))
        said = draw(text)
        if fmt == "openai":
            if exchange:
                calls = [{"id": f"c{i}.{j}", "type": "function"} for j in range(results)]
                out.append({"role": "assistant", "content": None, "tool_calls": calls})
                out += [{"role": "tool", "tool_call_id": c["id"], "content": said} for c in calls]
            else:
                out.append({"role": draw(st.sampled_from(["user", "assistant"])), "content": said})
        elif fmt == "openai-responses":
            if exchange:
                if draw(st.booleans()):
                    out.append({"type": "reasoning", "id": f"r{i}", "summary": []})
                ids = [f"c{i}.{j}" for j in range(results)]
                out += [{"type": "function_call", "call_id": c, "name": "w"} for c in ids]
                outputs = [{"type": "function_call_output", "call_id": c} for c in ids]
                out += [{**o, "output": said} for o in outputs]
            else:
                out.append({"role": draw(st.sampled_from(["user", "assistant"])), "content": said})
        elif fmt == "anthropic":
            if exchange:
                uses = [{"type": "tool_use", "id": f"t{i}.{j}"} for j in range(results)]
                out.append({"role": "assistant", "content": uses})
                blocks = [{"type": "tool_result", "tool_use_id": u["id"]} for u in uses]
                out.append({"role": "user", "content": blocks})
            else:
                out.append({"role": draw(st.sampled_from(["user", "assistant"])), "content": said})
        else:
            if exchange:
                out.append({"role": "model", "parts": [{"functionCall": {"name": "w"}}]})
                out.append({"role": "user", "parts": [{"functionResponse": {"name": "w"}}]})
            else:
                role = draw(st.sampled_from(["user", "model"]))
                out.append({"role": role, "parts": [{"text": said}]})
    return out


FORMATS = ["openai", "openai-responses", "anthropic", "gemini"]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    data=st.data(),
    fmt=st.sampled_from(FORMATS),
    content_depth=st.integers(-1, 6),
    nudge_depth=st.integers(0, 6),
)
def test_the_http_splice_equals_the_library_splice(
    sidecar: httpx.Client, data: st.DataObject, fmt: str, content_depth: int, nudge_depth: int
) -> None:
    dialogue = data.draw(dialogues(fmt))
    put = sidecar.put(
        "/v1/servers/333/settings",
        json={"refresh_cadence": 1, "content_depth": content_depth, "nudge_depth": nudge_depth},
    )
    assert put.status_code == 200
    body = start(sidecar, messages=dialogue, messages_format=fmt)
    ctx = library_context(body)
    assert ctx.items and ctx.nudge is not None
    assert body["messages"] == shortterm.inject(dialogue, ctx, format=fmt)
    sidecar.put("/v1/servers/333/settings", json={"refresh_cadence": 1, "content_depth": 1})


# -- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "messages", "field"),
    [
        ("openai", [{"role": "user", "content": "hi"}, {"role": "robot"}], "messages[1].role"),
        ("openai", [{"role": "user", "content": {"x": 1}}], "messages[0].content"),
        ("openai", ["hi"], "messages[0]"),
        ("openai", "hi", "messages"),
        ("anthropic", [{"role": "system", "content": "rules"}], "messages[0].role"),
        ("anthropic", [{"role": "user", "content": [{"text": "x"}]}], "messages[0].content[0]"),
        ("gemini", [{"role": "user", "content": "hi"}], "messages[0].parts"),
        ("openai-responses", [{"type": "function_call"}], "messages[0].call_id"),
    ],
)
def test_a_message_not_of_the_declared_shape_is_a_422_naming_index_and_field(
    sidecar: httpx.Client, fmt: str, messages: Any, field: str
) -> None:
    response = sidecar.post(
        "/v1/turns", json={**GENERAL, "messages": messages, "messages_format": fmt}
    )
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field


def test_an_unknown_format_is_a_422(sidecar: httpx.Client) -> None:
    response = sidecar.post("/v1/turns", json={**GENERAL, "messages": [], "messages_format": "x"})
    assert response.status_code == 422 and response.json()["field"] == "messages_format"


def test_a_huge_prompt_is_bound_by_the_body_limit(sidecar: httpx.Client) -> None:
    messages = [{"role": "user", "content": "x" * 1000}] * 1100  # over 1 MiB
    response = sidecar.post("/v1/turns", json={**GENERAL, "messages": messages})
    assert response.status_code == 413
    assert response.json()["code"] == "payload_too_large"
