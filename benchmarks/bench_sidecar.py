"""The chat-day turn through the HTTP sidecar: N concurrent clients over loopback.

Run on demand (not part of the test suite)::

    .venv/bin/python benchmarks/bench_sidecar.py                         # print the figures
    .venv/bin/python benchmarks/bench_sidecar.py --write docs/benchmarks.md

The sidecar (``shortterm serve``, SQLite store, in-process cache) runs in one process and the
clients in another, so each has a core of its own. Every client holds one keep-alive
connection and runs turns back to back: start a turn (context + tools), on every 5th turn call
the tool with a ~1,000-character summary, then capture ~10 messages. Turns rotate over 50
users, 20 channels and 2 servers (seed 42). The clients speak HTTP/1.1 over plain asyncio
streams, so the figures are the sidecar's cost, not a client library's. Bounded: at most
``--turns`` turns and ``--seconds`` seconds per client count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SECTION = "Sidecar over loopback HTTP"
ROUTES = ("start turn", "tool call", "capture")
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

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    async def request(self, method: str, path: str, body: Any) -> tuple[int, bytes]:
        data = json.dumps(body).encode()
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
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
    start = {
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
    return {"start": start, "capture": capture, "tool": n % 5 == 4}


async def client(
    host: str, port: int, seed: int, quota: int, deadline: float, out: dict[str, list[float]]
) -> int:
    rng = random.Random(seed)
    conn = await Connection.open(host, port)
    done = 0
    try:
        while done < quota and time.perf_counter() < deadline:
            plan = turn_plan(rng, done)
            t0 = time.perf_counter()
            status, body = await conn.request("POST", "/v1/turns", plan["start"])
            t1 = time.perf_counter()
            assert status == 201, (status, body[:200])
            out["start turn"].append(t1 - t0)
            turn_id = json.loads(body)["turn_id"]
            if plan["tool"]:
                call = {"name": "update_short_term_memory", "arguments": {"summary": SUMMARY}}
                status, body = await conn.request("POST", f"/v1/turns/{turn_id}/tool-calls", call)
                t2 = time.perf_counter()
                assert status == 200 and json.loads(body)["ok"], (status, body[:200])
                out["tool call"].append(t2 - t1)
                t1 = t2
            status, body = await conn.request(
                "POST", f"/v1/turns/{turn_id}/capture", plan["capture"]
            )
            assert status == 204, (status, body[:200])
            out["capture"].append(time.perf_counter() - t1)
            done += 1
    finally:
        await conn.close()
    return done


async def run_clients(url: str, clients: int, turns: int, seconds: float) -> dict[str, Any]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    out: dict[str, list[float]] = {route: [] for route in ROUTES}
    per_client = max(1, turns // clients)
    started = time.perf_counter()
    deadline = started + seconds
    done = await asyncio.gather(
        *(client(host, int(port), 42 + i, per_client, deadline, out) for i in range(clients))
    )
    elapsed = time.perf_counter() - started
    return {"clients": clients, "turns": sum(done), "elapsed_s": elapsed, "samples": out}


def client_main(url: str, clients: int, turns: int, seconds: float) -> None:
    result = asyncio.run(run_clients(url, clients, turns, seconds))
    json.dump(result, sys.stdout)


# -- the driver -------------------------------------------------------------------------------


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def start_server(store: str) -> tuple[subprocess.Popen[str], str]:
    exe = Path(sys.executable).with_name("shortterm")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHORTTERM_")}
    proc = subprocess.Popen(
        [str(exe), "serve", "--port", "0", "--store", store],
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


def render(results: list[dict[str, Any]], command: str) -> str:
    from shortterm.bench.report import machine

    rows = [
        "| clients | turns | requests/s | turns/s | route | requests | p50 ms | p99 ms |",
        "|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in results:
        samples = r["samples"]
        requests = sum(len(s) for s in samples.values())
        rps, tps = requests / r["elapsed_s"], r["turns"] / r["elapsed_s"]
        for i, route in enumerate(ROUTES):
            s = samples[route]
            lead = (
                f"| {r['clients']} | {r['turns']:,} | {rps:,.0f} | {tps:,.0f} |"
                if i == 0
                else "| | | | |"
            )
            rows.append(
                f"{lead} {route} | {len(s):,} | {percentile(s, 0.5) * 1000:.2f} "
                f"| {percentile(s, 0.99) * 1000:.2f} |"
            )
    return (
        f"Machine: {machine()}. Command: `{command}`. The sidecar (`shortterm serve`, SQLite "
        "store, in-process cache, uvicorn with httptools from the server extra) in one process, "
        "the clients in another; one keep-alive connection per client; latency as each client "
        "saw it over loopback. A turn is a start (context + tools), a tool call with a "
        "1,000-character summary on every 5th turn, and a capture of 10 messages.\n\n"
        + "\n".join(rows)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", default="1,16", help="comma-separated client counts")
    parser.add_argument("--turns", type=int, default=3000, help="turns per client count")
    parser.add_argument("--seconds", type=float, default=60.0, help="time bound per count")
    parser.add_argument("--write", type=Path, default=None, help="markdown file to update")
    parser.add_argument("--client", default=None, help=argparse.SUPPRESS)  # internal
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.clients.split(",") if c.strip()]
    if args.client:
        client_main(args.client, counts[0], args.turns, args.seconds)
        return 0
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(f"sqlite:///{Path(tmp) / 'bench.db'}")
        try:
            for clients in counts:
                out = subprocess.run(
                    [sys.executable, __file__, "--client", url, "--clients", str(clients),
                     "--turns", str(args.turns), "--seconds", str(args.seconds)],
                    capture_output=True, text=True, check=True, timeout=args.seconds + 60,
                )  # fmt: skip
                results.append(json.loads(out.stdout))
        finally:
            proc.terminate()
            proc.wait(30)
    shown = ["benchmarks/bench_sidecar.py", *(argv if argv is not None else sys.argv[1:])]
    table = render(results, "python " + " ".join(shown))
    print(table)
    if args.write is not None:
        from shortterm.bench.report import replace_section

        replace_section(args.write, SECTION, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
