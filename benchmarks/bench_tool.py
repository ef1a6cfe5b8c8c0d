"""A durable summary upgrade (``turn.call_tool``) against the floor: a raw ``sqlite3`` upsert
of the same two rows in one transaction, with the same WAL and ``synchronous`` settings.

Run on demand (not part of the test suite)::

    .venv/bin/python benchmarks/bench_tool.py                       # print the figures
    .venv/bin/python benchmarks/bench_tool.py --write docs/benchmarks.md

Both sides write a ~1,000-character summary to an existing user-scope row and server-scope
row and commit; the tool side also parses the model's JSON arguments, checks the guards,
cleans the text, zeroes the cadence counter and mirrors the rows into the hot tier. Rounds of
each side alternate so that machine noise hits both alike. Target: median within 1.5x.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import shortterm
from shortterm.store.base import DistilledWrite, ScopeMeta

SECTION = "## Tool call (durable upgrade)"
SUMMARY = (
    "Ana, Ben and Tomo are planning a Saturday hike on the ridge trail. They meet at the north "
    "car park at 8:00; Ben drives, Ana brings the maps and a first-aid kit. Rain is forecast "
    "after 15:00, so they want to be back down by 14:30. Open questions: whether Chloe joins "
    "(she answers tonight), and whether to take the longer loop past the lake if the weather "
    "holds. Ana is vegetarian and Ben cannot eat nuts, so lunch is cheese sandwiches and fruit. "
) * 3
SUMMARY = SUMMARY[:1000]
ARGS = json.dumps({"summary": SUMMARY})

RAW_UPSERT = """
INSERT INTO scopes (kind, owner_id, channel_id, persona_id, summary, summary_at, created_at,
    updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (kind, owner_id, channel_id, COALESCE(persona_id, '')) DO UPDATE SET
    summary = excluded.summary,
    summary_at = excluded.summary_at,
    turns_since_refresh = CASE WHEN scopes.kind = 'server' THEN 0
        ELSE scopes.turns_since_refresh END,
    revision = scopes.revision + 1,
    updated_at = excluded.updated_at
"""


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def tool_round(memory: shortterm.Memory, n: int, out: list[float]) -> None:
    for _ in range(n):
        turn = memory.turn(
            user_id="111", channel_id="222", server_id="333", persona_id="7", bot_name="Tomo"
        )
        started = time.perf_counter_ns()
        result = await turn.call_tool("update_short_term_memory", ARGS)
        out.append((time.perf_counter_ns() - started) / 1000)
        if not result.ok:
            raise RuntimeError(result.message)


async def store_round(memory: shortterm.Memory, n: int, out: list[float]) -> None:
    """The store call the tool makes, with the same arguments, and nothing else."""
    user = shortterm.ScopeKey.user("111", "222", "7")
    server = shortterm.ScopeKey.server("333", "222", "7")
    meta = ScopeMeta(server_id="333")
    change = DistilledWrite(summary=SUMMARY, set_summary=True)
    for _ in range(n):
        started = time.perf_counter_ns()
        await memory.store.write_distilled(
            [(user, meta), (server, meta)], change, reset_counter=server, now=time.time()
        )
        out.append((time.perf_counter_ns() - started) / 1000)


def raw_round(conn: sqlite3.Connection, n: int, out: list[float]) -> None:
    for _ in range(n):
        started = time.perf_counter_ns()
        now = time.time()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(RAW_UPSERT, ("user", "111", "222", "7", SUMMARY, now, now, now))
        conn.execute(RAW_UPSERT, ("server", "333", "222", "7", SUMMARY, now, now, now))
        conn.execute("COMMIT")
        out.append((time.perf_counter_ns() - started) / 1000)


async def measure(
    rounds: int, per_round: int, synchronous: str, directory: Path | None
) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        tool_db, raw_db = Path(tmp) / "tool.db", Path(tmp) / "raw.db"
        config = shortterm.Config(sweep_interval_s=0)
        store = f"sqlite:///{tool_db}?synchronous={synchronous}"
        async with shortterm.open(store=store, config=config) as memory:
            # The same schema for the floor, then the rows both sides update.
            async with shortterm.open(store=f"sqlite:///{raw_db}", config=config):
                pass
            conn = sqlite3.connect(raw_db, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={synchronous}")
            samples: dict[str, list[float]] = {"tool": [], "store": [], "raw": []}
            await tool_round(memory, 50, [])  # warm-up, creates the rows
            await store_round(memory, 50, [])
            raw_round(conn, 50, [])
            for _ in range(rounds):
                await tool_round(memory, per_round, samples["tool"])
                await store_round(memory, per_round, samples["store"])
                raw_round(conn, per_round, samples["raw"])
            conn.close()
    return samples


def report(results: dict[str, dict[str, list[float]]], command: str) -> str:
    first = next(iter(results.values()))
    lines = [
        SECTION,
        "",
        f"`{command}` — {len(first['tool'])} calls per path and setting, alternating rounds, "
        f"SQLite {sqlite3.sqlite_version} (WAL) in a temporary directory, Python "
        f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores.",
        "",
        "| `synchronous` | path | median µs | p99 µs |",
        "|---|---|---:|---:|",
    ]
    for synchronous, samples in results.items():
        tool, store, raw = samples["tool"], samples["store"], samples["raw"]
        med_t, med_s, med_r = (statistics.median(x) for x in (tool, store, raw))
        p99_t, p99_s, p99_r = (percentile(x, 0.99) for x in (tool, store, raw))
        sync = synchronous.lower()
        lines += [
            f"| {sync} | `turn.call_tool` (JSON args → 2 scopes durable → hot tier) | "
            f"{med_t:.1f} | {p99_t:.1f} |",
            f"| {sync} | of which `store.write_distilled` (the same 2 rows) | {med_s:.1f} | "
            f"{p99_s:.1f} |",
            f"| {sync} | floor: raw `sqlite3` upsert of the 2 rows, one transaction | "
            f"{med_r:.1f} | {p99_r:.1f} |",
            f"| {sync} | **ratio `call_tool` / floor** | **{med_t / med_r:.2f}×** | "
            f"{p99_t / p99_r:.2f}× |",
            f"| {sync} | ratio `write_distilled` / floor | {med_s / med_r:.2f}× | "
            f"{p99_s / p99_r:.2f}× |",
        ]
    normal = results.get("NORMAL")
    if normal is not None:
        tool, store, raw = (statistics.median(normal[k]) for k in ("tool", "store", "raw"))
        lines += [
            "",
            f"With `synchronous=normal` the target (1.5×) is **not met**: {tool / raw:.1f}×. "
            f"The store call alone is {store / raw:.1f}× the floor: its upsert keeps the row's "
            "metadata (server and channel names, thread parent, privacy, persona lineage) with "
            "`COALESCE`, and returns the whole committed row (`RETURNING`, 18 columns) so the "
            "hot tier mirrors exactly what is on disk; returning those columns is a large share "
            f"of the difference. The remaining {tool - store:.0f} µs "
            "are the tool's own work: decoding the JSON arguments, the turn's guards, cleaning "
            "the text (control characters, placeholders, grapheme-safe cut), building the scope "
            "keys, and mirroring the two rows into the hot tier. Without an fsync per commit "
            "that fixed cost is several times a bare two-row upsert; with `synchronous=full` "
            "the fsync dominates both sides (and varies from run to run by a few tens of "
            "percent).",
        ]
    lines.append("")
    return "\n".join(lines)


def write_section(path: Path, section: str) -> None:
    """Replace (or append) our section of the benchmarks page, keeping the others."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n\n"
    start = text.find(SECTION)
    if start == -1:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(SECTION))
        text = text[:start] + section + (text[end + 1 :] if end != -1 else "")
    path.write_text(text.rstrip("\n") + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--per-round", type=int, default=500)
    parser.add_argument("--synchronous", nargs="+", default=["NORMAL"], choices=["NORMAL", "FULL"])
    parser.add_argument("--dir", type=Path, help="where the database files go (default: /tmp)")
    parser.add_argument("--write", type=Path, help="update this markdown page's section")
    args = parser.parse_args(argv)
    results = {
        sync: asyncio.run(measure(args.rounds, args.per_round, sync, args.dir))
        for sync in args.synchronous
    }
    command = "python benchmarks/bench_tool.py"
    if args.synchronous != ["NORMAL"]:
        command += " --synchronous " + " ".join(args.synchronous)
    section = report(results, command)
    print(section)
    if args.write:
        write_section(args.write, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
