"""A journal that goes back below a process's position (a PostgreSQL standby promoted without
the newest entries, a SQLite file restored from a backup) must not hide the entries written
after it, even when they reuse the numbers the process had passed.

The rewind is made here as its effect on the journal: the newest entries deleted and the
sequence set back, as a promotion that lost them leaves it. Then a process that never saw the
old entries (opened after the rewind, as one on the promoted primary) clears a channel: its
entry takes a number the first process had passed. The first process holds that channel's
messages in its own (in-process) hot tier; it must stop serving them before its next call
returns. tests/reliability/test_postgres_failover.py does the same with a real promotion.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import psycopg
import pytest

import shortterm
from shortterm import Message, Reply, ScopeKey
from tests.support import drop_postgres_schema, service_url, with_query

G, PLANS, OTHER = "333", "plans", "other"

Rewind = Callable[[int], Awaitable[None]]


@pytest.fixture(params=["sqlite", "postgres"])
async def deployment(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[str, Rewind]]:
    """(store URL, rewind): ``rewind(keep)`` deletes the journal's entries after ``keep``
    and sets its sequence back to ``keep``, as a failover that lost them would."""
    if request.param == "sqlite":
        path = tmp_path / "stm.db"

        async def rewind_sqlite(keep: int) -> None:
            with sqlite3.connect(path) as db:
                db.execute("DELETE FROM journal WHERE seq > ?", (keep,))
                db.execute("DELETE FROM fence WHERE seq > ?", (keep,))
                db.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = 'journal'", (keep,))

        yield f"sqlite:///{path}", rewind_sqlite
        return
    pg_url = service_url("SHORTTERM_TEST_POSTGRES_URL", "PostgreSQL")
    schema = f"t_rewind_{os_token()}"

    async def rewind_postgres(keep: int) -> None:
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            await conn.execute(f'DELETE FROM "{schema}".journal WHERE seq > %s', (keep,))
            await conn.execute(f'DELETE FROM "{schema}".fence WHERE seq > %s', (keep,))
            await conn.execute(
                "SELECT setval(pg_get_serial_sequence(%s, 'seq'), %s)",
                (f'"{schema}".journal', keep),
            )

    yield with_query(pg_url, schema=schema), rewind_postgres
    await drop_postgres_schema(pg_url, schema)


def os_token() -> str:
    import uuid

    return uuid.uuid4().hex[:12]


async def say(memory: shortterm.Memory, channel: str, text: str) -> None:
    turn = memory.turn(user_id="111", channel_id=channel, server_id=G, channel_name=channel)
    said = Message("user", text, author_id="111", speaker="Ana")
    await turn.capture(history=[said], replies=[Reply(f"ok: {text}")])


async def test_entries_after_a_rewind_are_applied_though_they_reuse_our_numbers(
    deployment: tuple[str, Rewind],
) -> None:
    url, rewind = deployment
    plans = ScopeKey.server(G, PLANS)
    async with shortterm.open(store=url) as first:
        await say(first, PLANS, "the ridge at 8")
        keep = await first.store.journal_head()
        for n in range(3):  # entries the rewind will lose; `first` applied them
            await first.clear_channel(f"{OTHER}-{n}")
        passed = first.engine.journal.head
        assert passed >= keep + 3
        await rewind(keep)
        async with shortterm.open(store=url) as second:  # on the "promoted" journal
            await second.clear_channel(PLANS)
            assert await second.store.journal_head() <= passed  # a number `first` passed
        entry = await first.get(plans)
        assert entry is None or not entry.messages, entry
        assert first.engine.journal.rewinds == 1
        # Numbers go on increasing past every position: new entries reach every follower.
        assert await first.store.journal_head() > passed
        await say(first, PLANS, "after the failover")
        async with shortterm.open(store=url) as third:
            seen = await third.get(plans)
            assert seen is None or [m.content for m in seen.messages] != ["the ridge at 8"]


async def test_a_follower_at_the_journal_end_sees_no_rewind(
    deployment: tuple[str, Rewind],
) -> None:
    """Our own entry still there, others after it: no rewind is reported, nothing reloads."""
    url, _ = deployment
    async with shortterm.open(store=url) as first, shortterm.open(store=url) as second:
        await say(first, PLANS, "hello")
        await first.set_summary(ScopeKey.server(G, OTHER), "note")
        await second.clear_channel(OTHER)
        await second.set_summary(ScopeKey.server(G, OTHER), "again")
        assert (await first.get(ScopeKey.server(G, PLANS))) is not None
        assert first.engine.journal.rewinds == 0
        assert first.engine.journal.gaps == 0
