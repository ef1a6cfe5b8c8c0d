"""Instructions per operation of the facade's hot paths, for a figure no machine load moves.

Runs ``--turns`` operations of one kind through ``shortterm`` on SQLite + the in-process
tier (the embedded default): ``capture`` (``turn.capture`` of a 10-message history),
``context`` (``turn.context()`` beside 50 other channels' memory) or ``tool`` (``call_tool``
with a summary). Run it under callgrind twice, with N and 2N turns; the difference of the two
totals divided by N is the cost of one operation, with start-up cancelled out::

    for n in 2000 4000; do
        valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
            python benchmarks/count_instructions.py --op capture --turns $n 2>&1 | grep refs
    done

Timing on a shared machine varies with its load; instruction counts do not, so this is
how a change to a hot path is compared before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

import shortterm

G = "g1"


async def main(op: str, turns: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = shortterm.Config(sweep_interval_s=0)
        store = f"sqlite:///{Path(tmp) / 'count.db'}"
        async with shortterm.open(store, config=config) as memory:
            history = [
                shortterm.Message("user", f"message {i} about the trip", author_id=f"u{i % 3}")
                for i in range(10)
            ]
            for c in range(50):  # other channels' memory for the context to gather
                t = memory.turn(user_id="u0", channel_id=f"other{c}", server_id=G)
                await t.capture(history, [shortterm.Reply("noted")])
                await t.call_tool("update_short_term_memory", {"summary": f"plans {c}"})
            for i in range(turns):
                turn = memory.turn(user_id=f"u{i % 3}", channel_id=f"c{i % 20}", server_id=G)
                if op == "capture":
                    await turn.capture(history, [shortterm.Reply("a reply")])
                elif op == "context":
                    await turn.context()
                else:
                    await turn.call_tool("update_short_term_memory", {"summary": f"s{i}"})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", choices=("capture", "context", "tool"), required=True)
    parser.add_argument("--turns", type=int, default=2000)
    args = parser.parse_args()
    asyncio.run(main(args.op, args.turns))
