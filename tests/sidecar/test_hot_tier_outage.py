"""The hot tier (Redis) failing, as the sidecar reports it: named as the hot tier, not the store.

* A Redis Cluster master that dies refuses connections at once: ``/readyz`` answers 503 within
  2 s, long before the cluster itself declares the node failed (here: never, within the test).
  The cluster is this test's own, since a node of it is killed.
* A Redis that dies under a turn start: 503 ``cache_unavailable``, counted in
  ``shortterm_cache_errors_total`` (not the store's errors, not a degraded context), logged as
  the hot tier's failure; ``/healthz`` does not call the durable tier degraded.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from redis.crc import key_slot

import shortterm
from shortterm.cache.redis import RedisCache
from shortterm.cache.redis.codec import member
from shortterm.memory.facade import _PING_KEY
from shortterm.model.errors import CacheUnavailable
from shortterm.sidecar import create_app
from tests.cluster_support import require_redis_server, running_cluster
from tests.reliability.test_redis_edges import PrivateRedis
from tests.sidecar.live import serving
from tests.support import with_query

TURN = {"user_id": "111", "channel_id": "222", "server_id": "333"}
READY_WITHIN_S = 2.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _until(client: httpx.AsyncClient, status: int, within_s: float) -> tuple[float, dict]:
    """Poll /readyz every 0.1 s until it answers ``status``: the seconds taken, and its body."""
    started = time.monotonic()
    while True:
        ready = await client.get("/readyz")
        took = time.monotonic() - started
        if ready.status_code == status:
            return took, ready.json()
        assert took < within_s, f"still {ready.status_code} after {took:.1f} s: {ready.text}"
        await asyncio.sleep(0.1)


async def test_readyz_turns_503_within_2_s_of_a_cluster_master_dying(tmp_path: Path) -> None:
    require_redis_server()
    with running_cluster() as cluster:
        # As a production cluster (Redis's default): the cluster declares a node failed only
        # after 15 s, so what turns /readyz here is the probe, not the cluster's own verdict.
        for port in cluster.ports:
            cluster.cli(port, "config", "set", "cluster-node-timeout", "15000")
        store = f"sqlite:///{tmp_path / 'ready.db'}"
        async with shortterm.open(store=store, cache=cluster.url) as memory:
            cache = memory.cache
            assert isinstance(cache, RedisCache)
            # A master other than the one the single-key probe reads: it must be found too.
            probed = key_slot(cache.layout.record(_PING_KEY, member(_PING_KEY)).encode())
            victim = next(p for p in cluster.ports if p != cluster.owner(probed))
            async with (
                serving(create_app(memory)) as url,
                httpx.AsyncClient(base_url=url, timeout=10) as client,
            ):
                await _until(client, 200, 5.0)
                process = cluster.processes[victim]
                process.kill()  # dead: its port refuses connections at once
                process.wait(10)
                took, body = await _until(client, 503, READY_WITHIN_S)
                print(f"/readyz 503 {took:.2f} s after a master died")
                assert body["status"] == "not_ready" and body["store"] == "ok"
                assert body["cache"].startswith("the cache is unavailable: "), body
                health = await client.get("/healthz")
                assert health.status_code == 200 and health.json()["degraded"] is False


@pytest.fixture
async def private_redis(tmp_path: Path) -> AsyncIterator[PrivateRedis]:
    require_redis_server()
    server = PrivateRedis(_free_port(), tmp_path)
    await server.start()
    try:
        yield server
    finally:
        server.stop()


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in the scrape")


async def test_a_redis_outage_is_the_hot_tiers_not_the_stores(
    pg_url: str, schema: str, private_redis: PrivateRedis, caplog: pytest.LogCaptureFixture
) -> None:
    store = with_query(pg_url, schema=schema)
    cache = with_query(private_redis.url, prefix=quote("stm-hot:"), socket_timeout="0.5")
    async with (
        shortterm.open(store=store, cache=cache) as memory,
        serving(create_app(memory)) as url,
        httpx.AsyncClient(base_url=url, timeout=10) as client,
    ):
        assert (await client.post("/v1/turns", json=TURN)).status_code == 201
        before = (await client.get("/metrics")).text

        private_redis.stop()
        with caplog.at_level(logging.WARNING, logger="shortterm"):
            answer = await client.post("/v1/turns", json=TURN)
        assert answer.status_code == 503, answer.text
        assert answer.headers["retry-after"] == "1"
        assert answer.json()["code"] == "cache_unavailable", answer.text
        logged = caplog.text
        assert "hot tier failed during context" in logged, logged
        assert "durable tier failed" not in logged, logged

        after = (await client.get("/metrics")).text
        for unchanged in ("shortterm_store_errors_total", "shortterm_degraded_contexts_total"):
            assert _metric(after, unchanged) == _metric(before, unchanged), unchanged
        assert _metric(after, "shortterm_cache_errors_total") == (
            _metric(before, "shortterm_cache_errors_total") + 1
        )
        assert _metric(after, "shortterm_degraded") == 0
        assert _metric(after, "shortterm_cache_degraded") == 1
        health = await client.get("/healthz")
        assert health.status_code == 200
        assert health.json() == {"status": "ok", "degraded": False, "cache_degraded": True}

        # Still a StoreUnavailable, for callers that catch that.
        with pytest.raises(CacheUnavailable) as raised:
            await memory.turn(**TURN).context()
        assert isinstance(raised.value, shortterm.StoreUnavailable)

        await private_redis.start()  # back (empty): the next turn serves, and clears the flag
        assert (await client.post("/v1/turns", json=TURN)).status_code == 201
        assert (await client.get("/healthz")).json() == {"status": "ok", "degraded": False}
        assert memory.stats()["store_errors"] == 0
