"""Errors over HTTP: 422 naming the field, undecodable bodies, 404, 405 and 503 — one shape."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

import shortterm
from shortterm.model.config import Config
from shortterm.sidecar import SidecarSettings, create_app
from shortterm.store.sqlite import SQLiteStore
from tests.sidecar.live import serving
from tests.support import FakeClock

T = TypeVar("T")
TURN = {"user_id": "111", "channel_id": "222", "server_id": "333"}


def problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body: dict[str, Any] = response.json()
    assert set(body) == {"code", "detail", "field", "errors"}
    assert body["code"] == code
    return body


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"channel_id": "222"}, "user_id"),
        ({**TURN, "user_id": ""}, "user_id"),
        ({**TURN, "user_id": 111}, "user_id"),
        ({**TURN, "channel_id": "a\x00b"}, "channel_id"),
        ({**TURN, "persona_id": "p" * 257}, "persona_id"),
        ({**TURN, "has_tools": "yes"}, "has_tools"),
        ({**TURN, "privacy": "secret"}, "privacy"),
        ({**TURN, "tools_format": "xml"}, "tools_format"),
        ({**TURN, "max_tokens": 0}, "max_tokens"),
        ({**TURN, "bot_name": "   "}, "bot_name"),
        ({**TURN, "surprise": 1}, "surprise"),
    ],
)
async def test_a_bad_turn_start_names_the_field(
    asgi: httpx.AsyncClient, body: dict[str, Any], field: str
) -> None:
    got = problem(await asgi.post("/v1/turns", json=body), 422, "invalid_input")
    assert got["field"] == field
    assert got["detail"].startswith(field)
    assert got["errors"][0]["field"] == field


async def test_errors_over_real_http(http: httpx.AsyncClient) -> None:
    garbled = await http.post(
        "/v1/turns", content=b"\xff{", headers={"content-type": "application/json"}
    )
    assert problem(garbled, 422, "invalid_json")["field"] == "body"
    missing = await http.post("/v1/turns", json={"channel_id": "222"})
    assert problem(missing, 422, "invalid_input")["field"] == "user_id"
    problem(await http.get("/v1/users/111/channels/222/entry"), 404, "not_found")


async def test_nested_fields_are_named_by_their_path(asgi: httpx.AsyncClient) -> None:
    turn_id = (await asgi.post("/v1/turns", json=TURN)).json()["turn_id"]
    bad = {"history": [{"role": "user", "content": "ok"}, {"role": "robot", "content": "x"}]}
    got = problem(await asgi.post(f"/v1/turns/{turn_id}/capture", json=bad), 422, "invalid_input")
    assert got["field"] == "history[1].role"


async def test_library_refusals_are_422_naming_the_field(asgi: httpx.AsyncClient) -> None:
    too_many = {"crude_message_count": 11}  # above the memory's max_messages (10)
    got = problem(await asgi.put("/v1/servers/333/settings", json=too_many), 422, "invalid_input")
    assert got["field"] == "crude_message_count"
    assert "max_messages (10)" in got["detail"]
    same_slug = {
        "categories": [{"label": "Mood", "description": "a"}, {"label": "mood", "description": "b"}]
    }
    got = problem(await asgi.put("/v1/servers/333/settings", json=same_slug), 422, "invalid_input")
    assert got["field"] == "categories"


async def test_query_and_path_fields_are_named(asgi: httpx.AsyncClient) -> None:
    got = problem(await asgi.post("/v1/janitor?retention_days=-1"), 422, "invalid_input")
    assert got["field"] == "retention_days"
    got = problem(await asgi.get("/v1/servers/333/entries?persona_id="), 422, "invalid_input")
    assert got["field"] == "persona_id"
    long_id = "9" * 300
    got = problem(await asgi.get(f"/v1/users/{long_id}/settings"), 422, "invalid_input")
    assert got["field"] == "user_id"


@pytest.mark.parametrize(
    "raw", [b"{not json", b"\xff\xfe\x00", b'{"user_id": "1", ', b"", b"[1, 2]", b"null"]
)
async def test_undecodable_or_wrong_bodies_are_422(asgi: httpx.AsyncClient, raw: bytes) -> None:
    response = await asgi.post(
        "/v1/turns", content=raw, headers={"content-type": "application/json"}
    )
    got = problem(response, 422, "invalid_json" if raw[:1] in (b"{", b"\xff") else "invalid_input")
    assert got["field"] == "body" or got["field"] in ("user_id", "channel_id")


async def test_missing_things_are_404(asgi: httpx.AsyncClient) -> None:
    problem(await asgi.get("/v1/servers/333/channels/222/entry"), 404, "not_found")
    problem(await asgi.get("/v1/users/111/channels/222/entry?persona_id=0"), 404, "not_found")
    gone = {"name": "update_short_term_memory", "arguments": {}}
    problem(await asgi.post("/v1/turns/no-such-turn/tool-calls", json=gone), 404, "not_found")
    got = problem(await asgi.get("/v2/anything"), 404, "not_found")
    assert "/v2/anything" in got["detail"]


async def test_a_wrong_method_is_405(asgi: httpx.AsyncClient) -> None:
    response = await asgi.get("/v1/turns")
    problem(response, 405, "method_not_allowed")
    assert response.headers["allow"] == "POST"


class FailingStore(SQLiteStore):
    """A SQLite store whose every statement fails while ``failing`` is set."""

    failing = False

    def _guard(self, what: str, fn: Callable[[], T]) -> T:
        if self.failing:
            raise shortterm.StoreUnavailable(f"SQLite {what} failed: disk I/O error")
        return super()._guard(what, fn)


@pytest.fixture
async def failing(tmp_path: Path, clock: FakeClock) -> AsyncIterator[tuple[FailingStore, str]]:
    store = FailingStore(tmp_path / "failing.db")
    config = Config(sweep_interval_s=0)
    async with (
        shortterm.open(store=store, clock=clock, config=config) as memory,
        serving(create_app(memory, SidecarSettings())) as url,
    ):
        yield store, url


async def test_a_failing_store_is_503(failing: tuple[FailingStore, str]) -> None:
    store, url = failing
    async with httpx.AsyncClient(base_url=url) as client:
        store.failing = True
        for method, path, body in [
            ("PUT", "/v1/servers/333/settings", {"refresh_cadence": 3}),
            ("PUT", "/v1/users/111/settings", {"privacy": "partial"}),
            ("PUT", "/v1/servers/333/channels/222/entry/summary", {"summary": "x"}),
            ("DELETE", "/v1/channels/222", None),
            ("DELETE", "/v1/users/111", None),
            ("DELETE", "/v1/servers/333/channels/222", None),
            ("POST", "/v1/janitor", None),
            ("GET", "/v1/servers", None),
        ]:
            response = await client.request(method, path, json=body)
            got = problem(response, 503, "store_unavailable")
            assert response.headers["retry-after"] == "1"
            assert "disk I/O error" in got["detail"]

        # A turn still serves from the hot tier; a tool call is refused for the model.
        turn = await client.post("/v1/turns", json=TURN)
        assert turn.status_code == 201
        call = await client.post(
            f"/v1/turns/{turn.json()['turn_id']}/tool-calls",
            json={"name": "update_short_term_memory", "arguments": {"summary": "x"}},
        )
        assert call.status_code == 200
        assert call.json()["ok"] is False
        assert (await client.get("/healthz")).json()["degraded"] is True
        metrics = (await client.get("/metrics")).text
        assert "shortterm_store_errors_total" in metrics

        store.failing = False
        response = await client.put("/v1/servers/333/settings", json={"refresh_cadence": 3})
        assert response.status_code == 200
