"""The per-call check for other processes' commits on SQLite: cheap, and never wrong."""

from __future__ import annotations

import asyncio
import random
import sys
import textwrap
from pathlib import Path

from shortterm.model import ScopeKey, ScopeMeta
from shortterm.store.sqlite import SQLiteStore

# Another process that commits to the same file each time it is asked, and says when done.
_COMMITTER = textwrap.dedent(
    """
    import sqlite3, sys
    db = sqlite3.connect(sys.argv[1], isolation_level=None)
    db.execute("PRAGMA busy_timeout=5000")
    for line in sys.stdin:
        if line.strip() == "truncate":
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        else:
            db.execute("INSERT INTO journal (kind, at) VALUES ('user_settings', 0)")
        print("done", flush=True)
    """
)


async def test_a_commit_by_another_process_is_always_seen_and_our_own_never(
    tmp_path: Path,
) -> None:
    path = tmp_path / "watch.db"
    store = SQLiteStore(path)
    await store.migrate()
    other = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _COMMITTER,
        str(path),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert other.stdin is not None and other.stdout is not None
    rng = random.Random(7)
    store.journal_moved()  # take the current state as seen
    missed = spurious = 0
    try:
        for i in range(400):
            step = rng.choice(["foreign", "foreign", "own", "own", "truncate", "idle"])
            if step in ("foreign", "truncate"):
                other.stdin.write(b"truncate\n" if step == "truncate" else b"commit\n")
                await other.stdin.drain()
                assert (await other.stdout.readline()).strip() == b"done"
            elif step == "own":
                key = ScopeKey.server("g", f"c{i}", None)
                await store.touch([(key, ScopeMeta(server_id="g"))], increment=key, now=1.0)
            moved = store.journal_moved()
            if step == "foreign" and not moved:
                missed += 1
            if step in ("own", "idle") and moved:
                spurious += 1
            assert store.journal_moved() is False  # nothing happened since the last look
    finally:
        other.stdin.close()
        await asyncio.wait_for(other.wait(), 10)
        await store.close()
    assert missed == 0
    assert spurious == 0


async def test_an_in_memory_database_still_answers(tmp_path: Path) -> None:
    store = SQLiteStore(":memory:")
    await store.migrate()
    store.journal_moved()
    assert store.journal_moved() is False  # no -shm to read: SQLite's own answer
    await store.close()
