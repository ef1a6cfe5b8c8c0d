"""The round trips a sidecar route costs, counted on the wire: what `benchmarks/round_trips.py`
measures, held here for the steady state (the median request of each route; a scope's first
turn costs more, and is left to the mean the benchmark reports).

One node: a start reads the owner's directory with the records it listed last time and
registers the turn in one pipeline; a tool call reads the turn (taking the upgrade guard) and
mirrors its rows with the guard's release; a capture claims the turn and writes with its end.
On a cluster of three masters a start reaches every node holding the owner's records (one
round trip to each, in parallel); a write of a new scope also lists it in its owner's
directory, in the owner's slot, which is often on another node.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

from tests.cluster_support import require_redis_server
from tests.support import service_url

ROOT = Path(__file__).resolve().parents[2]


def _medians(tmp_path: Path, *where: str) -> dict[str, float]:
    out = tmp_path / "counts.json"
    pg = service_url("SHORTTERM_TEST_POSTGRES_URL", "PostgreSQL")
    command = [sys.executable, "benchmarks/round_trips.py", "--postgres", pg, *where]
    done = subprocess.run(
        [*command, "--turns", "160", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {name: statistics.median(counts) for name, counts in json.loads(out.read_text()).items()}


def test_each_route_costs_its_minimum_on_one_redis(tmp_path: Path) -> None:
    redis = service_url("SHORTTERM_TEST_REDIS_URL", "Redis")
    seen = _medians(tmp_path, "--redis", redis)
    assert seen == {
        "start turn pg": 0,
        "start turn redis": 1,
        "tool call pg": 1,
        "tool call redis": 2,
        "capture pg": 1,
        "capture redis": 2,
    }


def test_each_route_costs_its_minimum_on_a_cluster(tmp_path: Path) -> None:
    require_redis_server()
    seen = _medians(tmp_path, "--cluster")
    assert seen["start turn pg"] == 0 and seen["start turn redis"] <= 3  # one per node
    assert seen["tool call pg"] == 1 and seen["tool call redis"] <= 3
    # A capture is 2 once its scopes are listed; a new scope's listing in its owner directory
    # (the owner's slot, often another node) is one more, and this workload's users rarely
    # come back to the same channel within the run.
    assert seen["capture pg"] == 1 and seen["capture redis"] <= 3
