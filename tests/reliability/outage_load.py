"""The load of tests/reliability/test_postgres_outage.py: bot-like requests to sidecar replicas
(turn starts every ``EVERY_S``, the other routes in turn every ``SIDE_EVERY_S``), each timed and
logged with what it answered, and a relay to Redis that a test cuts."""

from __future__ import annotations

import asyncio
import itertools
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from shortterm.tool import texts
from tests.reliability.proxy import Proxy
from tests.support import service_url

EVERY_S = 0.1  # a turn start per replica this often
SIDE_EVERY_S = 0.5  # the other requests, in turn, per replica this often
G = "333"
CHANNELS = [f"c{i}" for i in range(6)]
SCRATCH = "scratch"  # cleared during the outage: no acknowledged write lives there
HEADER = "shortterm-degraded"
KINDS = (
    "start",
    "tool call",
    "capture",
    "entry",
    "entries",
    "clear",
    "settings",
    "read settings",
    "edit",
    "healthz",
)


@dataclass
class Seen:
    """One request: what, when it began (monotonic), how long it took, what it answered."""

    what: str
    began: float
    took_s: float
    status: int
    degraded: bool
    body: Any = None
    retry_after: str | None = None


@dataclass
class Log:
    seen: list[Seen] = field(default_factory=list)
    # Turns started beforehand, for a tool call or a capture while no turn can start.
    spare: list[str] = field(default_factory=list)
    steps: Iterator[int] = field(default_factory=itertools.count)  # of the other requests
    side_every_s: float = SIDE_EVERY_S

    def during(self, what: str, since: float, until: float) -> list[Seen]:
        return [s for s in self.seen if s.what == what and since <= s.began < until]


class RedisRelay:
    """A :class:`Proxy` in front of the test Redis, relaying in a thread and event loop of its
    own: the clients' loop, busy with the load, would otherwise delay every connection the
    sidecar makes through it (and so the answers the test times)."""

    def __init__(self) -> None:
        parts = urlsplit(service_url("SHORTTERM_TEST_REDIS_URL", "Redis"))
        self.proxy = Proxy(parts.hostname or "127.0.0.1", parts.port or 6379)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="redis-relay")
        self._thread.start()
        self._call(self.proxy.start())

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _do(self, action: Callable[[], None]) -> None:
        action()

    def cut(self) -> None:
        self._call(self._do(lambda: self.proxy.cut("reset")))

    def restore(self) -> None:
        self._call(self._do(self.proxy.restore))

    def close(self) -> None:
        self._call(self.proxy.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


def start_body(channel: str) -> dict[str, Any]:
    return {"user_id": "111", "channel_id": channel, "server_id": G, "bot_name": "Tomo"}


CAPTURE = {
    "history": [{"role": "user", "content": "Saturday?", "author_id": "111", "speaker": "Ana"}],
    "replies": [{"text": "Ridge trail at 8.", "persona_name": "Tomo"}],
}


async def timed(log: Log, what: str, request: Any) -> Seen:
    """``request`` awaited and logged."""
    began = time.monotonic()
    answer: httpx.Response = await request
    body: Any = None
    if answer.headers.get("content-type", "").startswith("application/json"):
        body = answer.json()
    seen = Seen(
        what,
        began,
        time.monotonic() - began,
        answer.status_code,
        answer.headers.get(HEADER) == "store",
        body,
        answer.headers.get("retry-after"),
    )
    log.seen.append(seen)
    return seen


async def start(client: httpx.AsyncClient, log: Log, channel: str) -> str | None:
    seen = await timed(log, "start", client.post("/v1/turns", json=start_body(channel)))
    return seen.body["turn_id"] if seen.status == 201 else None


async def turn(client: httpx.AsyncClient, log: Log, channel: str) -> str | None:
    """A turn started now (not timed), else a spare one."""
    started = await client.post("/v1/turns", json=start_body(channel))
    if started.status_code == 201:
        turn_id: str = started.json()["turn_id"]
        return turn_id
    return log.spare.pop() if log.spare else None


async def tool_call(client: httpx.AsyncClient, log: Log, channel: str, text: str) -> bool:
    """A summary saved through a tool call; whether it was acknowledged."""
    turn_id = await turn(client, log, channel)
    if turn_id is None:
        return False
    body = {"name": texts.TOOL_NAME, "arguments": {"summary": text}}
    call = client.post(f"/v1/turns/{turn_id}/tool-calls", json=body)
    seen = await timed(log, "tool call", call)
    return seen.status == 200 and seen.body["ok"] is True


async def side(client: httpx.AsyncClient, log: Log, step: int) -> None:
    """One of the other requests, in turn."""
    channel = CHANNELS[step % len(CHANNELS)]
    entry = f"/v1/servers/{G}/channels/{channel}/entry"
    kind = step % 9
    if kind == 0:
        await tool_call(client, log, channel, f"during {step}")
    elif kind == 1:
        turn_id = await turn(client, log, channel)
        if turn_id is not None:
            capture = client.post(f"/v1/turns/{turn_id}/capture", json=CAPTURE)
            await timed(log, "capture", capture)
    elif kind == 2:
        await timed(log, "entry", client.get(entry))
    elif kind == 3:
        await timed(log, "clear", client.delete(f"/v1/channels/{SCRATCH}"))
    elif kind == 4:
        settings = {"refresh_cadence": 10}
        await timed(log, "settings", client.put(f"/v1/servers/{G}/settings", json=settings))
    elif kind == 5:
        await timed(log, "entries", client.get(f"/v1/servers/{G}/entries"))
    elif kind == 6:
        edit = {"summary": f"edited {step}"}
        await timed(
            log, "edit", client.put(f"/v1/servers/{G}/channels/{SCRATCH}/entry/summary", json=edit)
        )
    elif kind == 7:
        await timed(log, "read settings", client.get(f"/v1/servers/{G}/settings"))
    else:
        seen = await timed(log, "healthz", client.get("/healthz"))
        metrics = await client.get("/metrics")
        seen.body = {**seen.body, "gauge": "shortterm_degraded 1" in metrics.text}


async def load(clients: list[httpx.AsyncClient], log: Log, until: float) -> list[asyncio.Task[Any]]:
    """Turn starts every EVERY_S and the other requests every SIDE_EVERY_S on each replica
    until ``until``, each in a task of its own (one that waits does not hold the next back):
    the tasks, some perhaps still waiting."""
    tasks: list[asyncio.Task[Any]] = []
    next_side = time.monotonic()
    while time.monotonic() < until:
        for i, client in enumerate(clients):
            channel = CHANNELS[(len(tasks) + i) % len(CHANNELS)]
            tasks.append(asyncio.create_task(start(client, log, channel)))
        if time.monotonic() >= next_side:
            for client in clients:
                tasks.append(asyncio.create_task(side(client, log, next(log.steps))))
            next_side += log.side_every_s
        await asyncio.sleep(EVERY_S)
    return tasks


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def summary(seen: list[Seen]) -> str:
    took = [s.took_s for s in seen]
    if not took:
        return "none"
    statuses = ", ".join(f"{n}×{st}" for st, n in sorted(counts(s.status for s in seen).items()))
    return (
        f"{len(seen)} ({statuses}), {sum(s.degraded for s in seen)} degraded; "
        f"{min(took):.3f}–{max(took):.3f} s, median {statistics.median(took):.3f}, "
        f"p99 {p99(took):.3f}"
    )


def counts(values: Any) -> dict[Any, int]:
    out: dict[Any, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def report(title: str, log: Log, since: float, until: float) -> dict[str, list[Seen]]:
    """The requests begun in [since, until), by kind, printed."""
    during = {w: log.during(w, since, until) for w in KINDS}
    print(f"\n{title}")
    for what, seen in during.items():
        print(f"  {what}: {summary(seen)}")
        said = {str(s.body.get("detail"))[:160] for s in seen if s.status >= 500 and s.body}
        for detail in sorted(said):
            print(f"    {detail}")
    return during
