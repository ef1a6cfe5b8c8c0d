"""The chat-day benchmark: full turns (context → capture → an upgrade every 5th turn of a
channel) on the embedded default, against floors measured in the same run.

Floors: for context and capture, a plain ``dict`` + ``deque(maxlen=10)`` with ``dict``-of-``set``
indexes doing the same reads and writes (the live scope, the three most recent other channels,
two scope writes); for the upgrade, a raw ``sqlite3`` upsert of the same two rows in one
transaction, with the same WAL and ``synchronous`` settings.
"""

from __future__ import annotations

import gc
import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cache.inprocess import InProcessCache
from ..memory import open as open_memory
from ..model import Message, ScopeKey, ScopeMeta
from ..model.config import Config
from ..store.sqlite import SQLiteStore
from .core import T0, Floor, Workload, peak_rss_mb
from .report import Timing, summarize

__all__ = ["ChatDayResult", "run_chatday"]

SUMMARY = ("The group planned a Saturday hike on the ridge trail, meeting at 8am. " * 15)[:1000]


@dataclass
class ChatDayResult:
    turns: int
    live_entries: int
    timings: dict[str, Timing] = field(default_factory=dict)
    turns_per_s: float = 0.0
    floor_turns_per_s: float = 0.0
    peak_rss_mb: float = 0.0


def _raw_upsert(db: sqlite3.Connection) -> Callable[[dict[str, Any]], None]:
    statement = (
        "INSERT INTO floor (kind, owner, channel, persona, summary, summary_at) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (kind, owner, channel, persona) "
        "DO UPDATE SET summary = excluded.summary, summary_at = excluded.summary_at"
    )

    def upsert(t: dict[str, Any]) -> None:
        db.execute("BEGIN IMMEDIATE")
        db.execute(statement, ("user", t["user_id"], t["channel_id"], t["persona_id"], SUMMARY, T0))
        if t["server_id"] is not None:
            db.execute(
                statement, ("server", t["server_id"], t["channel_id"], t["persona_id"], SUMMARY, T0)
            )
        db.execute("COMMIT")

    return upsert


async def run_chatday(turns: int, live_entries: int, tmp: Path) -> ChatDayResult:
    """``turns`` chat-day turns; the hot tier first grown to ``live_entries`` filler entries."""
    res = ChatDayResult(turns, live_entries)
    now = T0

    def clock() -> float:
        return now

    cfg = Config(sweep_interval_s=0, max_entries=max(2 * live_entries, 1_000_000))
    cache = InProcessCache(
        crude_ttl_s=cfg.crude_ttl_s,
        summary_ttl_s=cfg.summary_ttl_s,
        max_entries=cfg.max_entries,
        max_bytes=cfg.max_bytes,
    )
    store = SQLiteStore(tmp / f"chatday-{turns}-{live_entries}.db")
    memory = await open_memory(store, cache, config=cfg, clock=clock)
    work = Workload()
    if live_entries:
        filler = tuple(
            Message("user", m.content, author_id=f"pop-{m.author_id}", speaker=m.speaker, at=now)
            for m in work.history("u0", now)
        )
        meta = ScopeMeta(server_id="pop")
        for i in range(live_entries):
            key = ScopeKey._unchecked("user", f"pop{i}", f"popc{i % 50_000}", None)
            await cache.capture(key, filler, meta, None, now)

    floor = Floor()
    raw = sqlite3.connect(tmp / f"floor-{turns}-{live_entries}.db", isolation_level=None)
    raw.execute("PRAGMA journal_mode=WAL")
    raw.execute("PRAGMA synchronous=NORMAL")
    raw.execute(
        "CREATE TABLE floor (kind TEXT, owner TEXT, channel TEXT, persona TEXT, summary TEXT, "
        "summary_at REAL, PRIMARY KEY (kind, owner, channel, persona))"
    )
    raw_upsert = _raw_upsert(raw)

    samples: dict[str, list[int]] = {
        k: []
        for k in (
            "context",
            "capture",
            "upgrade",
            "floor context",
            "floor capture",
            "floor upgrade",
        )
    }
    per_channel: dict[str, int] = {}
    ours_ns = floor_ns = 0
    gc.collect()
    for _ in range(turns):
        t = work.turn()
        history = work.history(t["user_id"], now)
        reply = work.reply(t["persona_id"])
        said = [*work.history(t["user_id"], now), Message("assistant", reply.text, at=now)]
        n = per_channel[t["channel_id"]] = per_channel.get(t["channel_id"], 0) + 1
        upgrade = n % 5 == 0

        start = time.perf_counter_ns()
        floor.context(t)
        mid = time.perf_counter_ns()
        floor.capture(t, said)
        end = time.perf_counter_ns()
        samples["floor context"].append(mid - start)
        samples["floor capture"].append(end - mid)
        floor_ns += end - start
        if upgrade:
            start = time.perf_counter_ns()
            raw_upsert(t)
            took = time.perf_counter_ns() - start
            samples["floor upgrade"].append(took)
            floor_ns += took

        start = time.perf_counter_ns()
        turn = memory.turn(**t, user_message="so what is the plan?", bot_name="Tomo")
        await turn.context()
        mid = time.perf_counter_ns()
        if upgrade:
            await turn.call_tool("update_short_term_memory", json.dumps({"summary": SUMMARY}))
        after = time.perf_counter_ns()
        await turn.capture(history=history, replies=[reply])
        end = time.perf_counter_ns()
        samples["context"].append(mid - start)
        samples["capture"].append(end - after)
        if upgrade:
            samples["upgrade"].append(after - mid)
        ours_ns += end - start
        now += 0.05  # 20 turns a second of chat-time, so TTLs and relative times move

    for name, values in samples.items():
        res.timings[name] = summarize(name, values)
    res.turns_per_s = turns / (ours_ns / 1e9)
    res.floor_turns_per_s = turns / (floor_ns / 1e9)
    res.peak_rss_mb = peak_rss_mb()
    raw.close()
    await memory.close()
    return res


def render_chatday(results: list[ChatDayResult]) -> str:
    lines = [
        "| turns | live entries | operation | median µs | p99 µs | floor median µs | × floor |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in results:
        for op in ("context", "capture", "upgrade"):
            ours, floor = r.timings[op], r.timings[f"floor {op}"]
            lines.append(
                f"| {r.turns:,} | {r.live_entries:,} | {op} | {ours.median_us:.1f} | "
                f"{ours.p99_us:.1f} | {floor.median_us:.1f} | {ours.ratio(floor):.2f} |"
            )
    lines += [
        "",
        "| turns | live entries | turns/s | floor turns/s | peak RSS MB |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.turns:,} | {r.live_entries:,} | {r.turns_per_s:,.0f} | "
            f"{r.floor_turns_per_s:,.0f} | {r.peak_rss_mb:,.0f} |"
        )
    return "\n".join(lines)
