"""A writer is SIGKILLed at a random moment; every acknowledged write must survive."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import shortterm
from shortterm import ScopeKey
from shortterm.store.sqlite import SQLiteStore

WRITER = r"""
import asyncio, sys
import shortterm
from shortterm import ScopeKey, Message, Reply

async def main(url):
    async with shortterm.open(store=url, config=shortterm.Config(sweep_interval_s=0)) as memory:
        i = 0
        while True:
            key = ScopeKey.server("g", f"c{i % 10}")
            await memory.set_summary(key, f"v{i}")
            turn = memory.turn(user_id="u", channel_id=f"c{i % 10}", server_id="g")
            await turn.capture(history=[Message("user", "x", author_id="u")], replies=[Reply("y")])
            print(i, flush=True)   # printed only after both writes returned
            i += 1

asyncio.run(main(sys.argv[1]))
"""


def run_and_kill(url: str, seconds: float) -> list[int]:
    acked: list[int] = []
    with subprocess.Popen(
        [sys.executable, "-c", WRITER, url],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ) as proc:
        assert proc.stdout is not None
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            acked.append(int(line))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        acked.extend(int(x) for x in proc.stdout.read().split())
    return acked


def test_acknowledged_writes_survive_sigkill(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    url = f"sqlite:///{db}"
    rng = random.Random(7)
    total_acked = 0
    for rounds in range(1, 6):
        acked = run_and_kill(url, rng.uniform(0.6, 1.2))
        assert acked, "the writer acknowledged nothing before it was killed"
        total_acked += len(acked)

        async def check(acked: list[int] = acked, rounds: int = rounds) -> None:
            store = SQLiteStore(db)
            assert store.integrity_check() == "ok"
            await store.migrate()
            last = max(acked)
            for channel in range(10):
                done = [i for i in acked if i % 10 == channel]
                if not done:
                    continue
                row = await store.load(ScopeKey.server("g", f"c{channel}"))
                assert row is not None and row.summary is not None
                version = int(row.summary[1:])
                # the last acknowledged value, or one written just before the kill
                assert max(done) <= version <= last + 1
                # Every set_summary flushes the buffered captures (write-behind), so a kill
                # loses at most the one capture after the last of them, once per round.
                assert row.turns_since_refresh >= len(done) - rounds
            await store.close()

        asyncio.run(check())
    assert total_acked >= 5


async def test_reopening_after_a_crash_hydrates(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    run_and_kill(url, 0.8)
    async with shortterm.open(store=url, config=shortterm.Config(sweep_interval_s=0)) as memory:
        assert memory.stats()["hydrated_rows"] >= 1
