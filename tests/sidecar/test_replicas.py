"""Two real sidecar processes on one PostgreSQL + Redis: any replica serves any turn, the
one-upgrade guard holds across them, a capture ends the turn everywhere, and a forged or
tampered turn id is a 404 on every replica. Then the shared registry's expiry and bound, on a
fake clock."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

import shortterm
from shortterm.cache.redis.layout import DEFAULT_GROUPS, Layout
from shortterm.memory.turn import Turn
from shortterm.model.config import Config
from shortterm.model.errors import StoreUnavailable
from shortterm.sidecar import SidecarSettings, create_app
from shortterm.sidecar.turns import RedisTurnRegistry
from shortterm.tool import texts
from tests.sidecar.live import sidecar_process
from tests.support import FakeClock

TOOL = "update_short_term_memory"
OTHER = {"name": "other", "arguments": {}}
START = {"user_id": "111", "channel_id": "plans", "server_id": "333", "channel_name": "plans"}
CAPTURE = {
    "history": [{"role": "user", "content": "Saturday?", "author_id": "111", "speaker": "Ana"}],
    "replies": [{"text": "Ridge trail at 8.", "persona_name": "Tomo"}],
}


def summary(text: str) -> dict[str, Any]:
    return {"name": TOOL, "arguments": {"summary": text}}


@pytest.fixture(params=["redis", "redis-cluster"])
def shared_urls(request: pytest.FixtureRequest) -> tuple[str, str]:
    """PostgreSQL and a Redis shared by the replicas: one node, or a Redis Cluster."""
    fixture = "scale_urls" if request.param == "redis" else "cluster_scale_urls"
    store, cache = request.getfixturevalue(fixture)
    return str(store), str(cache)


@pytest.fixture
def replicas(shared_urls: tuple[str, str]) -> Iterator[tuple[str, str]]:
    store, cache = shared_urls
    with sidecar_process(store, cache) as a, sidecar_process(store, cache) as b:
        yield a, b


@pytest.fixture
async def clients(replicas: tuple[str, str]) -> AsyncIterator[tuple[httpx.AsyncClient, ...]]:
    async with (
        httpx.AsyncClient(base_url=replicas[0], timeout=20) as a,
        httpx.AsyncClient(base_url=replicas[1], timeout=20) as b,
    ):
        yield a, b


async def start(client: httpx.AsyncClient, **fields: Any) -> str:
    response = await client.post("/v1/turns", json={**START, **fields})
    assert response.status_code == 201, response.text
    turn_id: str = response.json()["turn_id"]
    return turn_id


async def test_a_turn_started_on_one_replica_is_served_by_the_other(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    a, b = clients
    turn_id = await start(a)
    call = await b.post(f"/v1/turns/{turn_id}/tool-calls", json=summary("Ridge trail, 8am."))
    assert call.status_code == 200 and call.json()["ok"] is True, call.text
    again = await a.post(f"/v1/turns/{turn_id}/tool-calls", json=summary("Another."))
    assert again.json() == {"ok": False, "message": texts.ALREADY}
    assert (await b.post(f"/v1/turns/{turn_id}/capture", json=CAPTURE)).status_code == 204
    for client in (a, b):  # the capture ended it everywhere
        late = await client.post(f"/v1/turns/{turn_id}/tool-calls", json=summary("Late."))
        assert late.status_code == 404 and late.json()["code"] == "not_found"
        assert (await client.post(f"/v1/turns/{turn_id}/capture", json=CAPTURE)).status_code == 404
    entry = (await a.get("/v1/servers/333/channels/plans/entry")).json()
    assert entry["summary"] == "Ridge trail, 8am."
    assert [m["content"] for m in entry["messages"]] == ["Saturday?", "Ridge trail at 8."]
    # The next turn, on the other replica, sees what the first one captured.
    later = await b.post("/v1/turns", json={**START, "channel_id": "general"})
    assert "Ridge trail at 8." in later.json()["context"]["items"][0]["text"]


async def test_parallel_tool_calls_through_two_replicas_exactly_one_succeeds(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    for round_ in range(12):
        turn_id = await start(clients[round_ % 2], channel_id=f"c{round_}")
        calls = [
            clients[i % 2].post(f"/v1/turns/{turn_id}/tool-calls", json=summary(f"v{i}"))
            for i in range(6)
        ]
        answers = [r.json() for r in await asyncio.gather(*calls)]
        winners = [x for x in answers if x["ok"]]
        assert len(winners) == 1, answers
        assert all(x["message"] in (texts.ALREADY, texts.IN_FLIGHT) for x in answers if not x["ok"])
        key = f"/v1/servers/333/channels/c{round_}/entry"
        stored = (await clients[1].get(key)).json()
        assert stored["summary"] in {f"v{i}" for i in range(6)}


async def test_a_capture_through_both_replicas_at_once_lands_once(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    for round_ in range(8):
        channel = f"cap{round_}"
        turn_id = await start(clients[0], channel_id=channel)
        done = await asyncio.gather(
            *(c.post(f"/v1/turns/{turn_id}/capture", json=CAPTURE) for c in clients)
        )
        # The second is a 404 once the first ended the turn, a 409 while it was capturing.
        assert sorted(r.status_code for r in done) in ([204, 404], [204, 409])
        for busy in (r for r in done if r.status_code == 409):
            assert busy.json()["code"] == "turn_busy", busy.text
            assert "captured by another request, on another sidecar replica" in busy.text
            assert int(busy.headers["Retry-After"]) >= 1
        entry = (await clients[0].get(f"/v1/servers/333/channels/{channel}/entry")).json()
        assert entry["turns_since_refresh"] == 1  # counted once


async def test_a_forged_or_tampered_turn_id_is_a_404_on_every_replica(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    a, b = clients
    real = await start(a)
    other = await start(a, user_id="999", channel_id="elsewhere")
    tampered = real[:-1] + ("A" if real[-1] != "A" else "B")
    token, _, group = real.rpartition(".")  # an id ends with its channel group's number
    forged = [
        secrets.token_urlsafe(24),
        tampered,
        ("A" if token[0] != "A" else "B") + real[1:],
        f"{token}.{(int(group) + 1) % DEFAULT_GROUPS}",
        f"{token}.{DEFAULT_GROUPS}",
        f"{token}.-1",
        token,
        real + "x",
        real[:-1],
        "x" * 256,
        "é" * 20,
        "../turns",
        "turn:" + real,
        "*",
    ]
    for client in (a, b):
        for turn_id in forged:
            call = await client.post(f"/v1/turns/{turn_id}/tool-calls", json=summary("forged"))
            assert call.status_code == 404, (turn_id, call.status_code, call.text)
            assert call.json()["code"] == "not_found"
            cap = await client.post(f"/v1/turns/{turn_id}/capture", json=CAPTURE)
            assert cap.status_code == 404
    # Nothing landed anywhere, and the real turns still work as themselves.
    assert (await a.get("/v1/servers/333/channels/plans/entry")).status_code == 404
    ok = await b.post(f"/v1/turns/{other}/tool-calls", json=summary("theirs"))
    assert ok.json()["ok"] is True
    assert (await b.get("/v1/servers/333/channels/plans/entry")).status_code == 404
    theirs = (await b.get("/v1/servers/333/channels/elsewhere/entry")).json()
    assert theirs["summary"] == "theirs"
    assert (await b.post(f"/v1/turns/{real}/tool-calls", json=summary("mine"))).json()["ok"]


# -- the shared registry on a fake clock ----------------------------------------------------------


@pytest.fixture
async def shared_app(
    shared_urls: tuple[str, str], clock: FakeClock
) -> AsyncIterator[httpx.AsyncClient]:
    store, cache = shared_urls
    config = Config(sweep_interval_s=0)
    async with shortterm.open(store=store, cache=cache, clock=clock, config=config) as memory:
        # 3 turns in each of the 16 channel groups (a shared registry's share per group).
        app = create_app(memory, SidecarSettings(turn_ttl_s=60, max_turns=3 * DEFAULT_GROUPS))
        assert isinstance(app.state.turns, RedisTurnRegistry)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            yield client


async def test_shared_turn_ids_expire_after_their_last_use(
    shared_app: httpx.AsyncClient, clock: FakeClock
) -> None:
    turn_id = await start(shared_app)
    clock.advance(50)
    refused = await shared_app.post(f"/v1/turns/{turn_id}/tool-calls", json=OTHER)
    assert refused.status_code == 200  # a use: the expiry moves forward
    clock.advance(50)
    assert (await shared_app.post(f"/v1/turns/{turn_id}/capture", json=CAPTURE)).status_code == 204
    expiring = await start(shared_app)
    clock.advance(61)
    late = await shared_app.post(f"/v1/turns/{expiring}/capture", json=CAPTURE)
    assert late.status_code == 404


async def test_shared_turn_ids_are_bounded_least_recently_used_first(
    shared_app: httpx.AsyncClient, clock: FakeClock
) -> None:
    # Channels of one group: the registry bounds each group's turns (its share of max_turns).
    layout = Layout("any:")
    channels = [c for c in (f"c{i}" for i in range(200)) if layout.group_of(c) == 0][:4]
    other = next(c for c in (f"c{i}" for i in range(200)) if layout.group_of(c) == 1)
    elsewhere = await start(shared_app, channel_id=other)  # another group: never evicted here
    ids = []
    for channel in channels[:3]:  # one clock step apart: uses at the same instant have no order
        ids.append(await start(shared_app, channel_id=channel))
        clock.advance(1)
    await shared_app.post(f"/v1/turns/{ids[0]}/tool-calls", json=OTHER)  # used
    newest = await start(shared_app, channel_id=channels[3])  # evicts ids[1], the least recent
    gone = await shared_app.post(f"/v1/turns/{ids[1]}/capture", json=CAPTURE)
    assert gone.status_code == 404
    for turn_id in (ids[0], ids[2], newest, elsewhere):
        assert (await shared_app.post(f"/v1/turns/{turn_id}/capture", json=CAPTURE)).is_success
    metrics = (await shared_app.get("/metrics")).text
    assert "shortterm_sidecar_turns_evicted_total 1.0" in metrics


async def test_a_shared_turn_keeps_any_text_it_was_given(shared_app: httpx.AsyncClient) -> None:
    # A lone surrogate is valid JSON; the turn's arguments must still round-trip through Redis.
    raw = '{"user_id": "111", "channel_id": "plans", "server_id": "333", "user_message": "\\ud800"}'
    started = await shared_app.post(
        "/v1/turns", content=raw, headers={"Content-Type": "application/json"}
    )
    assert started.status_code == 201, started.text
    turn_id = started.json()["turn_id"]
    call = await shared_app.post(f"/v1/turns/{turn_id}/tool-calls", json=summary("kept"))
    assert call.json()["ok"] is True
    assert (await shared_app.post(f"/v1/turns/{turn_id}/capture", json=CAPTURE)).is_success


async def test_a_refused_tool_call_leaves_the_guard_to_the_next(
    shared_app: httpx.AsyncClient,
) -> None:
    # The turn read takes the guard; a call refused before it wrote gives it back.
    turn_id = await start(shared_app)
    path = f"/v1/turns/{turn_id}/tool-calls"
    for refused in (OTHER, {"name": TOOL, "arguments": {"summary": 5}}):
        answer = (await shared_app.post(path, json=refused)).json()
        assert answer["ok"] is False and answer["message"] != texts.IN_FLIGHT
    assert (await shared_app.post(path, json=summary("kept"))).json()["ok"] is True
    again = (await shared_app.post(path, json=summary("twice"))).json()
    assert again == {"ok": False, "message": texts.ALREADY}


async def test_a_capture_that_failed_before_its_write_can_be_retried(
    shared_app: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    turn_id = await start(shared_app)
    capture = Turn.capture
    failures = [StoreUnavailable("the durable tier is down")]

    async def failing_once(self: Turn, *args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return await capture(self, *args, **kwargs)

    monkeypatch.setattr(Turn, "capture", failing_once)
    path = f"/v1/turns/{turn_id}/capture"
    assert (await shared_app.post(path, json=CAPTURE)).status_code == 503
    # Its end never went out and the claim was given back: the retry captures and ends it.
    assert (await shared_app.post(path, json=CAPTURE)).status_code == 204
    assert (await shared_app.post(path, json=CAPTURE)).status_code == 404
