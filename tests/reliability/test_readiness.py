"""/readyz follows the backends with no traffic but its own polls; /healthz stays a liveness 200.

The sidecar runs on PostgreSQL and Redis reached through loopback proxies; a test cuts one of
them (the real servers keep running) and polls only /readyz and /healthz: no other request
reaches the sidecar, so nothing else can clear or set its state.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from urllib.parse import quote

import httpx
import pytest

import shortterm
from shortterm.sidecar import create_app
from tests.reliability.conftest import through
from tests.reliability.proxy import Mode, Proxy
from tests.sidecar.live import serving
from tests.support import with_query

DOWN_WITHIN_S = 5.0
UP_WITHIN_S = 10.0
ANSWER_WITHIN_S = 3.0  # the probe's own bound is 1 s; the rest is slack for a loaded machine


@pytest.fixture
async def sidecar(
    pg_url: str, pg_proxy: Proxy, schema: str, redis_url: str, redis_proxy: Proxy, prefix: str
) -> AsyncIterator[httpx.AsyncClient]:
    # The URLs' default timeouts: what an operator who changed nothing gets.
    store = with_query(through(pg_url, pg_proxy), schema=schema)
    cache = with_query(through(redis_url, redis_proxy), prefix=quote(prefix))
    async with (
        shortterm.open(store=store, cache=cache) as memory,
        serving(create_app(memory)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        yield client


async def wait_for_status(client: httpx.AsyncClient, status: int, within_s: float) -> float:
    """Poll /readyz (and /healthz beside it) until it answers ``status``; the seconds taken."""
    started = time.monotonic()
    while True:
        health = await client.get("/healthz")
        assert health.status_code == 200, health.text  # liveness never follows the backends
        asked = time.monotonic()
        ready = await client.get("/readyz")
        answered = time.monotonic()
        # A probe is bounded: an orchestrator's own probe timeout must not be what fails it.
        assert answered - asked < ANSWER_WITHIN_S, f"/readyz took {answered - asked:.1f} s"
        took = answered - started
        if ready.status_code == status:
            print(f"/readyz {status} after {took:.1f} s")
            return took
        assert took < within_s, f"still {ready.status_code} after {took:.1f} s: {ready.text}"
        await asyncio.sleep(0.2)


@pytest.mark.parametrize("mode", ["reset", "blackhole"])
async def test_readyz_follows_postgres_without_traffic(
    sidecar: httpx.AsyncClient, pg_proxy: Proxy, mode: Mode
) -> None:
    ready = await sidecar.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "store": "ok", "cache": "ok"}

    pg_proxy.cut(mode)
    await wait_for_status(sidecar, 503, DOWN_WITHIN_S)
    body = (await sidecar.get("/readyz")).json()
    assert body["status"] == "not_ready" and body["cache"] == "ok"
    assert body["store"].startswith("the store "), body

    pg_proxy.restore()
    await wait_for_status(sidecar, 200, UP_WITHIN_S)


async def test_readyz_follows_redis_without_traffic(
    sidecar: httpx.AsyncClient, redis_proxy: Proxy
) -> None:
    assert (await sidecar.get("/readyz")).status_code == 200
    redis_proxy.cut("reset")
    await wait_for_status(sidecar, 503, DOWN_WITHIN_S)
    body = (await sidecar.get("/readyz")).json()
    assert body["store"] == "ok" and body["cache"].startswith("the cache "), body
    redis_proxy.restore()
    await wait_for_status(sidecar, 200, UP_WITHIN_S)
