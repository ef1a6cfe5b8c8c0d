"""A sidecar replica SIGKILLed 0-20 ms into a capture or a tool call, and the same call retried
on another replica: real ``shortterm serve`` processes on one PostgreSQL + Redis. A capture the
dead replica claimed still lands; an update it guarded lands exactly once (each scope's row
written once, one journal edit per scope). While the dead replica's claim is live, the retry is
answered 409 ``turn_busy`` with ``Retry-After``, naming another replica as the holder.

A claim is a lease of one durable operation and one Redis call at their bounds (40.2 s by
default): the dying replicas take theirs for 0.6 s (``lease_replica.py``), every other bound of
theirs and the survivor's kept at its default. A fresh dying replica is started for every round
while the previous round runs (a start costs about 0.6 s here). ``-s`` prints how the rounds
ended.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

import httpx
import psycopg
import pytest

from shortterm.tool import texts
from tests.sidecar.live import sidecar_process

ROUNDS = 15
KILL_WITHIN_S = 0.020
LEASE_S = 0.6  # the dying replicas' claims (lease_replica.py)
PATIENCE_S = 5.0  # how long a retry answered 409 is repeated
POLL_S = 0.05  # sooner than Retry-After (whole seconds) says: a round stays short
SEED = 7301
ROOT = Path(__file__).resolve().parents[2]

START = {"user_id": "111", "server_id": "333", "bot_name": "Tomo"}
CAPTURE = {
    "history": [{"role": "user", "content": "Saturday?", "author_id": "111", "speaker": "Ana"}],
    "replies": [{"text": "Ridge trail at 8.", "persona_name": "Tomo"}],
}
KEPT = ["Saturday?", "Ridge trail at 8."]


class Replica:
    """``shortterm serve`` as a process of ours, its claims lasting LEASE_S, to be SIGKILLed;
    starting from construction."""

    def __init__(self, store: str, cache: str) -> None:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("SHORTTERM_")}
        serve = ["serve", "--port", "0", "--store", store, "--cache", cache]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.reliability.lease_replica", str(LEASE_S), *serve],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=clean,
            cwd=ROOT,
        )

    def url(self) -> str:
        """Its base URL, once it listens (blocking: run it in a thread)."""
        assert self.proc.stderr is not None
        seen = []
        for line in self.proc.stderr:
            seen.append(line)
            if line.startswith("shortterm sidecar listening on "):
                return line.split()[4]
        raise AssertionError("the replica did not start:\n" + "".join(seen))

    def kill(self) -> None:
        """SIGKILL (no cleanup of any kind), then reap it and close its pipe; again: nothing."""
        self.proc.kill()
        self.proc.wait(10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


class Shared(NamedTuple):
    survivor: str  # replica B's URL
    store: str
    cache: str
    schema: str  # for reading PostgreSQL directly


class Round(NamedTuple):
    number: int
    after_s: float  # how far into the call the dying replica is killed

    @property
    def where(self) -> str:
        return f"round {self.number} (killed {self.after_s * 1000:.1f} ms in)"


@dataclass
class Tally:
    """What the rounds saw: ``problems`` fail the test, ``outcomes`` are printed with it."""

    problems: list[str] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    waits_s: list[float] = field(default_factory=list)

    def summary(self, what: str) -> str:
        ended = ", ".join(f"{n} {how}" for how, n in sorted(self.outcomes.items()))
        longest = max(self.waits_s, default=0.0)
        failed = len({p.split(":")[0] for p in self.problems})
        return (
            f"{what}: {failed}/{ROUNDS} rounds failed; {ended}; longest retry {longest:.2f} s"
            + "".join(f"\n  {p}" for p in self.problems)
        )


@pytest.fixture
def shared(scale_urls: tuple[str, str]) -> Iterator[Shared]:
    store, cache = scale_urls
    schema = parse_qs(urlsplit(store).query)["schema"][0]
    with sidecar_process(store, cache) as b:  # migrates the schema
        yield Shared(b, store, cache, schema)


async def dying(shared: Shared) -> AsyncIterator[tuple[Round, Replica, str]]:
    """Per round: a fresh replica and its URL, the next one starting while this round runs."""
    rng = random.Random(SEED)
    replicas: list[Replica] = []

    def started() -> Replica:
        replicas.append(Replica(shared.store, shared.cache))
        return replicas[-1]

    try:
        spare = started()
        for number in range(1, ROUNDS + 1):
            current, spare = spare, started()
            round_ = Round(number, rng.uniform(0, KILL_WITHIN_S))
            yield round_, current, await asyncio.to_thread(current.url)
            current.kill()
    finally:
        # Every one, also a replica that failed to start: left to the garbage collector, its
        # process and its stderr pipe made a later test fail (an unclosed file's warning).
        for replica in replicas:
            replica.kill()


async def start_turn(client: httpx.AsyncClient, channel: str) -> str:
    started = await client.post("/v1/turns", json={**START, "channel_id": channel})
    assert started.status_code == 201, started.text
    turn_id: str = started.json()["turn_id"]
    return turn_id


async def kill_into(
    replica: Replica, url: str, channel: str, route: str, body: dict[str, Any], after_s: float
) -> tuple[str, httpx.Response | None]:
    """Start a turn on the replica, send it the call and SIGKILL it ``after_s`` into the
    call: the call's path and the replica's answer, if it gave one."""
    async with httpx.AsyncClient(base_url=url, timeout=20) as client:
        path = f"/v1/turns/{await start_turn(client, channel)}/{route}"
        sent = asyncio.create_task(client.post(path, json=body))
        await asyncio.sleep(after_s)
        replica.kill()
        try:
            return path, await sent
        except httpx.TransportError:
            return path, None


async def retried(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], tally: Tally, round_: Round
) -> tuple[httpx.Response, bool]:
    """The same call on the survivor, sent again while it answers 409 (each one checked):
    the last answer, and whether a 409 came first."""
    began, busy = time.monotonic(), False
    while True:
        answer = await client.post(path, json=body)
        if answer.status_code != 409 or time.monotonic() - began > PATIENCE_S:
            tally.waits_s.append(time.monotonic() - began)
            return answer, busy
        busy = True
        problem = busy_problem(answer)
        if problem is not None:
            tally.problems.append(f"{round_.where}: {problem}")
        await asyncio.sleep(POLL_S)


def busy_problem(answer: httpx.Response) -> str | None:
    """What is wrong with a 409, if anything: it must say who holds the turn, and when to
    retry."""
    body = answer.json()
    retry_after = answer.headers.get("Retry-After", "")
    if body.get("code") != "turn_busy" or "on another sidecar replica" not in body["detail"]:
        return f"a 409 that does not say what happened: {body}"
    if not (retry_after.isdigit() and 1 <= int(retry_after) <= int(LEASE_S) + 1):
        return f"a 409 with Retry-After {retry_after!r} (the lease is {LEASE_S} s)"
    return None


# -- captures -----------------------------------------------------------------------------------


async def test_a_capture_claimed_by_a_replica_that_died_lands_through_another(
    shared: Shared,
) -> None:
    tally = Tally()
    async with httpx.AsyncClient(base_url=shared.survivor, timeout=20) as b:
        async for round_, replica, url in dying(shared):
            channel = f"cap{round_.number}"
            path, first = await kill_into(replica, url, channel, "capture", CAPTURE, round_.after_s)
            final, busy = await retried(b, path, CAPTURE, tally, round_)
            await judge_capture(b, channel, round_, first, final, busy, tally)
    print(tally.summary("captures"))
    assert not tally.problems, tally.summary("captures")


async def judge_capture(
    b: httpx.AsyncClient,
    channel: str,
    round_: Round,
    first: httpx.Response | None,
    final: httpx.Response,
    busy: bool,
    tally: Tally,
) -> None:
    finished = first is not None and first.status_code == 204
    tally.outcomes[f"{'409 then ' if busy else ''}{final.status_code}"] += 1
    entry = await b.get(f"/v1/servers/333/channels/{channel}/entry")
    kept = [m["content"] for m in entry.json()["messages"]] if entry.is_success else []
    if kept != KEPT:
        detail = final.json().get("detail") if final.content else ""
        tally.problems.append(f"{round_.where}: capture lost ({final.status_code} {detail})")
    elif final.status_code != 204 and not (final.status_code == 404 and not busy):
        # 404: the dead replica's capture went out whole and ended the turn (never after a
        # 409: a claim that lapsed is taken over, not ended).
        tally.problems.append(f"{round_.where}: the retry answered {final.status_code}")
    elif finished and final.status_code != 404:
        tally.problems.append(f"{round_.where}: captured twice ({final.status_code})")


# -- updates ------------------------------------------------------------------------------------


async def test_an_update_guarded_by_a_replica_that_died_lands_exactly_once(
    shared: Shared, pg_url: str
) -> None:
    tally = Tally()
    async with (
        httpx.AsyncClient(base_url=shared.survivor, timeout=20) as b,
        await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as db,
    ):
        async for round_, replica, url in dying(shared):
            channel = f"up{round_.number}"
            body = {"name": texts.TOOL_NAME, "arguments": {"summary": f"Notes of {channel}."}}
            path, first = await kill_into(replica, url, channel, "tool-calls", body, round_.after_s)
            final, busy = await retried(b, path, body, tally, round_)
            if await judge_update(db, shared.schema, channel, round_, first, final, busy, tally):
                again = await b.post(path, json={**body, "arguments": {"summary": "Another."}})
                if again.json() != {"ok": False, "message": texts.ALREADY}:
                    tally.problems.append(f"{round_.where}: a second update: {again.json()}")
    print(tally.summary("updates"))
    assert not tally.problems, tally.summary("updates")


async def judge_update(
    db: psycopg.AsyncConnection[Any],
    schema: str,
    channel: str,
    round_: Round,
    first: httpx.Response | None,
    final: httpx.Response,
    busy: bool,
    tally: Tally,
) -> bool:
    """Whether the round held: the retry saved the update, or said it was saved (always so
    when the dead replica answered ok); PostgreSQL holds it once, the journal agrees."""
    answer = final.json() if final.status_code == 200 else {"status": final.status_code}
    said = "ok" if answer.get("ok") else answer.get("message", str(answer))
    shown = {"ok": "ok", texts.ALREADY: "already updated"}.get(said, said[:30])
    tally.outcomes[f"{'409 then ' if busy else ''}{shown}"] += 1
    landed_first = first is not None and first.status_code == 200 and first.json()["ok"]
    if said not in ("ok", texts.ALREADY) or (landed_first and said != texts.ALREADY):
        tally.problems.append(f"{round_.where}: update lost or repeated, the retry said {said!r}")
        return False
    rows, edits = await durable(db, schema, channel)
    notes = f"Notes of {channel}."
    if rows != {("server", notes, 1), ("user", notes, 1)} or edits != {"server": 1, "user": 1}:
        tally.problems.append(f"{round_.where}: rows {sorted(rows)}, journal edits {edits}")
        return False
    return True


async def durable(
    db: psycopg.AsyncConnection[Any], schema: str, channel: str
) -> tuple[set[tuple[str, str, int]], dict[str, int]]:
    """The channel's rows (kind, summary, revision) and its journal's edits per scope kind:
    a scope written once is at revision 1, with one edit."""
    cur = await db.execute(
        f'SELECT kind, summary, revision FROM "{schema}".scopes WHERE channel_id = %s', (channel,)
    )
    rows = {(k, s, int(r)) for k, s, r in await cur.fetchall()}
    cur = await db.execute(
        f"SELECT subject->>0, count(*) FROM \"{schema}\".journal WHERE kind = 'edit' "
        "AND subject->>2 = %s GROUP BY 1",
        (channel,),
    )
    return rows, {k: int(n) for k, n in await cur.fetchall()}
