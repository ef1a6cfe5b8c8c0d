"""Private channels and cross-server recall, seen by processes that did not capture: after a
restart (SQLite, hot tier rebuilt from disk) and from a second live process (PostgreSQL +
Redis). A channel private when captured stays hidden even after it is made public, threads
under a private channel are hidden, and a third party's words never follow a user to another
server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.support import with_query
from tests.workers import Worker

G1, G2, G3 = "guild-1", "guild-2", "guild-3"
SECRET, THREAD, BEN = "SECRET-PLAN-41", "THREAD-PLAN-42", "BEN-WORDS-43"
ANA_ELSEWHERE = "ANA-ELSEWHERE-44"


async def _start(store: str, cache: str) -> Worker:
    return await Worker.start("tests.reliability.privacy_worker", store, cache)


async def remember(writer: Worker) -> None:
    await writer.call("private", server=G1, channels=["secret"])
    await writer.call("opt_in", user="ana")
    await writer.call(
        "capture",
        user="ana",
        channel="secret",
        server=G1,
        said=[["ana", SECRET]],
        reply="ok",
        summary=f"summary {SECRET}",
    )
    await writer.call(
        "capture", user="ana", channel="thread-1", server=G1, parent="secret",
        said=[["ana", THREAD]], reply="ok", summary=f"summary {THREAD}",
    )  # fmt: skip
    await writer.call(
        "capture", user="ana", channel="open-2", server=G2,
        said=[["ben", BEN], ["ana", ANA_ELSEWHERE]], reply="ok",
        summary=f"summary {ANA_ELSEWHERE}",
    )  # fmt: skip


async def check(reader: Worker, *, made_public: bool = False) -> None:
    # In the same server, outside the private channel: neither it nor its thread.
    here = await reader.call("context", user="ana", channel="general", server=G1)
    assert SECRET not in here and THREAD not in here
    inside = await reader.call("context", user="ana", channel="secret", server=G1)
    if made_public:
        assert THREAD not in inside  # "secret" is public now, its private thread is not
    else:
        assert THREAD in inside  # inside a private channel, its server's private thread shows
    # In another server, with the opt-in: Ana's own words travel, Ben's never do, and the
    # first server's private channels stay home.
    there = await reader.call("context", user="ana", channel="x", server=G3)
    assert ANA_ELSEWHERE in there
    assert BEN not in there and SECRET not in there and THREAD not in there
    dm = await reader.call("context", user="ana", channel="dm-9")
    assert ANA_ELSEWHERE in dm and SECRET not in dm and THREAD not in dm and BEN not in dm


async def test_rules_hold_after_a_restart_on_sqlite(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'p.db'}"
    writer = await _start(store, "memory://")
    try:
        await remember(writer)
    finally:
        await writer.stop()
    # A restart: the hot tier is rebuilt from the summaries on disk (messages are gone).
    reader = await _start(store, "memory://")
    try:
        await check(reader)
        await reader.call("private", server=G1, channels=[])
        await check(reader, made_public=True)
    finally:
        await reader.stop()


@pytest.mark.parametrize("made_public", [False, True])
async def test_rules_hold_across_processes_on_postgres_and_redis(
    pg_url: str, schema: str, redis_url: str, prefix: str, made_public: bool
) -> None:
    store = with_query(pg_url, schema=schema)
    cache = with_query(redis_url, prefix=quote(prefix))
    writer = await _start(store, cache)
    try:
        await remember(writer)
    finally:
        await writer.stop()  # the capturing process is gone: a restart
    a, b = await asyncio.gather(_start(store, cache), _start(store, cache))
    try:
        if made_public:
            # Private when captured stays private: the flag was recorded on the entries.
            await a.call("private", server=G1, channels=[])
        await check(b, made_public=made_public)
        await check(a, made_public=made_public)
    finally:
        await asyncio.gather(a.stop(), b.stop())
