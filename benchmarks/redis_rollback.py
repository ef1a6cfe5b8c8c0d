"""The first call after Redis rolled back past N forgets, on PostgreSQL + Redis.

A ``redis-server`` of the script's own with RDB: a process captures into a channel it then
clears, into one it keeps, and into ``--filler`` others; Redis is snapshotted (``SAVE``);
N - 1 forgets are journaled in bulk as other processes would have (clears of the filler
channels and of channels Redis never held, purges of filler users, a server channel's clear
now and then, each with its fence targets), every group's mark is moved past them as those
processes would have, and the process clears the first channel through the API (the N-th
forget). Redis is killed and restarted from the snapshot: its marks are back before the N
forgets, and the cleared channel's messages are back in it.

Then, timed: the first call (``Memory.get`` of the cleared scope), and reads of the cleared
and the kept scope every 50 ms until every group's mark is current again (the replay done).
Printed per N: the first call's wall time and answer, the replay's wall time, the longest
Redis command and how many took over 50 ms (``SLOWLOG``, every command over 1 ms logged,
those a script runs too), the scripts' server time and calls (``INFO commandstats``),
whether any read served the cleared message, how often the kept one was served during and
after, and another client's PING latency (a process of its own, every 5 ms) for a second
before and throughout.

    python benchmarks/redis_rollback.py --postgres postgresql://postgres@127.0.0.1:5432/test \\
        --forgets 100 3000 10000 100000

The PostgreSQL schemas it uses are private to the run and removed after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import redis.asyncio as aioredis

import shortterm
from shortterm import Message, Reply, ScopeKey
from shortterm.model.fence import channel_target, server_channel_target, user_target

G, SECRET, KEPT, U = "guild", "secret", "kept", "u-ana"
SECRET_KEY = ScopeKey.server(G, SECRET, None)
KEPT_KEY = ScopeKey.server(G, KEPT, None)
PREFIX = "rollback:"


class Redis:
    """A ``redis-server`` with its snapshot directory, killed without a shutdown save."""

    def __init__(self, workdir: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.workdir = workdir
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        self.proc = subprocess.Popen(  # noqa: ASYNC220 - returns at once; pinged below
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir), "--dbfilename", "dump.rdb"],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        for _ in range(400):
            try:
                if await self.admin("PING"):
                    return
            except (OSError, aioredis.ConnectionError):
                await asyncio.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def kill(self) -> None:
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    async def admin(self, *command: Any) -> Any:
        async with aioredis.Redis.from_url(self.url, decode_responses=True) as client:
            return await client.execute_command(*command)


# Another client's PINGs, in a process of their own, for as long as the replay runs: how
# long the replay holds the other clients up. Prints p99 and max in ms, and the count.
PINGER = """
import signal, sys, time, redis
client, took, stop = redis.Redis(port=int(sys.argv[1])), [], []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
print("ready", flush=True)
while not stop:
    started = time.perf_counter()
    client.ping()
    took.append(time.perf_counter() - started)
    time.sleep(0.005)
took.sort()
print(f"{took[len(took) * 99 // 100] * 1000:.1f} {took[-1] * 1000:.1f} {len(took)}")
"""


def pinger(port: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", PINGER, str(port)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def pinged(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    p99, longest, count = proc.communicate(timeout=30)[0].split()
    return f"p99 {p99} ms, max {longest} ms ({count} PINGs)"


async def journal_in_bulk(pg_url: str, schema: str, count: int, filler: int) -> int:
    """``count`` forgets other processes journaled (clears of the filler channels and of
    others, purges of filler users, a server channel's clear), with their fence targets;
    returns the journal's end."""
    rows: list[tuple[str, str, str]] = []
    for i in range(count):
        if i % 4 == 3:
            target = user_target(f"u-{i % filler}")
            rows.append(("user", json.dumps([target]), json.dumps([target])))
        elif i % 50 == 49:
            subject = [G, f"ch-{i % filler}", None]
            target = server_channel_target(G, f"ch-{i % filler}", None)
            rows.append(("server_channel", json.dumps(subject), json.dumps([target])))
        else:
            channel = f"ch-{i % filler}" if i % 2 == 0 else f"other-{i}"
            rows.append(("channel", json.dumps([channel]), json.dumps([channel_target(channel)])))
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await conn.execute(
            f'INSERT INTO "{schema}".journal (kind, subject, targets, at) '
            "SELECT k, s, t, %s FROM unnest(%s::text[], %s::jsonb[], %s::jsonb[]) AS r(k, s, t)",
            (time.time(), [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]),
        )
        cur = await conn.execute(f'SELECT max(seq) FROM "{schema}".journal')
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


async def _capture(memory: shortterm.Memory, channel: str, user: str, text: str) -> None:
    turn = memory.turn(user_id=user, channel_id=channel, server_id=G)
    said = [Message("user", text, author_id=user, at=time.time())]
    await turn.capture(history=said, replies=[Reply("noted")])


def _serves(entry: shortterm.Entry | None, word: str) -> bool:
    return entry is not None and any(word in m.content for m in entry.messages)


async def marks_current(client: aioredis.Redis, memory: shortterm.Memory) -> bool:
    layout = memory.cache.layout  # type: ignore[attr-defined]
    known = memory.cache._marks.known  # type: ignore[attr-defined]
    raws = await client.mget([layout.base(k) + "fm" for k in range(layout.groups)])
    return all(raw is not None and raw.isdigit() and int(raw) >= known for raw in raws)


async def one(pg_url: str, n: int, filler: int) -> dict[str, Any]:
    schema = f"rollback_{uuid.uuid4().hex[:10]}"
    store = f"{pg_url}?schema={schema}"
    workdir = Path(tempfile.mkdtemp(prefix="stm-rollback-"))
    server = Redis(workdir)
    await server.start()
    config = shortterm.Config(sweep_interval_s=0)
    cache = f"{server.url}?prefix={PREFIX}"
    out: dict[str, Any] = {"forgets": n}
    try:
        async with shortterm.open(store=store, cache=cache, config=config) as memory:
            secret, kept = uuid.uuid4().hex, uuid.uuid4().hex
            await _capture(memory, SECRET, U, f"the code is {secret}")
            await _capture(memory, KEPT, U, f"the boat is {kept}")
            for i in range(filler):
                await _capture(memory, f"ch-{i}", f"u-{i}", f"filler {i}")
            await server.admin("SAVE")  # the snapshot: the marks before the N forgets
            head = await journal_in_bulk(pg_url, schema, n - 1, filler)
            layout = memory.cache.layout  # type: ignore[attr-defined]
            for k in range(layout.groups):  # as the processes that forgot would have
                await server.admin("SET", layout.base(k) + "fm", str(head))
            await memory.clear_channel(SECRET)  # the N-th forget, through the API
            assert not _serves(await memory.get(SECRET_KEY), secret)
            server.kill()
            await server.start()  # from the snapshot: N forgets gone from Redis
            await server.admin("CONFIG", "SET", "slowlog-log-slower-than", "1000")
            await server.admin("CONFIG", "SET", "slowlog-max-len", "1000000")
            await server.admin("SLOWLOG", "RESET")
            quiet = pinger(server.port)
            await asyncio.sleep(1.0)
            out["pings before"] = pinged(quiet)
            pings = pinger(server.port)
            started = time.perf_counter()
            try:
                first = await memory.get(SECRET_KEY)
                out["first call"] = "served nothing" if first is None else "an entry"
            except shortterm.StoreUnavailable as exc:
                out["first call"] = f"{type(exc).__name__}: {str(exc)[:80]}"
                first = None
            out["first call s"] = time.perf_counter() - started
            leaked = _serves(first, secret)
            reads = kept_served = 0
            deadline = started + 600
            watcher = aioredis.Redis.from_url(server.url, decode_responses=True)
            while not await marks_current(watcher, memory):
                assert time.perf_counter() < deadline, "the replay never finished"
                leaked |= _serves(await memory.get(SECRET_KEY), secret)
                kept_served += _serves(await memory.get(KEPT_KEY), kept)
                reads += 1
                await asyncio.sleep(0.05)
            out["replay s"] = time.perf_counter() - started
            out["pings during"] = pinged(pings)
            await watcher.aclose()
            out["reads during"] = reads
            out["kept served during"] = kept_served
            leaked |= _serves(await memory.get(SECRET_KEY), secret)
            out["kept served after"] = _serves(await memory.get(KEPT_KEY), kept)
            out["forgotten served"] = leaked
            log = await server.admin("SLOWLOG", "GET", "-1")
            durations = [int(e[2]) for e in log]
            if os.environ.get("ROLLBACK_SLOWLOG"):
                for e in log[::-1]:
                    print(int(e[2]), " ".join(map(str, e[3][:8]))[:150])
            out["commands"] = len(durations)
            out["longest ms"] = max(durations, default=0) / 1000
            out["over 50 ms"] = sum(d > 50_000 for d in durations)
            stats = await server.admin("INFO", "commandstats")
            out["script calls"] = sum(
                int(v["calls"])
                for name, v in stats.items()
                if name in ("cmdstat_eval", "cmdstat_evalsha")
            )
            out["scripts ms"] = (
                sum(
                    float(v["usec"])
                    for name, v in stats.items()
                    if name in ("cmdstat_eval", "cmdstat_evalsha")
                )
                / 1000
            )
    finally:
        server.kill()
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", required=True, help="a PostgreSQL URL")
    parser.add_argument("--forgets", type=int, nargs="+", default=[100, 3000, 10_000])
    parser.add_argument("--filler", type=int, default=200, help="channels with data")
    args = parser.parse_args()
    for n in args.forgets:
        result = await one(args.postgres, n, args.filler)
        print(
            f"N={n}: first call {result['first call s']:.2f} s ({result['first call']}); "
            f"replay {result['replay s']:.2f} s; longest command {result['longest ms']:.1f} ms, "
            f"{result['over 50 ms']} over 50 ms of {result['commands']}; scripts "
            f"{result['scripts ms']:.0f} ms in {result['script calls']} calls; "
            f"forgotten served: {result['forgotten served']}; "
            f"kept served during/after: {result['kept served during']}/{result['reads during']}"
            f", {result['kept served after']}; another client's PING before: "
            f"{result['pings before']}, during: {result['pings during']}",
            flush=True,
        )


if __name__ == "__main__":
    asyncio.run(main())
