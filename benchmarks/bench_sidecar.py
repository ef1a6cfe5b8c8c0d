"""The chat-day turn through the HTTP sidecar: N concurrent clients over loopback.

Run on demand (not part of the test suite)::

    .venv/bin/python benchmarks/bench_sidecar.py                         # print the figures
    .venv/bin/python benchmarks/bench_sidecar.py --write docs/benchmarks.md
    .venv/bin/python benchmarks/bench_sidecar.py --replicas 1,2 --clients 4 \
        --postgres postgresql://postgres@127.0.0.1:5432/test --redis redis://127.0.0.1:6379/0
    .venv/bin/python benchmarks/bench_sidecar.py --curve --clients 1,4,16,64 \
        --postgres postgresql://postgres@127.0.0.1:5432/test --redis redis://127.0.0.1:6379/0

The sidecar (``shortterm serve``; SQLite store and in-process cache, or with ``--replicas``
several processes on one PostgreSQL + Redis) runs apart from the clients' process. Every client
holds one keep-alive connection per replica and runs turns back to back: start a turn
(context + tools), on every 5th turn call the tool with a ~1,000-character summary, then
capture ~10 messages. Every other turn start carries a 30-message prompt in ``messages`` to
splice, so both kinds of start are measured in the same run. With several replicas, a client
starts its turn on one replica and calls the tool and captures on the next, as a load
balancer would spread them. Turns rotate over 50 users, 20 channels and 2 servers (seed 42).
The clients speak HTTP/1.1 over plain asyncio streams, so the figures are the sidecar's cost,
not a client library's. Each client's first 10 turns warm its connections up and are not
counted. Bounded: at most ``--turns`` turns and ``--seconds`` seconds per run.

``--curve`` runs every client count on one SQLite sidecar and, given ``--postgres`` and
``--redis``, on one sidecar over PostgreSQL + Redis, for one table of requests per second
against clients. Every mode also measures CPU per request: the load-generating process's own
(``resource.getrusage``, warm-up turns included, as their requests are) and the sidecar
processes' (``/proc``, Linux only).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

SECTION = "Sidecar over loopback HTTP"
REPLICAS_SECTION = "Sidecar replicas on PostgreSQL + Redis"
CURVE_SECTION = "Sidecar requests per second by clients"
SPLICED = "start turn + 30 messages"
WARMUP = 10  # turns per client before the clock counts
ROUTES = ("start turn", SPLICED, "tool call", "capture")
SUMMARY = (
    "Ana, Ben and Tomo are planning a Saturday hike on the ridge trail. They meet at the north "
    "car park at 8:00; Ben drives, Ana brings the maps and a first-aid kit. Rain is forecast "
    "after 15:00, so they want to be back down by 14:30. Open questions: whether Chloe joins "
    "(she answers tonight), and whether to take the longer loop past the lake. "
) * 4
SUMMARY = SUMMARY[:1000]
LINE = "Sounds good, I'll bring the maps and check the forecast again tomorrow morning. "


# -- the client side (its own process) --------------------------------------------------------


class Connection:
    """One keep-alive HTTP/1.1 connection; enough of the protocol for JSON requests."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.host = host

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, f"{host}:{port}")

    async def request(self, method: str, path: str, body: Any) -> tuple[int, bytes]:
        data = json.dumps(body).encode()
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n"
        )
        self.writer.write(head.encode() + data)
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.lower() == "content-length":
                length = int(value)
        return status, await self.reader.readexactly(length) if length else b""

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


def turn_plan(rng: random.Random, n: int) -> dict[str, Any]:
    server = rng.choice(("5001", "5002"))
    user = str(1000 + rng.randrange(50))
    channel = str(7000 + rng.randrange(20))
    start: dict[str, Any] = {
        "user_id": user,
        "channel_id": channel,
        "server_id": server,
        "persona_id": "1",
        "user_message": "what did we say about Saturday?",
        "user_name": f"user {user}",
        "bot_name": "Tomo",
        "channel_name": f"channel-{channel}",
        "provider": "openai",
    }
    history = [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": LINE * 3,
            "author_id": user if i % 2 == 0 else None,
            "speaker": f"user {user}" if i % 2 == 0 else "Tomo",
        }
        for i in range(9)
    ]
    capture = {"history": history, "replies": [{"text": LINE * 2, "persona_id": "1"}]}
    spliced = n % 2 == 1
    if spliced:
        start = {**start, "messages": prompt(user)}
    return {"start": start, "capture": capture, "tool": n % 5 == 4, "spliced": spliced}


def prompt(user: str) -> list[dict[str, Any]]:
    """A 30-message chat-completions prompt: a system message and a dialogue with two tool
    exchanges in it."""
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are Tomo. " + LINE}]
    for i in range(25):
        role = "user" if i % 2 == 0 else "assistant"
        out.append({"role": role, "content": (f"user {user}: " if i % 2 == 0 else "") + LINE})
    for k in range(2):
        call = {"id": f"call_{k}", "type": "function", "function": {"name": "w", "arguments": "{}"}}
        out.insert(10 + 8 * k, {"role": "assistant", "content": None, "tool_calls": [call]})
        out.insert(11 + 8 * k, {"role": "tool", "tool_call_id": f"call_{k}", "content": "sunny"})
    return out[:30]


def host_port(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


async def client(
    urls: list[str], seed: int, quota: int, deadline: float, out: dict[str, list[float]]
) -> tuple[int, float, int]:
    """Turns back to back; answers how many were counted, when counting began and how many
    requests the warm-up made."""
    rng = random.Random(seed)
    conns = [await Connection.open(*host_port(url)) for url in urls]
    done = 0
    warm: dict[str, list[float]] = {route: [] for route in ROUTES}
    samples = warm  # the first turns warm every connection up
    clocked = time.perf_counter()
    try:
        while done < quota and time.perf_counter() < deadline:
            if done == WARMUP:
                samples, clocked = out, time.perf_counter()
            plan = turn_plan(rng, done)
            # Start on one replica, go on with the turn on the next (one replica: the same).
            starter = conns[(seed + done) % len(conns)]
            conn = conns[(seed + done + 1) % len(conns)]
            t0 = time.perf_counter()
            status, body = await starter.request("POST", "/v1/turns", plan["start"])
            t1 = time.perf_counter()
            assert status == 201, (status, body[:200])
            answer = json.loads(body)
            assert ("messages" in answer) == plan["spliced"]
            samples[SPLICED if plan["spliced"] else "start turn"].append(t1 - t0)
            turn_id = answer["turn_id"]
            if plan["tool"]:
                call = {"name": "update_short_term_memory", "arguments": {"summary": SUMMARY}}
                status, body = await conn.request("POST", f"/v1/turns/{turn_id}/tool-calls", call)
                t2 = time.perf_counter()
                assert status == 200 and json.loads(body)["ok"], (status, body[:200])
                samples["tool call"].append(t2 - t1)
                t1 = t2
            status, body = await conn.request(
                "POST", f"/v1/turns/{turn_id}/capture", plan["capture"]
            )
            assert status == 204, (status, body[:200])
            samples["capture"].append(time.perf_counter() - t1)
            done += 1
    finally:
        for c in conns:
            await c.close()
    return max(0, done - WARMUP), clocked, sum(len(s) for s in warm.values())


async def run_clients(urls: list[str], clients: int, turns: int, seconds: float) -> dict[str, Any]:
    out: dict[str, list[float]] = {route: [] for route in ROUTES}
    per_client = max(1, turns // clients) + WARMUP
    started = time.perf_counter()
    deadline = started + seconds
    cpu = cpu_s()
    ran = await asyncio.gather(
        *(client(urls, 42 + i, per_client, deadline, out) for i in range(clients))
    )
    cpu = cpu_s() - cpu
    elapsed = time.perf_counter() - min(at for _, at, _ in ran)
    return {
        "replicas": len(urls),
        "clients": clients,
        "turns": sum(n for n, _, _ in ran),
        "elapsed_s": elapsed,
        "samples": out,
        # CPU over every request this process made, the warm-up's included.
        "client_cpu_s": cpu,
        "requests_all": sum(len(s) for s in out.values()) + sum(w for _, _, w in ran),
    }


def cpu_s() -> float:
    """This process's CPU seconds so far, user and system."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def client_main(urls: str, clients: int, turns: int, seconds: float) -> None:
    result = asyncio.run(run_clients(urls.split(","), clients, turns, seconds))
    json.dump(result, sys.stdout)


# -- the driver -------------------------------------------------------------------------------


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def start_server(store: str, cache: str = "memory://") -> tuple[subprocess.Popen[str], str]:
    exe = Path(sys.executable).with_name("shortterm")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHORTTERM_")}
    proc = subprocess.Popen(
        [str(exe), "serve", "--port", "0", "--store", store, "--cache", cache],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    for _ in range(200):
        line = proc.stderr.readline()
        if not line:
            break
        if line.startswith("shortterm sidecar listening on "):
            return proc, line.split()[4]
    proc.kill()
    raise SystemExit("the sidecar did not start")


def table(results: list[dict[str, Any]]) -> str:
    rows = [
        "| replicas | clients | turns | requests/s | turns/s | route | requests "
        "| p50 ms | p99 ms |",
        "|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in results:
        samples = r["samples"]
        requests = sum(len(s) for s in samples.values())
        rps, tps = requests / r["elapsed_s"], r["turns"] / r["elapsed_s"]
        for i, route in enumerate(ROUTES):
            s = samples[route]
            lead = (
                f"| {r['replicas']} | {r['clients']} | {r['turns']:,} | {rps:,.0f} | {tps:,.0f} |"
                if i == 0
                else "| | | | | |"
            )
            rows.append(
                f"{lead} {route} | {len(s):,} | {percentile(s, 0.5) * 1000:.2f} "
                f"| {percentile(s, 0.99) * 1000:.2f} |"
            )
    costs = []
    for r in results:
        plain, spliced = r["samples"]["start turn"], r["samples"][SPLICED]
        delta = (percentile(spliced, 0.5) - percentile(plain, 0.5)) * 1000
        costs.append(f"{delta:+.2f} ms ({r['replicas']} × {r['clients']})")
    note = (
        "\n\nThe splice, as the median of a start with the 30-message prompt minus one without "
        "(replicas × clients): " + ", ".join(costs) + "."
    )
    return "\n".join(rows) + note


TURN_TEXT = (
    "A turn is a start (context + tools; every other one with a 30-message chat-completions "
    "prompt to splice, two tool exchanges in it), a tool call with a 1,000-character summary "
    "on every 5th turn, and a capture of 10 messages."
)


def load() -> str:
    """The machine's load when the run began: the figures are only as quiet as the machine."""
    one, five, _ = os.getloadavg()
    return f"Load average when the run began: {one:.1f} (1 min), {five:.1f} (5 min)."


def render(results: list[dict[str, Any]], command: str, loaded: str) -> str:
    from shortterm.bench.report import machine

    return (
        f"Machine: {machine()}. {loaded} Command: `{command}`. "
        "The sidecar (`shortterm serve`, SQLite store, in-process cache, uvicorn with "
        "httptools from the server extra) in one process, the clients in another; one "
        "keep-alive connection per client; latency as each client saw it over loopback. "
        f"{TURN_TEXT}\n\n" + table(results)
    )


def render_replicas(results: list[dict[str, Any]], command: str, loaded: str) -> str:
    from shortterm.bench.report import machine

    return (
        f"Machine: {machine()}. {loaded} Command: `{command}`. "
        "One or two `shortterm serve` processes on one PostgreSQL store and one Redis cache "
        "(so turns live in Redis, and the one-upgrade guard is taken there), PostgreSQL and "
        "Redis on the same machine; the clients in another process, each with one keep-alive "
        "connection per replica; with two replicas a turn starts on one and its tool call and "
        f"capture go to the other. {TURN_TEXT} Every process shares the same cores, so two "
        "replicas show the cost of the shared turn state, not a gain in throughput.\n\n"
        + table(results)
    )


def curve_table(results: list[dict[str, Any]]) -> str:
    rows = [
        "| store | clients | requests/s | turns/s | p50 ms | p99 ms "
        "| client CPU µs per request | sidecar CPU µs per request |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        every = [t for s in r["samples"].values() for t in s]
        rps, tps = len(every) / r["elapsed_s"], r["turns"] / r["elapsed_s"]
        client = r["client_cpu_s"] / r["requests_all"] * 1e6
        server = r.get("server_cpu_s")
        sidecar = f"{server / r['requests_all'] * 1e6:,.0f}" if server is not None else "–"
        rows.append(
            f"| {r['store']} | {r['clients']} | {rps:,.0f} | {tps:,.0f} "
            f"| {percentile(every, 0.5) * 1000:.2f} | {percentile(every, 0.99) * 1000:.2f} "
            f"| {client:,.0f} | {sidecar} |"
        )
    return "\n".join(rows)


def render_curve(results: list[dict[str, Any]], command: str, loaded: str) -> str:
    from shortterm.bench.report import machine

    return (
        f"Machine: {machine()} (the sidecar, its clients, PostgreSQL and Redis share those "
        f"2 cores). {loaded} Command: `{command}`. One `shortterm serve` process (SQLite "
        "store and in-process cache, or PostgreSQL store and Redis cache on the same "
        "machine), the clients in another process, one keep-alive connection each, turns "
        f"back to back. {TURN_TEXT} Requests per second and latency (p50, p99 over every "
        "route) count the turns after each client's 10 warm-up turns; CPU per request "
        "divides a process's CPU time (user + system) over the whole run, warm-up "
        "included, by every request of the run: the clients' own process "
        "(`resource.getrusage`) and the sidecar's (`/proc`).\n\n" + curve_table(results)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", default="1,16", help="comma-separated client counts")
    parser.add_argument("--turns", type=int, default=3000, help="turns per client count")
    parser.add_argument("--seconds", type=float, default=60.0, help="time bound per count")
    parser.add_argument("--write", type=Path, default=None, help="markdown file to update")
    parser.add_argument(
        "--replicas",
        default=None,
        help="comma-separated replica counts, on --postgres and --redis (e.g. 1,2)",
    )
    parser.add_argument("--postgres", default=None, help="PostgreSQL URL for --replicas")
    parser.add_argument("--redis", default=None, help="Redis URL for --replicas")
    parser.add_argument(
        "--curve",
        action="store_true",
        help="every --clients count on SQLite and, with --postgres and --redis, on "
        "PostgreSQL + Redis: one table of requests/s and CPU per request",
    )
    parser.add_argument("--client", default=None, help=argparse.SUPPRESS)  # internal
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.clients.split(",") if c.strip()]
    if args.client:
        client_main(args.client, counts[0], args.turns, args.seconds)
        return 0
    shown = ["benchmarks/bench_sidecar.py", *(argv if argv is not None else sys.argv[1:])]
    command = "python " + " ".join(shown)
    loaded = load()
    if args.curve:
        stores = [0] + ([1] if args.postgres and args.redis else [])
        results = [run_on(replicas=n, clients=c, args=args) for n in stores for c in counts]
        text, section = render_curve(results, command, loaded), CURVE_SECTION
    elif args.replicas is not None:
        if not (args.postgres and args.redis):
            parser.error("--replicas needs --postgres and --redis")
        replicas = [int(r) for r in args.replicas.split(",") if r.strip()]
        results = [run_on(replicas=n, clients=c, args=args) for n in replicas for c in counts]
        text, section = render_replicas(results, command, loaded), REPLICAS_SECTION
    else:
        results = [run_on(replicas=0, clients=c, args=args) for c in counts]
        text, section = render(results, command, loaded), SECTION
    print(text)
    if args.write is not None:
        from shortterm.bench.report import replace_section

        replace_section(args.write, section, text)
    return 0


def drive(urls: list[str], clients: int, args: argparse.Namespace) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--client", ",".join(urls), "--clients", str(clients),
         "--turns", str(args.turns), "--seconds", str(args.seconds)],
        capture_output=True, text=True, timeout=args.seconds + 60,
    )  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"the clients failed:\n{out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def run_on(*, replicas: int, clients: int, args: argparse.Namespace) -> dict[str, Any]:
    """One run: ``replicas`` processes on a fresh PostgreSQL schema and Redis prefix (removed
    afterwards), or with ``replicas=0`` one process on a fresh SQLite file."""
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        if replicas == 0:
            store, cache, count = f"sqlite:///{Path(tmp) / 'bench.db'}", "memory://", 1
        else:
            tag = uuid.uuid4().hex[:12]
            store = with_query(args.postgres, schema=f"bench_{tag}")
            cache = with_query(args.redis, prefix=f"bench-{tag}:")
            stack.callback(cleanup, args.postgres, f"bench_{tag}", args.redis, f"bench-{tag}:")
            count = replicas
        urls, procs = [], []
        for _ in range(count):  # one after the other: the first one migrates
            proc, url = start_server(store, cache)
            stack.callback(stop, proc)
            urls.append(url)
            procs.append(proc)
        before = [process_cpu_s(proc.pid) for proc in procs]
        result = drive(urls, clients, args)
        after = [process_cpu_s(proc.pid) for proc in procs]
        if None not in before and None not in after:
            result["server_cpu_s"] = sum(after) - sum(before)  # type: ignore[arg-type]
        result["store"] = "SQLite + in-process" if replicas == 0 else "PostgreSQL + Redis"
        return result


def process_cpu_s(pid: int) -> float | None:
    """User and system CPU seconds of a running process (Linux ``/proc``), None elsewhere."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def with_query(url: str, **options: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return f"{url}{'&' if '?' in url else '?'}{query}"


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    proc.wait(30)
    if proc.stderr is not None:
        proc.stderr.close()


def cleanup(pg_url: str, schema: str, redis_url: str | None, prefix: str) -> None:
    import psycopg
    import redis

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    if redis_url is None:
        return  # a throwaway server
    client = redis.Redis.from_url(redis_url)
    try:
        for name in client.scan_iter(match=f"{prefix}*", count=1000):
            client.delete(name)
    finally:
        client.close()


if __name__ == "__main__":
    raise SystemExit(main())
