"""Core benchmark: capture, get, clears and hydration against the floor, in one run.

The floor is what BENCHMARK.md defines: a plain ``dict`` of ``deque(maxlen=10)`` with
``dict``-of-``set`` indexes by owner and channel, doing the same per-turn work (two scope
writes per guild turn). Every figure is measured in the same process as its floor.
"""

from __future__ import annotations

import asyncio
import random
import resource
import sqlite3
import tempfile
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any

from ..cache.inprocess import InProcessCache
from ..memory import open as open_memory
from ..memory.facade import Memory
from ..model import Message, Reply, ScopeKey, ScopeMeta
from ..model.config import Config
from ..store.reference import ReferenceStore
from ..store.sqlite import SQLiteStore
from .report import Timing, machine, summarize

__all__ = ["CoreResults", "Workload", "run_core"]

T0 = 1_800_000_000.0


class Workload:
    """The chat-day population: 50 servers × 20 channels, 5,000 users, 2 personas, Zipf(1.1)
    skew from a seeded RNG, 10% of turns in DMs."""

    def __init__(self, seed: int = 42, servers: int = 50, channels: int = 20, users: int = 5000):
        self.rng = random.Random(seed)
        self.servers, self.channels, self.users = servers, channels, users
        self._server_w = list(accumulate(1 / (i + 1) ** 1.1 for i in range(servers)))
        self._channel_w = list(accumulate(1 / (i + 1) ** 1.1 for i in range(channels)))
        self._user_w = list(accumulate(1 / (i + 1) ** 1.1 for i in range(users)))
        self.filler = "lorem ipsum dolor sit amet " * 12

    def _pick(self, n: int, weights: list[float]) -> int:
        return self.rng.choices(range(n), cum_weights=weights)[0]

    def turn(self) -> dict[str, Any]:
        user = f"u{self._pick(self.users, self._user_w)}"
        persona = f"p{self.rng.randrange(2)}"
        if self.rng.random() < 0.1:
            self._regulars: tuple[str, ...] = ()
            return {
                "user_id": user,
                "channel_id": f"dm-{user}",
                "server_id": None,
                "persona_id": persona,
            }
        server = self._pick(self.servers, self._server_w)
        channel = self._pick(self.channels, self._channel_w)
        # Each channel has its own regulars, who speak around the one the bot answers.
        base = server * self.channels + channel
        self._regulars = tuple(f"u{(base * 7919 + 104_729 * i) % self.users}" for i in range(8))
        return {
            "user_id": user,
            "channel_id": f"s{server}c{channel}",
            "server_id": f"s{server}",
            "persona_id": persona,
        }

    def history(self, user: str, now: float) -> list[Message]:
        """The last 9 messages the bot saw in the channel of the last :meth:`turn`, the new
        ~120-char user message among them. In a DM only the user and the bot speak."""
        regulars = getattr(self, "_regulars", ())
        out = []
        for i in range(8):
            text, at = self.filler[: 60 + 20 * (i % 5)], now - 60 * (9 - i)
            if regulars:
                out.append(Message("user", text, author_id=regulars[i], speaker=f"R{i}", at=at))
            elif i % 2:
                out.append(Message("assistant", text, speaker="Tomo", at=at))
            else:
                out.append(Message("user", text, author_id=user, speaker="Ana", at=at))
        out.append(Message("user", self.filler[:120], author_id=user, speaker="Ana", at=now))
        return out

    def reply(self, persona: str) -> Reply:
        return Reply(self.filler[:300], persona_id=persona, persona_name="Tomo")


class Floor:
    """dict + deque(maxlen=10) + dict-of-set indexes: the least any capture could do."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str, str, str | None], deque[Message]] = {}
        self.by_owner: dict[tuple[str, str], set[tuple[str, str, str, str | None]]] = {}
        self.by_channel: dict[str, set[tuple[str, str, str, str | None]]] = {}
        self.written: dict[tuple[str, str, str, str | None], int] = {}
        self._tick = 0

    def write(self, key: tuple[str, str, str, str | None], messages: list[Message]) -> None:
        dq = self.entries.get(key)
        if dq is None:
            dq = self.entries[key] = deque(maxlen=10)
            self.by_owner.setdefault((key[0], key[1]), set()).add(key)
            self.by_channel.setdefault(key[2], set()).add(key)
        dq.clear()
        dq.extend(messages)
        self._tick += 1
        self.written[key] = self._tick

    def context(self, t: dict[str, Any]) -> str:
        """The floor's read: the live deque and the three most recently written other
        channels of the same owner, joined into text."""
        owner = ("server", t["server_id"]) if t["server_id"] else ("user", t["user_id"])
        live = (owner[0], owner[1], t["channel_id"], t["persona_id"])
        parts = [m.content for m in self.entries.get(live, ())]
        others = [k for k in self.by_owner.get(owner, ()) if k[2] != t["channel_id"]]
        others.sort(key=self.written.__getitem__, reverse=True)
        for key in others[:3]:
            parts.extend(m.content for m in self.entries[key])
        return "\n".join(parts)

    def capture(self, t: dict[str, Any], messages: list[Message]) -> None:
        self.write(("user", t["user_id"], t["channel_id"], t["persona_id"]), messages)
        if t["server_id"] is not None:
            self.write(("server", t["server_id"], t["channel_id"], t["persona_id"]), messages)

    def get(self, key: tuple[str, str, str, str | None]) -> deque[Message] | None:
        return self.entries.get(key)

    def clear_channel(self, channel: str) -> int:
        doomed = self.by_channel.pop(channel, set())
        for key in doomed:
            del self.entries[key]
            self.by_owner[(key[0], key[1])].discard(key)
        return len(doomed)


@dataclass
class CoreResults:
    live_entries: int
    timings: dict[str, Timing] = field(default_factory=dict)
    notes: dict[str, float] = field(default_factory=dict)


def _timed(samples: list[int], fn: Callable[..., object], *args: Any) -> None:
    start = time.perf_counter_ns()
    fn(*args)
    samples.append(time.perf_counter_ns() - start)


async def _awaited(samples: list[int], fn: Callable[..., Awaitable[object]], *args: Any) -> None:
    start = time.perf_counter_ns()
    await fn(*args)
    samples.append(time.perf_counter_ns() - start)


async def _measure_size(live: int, ops: int, tmp: Path) -> CoreResults:
    res = CoreResults(live)
    cfg = Config(sweep_interval_s=0, max_entries=live * 2 + 100_000)
    now = T0

    def clock() -> float:
        return now  # frozen: every entry stays live for the whole run

    cache = InProcessCache(
        crude_ttl_s=cfg.crude_ttl_s,
        summary_ttl_s=cfg.summary_ttl_s,
        max_entries=cfg.max_entries,
        max_bytes=cfg.max_bytes,
    )
    floor = Floor()
    work = Workload()

    # Grow both structures to `live` entries (shared message tuples keep RAM modest).
    # Population authors are nobody the workload talks as, so clears measure only their own k.
    shared = tuple(
        Message("user", m.content, author_id=f"pop-{m.author_id}", speaker=m.speaker, at=now)
        for m in work.history("u0", now)
    )
    meta = ScopeMeta(server_id="pop")
    started = time.perf_counter()
    for i in range(live):
        key = ScopeKey.user(f"pop{i}", f"popc{i % 50_000}", None)
        await cache.capture(key, shared, meta, None, now)
        floor.write(key.astuple, list(shared))
    res.notes["populate_s"] = time.perf_counter() - started

    sqlite_store = SQLiteStore(tmp / f"bench-{live}.db")
    await sqlite_store.migrate()
    on_sqlite = Memory(store=sqlite_store, cache=cache, config=cfg, clock=clock)
    in_memory = Memory(store=ReferenceStore(), cache=cache, config=cfg, clock=clock)
    cache.set_complete(True)

    turns = [work.turn() for _ in range(ops)]

    # Each turn's messages are built just before they are captured, as a bot does: timing
    # pre-built lists would measure cache misses on cold objects instead of our code.
    floor_ns: list[int] = []
    for t in turns:
        said = [*work.history(t["user_id"], now), Message("assistant", work.filler[:300], at=now)]
        _timed(floor_ns, floor.capture, t, said)
    res.timings["floor capture"] = summarize("floor capture", floor_ns)

    for name, memory in (
        ("capture (hot tier, memory:// store)", in_memory),
        ("capture (hot tier + SQLite counter)", on_sqlite),
    ):
        samples: list[int] = []
        for t in turns:
            history, reply = work.history(t["user_id"], now), work.reply(t["persona_id"])
            turn = memory.turn(**t)
            start = time.perf_counter_ns()
            await turn.capture(history=history, replies=[reply])
            samples.append(time.perf_counter_ns() - start)
        res.timings[name] = summarize(name, samples)

    floor_ctx: list[int] = []
    ctx_ns: list[int] = []
    for t in turns:
        _timed(floor_ctx, floor.context, t)
        turn = in_memory.turn(**t, user_message="what is the plan?", bot_name="Tomo")
        await _awaited(ctx_ns, turn.context)
    res.timings["floor context"] = summarize("floor context", floor_ctx)
    res.timings["context"] = summarize("context", ctx_ns)

    live_keys = [memory_turn_key(t) for t in turns]
    floor_get: list[int] = []
    for k in live_keys:
        _timed(floor_get, floor.get, k.astuple)
    res.timings["floor get"] = summarize("floor get", floor_get)
    get_ns: list[int] = []
    for k in live_keys:
        await _awaited(get_ns, in_memory.get, k)
    res.timings["get"] = summarize("get", get_ns)

    # Clears touch only the k entries they own: their cost must not depend on `live`.
    users = sorted({t["user_id"] for t in turns})[:200]
    channels = sorted({t["channel_id"] for t in turns})[:200]
    clear_user_ns: list[int] = []
    for u in users:
        await _awaited(clear_user_ns, in_memory.clear_user, u)
    res.timings["clear_user"] = summarize("clear_user", clear_user_ns)
    clear_channel_ns: list[int] = []
    floor_clear_ns: list[int] = []
    for c in channels:
        _timed(floor_clear_ns, floor.clear_channel, c)
        await _awaited(clear_channel_ns, in_memory.clear_channel, c)
    res.timings["floor clear_channel"] = summarize("floor clear_channel", floor_clear_ns)
    res.timings["clear_channel"] = summarize("clear_channel", clear_channel_ns)
    res.notes["entries_after"] = float(cache.stats()["entries"])
    await on_sqlite.flush()  # the write-behind's last batch, before its store closes
    await sqlite_store.close()
    await cache.close()
    return res


def memory_turn_key(t: dict[str, Any]) -> ScopeKey:
    if t["server_id"] is None:
        return ScopeKey.user(t["user_id"], t["channel_id"], t["persona_id"])
    return ScopeKey.server(t["server_id"], t["channel_id"], t["persona_id"])


async def write_hydration_rows(rows: int, tmp: Path) -> Path:
    """A migrated SQLite file holding ``rows`` live summary rows, written straight in."""
    path = tmp / f"hydrate-{rows}.db"
    store = SQLiteStore(path)
    await store.migrate()
    await store.close()
    db = sqlite3.connect(path)
    summary = "a distilled summary of the channel " * 28
    db.executemany(
        "INSERT INTO scopes (kind, owner_id, channel_id, persona_id, server_id, summary, "
        "summary_at, turns_since_refresh, created_at, updated_at) "
        "VALUES ('server', ?, ?, 'p0', ?, ?, ?, 3, ?, ?)",
        ((f"s{i % 500}", f"c{i}", f"s{i % 500}", summary, T0, T0, T0) for i in range(rows)),
    )
    db.commit()
    db.close()
    return path


async def measure_hydration(rows: int, tmp: Path, path: Path | None = None) -> tuple[float, int]:
    """Time open() + hydration of `rows` live summary rows (written first unless `path`
    holds them already)."""
    if path is None:
        path = await write_hydration_rows(rows, tmp)
    cache = InProcessCache(
        crude_ttl_s=43200, summary_ttl_s=86400, max_entries=rows * 2, max_bytes=1 << 40
    )
    started = time.perf_counter()
    memory = await open_memory(
        SQLiteStore(path), cache, config=Config(sweep_interval_s=0), clock=lambda: T0 + 60
    )
    elapsed = time.perf_counter() - started
    hydrated = memory.stats()["hydrated_rows"]
    await memory.close()
    return elapsed, int(hydrated)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def run_core(sizes: list[int], ops: int, hydrate_rows: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {"machine": machine(), "ops": ops, "sizes": {}, "hydration": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for live in sizes:
            res = await _measure_size(live, ops, Path(tmp))
            out["sizes"][live] = res
        for rows in hydrate_rows:
            out["hydration"][rows] = await measure_hydration(rows, Path(tmp))
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def render_core(results: dict[str, Any], command: str) -> str:
    lines = [
        f"Machine: {results['machine']}. Command: `{command}`. "
        f"{results['ops']:,} chat-day turns per size (seed 42); per-operation median and p99 "
        "in µs; the ratio compares medians with the floor measured in the same run.",
        "",
        "| live entries | operation | median µs | p99 µs | × floor |",
        "|---:|---|---:|---:|---:|",
    ]
    for live, res in results["sizes"].items():
        t = res.timings
        rows = [
            ("floor capture", None),
            ("capture (hot tier, memory:// store)", "floor capture"),
            ("capture (hot tier + SQLite counter)", "floor capture"),
            ("floor context", None),
            ("context", "floor context"),
            ("floor get", None),
            ("get", "floor get"),
            ("floor clear_channel", None),
            ("clear_channel", "floor clear_channel"),
            ("clear_user", None),
        ]
        for name, floor in rows:
            timing = t[name]
            ratio = f"{timing.ratio(t[floor]):.2f}" if floor else "—"
            lines.append(
                f"| {live:,} | {name} | {timing.median_us:.2f} | {timing.p99_us:.2f} | {ratio} |"
            )
    lines += ["", "| hydration rows | seconds | rows hydrated |", "|---:|---:|---:|"]
    for rows, (seconds, hydrated) in results["hydration"].items():
        lines.append(f"| {rows:,} | {seconds:.3f} | {hydrated:,} |")
    lines += ["", f"Peak resident memory of the run: {results['peak_rss_mb']:,.0f} MB."]
    return "\n".join(lines)


def main_core(sizes: list[int], ops: int, hydrate_rows: list[int]) -> dict[str, Any]:
    return asyncio.run(run_core(sizes, ops, hydrate_rows))


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


async def measure_memory(entries: int) -> dict[str, float]:
    """Resident bytes per live entry: each entry holds 10 unique messages of 300 characters,
    captured through the hot tier; compared with the raw size of those messages."""
    import gc

    cache = InProcessCache(
        crude_ttl_s=43200, summary_ttl_s=86400, max_entries=entries * 2, max_bytes=1 << 50
    )
    meta = ScopeMeta(server_id="mem")
    gc.collect()
    before = _rss_bytes()
    raw = 0
    for i in range(entries):
        messages = tuple(
            Message(
                "user",
                f"{i:>10}-{j}-" + "x" * (300 - 14),
                author_id=f"user{(i + j) % 5000}",
                speaker=f"Speaker {(i + j) % 5000}",
                at=T0,
            )
            for j in range(10)
        )
        raw += sum(len(m.content) for m in messages)
        await cache.capture(ScopeKey.server(f"s{i % 50}", f"c{i}", "p0"), messages, meta, None, T0)
    gc.collect()
    used = _rss_bytes() - before
    stats = cache.stats()
    await cache.close()
    return {
        "entries": float(entries),
        "rss_bytes_per_entry": used / entries,
        "raw_bytes_per_entry": raw / entries,
        "ratio": used / raw,
        "tier_estimate_per_entry": stats["bytes"] / entries,
    }
