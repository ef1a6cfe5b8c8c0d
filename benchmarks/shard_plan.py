"""What sharding the durable tier by channel group would cost: a simulation over the chat-day turns.

Run on demand (not part of the test suite)::

    .venv/bin/python benchmarks/shard_plan.py                 # print the table
    .venv/bin/python benchmarks/shard_plan.py --write docs/benchmarks.md

Past one PostgreSQL primary, the natural shard key is the one the Redis Cluster layout already
uses: the channel's group (``crc32(channel) mod G``), each of S databases holding the groups
``g mod S == s`` with its own journal and forget fence. This script replays ``--turns``
chat-day turns (``shortterm.bench.core``, seed 42) and counts, for S = 1, 2, 4, 8, how many
databases each kind of operation must reach:

* a capture, a tool call and a same-channel read reach one (both scopes share the channel);
* other-channel recall of an owner the hot tier does not hold reaches every database that holds
  one of the owner's channels seen so far (mean and worst over the turns);
* a user's purge and a privacy choice reach all S (the fence of every shard must hold the
  tombstone before anything is evicted); a channel clear reaches one;
* every process follows S journals (one LISTEN connection and one position each).

Nothing is timed: the figures are counts, so they hold on any machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from shortterm.bench.core import Workload
from shortterm.bench.report import publish
from shortterm.cache.redis.layout import DEFAULT_GROUPS, Layout

SECTION = "Past one PostgreSQL primary (simulated)"
SHARDS = (1, 2, 4, 8)


def simulate(turns: int, shards: int, groups: int) -> dict[str, tuple[float, int]]:
    """Per owner kind, the databases a cold owner-wide read reaches: mean and worst."""
    layout = Layout("p:", groups)
    work = Workload()
    held: dict[tuple[str, str], set[int]] = {}
    reached: dict[str, list[int]] = {"user": [], "server": []}
    for _ in range(turns):
        t = work.turn()
        shard = layout.group_of(t["channel_id"]) % shards
        owners = [("user", t["user_id"])]
        if t["server_id"]:
            owners.append(("server", t["server_id"]))
        for owner in owners:
            seen = held.setdefault(owner, set())
            reached[owner[0]].append(len(seen | {shard}))
            seen.add(shard)
    return {kind: (statistics.fmean(n), max(n)) for kind, n in reached.items()}


def table(turns: int, groups: int) -> str:
    rows = [
        "| databases S | capture, tool call, same-channel read | other-channel recall, cold "
        "user (mean / worst) | the same, cold server | purge, privacy choice | journals each "
        "process follows |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for s in SHARDS:
        r = simulate(turns, s, groups)
        (um, uw), (sm, sw) = r["user"], r["server"]
        rows.append(f"| {s} | 1 | {um:.2f} / {uw} | {sm:.2f} / {sw} | {s} | {s} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=20_000)
    parser.add_argument("--groups", type=int, default=DEFAULT_GROUPS)
    parser.add_argument("--write", default=None, help="markdown file to update")
    args = parser.parse_args(argv)
    shown = ["benchmarks/shard_plan.py", *(argv if argv is not None else sys.argv[1:])]
    text = (
        f"Command: `python {' '.join(shown)}`. {args.turns:,} chat-day turns (seed 42), "
        f"G = {args.groups} channel groups spread over S databases (group mod S); counts of "
        "databases an operation reaches, see the script's docstring.\n\n"
        + table(args.turns, args.groups)
    )
    publish(text, args.write, SECTION)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
