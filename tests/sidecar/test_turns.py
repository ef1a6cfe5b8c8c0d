"""The turn flow over real HTTP: start, tool call, capture; the guard across requests; turn
ids that expire, are bounded and end with their capture."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

import shortterm
from shortterm.sidecar import SidecarSettings, create_app
from tests.support import FakeClock

TOOL = "update_short_term_memory"
PLANS = {"user_id": "111", "channel_id": "plans", "server_id": "333", "channel_name": "plans"}
CAPTURE = {
    "history": [
        {"role": "user", "content": "Pack list for Saturday?", "author_id": "111", "speaker": "Ana"}
    ],
    "replies": [{"text": "Water, rain jacket, snacks.", "persona_name": "Tomo"}],
}


async def start(client: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    response = await client.post("/v1/turns", json={**PLANS, **fields})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_full_turn_flow(http: httpx.AsyncClient) -> None:
    first = await start(http)
    assert first["context"] == {"items": [], "nudge": None, "memory_depth": -1, "nudge_depth": 2}
    assert [t["function"]["name"] for t in first["tools"]] == [TOOL]
    assert first["maintenance_due"] is False
    turn_id = first["turn_id"]
    assert len(turn_id) >= 32

    summary = "Hike planned: Saturday, ridge trail, 8am."
    call = await http.post(
        f"/v1/turns/{turn_id}/tool-calls", json={"name": TOOL, "arguments": {"summary": summary}}
    )
    assert call.status_code == 200
    assert call.json()["ok"] is True

    captured = await http.post(f"/v1/turns/{turn_id}/capture", json=CAPTURE)
    assert captured.status_code == 204
    assert captured.content == b""

    entry = (await http.get("/v1/servers/333/channels/plans/entry")).json()
    assert entry["summary"] == summary
    assert [m["content"] for m in entry["messages"]] == [
        "Pack list for Saturday?",
        "Water, rain jacket, snacks.",
    ]

    later = await start(http, channel_id="general", channel_name="general", bot_name="Tomo")
    (item,) = later["context"]["items"]
    assert item["kind"] == "other_channels"
    assert "Pack list for Saturday?" in item["text"]
    assert summary in item["text"]


@pytest.mark.parametrize("fmt", ["openai", "openai-responses", "anthropic", "gemini", "mcp"])
async def test_tools_in_each_format(
    asgi: httpx.AsyncClient, memory: shortterm.Memory, fmt: str
) -> None:
    body = await start(asgi, tools_format=fmt)
    expected = memory.turn(user_id="111", channel_id="plans", server_id="333").tools(fmt)
    assert body["tools"] == expected


async def test_the_tool_arguments_may_be_a_json_string(asgi: httpx.AsyncClient) -> None:
    turn_id = (await start(asgi))["turn_id"]
    call = await asgi.post(
        f"/v1/turns/{turn_id}/tool-calls", json={"name": TOOL, "arguments": '{"summary": "x y"}'}
    )
    assert call.json()["ok"] is True


async def test_one_upgrade_per_turn_across_requests(http: httpx.AsyncClient) -> None:
    turn_id = (await start(http))["turn_id"]
    url = f"/v1/turns/{turn_id}/tool-calls"
    first = await http.post(url, json={"name": TOOL, "arguments": {"summary": "first"}})
    second = await http.post(url, json={"name": TOOL, "arguments": {"summary": "second"}})
    assert first.json()["ok"] is True
    assert second.status_code == 200
    assert second.json()["ok"] is False
    entry = (await http.get("/v1/servers/333/channels/plans/entry")).json()
    assert entry["summary"] == "first"

    # A fresh turn may upgrade again.
    other = (await start(http))["turn_id"]
    again = await http.post(
        f"/v1/turns/{other}/tool-calls", json={"name": TOOL, "arguments": {"summary": "third"}}
    )
    assert again.json()["ok"] is True


async def test_parallel_calls_on_one_turn_upgrade_once(http: httpx.AsyncClient) -> None:
    turn_id = (await start(http))["turn_id"]
    url = f"/v1/turns/{turn_id}/tool-calls"
    calls = [
        http.post(url, json={"name": TOOL, "arguments": {"summary": f"take {i}"}}) for i in range(8)
    ]
    results = [r.json()["ok"] for r in await asyncio.gather(*calls)]
    assert results.count(True) == 1


async def test_a_refused_call_is_an_answer_not_an_error(asgi: httpx.AsyncClient) -> None:
    turn_id = (await start(asgi))["turn_id"]
    call = await asgi.post(
        f"/v1/turns/{turn_id}/tool-calls", json={"name": "nope", "arguments": {}}
    )
    assert call.status_code == 200
    assert call.json()["ok"] is False
    assert TOOL in call.json()["message"]


async def test_capture_ends_the_turn(asgi: httpx.AsyncClient) -> None:
    turn_id = (await start(asgi))["turn_id"]
    assert (await asgi.post(f"/v1/turns/{turn_id}/capture", json=CAPTURE)).status_code == 204
    again = await asgi.post(f"/v1/turns/{turn_id}/capture", json=CAPTURE)
    assert again.status_code == 404
    assert again.json()["code"] == "not_found"
    late = await asgi.post(f"/v1/turns/{turn_id}/tool-calls", json={"name": TOOL, "arguments": {}})
    assert late.status_code == 404


async def test_two_captures_of_one_turn_at_once_land_once(http: httpx.AsyncClient) -> None:
    turn_id = (await start(http))["turn_id"]
    done = await asyncio.gather(
        *(http.post(f"/v1/turns/{turn_id}/capture", json=CAPTURE) for _ in range(3))
    )
    assert sorted(r.status_code for r in done) == [204, 404, 404]
    entry = (await http.get("/v1/servers/333/channels/plans/entry")).json()
    assert entry["turns_since_refresh"] == 1


async def test_a_failed_capture_keeps_the_turn(asgi: httpx.AsyncClient) -> None:
    turn_id = (await start(asgi))["turn_id"]
    bad = {"history": [{"role": "user", "content": "hi", "at": -1}], "replies": []}
    assert (await asgi.post(f"/v1/turns/{turn_id}/capture", json=bad)).status_code == 422
    assert (await asgi.post(f"/v1/turns/{turn_id}/capture", json=CAPTURE)).status_code == 204


async def test_turn_ids_expire_after_their_ttl(memory: shortterm.Memory, clock: FakeClock) -> None:
    app = create_app(memory, SidecarSettings(turn_ttl_s=60))
    async with _client(app) as client:
        used = (await start(client))["turn_id"]
        idle = (await start(client))["turn_id"]
        clock.advance(45)
        ok = await client.post(f"/v1/turns/{used}/tool-calls", json={"name": "x", "arguments": {}})
        assert ok.status_code == 200  # a use pushes the expiry forward
        clock.advance(30)  # idle: 75 s unused; used: 30 s since its last use
        gone = await client.post(f"/v1/turns/{idle}/capture", json=CAPTURE)
        assert gone.status_code == 404
        assert (await client.post(f"/v1/turns/{used}/capture", json=CAPTURE)).status_code == 204
        metrics = (await client.get("/metrics")).text
        assert "shortterm_sidecar_turns_expired_total 1.0" in metrics


async def test_turn_ids_are_bounded_least_recently_used_first(memory: shortterm.Memory) -> None:
    app = create_app(memory, SidecarSettings(max_turns=3))
    async with _client(app) as client:
        ids = [(await start(client))["turn_id"] for _ in range(3)]
        touched = await client.post(
            f"/v1/turns/{ids[0]}/tool-calls", json={"name": "x", "arguments": {}}
        )
        assert touched.status_code == 200  # ids[0] is now the most recently used
        newest = (await start(client))["turn_id"]  # evicts ids[1]
        assert len(app.state.turns) == 3
        statuses = {
            turn_id: (
                await client.post(
                    f"/v1/turns/{turn_id}/tool-calls", json={"name": "x", "arguments": {}}
                )
            ).status_code
            for turn_id in (ids[0], ids[1], ids[2], newest)
        }
        assert statuses == {ids[0]: 200, ids[1]: 404, ids[2]: 200, newest: 200}
        assert "shortterm_sidecar_turns_evicted_total 1.0" in (await client.get("/metrics")).text


async def test_turn_ids_are_unguessable(asgi: httpx.AsyncClient) -> None:
    ids = {(await start(asgi))["turn_id"] for _ in range(50)}
    assert len(ids) == 50
    assert all(len(i) == 32 and i.replace("-", "").replace("_", "").isalnum() for i in ids)


async def test_a_dm_turn_and_context_budget(asgi: httpx.AsyncClient) -> None:
    body = await start(asgi, server_id=None, channel_name=None, max_tokens=50)
    assert body["context"]["items"] == []
    assert body["expires_in_s"] == 900


def _client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")
