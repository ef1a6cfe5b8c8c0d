"""Forgets hold when the journal is pruned, and while a process is degraded.

- The janitor never shortens the journal's retention (whatever ``retention_days``), and a
  process whose position is older than what was pruned (a forget journaled "eight days ago",
  then pruned at once) learns of the gap on its next call and drops what it cannot prove:
  100 rounds per durable backend, a bot process and an admin process, random retentions.
- A write that began before a prune is refused (its fence rows may be gone).
- A process that saw the durable tier fail once (a locked SQLite file, a PostgreSQL table
  locked past the operation's bound) still follows the journal before it answers: another
  process's clear is honoured by its next read, without a write of its own succeeding first.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import time
import uuid
from pathlib import Path

import psycopg
import pytest

import shortterm
from shortterm import ScopeKey
from shortterm.memory.rules import DistilledPlan
from shortterm.model import DistilledWrite
from shortterm.model.fence import WriteFence
from tests.support import drop_postgres_schema, service_url, with_query
from tests.workers import Worker

ROUNDS = 100
OLD_S = 8 * 86400.0  # older than the journal's retention (7 days)
NOTIFY_S = 0.2  # PostgreSQL + in-process: a NOTIFY in flight (docs/design.md, "Following")


async def _worker(store_url: str, *extra: str) -> Worker:
    return await Worker.start("tests.reliability.edge_worker", store_url, "memory://", *extra)


async def test_pruning_the_journal_never_undoes_a_forget(store_url: str) -> None:
    bot, admin = await _worker(store_url), await _worker(store_url)
    rng = random.Random(27)
    stale: list[str] = []
    try:
        for i in range(ROUNDS):
            channel, said, summary = f"c{i}", f"said-{i}-x", f"summary-{i}-x"
            turn = {"user": "u1", "channel": channel, "server": "g1"}
            await bot.call("capture", text=said, summary=summary, **turn)
            assert summary in await bot.call("get", **turn)
            # Half the clears look older than the retention: the prune then deletes them
            # before the bot has read them.
            old = rng.random() < 0.5
            await admin.call("shift", seconds=-OLD_S if old else 0.0)
            await admin.call("clear_channel", channel=channel)
            await admin.call("janitor", days=rng.choice([0, 0, 1, 30]))
            if store_url.startswith("postgresql"):
                await asyncio.sleep(NOTIFY_S)  # the documented window of a NOTIFY in flight
            shown = await bot.call("get", **turn)
            shown += await bot.call("context", user="u1", channel=f"other{i}", server="g1")
            if said in shown or summary in shown:
                stale.append(f"round {i} (old={old})")
        gaps = (await bot.call("stats"))["gaps"]
    finally:
        await bot.stop()
        await admin.stop()
    print(f"\n{len(stale)} of {ROUNDS} rounds served a cleared channel; {gaps} gaps met")
    assert stale == []
    assert gaps > 0  # the pruned half went through the gap path


async def test_a_write_that_began_before_a_prune_is_refused(store_url: str) -> None:
    key = ScopeKey.user("u1", "c1", "p1")
    async with shortterm.open(store=store_url) as writer:
        fence = WriteFence(writer.journal.head, "u1")  # the write begins here...

        def old() -> float:
            return time.time() - OLD_S

        async with shortterm.open(store=store_url, clock=old) as admin:
            await admin.clear_channel("c1")  # ...a forget overtakes it, and is pruned at once
            await admin.janitor(retention_days=0)
        change = DistilledWrite(summary="from before the forget", set_summary=True)
        rows = await writer.write(DistilledPlan([(key, None)], change, None), fence=fence)
        assert rows == []
        assert await writer.find_rows(channel_id="c1") == []


async def test_a_process_paused_longer_than_the_ttls_serves_nothing_expired(
    store_url: str,
) -> None:
    """SIGSTOP longer than both TTLs (1 s here): the first read after SIGCONT finds nothing
    live, although no sweep ran while the process was stopped."""
    bot = await _worker(store_url, "50", "1")
    turn = {"user": "u1", "channel": "c1", "server": "g1"}
    try:
        await bot.call("capture", text="said-x", summary="kept-x", **turn)
        assert "kept-x" in await bot.call("get", **turn)
        os.kill(bot.proc.pid, signal.SIGSTOP)
        await asyncio.sleep(1.5)
        os.kill(bot.proc.pid, signal.SIGCONT)
        assert await bot.call("get", **turn) == ""
        assert "x" not in await bot.call("context", user="u1", channel="c2", server="g1")
    finally:
        await bot.stop()


# -- a degraded process ------------------------------------------------------------------


async def _stale_reads_after_clear(bot: Worker, clearer: Worker, channel: str, text: str) -> int:
    await clearer.call("clear_channel", channel=channel)
    stale = 0
    for _ in range(10):
        if text in await bot.call("get", user="u1", channel=channel, server="g1"):
            stale += 1
        await asyncio.sleep(0.02)
    return stale


@pytest.mark.parametrize("write_behind_ms", ["0", "50"])
async def test_a_degraded_sqlite_process_still_follows(
    tmp_path: Path, write_behind_ms: str
) -> None:
    """With write-through captures, the capture fails on the locked file; with the
    write-behind, the capture's buffered flush fails, then another process clears: a failed
    flush followed by a forget brings nothing back, in the hot tier or in the rows."""
    path = tmp_path / "shared.db"
    bot = await _worker(f"sqlite:///{path}?busy_timeout_ms=50", write_behind_ms)
    clearer = await _worker(f"sqlite:///{path}")
    stale = []
    try:
        for i in range(4):
            turn = {"user": "u1", "channel": f"c{i}", "server": "g1"}
            await bot.call("capture", text="hello", summary=f"kept-{i}-x", **turn)
            locker = sqlite3.connect(path, isolation_level=None)
            locker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
            await bot.call("capture", text="again", **turn)
            await asyncio.sleep(0.3)  # the write-behind's window passes; its flush fails
            assert (await bot.call("stats"))["degraded"]
            locker.execute("ROLLBACK")
            locker.close()
            stale.append(await _stale_reads_after_clear(bot, clearer, f"c{i}", f"kept-{i}-x"))
        async with shortterm.open(store=f"sqlite:///{path}") as reader:
            assert await reader.find_rows(user_id="u1") == []
    finally:
        await bot.stop()
        await clearer.stop()
    print(f"\nstale reads after the clear, per round: {stale}")
    assert stale == [0, 0, 0, 0]


async def test_a_degraded_postgres_process_still_follows() -> None:
    """The bot's capture waits on a table another session holds locked until its operation's
    bound, so the bot knows the durable tier failed (a read that meets a dropped connection
    is retried at once, so a terminated backend no longer degrades it); the lock goes, and
    another process clears the channel: the bot's next read does not serve it."""
    pg_url = service_url("SHORTTERM_TEST_POSTGRES_URL", "PostgreSQL")
    schema = f"t_{uuid.uuid4().hex[:16]}"
    store = with_query(pg_url, schema=schema)
    bot = await _worker(with_query(store, operation_timeout_s=0.5))
    clearer = await _worker(store)
    stale = []
    try:
        for i in range(3):
            turn = {"user": "u1", "channel": f"c{i}", "server": "g1"}
            await bot.call("capture", text="hello", summary=f"kept-{i}-x", **turn)
            async with await psycopg.AsyncConnection.connect(pg_url) as admin:
                await admin.execute(f'LOCK TABLE "{schema}".scopes IN ACCESS EXCLUSIVE MODE')
                await bot.call("capture", text="again", user="u1", channel=f"d{i}", server="g1")
                await admin.rollback()  # the lock goes: PostgreSQL answers again
            assert (await bot.call("stats"))["degraded"]
            stale.append(await _stale_reads_after_clear(bot, clearer, f"c{i}", f"kept-{i}-x"))
    finally:
        await bot.stop()
        await clearer.stop()
        await drop_postgres_schema(pg_url, schema)
    print(f"\nstale reads after the clear, per round: {stale}")
    assert stale == [0, 0, 0]
