"""Round trips per sidecar route: how often a request waits on PostgreSQL and on Redis.

Run on demand (not part of the test suite)::

    .venv/bin/python benchmarks/round_trips.py \
        --postgres postgresql://postgres@127.0.0.1:5432/test --redis redis://127.0.0.1:6379/0
    .venv/bin/python benchmarks/round_trips.py ... --write docs/benchmarks.md
    .venv/bin/python benchmarks/round_trips.py --postgres ... --cluster

With ``--cluster`` (instead of ``--redis``) the hot tier is a Redis Cluster of three masters
the script starts on loopback ports of its own (Debian's ``redis-server``, as the tests do),
each announcing its relay's port, so that every connection the client opens to any node is
counted: a request's Redis figure is then the sum over the nodes it reached.

One ``shortterm serve`` process on a fresh PostgreSQL schema and Redis prefix, both reached
through loopback relays in this process that count round trips: on each relayed connection, a
burst the client sends after the server last answered (or first) is one round trip, so a
pipeline of commands counts once and a query followed by its fetch counts twice. The LISTEN
connection is left out (its heartbeat is not a request's cost). The turns are those of
``bench_sidecar.py`` (a start, a tool call on every 5th turn, a capture; one client, one
keep-alive connection), and the figure is the mean per route over ``--turns`` turns after a
warm-up: the counters are read between requests, when the sidecar has nothing in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
import tempfile
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from bench_sidecar import (
    SUMMARY,
    WARMUP,
    Connection,
    cleanup,
    host_port,
    start_server,
    stop,
    turn_plan,
    with_query,
)

from shortterm.bench.report import publish

ROOT = Path(__file__).resolve().parents[1]
SECTION = "Round trips per sidecar route"
CLUSTER_SECTION = "Round trips per sidecar route on a Redis Cluster"
ROUTES = ("start turn", "tool call", "capture")
_CHUNK = 1 << 16
_LISTEN = b"LISTEN"


@dataclass
class Relay:
    """A loopback relay to one server that counts its connections' round trips."""

    target: tuple[str, int]
    round_trips: int = 0
    trace: list[bytes] | None = None  # each round trip's first bytes, when tracing
    _servers: list[asyncio.Server] = field(default_factory=list)

    async def start(self) -> int:
        server = await asyncio.start_server(self._link, "127.0.0.1", 0)
        self._servers.append(server)
        port: int = server.sockets[0].getsockname()[1]
        return port

    async def _link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        state = {"answered": True, "listen": False}

        async def client_to_server() -> None:
            while data := await reader.read(_CHUNK):
                state["listen"] = state["listen"] or _LISTEN in data
                if state["answered"] and not state["listen"]:
                    self.round_trips += 1
                    if self.trace is not None:
                        self.trace.append(data[:160])
                state["answered"] = False
                up_writer.write(data)
                await up_writer.drain()
            up_writer.close()

        async def server_to_client() -> None:
            while data := await up_reader.read(_CHUNK):
                state["answered"] = True
                writer.write(data)
                await writer.drain()
            writer.close()

        try:
            await asyncio.gather(client_to_server(), server_to_client())
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
            up_writer.close()

    def close(self) -> None:
        for server in self._servers:
            server.close()


def relayed(url: str, port: int) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0] + "@" if len(netloc) == 2 else ""
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{port}"))


def target(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 0


def _shown(burst: bytes) -> str:
    """A traced burst, readable: RESP framing and binary bytes dropped."""
    text = burst.decode("latin-1")
    text = re.sub(r"\r\n[*$]\d+", " ", text)
    return re.sub(r"[^ -~]", ".", text)[:120]


async def count(
    url: str, pg: Relay, redis: Relay | Relays, turns: int, trace: int = 0
) -> dict[str, list[int]]:
    """Per route, the PostgreSQL and the Redis round trips of each counted request."""
    conn = await Connection.open(*host_port(url))
    seen: dict[str, list[int]] = {f"{route} {db}": [] for route in ROUTES for db in ("pg", "redis")}

    async def timed(route: str, method: str, path: str, body: Any, counted: bool) -> bytes:
        await asyncio.sleep(0.01)  # let background reads (the journal, sweeps) settle first
        pg0, r0 = pg.round_trips, redis.round_trips
        status, answer = await conn.request(method, path, body)
        assert status in (200, 201, 204), (route, status, answer[:200])
        if counted:
            seen[f"{route} pg"].append(pg.round_trips - pg0)
            seen[f"{route} redis"].append(redis.round_trips - r0)
            if len(seen[f"{route} pg"]) <= trace:
                print(f"-- {route}")
                for relay, name in ((pg, "pg"), (redis, "redis")):
                    for burst in relay.trace or []:
                        print(f"   {name}: {_shown(burst)}")
        for relay in (pg, redis):
            relay.trace = [] if trace else None
        return answer

    rng = random.Random(42)
    try:
        for n in range(turns + WARMUP):
            plan = turn_plan(rng, n)
            plan["start"].pop("messages", None)
            counted = n >= WARMUP
            started = json.loads(
                await timed("start turn", "POST", "/v1/turns", plan["start"], counted)
            )
            turn_id = started["turn_id"]
            if plan["tool"]:
                call = {"name": "update_short_term_memory", "arguments": {"summary": SUMMARY}}
                path = f"/v1/turns/{turn_id}/tool-calls"
                await timed("tool call", "POST", path, call, counted)
            path = f"/v1/turns/{turn_id}/capture"
            await timed("capture", "POST", path, plan["capture"], counted)
    finally:
        await conn.close()
    return seen


@dataclass
class Relays:
    """The Redis relays of one run (one per cluster node), counted together."""

    relays: list[Relay]

    @property
    def round_trips(self) -> int:
        return sum(r.round_trips for r in self.relays)

    @property
    def trace(self) -> list[bytes] | None:
        traces = [r.trace for r in self.relays if r.trace is not None]
        return None if not traces else [b for t in traces for b in t]

    @trace.setter
    def trace(self, value: list[bytes] | None) -> None:
        for relay in self.relays:
            relay.trace = None if value is None else []

    def close(self) -> None:
        for relay in self.relays:
            relay.close()


async def _announced_cluster(stack: ExitStack) -> tuple[str, Relays]:
    """Three masters, each announcing its relay's port to clients; the seed URL (a relay)."""
    sys.path.insert(0, str(ROOT))
    from tests.cluster_support import running_cluster  # the tests' own cluster, reused

    cluster = stack.enter_context(running_cluster())
    relays = [Relay(("127.0.0.1", port)) for port in cluster.ports]
    for relay, port in zip(relays, cluster.ports, strict=True):
        relay_port = await relay.start()
        cluster.cli(port, "config", "set", "cluster-announce-port", str(relay_port))
        cluster.cli(port, "config", "set", "cluster-announce-bus-port", str(port + 10000))
    relay_ports = {str(r._servers[0].sockets[0].getsockname()[1]) for r in relays}

    def announced() -> bool:
        slots = cluster.cli(cluster.ports[0], "cluster", "slots")
        return all(port in slots for port in relay_ports)

    for _ in range(200):
        if await asyncio.to_thread(announced):
            break
        await asyncio.sleep(0.1)
    else:
        raise RuntimeError("the cluster's nodes did not announce their relays")
    seed = relays[0]._servers[0].sockets[0].getsockname()[1]
    return f"redis+cluster://127.0.0.1:{seed}", Relays(relays)


async def run(args: argparse.Namespace) -> dict[str, list[int]]:
    pg = Relay(target(args.postgres))
    pg_port = await pg.start()
    tag = uuid.uuid4().hex[:12]
    store = with_query(relayed(args.postgres, pg_port), schema=f"bench_{tag}")
    with tempfile.TemporaryDirectory(), ExitStack() as stack:
        redis: Relay | Relays
        if args.cluster:
            seed, redis = await _announced_cluster(stack)
            cache = with_query(seed, prefix=f"bench-{tag}:")
            stack.callback(cleanup, args.postgres, f"bench_{tag}", None, "")
        else:
            redis = Relay(target(args.redis))
            cache = with_query(relayed(args.redis, await redis.start()), prefix=f"bench-{tag}:")
            stack.callback(cleanup, args.postgres, f"bench_{tag}", args.redis, f"bench-{tag}:")
        proc, url = await asyncio.to_thread(start_server, store, cache)
        try:
            return await count(url, pg, redis, args.turns, args.trace)
        finally:
            await asyncio.to_thread(stop, proc)  # its connections end before the relays do
            await asyncio.sleep(0.2)
            pg.close()
            redis.close()


def mean(xs: list[int]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def table(seen: dict[str, list[int]]) -> str:
    rows = ["| route | requests | PostgreSQL | Redis |", "|---|---:|---:|---:|"]
    for route in ROUTES:
        pg, redis = seen[f"{route} pg"], seen[f"{route} redis"]
        rows.append(f"| {route} | {len(pg)} | {mean(pg):.2f} | {mean(redis):.2f} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--postgres", required=True, help="PostgreSQL URL")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--redis", help="Redis URL")
    where.add_argument(
        "--cluster", action="store_true", help="a Redis Cluster of three masters started here"
    )
    parser.add_argument("--turns", type=int, default=200, help="counted turns")
    parser.add_argument(
        "--trace", type=int, default=0, help="print the round trips of the first N per route"
    )
    parser.add_argument("--write", default=None, help="markdown file to update")
    parser.add_argument("--json", default=None, help="write each request's counts here")
    args = parser.parse_args(argv)
    seen = asyncio.run(run(args))
    if args.json is not None:
        Path(args.json).write_text(json.dumps(seen), encoding="utf-8")
    shown = ["benchmarks/round_trips.py", *(argv if argv is not None else sys.argv[1:])]
    where = "three masters, each node's connections counted; " if args.cluster else ""
    text = (
        f"Command: `python {' '.join(shown)}`. Mean round trips per request through counting "
        f"loopback relays (see the script's docstring); {where}one client, one sidecar "
        f"process, {args.turns} turns.\n\n" + table(seen)
    )
    publish(text, args.write, CLUSTER_SECTION if args.cluster else SECTION)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
