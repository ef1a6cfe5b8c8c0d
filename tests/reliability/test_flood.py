"""A flood of distinct scopes stays inside the hot tier's ceilings, in the tier's own estimate
and in resident memory. The million-scope run is ``benchmarks/bench_flood.py`` (about 20 s
per path); here the same script runs smaller floods in a fresh process, so that RSS is its
own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from shortterm import ScopeKey
from shortterm.cache.inprocess import InProcessCache
from shortterm.store.base import ScopeMeta
from tests.support import T0

ROOT = Path(__file__).resolve().parents[2]


def flood(*args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_flood.py"), *args],
        capture_output=True, text=True, check=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def test_resident_memory_stops_growing_once_the_tier_is_full() -> None:
    small = flood("--path", "cache", "--scopes", "40000", "--max-entries", "10000")
    large = flood("--path", "cache", "--scopes", "200000", "--max-entries", "10000")
    for run in (small, large):
        assert run["entries"] == 10000 and run["tier_bytes"] <= run["max_bytes"]
        assert run["evictions"] == run["scopes"] - run["entries"]
    # Five times the scopes through the same ceiling: resident memory may not follow.
    assert large["rss_growth_mib"] <= small["rss_growth_mib"] * 1.25 + 4, (small, large)


def test_the_byte_ceiling_binds_through_the_public_capture_path() -> None:
    run = flood(
        "--path", "capture", "--scopes", "20000", "--max-entries", "1000000",
        "--max-bytes", str(8 << 20),
    )  # fmt: skip
    assert run["tier_bytes"] <= 8 << 20 and run["evictions"] == run["scopes"] - run["entries"]
    assert run["rss_growth_mib"] < 8 * 3 + 16


def test_evicted_owners_are_tracked_within_a_bound_and_still_read_back() -> None:
    cache = InProcessCache(crude_ttl_s=100, summary_ttl_s=100, max_entries=10, max_bytes=1 << 30)
    cache.set_complete(True)  # as after a full hydration
    meta = ScopeMeta()

    async def run() -> None:
        for i in range(5000):
            await cache.capture(ScopeKey.user(f"u{i}", "c"), (), meta, None, T0)
        # The first owners were evicted: they must read as incomplete (re-read them)...
        _, complete = await cache.owner_entries("user", "u0", T0)
        assert not complete
        await cache.mark_complete("user", "u0")
        _, complete = await cache.owner_entries("user", "u0", T0)
        assert complete  # ...and complete again once the facade re-read them
        tracked = len(cache._incomplete) + len(cache._complete_owners)
        assert tracked <= 10 + 1024  # not one record per owner that ever passed through

    import asyncio

    asyncio.run(run())
