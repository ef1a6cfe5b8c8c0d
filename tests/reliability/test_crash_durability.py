"""A writer doing tool upgrades (both scopes), settings changes and clears is SIGKILLed at
random moments, 20 times per backend. After every kill the durable state must be exactly
what the acknowledged operations produced, or that plus the one operation in flight, applied
whole: an upgrade is in both scopes or in neither, a clear is done or not started. SQLite must
also pass ``PRAGMA integrity_check``, and a restart must serve every acknowledged value.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

import shortterm
from shortterm import Category, ScopeKey, ServerSettings
from tests.reliability.crash_ops import CATEGORIES, H, State, op_for
from tests.support import with_query

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 20
KILL_AFTER_S = (0.05, 0.6)  # after the writer says it is ready
READY_LIMIT_S = 30.0


def run_and_kill(url: str, seed: int, start: int, after_s: float) -> tuple[list[int], str]:
    """Start the writer, SIGKILL it ``after_s`` seconds after it is ready; the indexes it
    acknowledged, and what it wrote to stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.reliability.crash_writer", url, str(seed), str(start)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None and proc.stderr is not None
    lines: list[str] = []
    ready = threading.Event()

    def drain() -> None:  # read continuously, so a full pipe never slows the writer down
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == "ready":
                ready.set()
            else:
                lines.append(line)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        assert ready.wait(READY_LIMIT_S), "the writer never opened its memory"
        time.sleep(after_s)  # the random moment of the crash is the point of the test
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        reader.join(READY_LIMIT_S)
    errors = proc.stderr.read()
    proc.stderr.close()
    proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL, f"the writer died on its own:\n{errors}"
    return [int(x) for x in lines], errors


def _categories(raw: Any) -> str:
    value = json.loads(raw) if isinstance(raw, str) else raw
    return json.dumps(value or {}, sort_keys=True)


def _snapshot(rows: Any, servers: Any, users: Any) -> tuple[Any, ...]:
    return (
        sorted(((k, o, c, p), (s, _categories(cat), t)) for k, o, c, p, s, cat, t in rows),
        sorted((sid, (cad, nudge)) for sid, cad, nudge in servers),
        sorted((uid, (priv, bool(opt))) for uid, priv, opt in users),
    )


_ROWS = (
    "SELECT kind, owner_id, channel_id, persona_id, summary, categories, turns_since_refresh "
    "FROM {t}scopes"
)
_SERVERS = "SELECT server_id, refresh_cadence, nudge_text FROM {t}server_settings"
_USERS = "SELECT user_id, privacy, cross_server_opt_in FROM {t}user_settings"


def sqlite_state(path: Path) -> tuple[Any, ...]:
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        return _snapshot(
            *(db.execute(q.format(t="")).fetchall() for q in (_ROWS, _SERVERS, _USERS))
        )
    finally:
        db.close()


def _killed_writer_settled(
    conn: psycopg.Connection[Any], writer: str, limit_s: float = 10.0
) -> None:
    """Wait until the killed writer's server backends are gone. A statement the writer sent
    before it died (a whole pipelined transaction) still runs, and may commit, after the
    kill: observing before it ends would race it."""
    deadline = time.monotonic() + limit_s
    while conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (writer,)
    ).fetchone() != (0,):
        assert time.monotonic() < deadline, "the killed writer's backends never went away"
        time.sleep(0.01)


def _writer_name(schema: str) -> str:
    return f"stm-crash-{schema}"  # this test's processes only, whatever else is connected


def postgres_state(url: str, schema: str) -> tuple[Any, ...]:
    with psycopg.connect(url, autocommit=True) as conn:
        _killed_writer_settled(conn, _writer_name(schema))
        t = f'"{schema}".'
        return _snapshot(
            *(conn.execute(q.format(t=t)).fetchall() for q in (_ROWS, _SERVERS, _USERS))
        )


async def check_restart(url: str, state: State) -> None:
    """A fresh process's view: every acknowledged value is served after hydration."""
    config = shortterm.Config(sweep_interval_s=0)
    async with shortterm.open(store=url, config=config) as memory:
        for (kind, owner, channel, persona), row in state.rows.items():
            entry = await memory.get(ScopeKey(kind, owner, channel, persona))  # type: ignore[arg-type]
            if row.summary is None and not row.categories:
                assert entry is None
                continue
            assert entry is not None, (kind, owner, channel)
            assert (entry.summary, dict(entry.categories)) == (row.summary, row.categories)
        for server_id, (cadence, nudge) in state.servers.items():
            settings = await memory.server_settings(server_id)
            assert (settings.refresh_cadence, settings.nudge_text) == (cadence, nudge)
        for user_id, (privacy, opt_in) in state.users.items():
            user = await memory.user_settings(user_id)
            assert (user.privacy.value, user.cross_server_opt_in) == (privacy, opt_in)


async def crash_rounds(url: str, observe: Any, seed: int) -> dict[str, int]:
    config = shortterm.Config(sweep_interval_s=0)
    async with shortterm.open(store=url, config=config) as memory:
        cats = tuple(Category(label, f"the {label.lower()}") for label in CATEGORIES)
        await memory.configure_server(H, ServerSettings(categories=cats))
    state = State(servers={H: (5, None)})
    rng = random.Random(seed)
    start, acked_total, landed, buffered_lost = 0, 0, 0, 0
    kinds: set[str] = set()
    for _round in range(ROUNDS):
        acked, _errors = run_and_kill(url, seed, start, rng.uniform(*KILL_AFTER_S))
        last = acked[-1] if acked else start - 1
        assert acked == list(range(start, last + 1)), "acknowledgements out of order"
        ops = [op_for(seed, i) for i in acked]
        kinds.update(op["op"] for op in ops)
        # Captures after the last other operation may still be buffered by the write-behind
        # (every other operation flushes first): a kill loses their durable part, but only a
        # newest part of it (flushes commit whole batches in order), never anything else.
        trailing = 0
        while trailing < len(ops) and ops[len(ops) - 1 - trailing]["op"] == "capture":
            trailing += 1
        for op in ops[: len(ops) - trailing]:
            state.apply(op)
        candidates = []
        for op in [*ops[len(ops) - trailing :], op_for(seed, last + 1)]:
            candidates.append(state.copy())
            state.apply(op)
        candidates.append(state)  # everything, and the write in flight
        observed = observe()
        matched = [i for i, c in enumerate(candidates) if c.snapshot() == observed]
        assert matched, (
            "the durable state matches neither the acknowledged writes (less buffered "
            f"captures) nor those plus the write in flight ({op_for(seed, last + 1)})"
        )
        state = candidates[matched[-1]]
        if matched[-1] == trailing + 1:
            landed += 1
        else:
            buffered_lost += trailing - matched[-1]
        await check_restart(url, state)
        acked_total += len(acked)
        start = last + 2
    assert acked_total >= 10 * ROUNDS, "too few writes acknowledged to mean anything"
    assert len(kinds) == 8, f"some kinds of operation never ran: {kinds}"
    return {"acked": acked_total, "in_flight_landed": landed, "buffered_lost": buffered_lost}


async def test_sqlite_keeps_every_acknowledged_write_through_sigkills(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    figures = await crash_rounds(f"sqlite:///{db}", lambda: sqlite_state(db), seed=11)
    print("sqlite crash rounds:", figures)  # shown with pytest -s


async def test_postgres_keeps_every_acknowledged_write_through_sigkills(
    pg_url: str, schema: str
) -> None:
    url = with_query(pg_url, schema=schema, application_name=_writer_name(schema))
    figures = await crash_rounds(url, lambda: postgres_state(pg_url, schema), seed=12)
    print("postgres crash rounds:", figures)  # shown with pytest -s
