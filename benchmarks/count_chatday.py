"""Instructions per chat-day operation against the floor, for figures no machine load moves.

The workload of ``shortterm bench`` (``bench.core.Workload``): 50 servers × 20 channels, 5,000
users, nine messages of history. 2,000 turns are captured first (by shortterm, or by the floor
for the floor phases); then ``--ops`` operations of one phase run: ``ctx`` (``turn.context()``),
``cap`` (``turn.capture`` on the in-process tier with the ``memory://`` store), ``capsql``
(the same on a SQLite file, the embedded default, with its write-behind), ``floorctx``,
``floorcap``, or ``hist`` (building the messages only, which the capture phases include). Run
each phase under callgrind with N and 2N operations; the difference divided by N is one
operation, start-up and population cancelled out::

    for n in 1000 2000; do
        valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
            python benchmarks/count_chatday.py ctx --ops $n 2>&1 | grep refs
    done

Subtract ``hist`` from ``cap`` and ``floorcap`` to compare the captures themselves.
``--forgotten N`` clears N other channels and purges N other users before the phase.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from shortterm.bench.core import T0, Floor, Workload
from shortterm.cache.inprocess import InProcessCache
from shortterm.memory import open as open_memory
from shortterm.memory.facade import Memory
from shortterm.model import Message
from shortterm.model.config import Config
from shortterm.store.reference import ReferenceStore
from shortterm.store.sqlite import SQLiteStore

PHASES = ("ctx", "cap", "capsql", "floorctx", "floorcap", "hist")


async def main(phase: str, ops: int, forgotten: int = 0, population: int = 2000) -> None:
    cfg = Config(sweep_interval_s=0)
    cache = InProcessCache(
        crude_ttl_s=cfg.crude_ttl_s,
        summary_ttl_s=cfg.summary_ttl_s,
        max_entries=cfg.max_entries,
        max_bytes=cfg.max_bytes,
    )
    if phase == "capsql":
        tmp = tempfile.TemporaryDirectory()
        store = SQLiteStore(Path(tmp.name) / "count.db")
        memory = await open_memory(store, cache, config=cfg, clock=lambda: T0)
    else:
        memory = Memory(store=ReferenceStore(), cache=cache, config=cfg, clock=lambda: T0)
        cache.set_complete(True)
    work, floor = Workload(), Floor()
    plan = [work.turn() for _ in range(population)]
    for t in plan:
        history, reply = work.history(t["user_id"], T0), work.reply(t["persona_id"])
        if phase.startswith("floor"):
            floor.capture(t, [*history, Message("assistant", reply.text, at=T0)])
        else:
            await memory.turn(**t).capture(history=history, replies=[reply])
    for i in range(forgotten):  # horizons of channels and users this workload never meets
        await memory.clear_channel(f"gone-{i}")
        await memory.clear_user(f"gone-user-{i}")
    for i in range(ops):
        if phase == "floorctx":
            floor.context(plan[i % population])
            continue
        if phase == "ctx":
            t = plan[i % population]
            await memory.turn(**t, user_message="what is the plan?", bot_name="Tomo").context()
            continue
        t = work.turn()
        history, reply = work.history(t["user_id"], T0), work.reply(t["persona_id"])
        if phase == "hist":
            [*history, Message("assistant", reply.text, at=T0)]
        elif phase == "floorcap":
            floor.capture(t, [*history, Message("assistant", reply.text, at=T0)])
        else:
            await memory.turn(**t).capture(history=history, replies=[reply])
    await memory.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("phase", choices=PHASES)
    parser.add_argument("--ops", type=int, default=1000)
    parser.add_argument(
        "--forgotten",
        type=int,
        default=0,
        help="clear this many other channels and purge as many other users first, so every "
        "capture checks the forgets' horizons (the steady state once anything was forgotten)",
    )
    args = parser.parse_args()
    asyncio.run(main(args.phase, args.ops, args.forgotten))
