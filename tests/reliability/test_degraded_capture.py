"""A capture made while PostgreSQL is unreachable (through a loopback proxy the test cuts) is kept
in the hot tier only; the caller that made it learns so: ``Turn.capture`` returns
``Captured(degraded=True, reason=...)``, and the sidecar's 204 carries ``Shortterm-Degraded:
store`` (documented in /openapi.json). Before the cut and after the restore, neither says it.
"""

from __future__ import annotations

import asyncio
import time

import httpx

import shortterm
from shortterm import Captured, Config, Message, Reply
from shortterm.sidecar import create_app
from tests.reliability.conftest import through
from tests.reliability.proxy import Proxy
from tests.support import with_query

BOUNDS = "operation_timeout_s=1&pool_timeout_s=1&pool_reconnect_timeout_s=0.5&connect_timeout=1"
BACK_WITHIN_S = 10.0
TURN = {"user_id": "u1", "channel_id": "c1", "server_id": "g1"}
CAPTURE = {
    "history": [{"role": "user", "content": "pack list?", "author_id": "u1"}],
    "replies": [{"text": "water, snacks"}],
}


async def _capture(memory: shortterm.Memory, text: str) -> Captured:
    turn = memory.turn(**TURN)
    return await turn.capture(
        history=[Message("user", text, author_id="u1")], replies=[Reply(f"re: {text}")]
    )


async def _until_kept(memory: shortterm.Memory) -> Captured:
    deadline = time.monotonic() + BACK_WITHIN_S
    while True:
        captured = await _capture(memory, "back")
        if not captured.degraded or time.monotonic() > deadline:
            return captured
        await asyncio.sleep(0.2)


async def test_a_capture_kept_in_the_hot_tier_only_says_so(
    pg_url: str, schema: str, pg_proxy: Proxy
) -> None:
    store = with_query(through(pg_url, pg_proxy), schema=schema) + "&" + BOUNDS
    config = Config(sweep_interval_s=0)
    async with shortterm.open(store=store, cache="memory://", config=config) as memory:
        assert await _capture(memory, "before") == Captured(degraded=False, reason=None)
        pg_proxy.cut("reset")
        degraded = await _capture(memory, "during")
        assert degraded.degraded, degraded
        assert degraded.reason is not None and "PostgreSQL" in degraded.reason, degraded
        entry = await memory.get(shortterm.ScopeKey.server("g1", "c1", None))
        assert entry is not None and entry.messages[0].content == "during"  # it was kept
        pg_proxy.restore()
        assert not (await _until_kept(memory)).degraded


async def test_the_sidecar_says_a_degraded_capture_in_its_answer(
    pg_url: str, schema: str, pg_proxy: Proxy
) -> None:
    store = with_query(through(pg_url, pg_proxy), schema=schema) + "&" + BOUNDS
    config = Config(sweep_interval_s=0)
    async with shortterm.open(store=store, cache="memory://", config=config) as memory:
        transport = httpx.ASGITransport(app=create_app(memory))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:

            async def capture() -> httpx.Response:
                turn_id = (await http.post("/v1/turns", json=TURN)).json()["turn_id"]
                return await http.post(f"/v1/turns/{turn_id}/capture", json=CAPTURE)

            kept = await capture()
            assert kept.status_code == 204 and "shortterm-degraded" not in kept.headers
            pg_proxy.cut("reset")
            degraded = await capture()
            assert degraded.status_code == 204, degraded.text
            assert degraded.headers["shortterm-degraded"] == "store"
            pg_proxy.restore()

            document = (await http.get("/openapi.json")).json()
            answer = document["paths"]["/v1/turns/{turn_id}/capture"]["post"]["responses"]["204"]
            assert answer["headers"]["Shortterm-Degraded"]["schema"]["enum"] == ["store"]
