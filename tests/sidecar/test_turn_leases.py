"""Claims on a shared turn are leases: two replicas (two memories on one PostgreSQL + Redis,
in this process), the first one stalled mid-call past its lease (0.3 s + 0.2 s) as if it had
died. Until the lease runs out, the same call on the other replica is a 409 that says so, a
different update is refused for the model as before; after it, the call takes the claim over.
An update lands once whatever the stalled owner does next (its write is fenced off when it
had not landed, and found when it had); a capture is done again.

The replica that dies for real (SIGKILL) is tests/reliability/test_replica_dies.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import psycopg
import pytest

import shortterm
from shortterm.model.config import Config
from shortterm.model.errors import StoreUnavailable
from shortterm.sidecar import SidecarSettings, create_app
from shortterm.sidecar.turns import RedisTurnRegistry
from shortterm.tool import texts

LEASE_S = 0.3 + 0.2  # the stalled replica's operation_timeout_s + its Redis call bound
START = {"user_id": "111", "channel_id": "plans", "server_id": "333", "channel_name": "plans"}
CAPTURE = {
    "history": [{"role": "user", "content": "Saturday?", "author_id": "111", "speaker": "Ana"}],
    "replies": [{"text": "Ridge trail at 8.", "persona_name": "Tomo"}],
}


def summary(text: str) -> dict[str, Any]:
    return {"name": texts.TOOL_NAME, "arguments": {"summary": text}}


class Stalled:
    """A store whose ``name`` operation waits at ``gate``: before it runs (the owner has not
    written yet) or, ``after``, once it committed (the owner wrote and then stopped)."""

    def __init__(self, inner: Any, name: str, *, after: bool = False) -> None:
        self._inner, self._name, self._after = inner, name, after
        self.reached = asyncio.Event()
        self.gate = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name != self._name:
            return attr

        async def stalled(*args: Any, **kwargs: Any) -> Any:
            if not self._after:
                self.reached.set()
                await self.gate.wait()
            result = await attr(*args, **kwargs)
            if self._after:
                self.reached.set()
                await self.gate.wait()
            return result

        return stalled


class Replicas:
    def __init__(
        self, a: httpx.AsyncClient, b: httpx.AsyncClient, memories: list[Any], schema: str
    ) -> None:
        self.a, self.b, self.schema = a, b, schema
        self.a_memory, self.b_memory = memories

    def stall(self, name: str, *, after: bool = False) -> Stalled:
        stalled = Stalled(self.a_memory.store, name, after=after)
        self.a_memory.store = stalled
        return stalled


@pytest.fixture
async def replicas(scale_urls: tuple[str, str]) -> AsyncIterator[Replicas]:
    store, cache = scale_urls
    schema = parse_qs(urlsplit(store).query)["schema"][0]
    short = (f"{store}&operation_timeout_s=0.3", f"{cache}&socket_timeout=0.2&retries=0")
    config = Config(sweep_interval_s=0)
    async with (
        shortterm.open(store=store, cache=cache, config=config) as b_memory,  # migrates
        shortterm.open(store=short[0], cache=short[1], config=config) as a_memory,
    ):
        apps = [create_app(m, SidecarSettings()) for m in (a_memory, b_memory)]
        assert isinstance(apps[0].state.turns, RedisTurnRegistry)
        assert apps[0].state.turns.lease_s == pytest.approx(LEASE_S)
        async with (
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=apps[0]), base_url="http://127.0.0.1"
            ) as a,
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=apps[1]), base_url="http://127.0.0.1"
            ) as b,
        ):
            yield Replicas(a, b, [a_memory, b_memory], schema)


async def start(client: httpx.AsyncClient) -> str:
    started = await client.post("/v1/turns", json=START)
    assert started.status_code == 201, started.text
    turn_id: str = started.json()["turn_id"]
    return turn_id


def assert_busy(answer: httpx.Response, saying: str) -> None:
    assert answer.status_code == 409, answer.text
    assert answer.json()["code"] == "turn_busy"
    assert saying in answer.json()["detail"]
    assert answer.headers["Retry-After"] == "1"  # 0.5 s left at most, in whole seconds


async def written_once(pg_url: str, schema: str) -> bool:
    """Each scope of the channel written by one update: revision 1, one journal edit."""
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as db:
        cur = await db.execute(f'SELECT kind, revision FROM "{schema}".scopes')
        rows = sorted(await cur.fetchall())
        cur = await db.execute(
            f"SELECT subject->>0 FROM \"{schema}\".journal WHERE kind = 'edit' ORDER BY 1"
        )
        edits = [k for (k,) in await cur.fetchall()]
    return rows == [("server", 1), ("user", 1)] and edits == ["server", "user"]


async def test_an_owner_past_its_lease_is_taken_over_and_its_write_fenced_off(
    replicas: Replicas, pg_url: str
) -> None:
    a, b = replicas.a, replicas.b
    stalled = replicas.stall("write_distilled")
    turn_id = await start(b)
    path = f"/v1/turns/{turn_id}/tool-calls"
    owner = asyncio.create_task(a.post(path, json=summary("Ridge trail, 8am.")))
    await stalled.reached.wait()  # A holds the guard and is about to write
    again = await b.post(path, json=summary("Ridge trail, 8am."))
    assert_busy(again, "this same update is being saved by another request, on another sidecar")
    other = await b.post(path, json=summary("Something else."))  # the model's parallel call
    assert other.json() == {"ok": False, "message": texts.IN_FLIGHT}
    await asyncio.sleep(LEASE_S)
    taken = await b.post(path, json=summary("Ridge trail, 8am."))
    assert taken.json() == {"ok": True, "message": texts.OK}
    stalled.gate.set()  # A wakes up and writes: too late, its claim was fenced off
    assert (await owner).json() == {"ok": False, "message": texts.OVERTAKEN}
    assert await written_once(pg_url, replicas.schema)
    late = await a.post(path, json=summary("Once more."))
    assert late.json() == {"ok": False, "message": texts.ALREADY}


async def test_an_owner_whose_write_landed_before_it_stopped_is_not_written_again(
    replicas: Replicas, pg_url: str
) -> None:
    a, b = replicas.a, replicas.b
    stalled = replicas.stall("write_distilled", after=True)
    turn_id = await start(b)
    path = f"/v1/turns/{turn_id}/tool-calls"
    owner = asyncio.create_task(a.post(path, json=summary("Ridge trail, 8am.")))
    await stalled.reached.wait()  # committed; the guard not yet settled
    assert_busy(await b.post(path, json=summary("Ridge trail, 8am.")), "on another sidecar")
    await asyncio.sleep(LEASE_S)
    found = await b.post(path, json=summary("Ridge trail, 8am."))
    assert found.json() == {"ok": False, "message": texts.ALREADY}
    stalled.gate.set()
    assert (await owner).json() == {"ok": True, "message": texts.OK}
    assert await written_once(pg_url, replicas.schema)


async def test_a_takeover_the_store_could_not_decide_is_decided_by_the_next_call(
    replicas: Replicas, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = replicas.a, replicas.b
    stalled = replicas.stall("write_distilled")
    turn_id = await start(b)
    path = f"/v1/turns/{turn_id}/tool-calls"
    owner = asyncio.create_task(a.post(path, json=summary("Ridge trail, 8am.")))
    await stalled.reached.wait()
    await asyncio.sleep(LEASE_S)
    engine = replicas.b_memory.engine
    take_over = engine.take_over_upgrade
    failures = [StoreUnavailable("the durable tier is down")]

    async def failing_once(*args: Any, **kwargs: Any) -> bool:
        if failures:
            raise failures.pop()
        result: bool = await take_over(*args, **kwargs)
        return result

    monkeypatch.setattr(engine, "take_over_upgrade", failing_once)
    down = await b.post(path, json=summary("Ridge trail, 8am."))
    assert down.json() == {"ok": False, "message": texts.STORE_DOWN}
    # Not decided, so not freed: the next call takes it over at once and decides it.
    taken = await b.post(path, json=summary("Ridge trail, 8am."))
    assert taken.json() == {"ok": True, "message": texts.OK}
    stalled.gate.set()
    assert (await owner).json() == {"ok": False, "message": texts.OVERTAKEN}
    assert await written_once(pg_url, replicas.schema)


async def test_a_capture_past_its_lease_is_done_again(replicas: Replicas) -> None:
    a, b = replicas.a, replicas.b
    stalled = replicas.stall("touch")  # a capture's durable step
    turn_id = await start(b)
    path = f"/v1/turns/{turn_id}/capture"
    owner = asyncio.create_task(a.post(path, json=CAPTURE))
    await stalled.reached.wait()
    assert_busy(await b.post(path, json=CAPTURE), "is being captured by another request, on")
    await asyncio.sleep(LEASE_S)
    assert (await b.post(path, json=CAPTURE)).status_code == 204
    stalled.gate.set()
    assert (await owner).status_code == 204  # the same dialogue, replaced again
    entry = (await b.get("/v1/servers/333/channels/plans/entry")).json()
    assert [m["content"] for m in entry["messages"]] == ["Saturday?", "Ridge trail at 8."]
    assert entry["turns_since_refresh"] == 2  # both durable steps ran: the nudge comes early
    assert (await b.post(path, json=CAPTURE)).status_code == 404  # the turn ended
