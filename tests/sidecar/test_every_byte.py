"""Every string a body can hold, lone surrogates included: no route answers 500.

A JSON ``"\\ud800"`` escape is valid JSON, and Python's decoder makes it a string that cannot
be encoded as UTF-8. Text keeps its place as U+FFFD (a spliced prompt comes back valid UTF-8
JSON), an id with one is refused with a 422 naming it, and the keep-alive connection that
carried it serves the next request. All against uvicorn on loopback.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shortterm
from shortterm import inject
from shortterm.model.config import Config
from shortterm.sidecar import SidecarSettings, openapi_document
from shortterm.sidecar.schemas import ID_PATTERN
from tests.sidecar.live import serving_in_thread
from tests.sidecar.test_splice import GENERAL, library_context, seed

HEADERS = {"Content-Type": "application/json"}
LONE = ("\ud800", "\udbff", "\udc00", "\udfff")


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    db: Path = tmp_path_factory.mktemp("every-byte") / "stm.db"

    def open_memory() -> Any:
        return shortterm.open(store=f"sqlite:///{db}", config=Config(sweep_interval_s=0))

    with serving_in_thread(open_memory) as url, httpx.Client(base_url=url, timeout=30) as client:
        seed(client, content_depth=1, nudge_depth=0)
        yield client


def post_raw(client: httpx.Client, method: str, path: str, body: Any) -> httpx.Response:
    # json.dumps writes a lone surrogate as its "\udXXX" escape: ASCII, as a client would send.
    return client.request(method, path, content=json.dumps(body).encode(), headers=HEADERS)


def surrogates_in(value: Any) -> list[str]:
    """The strings of a decoded JSON value (keys included) that UTF-8 cannot encode."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return [value]
        return []
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in surrogates_in(k) + surrogates_in(v)]
    if isinstance(value, list):
        return [s for v in value for s in surrogates_in(v)]
    return []


def strict_json(response: httpx.Response) -> Any:
    """The body (if any), which must be UTF-8 JSON without a lone surrogate, escaped or not."""
    assert response.status_code < 500, response.text
    if not response.content:
        return None
    decoded = json.loads(response.content.decode("utf-8"))
    assert surrogates_in(decoded) == [], response.text
    return decoded


def replaced(value: Any) -> Any:
    """What the sidecar should make of ``value``: each lone surrogate as U+FFFD."""
    if isinstance(value, str):
        return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in value)
    if isinstance(value, dict):
        return {replaced(k): replaced(v) for k, v in value.items()}
    if isinstance(value, list):
        return [replaced(v) for v in value]
    return value


# -- a prompt of every shape, with text in every slot ------------------------------------------


def prompt(fmt: str, t: list[str]) -> list[dict[str, Any]]:
    """A dialogue in ``fmt`` with a tool exchange and content parts; ``t`` fills its text."""
    if fmt == "openai":
        call = {"id": t[0], "type": "function", "function": {"name": t[1], "arguments": t[2]}}
        return [
            {"role": "system", "content": t[3]},
            {"role": "user", "content": t[4], "name": t[5]},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": t[0], "content": t[6]},
            {"role": "user", "content": [{"type": "text", "text": t[7]}]},
        ]
    if fmt == "openai-responses":
        return [
            {"role": "developer", "content": t[3]},
            {"role": "user", "content": t[4]},
            {"type": "function_call", "call_id": t[0], "name": t[1], "arguments": t[2]},
            {"type": "function_call_output", "call_id": t[0], "output": t[6]},
            {"role": "user", "content": [{"type": "input_text", "text": t[7]}]},
        ]
    if fmt == "anthropic":
        use = {"type": "tool_use", "id": t[0], "name": t[1], "input": {t[5]: t[2]}}
        result = {"type": "tool_result", "tool_use_id": t[0], "content": t[6]}
        return [
            {"role": "user", "content": t[4]},
            {"role": "assistant", "content": [{"type": "text", "text": t[3]}, use]},
            {"role": "user", "content": [result, {"type": "text", "text": t[7]}]},
        ]
    call = {"functionCall": {"name": t[1], "args": {t[5]: t[2]}}}
    response = {"functionResponse": {"name": t[1], "response": {t[5]: t[6]}}}
    return [
        {"role": "user", "parts": [{"text": t[4]}, {"text": t[3]}]},
        {"role": "model", "parts": [call]},
        {"role": "function", "parts": [response]},
        {"role": "user", "parts": [{"text": t[7]}]},
    ]


SLOTS = 8
FORMATS = ("openai", "openai-responses", "anthropic", "gemini")


def spliced(client: httpx.Client, fmt: str, messages: list[dict[str, Any]]) -> None:
    """Start a turn with ``messages``: the answer is the library's splice of the same messages
    with their lone surrogates replaced."""
    start = {**GENERAL, "messages": messages, "messages_format": fmt}
    answer = post_raw(client, "POST", "/v1/turns", start)
    assert answer.status_code == 201, answer.text
    body = strict_json(answer)
    # What the server decoded: json.loads joins an escaped pair into one character.
    sent = replaced(json.loads(json.dumps(messages)))
    assert body["messages"] == inject(sent, library_context(body), format=fmt)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_lone_surrogate_in_every_slot_of_a_prompt_becomes_u_fffd(
    sidecar: httpx.Client, fmt: str
) -> None:
    texts = [f"slot {i} {LONE[i % len(LONE)]} end" for i in range(SLOTS)]
    spliced(sidecar, fmt, prompt(fmt, texts))


# Any code point, and half of the draws a surrogate: Hypothesis leaves them out unless asked
# by category (``exclude_categories=()`` does not do it, and 2,048 of 1.1 million code points
# would hardly ever be drawn anyway).
any_char = st.one_of(st.characters(), st.characters(categories=["Cs"]))
any_text = st.text(any_char, min_size=1, max_size=12)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(fmt=st.sampled_from(FORMATS), texts=st.lists(any_text, min_size=SLOTS, max_size=SLOTS))
def test_any_text_in_a_prompt_comes_back_spliced_and_valid(
    sidecar: httpx.Client, fmt: str, texts: list[str]
) -> None:
    spliced(sidecar, fmt, prompt(fmt, texts))


def test_the_connection_that_carried_a_lone_surrogate_serves_the_next_request(
    sidecar: httpx.Client,
) -> None:
    url = urlsplit(str(sidecar.base_url))
    assert url.hostname is not None and url.port is not None
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    bad = {**GENERAL, "messages": [{"role": "user", "content": "a\ud800b"}]}
    good = {**GENERAL, "messages": [{"role": "user", "content": "ab"}]}
    answers = []
    try:
        connection.connect()
        opened = connection.sock
        for body in (bad, good, bad):
            connection.request("POST", "/v1/turns", json.dumps(body).encode(), HEADERS)
            response = connection.getresponse()
            answers.append((response.status, json.loads(response.read().decode("utf-8"))))
            assert connection.sock is opened  # still the same connection
    finally:
        connection.close()
    assert [status for status, _ in answers] == [201, 201, 201]
    for (_, answer), sent in zip(answers, ("a\ufffdb", "ab", "a\ufffdb"), strict=True):
        assert {"role": "user", "content": sent} in answer["messages"]


# -- every string field of every route ------------------------------------------------------------

DOCUMENT = openapi_document(SidecarSettings())
# Apart from the server the prompts above are spliced for: these cases change its settings.
PATH_VALUES = {"server_id": "900", "user_id": "901", "channel_id": "902"}


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is not None:
        return _resolve(DOCUMENT["components"]["schemas"][ref.rsplit("/", 1)[1]])
    for option in schema.get("anyOf", ()):
        if option.get("type") != "null":
            return _resolve(option)
    return schema


def _schema_at(schema: dict[str, Any], path: tuple[str | int, ...]) -> dict[str, Any]:
    for part in path:
        schema = _resolve(schema)
        if isinstance(part, int):
            schema = schema.get("items", {})
        else:
            additional = schema.get("additionalProperties")
            fallback = additional if isinstance(additional, dict) else {}
            schema = schema.get("properties", {}).get(part, fallback)
    return _resolve(schema)


def _string_paths(value: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    if isinstance(value, str):
        yield path
    elif isinstance(value, dict):
        for key, inner in value.items():
            yield from _string_paths(inner, (*path, key))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from _string_paths(inner, (*path, i))


def _with(value: Any, path: tuple[str | int, ...], lone: str) -> Any:
    """A copy of ``value`` whose string at ``path`` ends with ``lone``."""
    if not path:
        return value + lone
    copy = list(value) if isinstance(value, list) else dict(value)
    copy[path[0]] = _with(value[path[0]], path[1:], lone)  # type: ignore[index]
    return copy


def _at(value: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        value = value[part]
    return value


def _strings(value: Any) -> set[str]:
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return {s for inner in value.values() for s in _strings(inner)}
    if isinstance(value, list):
        return {s for inner in value for s in _strings(inner)}
    return set()


def _field(path: tuple[str | int, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _cases() -> Iterator[Any]:
    for template, operations in DOCUMENT["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body is None:
                continue
            for path in _string_paths(body["example"]):
                name = f"{method.upper()} {template} {_field(path)}"
                yield pytest.param(method.upper(), template, body, path, id=name)


def _call(client: httpx.Client, method: str, template: str, body: Any) -> httpx.Response:
    values = dict(PATH_VALUES)
    if "{turn_id}" in template:  # a fresh turn each time: one update per turn
        started = client.post("/v1/turns", json=GENERAL)
        values["turn_id"] = started.json()["turn_id"]
    return post_raw(client, method, template.format(**values), body)


@pytest.mark.parametrize(("method", "template", "body", "path"), list(_cases()))
def test_a_lone_surrogate_in_any_string_field(
    sidecar: httpx.Client,
    method: str,
    template: str,
    body: dict[str, Any],
    path: tuple[str | int, ...],
) -> None:
    """Text: answered as the example without it is, echoed with U+FFFD. An id: 422 naming it.
    A fixed word: 422."""
    example = body["example"]
    baseline = _call(sidecar, method, template, example)
    echoed = _strings(strict_json(baseline))
    answer = _call(sidecar, method, template, _with(example, path, "\udc00"))
    answered = strict_json(answer)
    schema = _schema_at(body["schema"], path)
    # A provider message's role is a fixed word too, one the document cannot state.
    fixed_word = "enum" in schema or "const" in schema or path[0::2] == ("messages", "role")
    if schema.get("pattern") == ID_PATTERN:
        assert answer.status_code == 422, answer.text
        assert answered["field"] == _field(path)
        assert "no lone surrogates" in answered["detail"]
    elif fixed_word:
        assert answer.status_code == 422, answer.text
        assert answered["field"] == _field(path)
    else:
        assert answer.status_code == baseline.status_code, answer.text
        value = _at(example, path)
        if value in echoed:
            assert value + "\ufffd" in _strings(answered), answer.text


def test_a_lone_surrogate_in_a_key_is_named_as_u_fffd(sidecar: httpx.Client) -> None:
    unknown = post_raw(sidecar, "POST", "/v1/turns", {**GENERAL, "extra\ud800": 1})
    assert unknown.status_code == 422
    assert strict_json(unknown)["field"] == "extra\ufffd"
    slug = post_raw(
        sidecar,
        "PUT",
        "/v1/servers/333/channels/general/entry/categories",
        {"categories": {"mo\udc00od": "calm"}},
    )
    assert slug.status_code == 422
    assert "no lone surrogates" in strict_json(slug)["detail"]


def test_text_with_a_lone_surrogate_is_kept_as_u_fffd(sidecar: httpx.Client) -> None:
    path = "/v1/servers/333/channels/surrogates/entry/summary"
    edited = post_raw(sidecar, "PUT", path, {"summary": "plans \ud83d for Saturday"})
    assert edited.status_code == 200, edited.text
    assert strict_json(edited)["entry"]["summary"] == "plans \ufffd for Saturday"
    turn = post_raw(sidecar, "POST", "/v1/turns", {**GENERAL, "channel_id": "surrogates"})
    capture = {
        "history": [{"role": "user", "content": "hi \udfff", "speaker": "A\ud800na"}],
        "replies": [{"text": "hello \udc00", "persona_name": "To\udbffmo"}],
    }
    path_capture = f"/v1/turns/{turn.json()['turn_id']}/capture"
    assert post_raw(sidecar, "POST", path_capture, capture).status_code == 204
    entry = strict_json(sidecar.get("/v1/servers/333/channels/surrogates/entry"))
    said = [(m["content"], m["speaker"]) for m in entry["messages"]]
    assert said == [("hi \ufffd", "A\ufffdna"), ("hello \ufffd", "To\ufffdmo")]
