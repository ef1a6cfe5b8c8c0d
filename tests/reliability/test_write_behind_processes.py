"""Write-behind across real OS processes on one SQLite file.

A bot process captures in one channel with the write-behind on while this test clears that
channel again and again through the CLI (``python -m shortterm.cli clear channel``), another
process. After the last clear returned, the bot's later flushes must never bring back what it
covered: once the bot closed (its last flush), the channel's durable counter counts exactly the
captures whose fence position is at or after the last clear's journal entry. The last clear
lands while one of the bot's captures is held unflushed (see write_behind_bot.py), so there is
always a step it must refuse: an unfenced flush (``unfenced``, a deliberate break) counts it, in
every run.

A SIGKILL with buffered touches: every acknowledged tool call survives, and at most the
buffered captures' counter steps (one turn bound's worth) are lost.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from shortterm import ScopeKey
from shortterm.store.sqlite import SQLiteStore

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
LIVE = ("server", "g", "c")


class Bot:
    """The bot process; its output goes to a file (read once it exited), so no pipe can
    fill up or be read half."""

    def __init__(self, db: Path, mode: str, window_ms: int, turns: int, *extra: str) -> None:
        self.out = db.with_suffix(".out")
        args = [f"sqlite:///{db}", mode, str(window_ms), str(turns), *extra]
        with self.out.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.reliability.write_behind_bot", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=ENV,
                cwd=ROOT,
            )
        deadline = time.monotonic() + 30
        while not self.out.read_text().startswith("ready"):
            assert time.monotonic() < deadline and self.proc.poll() is None, self.out.read_text()
            time.sleep(0.01)

    def lines(self) -> list[str]:
        return self.out.read_text().splitlines()

    def wait_for(self, seen: Callable[[list[str]], bool]) -> None:
        deadline = time.monotonic() + 30
        while not seen(self.lines()):
            assert time.monotonic() < deadline and self.proc.poll() is None, self.lines()[-5:]
            time.sleep(0.01)


def _positions(lines: list[str]) -> list[int]:
    """The fence positions of the bot's captures, in order."""
    return [int(x.split()[1]) for x in lines if x.startswith("capture")]


def durable(db: Path) -> tuple[int | None, int]:
    """The live scope's durable counter (None: no row) and the journal's last sequence."""
    conn = sqlite3.connect(db)
    try:
        row = conn.execute(
            "SELECT turns_since_refresh FROM scopes "
            "WHERE kind = ? AND owner_id = ? AND channel_id = ?",
            LIVE,
        ).fetchone()
        seq = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM journal").fetchone()[0]
    finally:
        conn.close()
    return (None if row is None else int(row[0])), int(seq)


def clear_channel(url: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "shortterm.cli", "clear", "channel", "c", "--store", url, "--yes"],
        check=True,
        env=ENV,
        cwd=ROOT,
        capture_output=True,
    )


def run_clears(db: Path, clears: int, *extra: str) -> tuple[int, int, int]:
    """Returns (durable counter, captures at or after the last clear, captures before it)."""
    url = f"sqlite:///{db}"
    # A long window and bound: the bot's buffer holds many captures when a clear lands.
    bot = Bot(db, "capture", 30, 64, *extra)
    rng = random.Random(11)
    hold = Path(f"{db}.hold")
    try:
        for _ in range(clears - 1):
            time.sleep(rng.uniform(0.02, 0.08))
            clear_channel(url)
        hold.touch()  # the last clear lands between a capture and its flush
        bot.wait_for(lambda lines: "held" in lines)
        clear_channel(url)
        last_seq = durable(db)[1]
        hold.unlink()
        # The bot captures on after the last clear too: one such capture at least.
        bot.wait_for(lambda lines: any(p >= last_seq for p in _positions(lines)))
    finally:
        Path(f"{db}.stop").touch()
        hold.unlink(missing_ok=True)
        bot.proc.wait(timeout=60)
    lines = bot.lines()
    assert lines and lines[-1] == "closed", (bot.proc.returncode, lines[-5:])
    positions = _positions(lines)
    after = sum(p >= last_seq for p in positions)
    counter, _ = durable(db)
    return counter or 0, after, len(positions) - after


def test_a_clear_in_another_process_is_never_undone_by_the_bots_flushes(tmp_path: Path) -> None:
    counter, after, before = run_clears(tmp_path / "x.db", 12)
    print(f"\n{before} captures began before the last clear, {after} after; counter {counter}")
    assert before > 0 and after > 0
    assert counter == after


def test_the_processes_catch_an_unfenced_flush(tmp_path: Path) -> None:
    counter, after, _ = run_clears(tmp_path / "b.db", 12, "unfenced")
    print(f"\nunfenced flush: counter {counter}, captures after the last clear {after}")
    assert counter > after


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sigkill_loses_at_most_the_buffered_steps_never_a_tool_call(
    tmp_path: Path, seed: int
) -> None:
    db = tmp_path / "k.db"
    turns = 8
    bot = Bot(db, "tool", 10_000, turns)  # only the turn bound flushes
    time.sleep(random.Random(seed).uniform(0.3, 0.8))
    bot.proc.send_signal(signal.SIGKILL)
    bot.proc.wait()
    lines = bot.lines()
    tools = [int(x.split()[1]) for x in lines if x.startswith("tool")]
    assert tools, "no tool call was acknowledged before the kill"
    last_tool = tools[-1]
    # Captures acknowledged after the last acknowledged tool call (which reset the counter).
    idx = lines.index(f"tool {last_tool}")
    since = sum(x.startswith("capture") for x in lines[idx + 1 :])

    async def check() -> tuple[str | None, int]:
        store = SQLiteStore(db)
        assert store.integrity_check() == "ok"
        row = await store.load(ScopeKey.server("g", "c"))
        await store.close()
        assert row is not None and row.summary is not None
        return row.summary, row.turns_since_refresh

    summary, counter = asyncio.run(check())
    version = int(summary[1:])
    # The last acknowledged summary, or the one in flight at the kill (five turns later).
    assert version in (last_tool, last_tool + 5), (version, last_tool)
    if version == last_tool:
        # Steps since the reset: never more than acknowledged (+1 in flight), and at most
        # one turn bound's worth lost (the buffer at the kill).
        assert since - turns <= counter <= since + 1, (counter, since)
    print(f"\nkilled after {len(tools)} tool calls; counter {counter} of {since} steps since")
