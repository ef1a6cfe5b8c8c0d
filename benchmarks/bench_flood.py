"""A flood of distinct scopes against the hot tier's ceilings: resident memory must stay
bounded by ``max_entries`` / ``max_bytes`` however many scopes pass through.

Two paths:

* ``cache``: ``InProcessCache.capture`` directly (what a capture does to the tier), fast
  enough for a million scopes in seconds;
* ``capture``: ``turn.capture`` through the public API, one DM turn per new user (one scope
  each), with a SQLite store in a temporary folder (``memory://`` would keep every row in
  the process, which is a durable tier, not the bounded one under test).

Every scope gets its own user id and three messages of about 100 characters of their own, so
nothing is shared between scopes. Reported: the tier's byte estimate and entries, evictions,
resident memory (RSS) before and after the flood and its peak, and the run time. One JSON
object is printed.

    python benchmarks/bench_flood.py --path cache --scopes 1000000
    python benchmarks/bench_flood.py --path capture --scopes 1000000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import sys
import tempfile
import time
from typing import Any

import shortterm
from shortterm import Message, Reply, ScopeKey
from shortterm.cache.inprocess import InProcessCache
from shortterm.store.base import ScopeMeta

T0 = 1_800_000_000.0
META = ScopeMeta()


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def messages(i: int) -> tuple[Message, ...]:
    return tuple(
        Message("user", f"message {n} of scope {i}: " + "x" * 80, author_id=f"user-{i}", at=T0)
        for n in range(3)
    )


async def flood_cache(scopes: int, max_entries: int, max_bytes: int) -> dict[str, Any]:
    cache = InProcessCache(
        crude_ttl_s=43200, summary_ttl_s=86400, max_entries=max_entries, max_bytes=max_bytes
    )
    before = rss_bytes()
    started = time.perf_counter()
    for i in range(scopes):
        await cache.capture(ScopeKey.user(f"user-{i}", "c1"), messages(i), META, None, T0)
    elapsed = time.perf_counter() - started
    gc.collect()
    return {"before": before, "elapsed_s": elapsed, "stats": cache.stats(), "tier": cache}


async def flood_capture(scopes: int, max_entries: int, max_bytes: int) -> dict[str, Any]:
    config = shortterm.Config(sweep_interval_s=0, max_entries=max_entries, max_bytes=max_bytes)
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/flood.db"
        async with shortterm.open(store=url, config=config, clock=lambda: T0) as memory:
            before = rss_bytes()
            started = time.perf_counter()
            for i in range(scopes):
                turn = memory.turn(user_id=f"user-{i}", channel_id="dm")
                await turn.capture(history=list(messages(i)), replies=[Reply("ok " * 30)])
            elapsed = time.perf_counter() - started
            gc.collect()
            stats = memory.stats()
            return {"before": before, "elapsed_s": elapsed, "stats": stats, "tier": memory.cache}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", choices=("cache", "capture"), default="cache")
    parser.add_argument("--scopes", type=int, default=1_000_000)
    parser.add_argument("--max-entries", type=int, default=50_000)
    parser.add_argument("--max-bytes", type=int, default=64 << 20)
    args = parser.parse_args()
    run = flood_cache if args.path == "cache" else flood_capture
    result = asyncio.run(run(args.scopes, args.max_entries, args.max_bytes))
    after = rss_bytes()
    stats = result["stats"]
    tier = result["tier"]
    out = {
        "path": args.path,
        "scopes": args.scopes,
        "max_entries": args.max_entries,
        "max_bytes": args.max_bytes,
        "entries": stats["entries"],
        "tier_bytes": stats["bytes"],
        "evictions": stats["evictions"],
        "rss_before_mib": round(result["before"] / 2**20, 1),
        "rss_after_mib": round(after / 2**20, 1),
        "rss_growth_mib": round((after - result["before"]) / 2**20, 1),
        "rss_peak_mib": round(peak_rss_bytes() / 2**20, 1),
        "owners_tracked_incomplete": len(getattr(tier, "_incomplete", ())),
        "elapsed_s": round(result["elapsed_s"], 2),
        "scopes_per_s": round(args.scopes / result["elapsed_s"]),
        "python": sys.version.split()[0],
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
