"""A process far behind the journal applies all of it on its next call: the follower reads
page after page until the end, whatever its own entry does to the first page's length."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

import shortterm
from shortterm import Config, Message, Reply, ScopeKey
from shortterm.memory.engine.follower import _JOURNAL_PAGE as PAGE  # the edge under test
from tests.support import FakeClock

G, P = "g1", "p1"
KEY = ScopeKey.server(G, "target", P)


def cfg() -> Config:
    return Config(sweep_interval_s=0, write_behind_ms=0)


async def journal_others(store_url: str, count: int, now: float) -> None:
    """``count`` forgets of other channels, as another process would have journaled them
    while this one idled (written in bulk: the API would take minutes for 100,000)."""
    if store_url.startswith("sqlite"):
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as db:
            db.execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
                "INSERT INTO journal (kind, subject, targets, at) "
                "SELECT 'channel', json_array('other-' || i), '[]', ? FROM n",
                (count, now),
            )
        return
    url, _, query = store_url.partition("?")
    schema = dict(p.split("=", 1) for p in query.split("&"))["schema"]
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(
            f'INSERT INTO "{schema}".journal (kind, subject, targets, at) '
            "SELECT 'channel', jsonb_build_array('other-' || i), '[]'::jsonb, %s "
            "FROM generate_series(1, %s) AS i",
            (now, count),
        )


@pytest.mark.parametrize("behind", [PAGE - 1, PAGE, 100_000])
async def test_a_process_far_behind_serves_nothing_cleared(
    store_url: str, clock: FakeClock, behind: int
) -> None:
    config = cfg()
    async with (
        shortterm.open(store=store_url, clock=clock, config=config) as idle,
        shortterm.open(store=store_url, clock=clock, config=config) as busy,
    ):
        turn = idle.turn(user_id="ana", channel_id="target", server_id=G, persona_id=P)
        await turn.capture(
            history=[Message("user", "hello", author_id="ana", at=clock())],
            replies=[Reply("hi", persona_id=P)],
        )
        assert await idle.get(KEY) is not None
        # The clear is the last of ``behind`` entries the idle process has not read.
        await journal_others(store_url, behind - 1, clock())
        await busy.clear_channel("target")
        assert await idle.get(KEY) is None
        assert idle.stats()["journal_entries"] >= behind
