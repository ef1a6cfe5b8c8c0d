"""A call that failed gives its claim back: two replicas (two memories on one PostgreSQL and a
Redis of this test's own, in this process), the call on replica A held mid-way while Redis
fails under it (killed, or full and refusing writes), then let go.

A capture answers 503; once Redis is back (restarted with its data: every write is in its
append-only file) the retry is served at once, through either replica, rather than refused
``409 turn_busy`` until the failed call's lease runs out (30.5 s here). A tool call whose
write landed before Redis failed answers ``ok: true``; its guard is settled once Redis is
back, so the model's next call on the turn is told the turn was updated, not that an update
is still being saved, and the same call sent again is not a 409.

Each kind runs 8 rounds (2 outages x 2 replicas for the retry x 2); every round is reported,
then the test fails on any round whose retry waited. The single-process registry releases
the same way (the last tests). A replica that dies leaves its lease to lapse:
test_turn_leases.py and tests/reliability/test_replica_dies.py.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import psycopg
import pytest
import redis.asyncio as aioredis

import shortterm
from shortterm.model.config import Config
from shortterm.sidecar import SidecarSettings, create_app
from shortterm.sidecar.turns import RedisTurnRegistry, TurnRegistry
from shortterm.tool import texts
from tests.cluster_support import require_redis_server
from tests.sidecar.test_turn_leases import CAPTURE, START, Stalled, summary
from tests.support import with_query

SERVED_WITHIN_S = 3.0  # after Redis is back; the lease of the failed call is 30.5 s
ROUNDS = [(outage, via) for outage in ("killed", "full") for via in ("A", "B")] * 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class KeepingRedis:
    """A ``redis-server`` of this test's own that keeps every write (``appendfsync always``):
    killed and started again, it holds what it held, the claims of calls under way too."""

    def __init__(self, workdir: Path) -> None:
        self.port = _free_port()
        self.workdir = workdir
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        self.proc = subprocess.Popen(  # noqa: ASYNC220 - it returns at once; we poll below
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes", "--appendfsync", "always", "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while True:
            try:
                async with aioredis.Redis.from_url(self.url) as client:
                    if await client.ping():
                        return
            except (OSError, aioredis.ConnectionError):
                pass
            assert time.monotonic() < deadline, "the private redis-server did not start"
            await asyncio.sleep(0.02)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=20)
            self.proc = None

    async def config(self, name: str, value: str) -> None:
        async with aioredis.Redis.from_url(self.url) as client:
            await client.config_set(name, value)

    async def fail(self, outage: str) -> None:
        if outage == "killed":
            self.kill()
        else:  # full: a noeviction Redis over maxmemory refuses every write
            await self.config("maxmemory", "1")

    async def recover(self, outage: str) -> None:
        if outage == "killed":
            await self.start()
        else:
            await self.config("maxmemory", "0")


@pytest.fixture
async def keeping_redis(tmp_path: Path) -> AsyncIterator[KeepingRedis]:
    require_redis_server("this test")
    server = KeepingRedis(tmp_path)
    await server.start()
    try:
        yield server
    finally:
        server.kill()


class Replicas:
    def __init__(self, clients: dict[str, httpx.AsyncClient], a_memory: Any) -> None:
        self.clients = clients
        self.a_memory = a_memory

    def stall(self, name: str) -> Stalled:
        stalled = Stalled(self.a_memory.store, name)
        self.a_memory.store = stalled
        return stalled

    def unstall(self, stalled: Stalled) -> None:
        self.a_memory.store = stalled._inner


@pytest.fixture
async def replicas(
    pg_url: str, schema: str, keeping_redis: KeepingRedis
) -> AsyncIterator[Replicas]:
    store = with_query(pg_url, schema=schema)  # PostgreSQL's bounds: 30 s
    cache = with_query(keeping_redis.url, prefix=quote("stm-claims:"), socket_timeout="0.5")
    config = Config(sweep_interval_s=0)
    async with (
        shortterm.open(store=store, cache=cache, config=config) as b_memory,  # migrates
        shortterm.open(store=store, cache=cache, config=config) as a_memory,
    ):
        apps = [create_app(m, SidecarSettings()) for m in (a_memory, b_memory)]
        assert isinstance(apps[0].state.turns, RedisTurnRegistry)
        assert apps[0].state.turns.lease_s > 30
        async with (
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=apps[0]), base_url="http://127.0.0.1"
            ) as a,
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=apps[1]), base_url="http://127.0.0.1"
            ) as b,
        ):
            yield Replicas({"A": a, "B": b}, a_memory)


async def _start(client: httpx.AsyncClient) -> str:
    started = await client.post("/v1/turns", json=START)
    assert started.status_code == 201, started.text
    turn_id: str = started.json()["turn_id"]
    return turn_id


async def _until_served(
    client: httpx.AsyncClient,
    path: str,
    body: dict[str, Any],
    waiting: Callable[[httpx.Response], bool],
) -> tuple[httpx.Response, float]:
    """Send every 0.1 s while the answer is ``waiting`` (refused for a claim still held),
    for up to SERVED_WITHIN_S: the last answer and the seconds since the first send."""
    began = time.monotonic()
    while True:
        answer = await client.post(path, json=body)
        took = time.monotonic() - began
        if not waiting(answer) or took >= SERVED_WITHIN_S:
            return answer, took
        await asyncio.sleep(0.1)


def _busy(answer: httpx.Response) -> bool:
    return answer.status_code == 409


def _in_flight(answer: httpx.Response) -> bool:
    return _busy(answer) or answer.json().get("message") == texts.IN_FLIGHT


def _report(rounds: list[str], bad: list[str]) -> None:
    print("\n" + "\n".join(rounds))
    assert not bad, f"{len(bad)} of {len(rounds)} rounds waited out a failed call's claim:\n" + (
        "\n".join(bad)
    )


async def test_a_failed_capture_gives_its_claim_back(
    replicas: Replicas, keeping_redis: KeepingRedis
) -> None:
    a = replicas.clients["A"]
    rounds, bad = [], []
    for i, (outage, via) in enumerate(ROUNDS, 1):
        turn_id = await _start(replicas.clients["B"])
        path = f"/v1/turns/{turn_id}/capture"
        stalled = replicas.stall("touch")  # the capture's durable step: its claim is taken
        owner = asyncio.create_task(a.post(path, json=CAPTURE))
        await stalled.reached.wait()
        await keeping_redis.fail(outage)
        stalled.gate.set()
        failed = await owner
        replicas.unstall(stalled)
        assert failed.status_code == 503, failed.text
        assert failed.json()["code"] == "cache_unavailable", failed.text
        await keeping_redis.recover(outage)
        client = replicas.clients[via]
        retry, took = await _until_served(client, path, CAPTURE, _busy)
        line = f"capture round {i} ({outage}, retry via {via}): {retry.status_code}, {took:.2f} s"
        rounds.append(line)
        if retry.status_code != 204:
            bad.append(f"{line}: {retry.text}")
            continue
        ended = await client.post(path, json=CAPTURE)
        assert ended.status_code == 404, ended.text  # the retry captured and ended the turn
    _report(rounds, bad)


async def _edits(pg_url: str, schema: str) -> int:
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as db:
        cur = await db.execute(f"SELECT count(*) FROM \"{schema}\".journal WHERE kind = 'edit'")
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def test_a_tool_call_redis_failed_under_settles_its_guard(
    replicas: Replicas, keeping_redis: KeepingRedis, pg_url: str, schema: str
) -> None:
    a = replicas.clients["A"]
    rounds, bad = [], []
    for i, (outage, via) in enumerate(ROUNDS, 1):
        turn_id = await _start(replicas.clients["B"])
        path = f"/v1/turns/{turn_id}/tool-calls"
        edits = await _edits(pg_url, schema)
        stalled = replicas.stall("write_distilled")  # the guard is taken, nothing written yet
        owner = asyncio.create_task(a.post(path, json=summary("Ridge trail, 8am.")))
        await stalled.reached.wait()
        await keeping_redis.fail(outage)
        stalled.gate.set()
        first = await owner
        replicas.unstall(stalled)
        await keeping_redis.recover(outage)
        client = replicas.clients[via]
        # The model's next call on the turn, and the same call sent again.
        other, took = await _until_served(client, path, summary("Something else."), _in_flight)
        again, took_again = await _until_served(client, path, summary("Ridge trail, 8am."), _busy)
        written = await _edits(pg_url, schema) - edits
        line = (
            f"tool call round {i} ({outage}, then via {via}): {first.status_code} "
            f"{first.text[:60]}; next call after {took:.2f} s: {other.text[:60]}; "
            f"same call after {took_again:.2f} s: {again.status_code}; {written} scope edits"
        )
        rounds.append(line)
        already = {"ok": False, "message": texts.ALREADY}
        if (
            first.status_code != 200
            or first.json() != {"ok": True, "message": texts.OK}
            or other.status_code != 200
            or other.json() != already
            or again.status_code != 200
            or again.json() != already
            or written != 2  # the user scope and the server scope, once
        ):
            bad.append(line)
    _report(rounds, bad)


# -- the single-process registry --------------------------------------------------------------


@pytest.fixture
async def single(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    store = f"sqlite:///{tmp_path / 'single.db'}"
    async with shortterm.open(store=store, config=Config(sweep_interval_s=0)) as memory:
        app = create_app(memory, SidecarSettings())
        assert isinstance(app.state.turns, TurnRegistry)
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)  # answered 500
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            yield client, memory


class FailingOnce:
    """A tier whose ``name`` operation fails once, with an error no tier expects (a 500),
    after the call took its claim."""

    def __init__(self, inner: Any, name: str) -> None:
        self._inner, self._name, self.failures = inner, name, 1

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name != self._name:
            return attr

        async def failing(*args: Any, **kwargs: Any) -> Any:
            if self.failures:
                self.failures -= 1
                raise RuntimeError("the store broke")
            return await attr(*args, **kwargs)

        return failing


async def test_the_single_process_registry_gives_a_failed_capture_back(
    single: tuple[httpx.AsyncClient, Any],
) -> None:
    client, memory = single
    turn_id = await _start(client)
    memory.cache = FailingOnce(memory.cache, "capture_scopes")
    path = f"/v1/turns/{turn_id}/capture"
    assert (await client.post(path, json=CAPTURE)).status_code == 500
    assert memory.cache.failures == 0
    assert (await client.post(path, json=CAPTURE)).status_code == 204
    assert (await client.post(path, json=CAPTURE)).status_code == 404


async def test_the_single_process_registry_serves_a_failed_tool_calls_retry(
    single: tuple[httpx.AsyncClient, Any],
) -> None:
    client, memory = single
    turn_id = await _start(client)
    memory.store = FailingOnce(memory.store, "write_distilled_after")
    path = f"/v1/turns/{turn_id}/tool-calls"
    assert (await client.post(path, json=summary("Ridge trail."))).status_code == 500
    assert memory.store.failures == 0
    retry = await client.post(path, json=summary("Ridge trail."))
    assert retry.json() == {"ok": True, "message": texts.OK}
