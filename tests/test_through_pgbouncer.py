"""PostgreSQL through a PgBouncer in transaction mode (Debian's, started by the test session):
``pooler=transaction`` opens and serves where every statement may run on another server
connection, and a forget made by another process still reaches a PostgreSQL + in-process
memory within ``listen_timeout_s`` (polling the journal's end; nothing can LISTEN through the
pooler), or as fast as a NOTIFY with ``listen_url``.

The store's whole contract through the pooler is the conformance suite's ``pgbouncer`` backend
(tests/conformance/test_store_conformance.py). ``pytest -s`` prints the measured windows.
"""

from __future__ import annotations

import asyncio
import random
import statistics
from collections.abc import AsyncIterator
from urllib.parse import quote

import pytest
from psycopg_pool import AsyncConnectionPool

import shortterm
from shortterm import ConfigError, Message, Reply, ScopeKey, StoreUnavailable
from shortterm.model.urls import shown_url
from shortterm.store.postgres import PostgresStore
from tests.pgbouncer_support import running_pgbouncer
from tests.stale_reads import late_reads, shows, until_listening
from tests.support import with_query
from tests.workers import Worker

G, P = "g1", "p1"
POLLED_S = 0.5  # listen_timeout_s while polling: the bound on a forget's lateness
LISTENED_S = 5.0  # listen_timeout_s with listen_url: polling alone would be seconds late
NOTIFY_SLACK_S = 0.25  # a NOTIFY in flight on a loaded machine
WATCH_S = 2.0
ROUNDS = 6
CONFIG = shortterm.Config(sweep_interval_s=0)


def _pooled(pgbouncer_url: str, schema: str, **options: object) -> str:
    return with_query(pgbouncer_url, schema=schema, pooler="transaction", **options)


@pytest.fixture
async def clearer(pgbouncer_url: str, schema: str) -> AsyncIterator[Worker]:
    """Another process on the same memory, through the pooler too: it does the forgetting."""
    url = _pooled(pgbouncer_url, schema, listen_timeout_s=POLLED_S)
    worker = await Worker.start("tests.reliability.listen_worker", url)
    yield worker
    await worker.stop()


async def _remember(memory: shortterm.Memory, channel: str, token: str) -> ScopeKey:
    turn = memory.turn(user_id="u1", channel_id=channel, server_id=G, persona_id=P)
    await turn.capture(history=[Message("user", token, author_id="u1")], replies=[Reply("ok")])
    key = ScopeKey.server(G, channel, P)
    assert shows(await memory.get(key), token)
    return key


async def _latest_stale_read(
    memory: shortterm.Memory, clearer: Worker, channel: str, key: ScopeKey, token: str
) -> float:
    """How long after the other process's clear returned the last read that still served
    ``token`` began (0: none)."""
    lates = await late_reads(memory, clearer, channel, key, token, watch_s=WATCH_S)
    return max(lates, default=0.0)


async def _rounds(memory: shortterm.Memory, clearer: Worker, name: str) -> list[float]:
    rng, lates = random.Random(5), []
    for i in range(ROUNDS):
        channel, token = f"{name}{i}", f"{name.upper()}-{i}"
        key = await _remember(memory, channel, token)
        await until_listening(memory)
        await asyncio.sleep(rng.uniform(0, POLLED_S / 2))  # anywhere between two heartbeats
        lates.append(await _latest_stale_read(memory, clearer, channel, key, token))
    print(
        f"\n{name}: {sum(x > 0 for x in lates)}/{ROUNDS} rounds served the cleared channel after "
        f"the clear returned; the last such read began {statistics.median(lates) * 1000:.0f} ms "
        f"after it (median), {max(lates) * 1000:.0f} ms (max)"
    )
    return lates


async def test_a_forget_elsewhere_is_honoured_within_listen_timeout_by_polling(
    pgbouncer_url: str, schema: str, clearer: Worker
) -> None:
    url = _pooled(pgbouncer_url, schema, listen_timeout_s=POLLED_S)
    async with shortterm.open(store=url, cache="memory://", config=CONFIG) as memory:
        lates = await _rounds(memory, clearer, "polled")
    assert max(lates) < POLLED_S


async def test_listen_url_brings_back_notify_latency(
    pg_url: str, pgbouncer_url: str, schema: str, clearer: Worker
) -> None:
    direct = quote(pg_url, safe="")
    url = _pooled(pgbouncer_url, schema, listen_timeout_s=LISTENED_S, listen_url=direct)
    async with shortterm.open(store=url, cache="memory://", config=CONFIG) as memory:
        lates = await _rounds(memory, clearer, "listened")
    assert max(lates) < NOTIFY_SLACK_S  # polling every LISTENED_S / 3 would be seconds late


async def test_open_through_the_pooler_twice_and_in_two_processes_at_once(
    pgbouncer_url: str, schema: str
) -> None:
    """Each open runs the migrations' statements on whichever server connection PgBouncer
    hands out, after other clients' statements: named prepared statements would collide."""
    url = _pooled(pgbouncer_url, schema)
    for _ in range(2):
        async with shortterm.open(store=url, cache="memory://", config=CONFIG) as memory:
            await _remember(memory, "c1", "hello")
    workers = await asyncio.gather(
        *(Worker.start("tests.reliability.listen_worker", url) for _ in range(2))
    )
    try:
        await asyncio.gather(
            *(w.call("capture", user="u1", channel="c2", said=[["u1", "hi"]]) for w in workers)
        )
    finally:
        await asyncio.gather(*(w.stop() for w in workers))


async def test_a_pooled_url_without_the_option_is_told_to_add_it(pg_url: str, schema: str) -> None:
    """Without ``pooler=transaction`` psycopg's prepared statement names collide on PgBouncer's
    server connections; the open sees the pooler hand our session on and refuses, naming the
    option (tests/test_postgres_operator_errors.py has the rest). (A PgBouncer of its own:
    these stores leave prepared statements and a LISTEN behind on its server connections.)"""
    errors = []
    with running_pgbouncer(pg_url) as pooled:
        for _ in range(4):
            try:
                url = with_query(pooled, schema=schema)
                async with shortterm.open(store=url, cache="memory://", config=CONFIG):
                    pass
            except (StoreUnavailable, ConfigError) as exc:
                errors.append(str(exc))
    assert any("add pooler=transaction" in e for e in errors), errors


def test_pooler_and_listen_url_options_are_checked(pg_url: str) -> None:
    with pytest.raises(ConfigError, match=r"pooler='session'.*pooler=transaction"):
        PostgresStore.from_url(with_query(pg_url, pooler="session"))
    bad = quote("postgresql://u@h/db?sslmod=require", safe="")
    with pytest.raises(ConfigError, match=r"unknown option 'sslmod'.*did you mean 'sslmode'"):
        PostgresStore.from_url(with_query(pg_url, pooler="transaction", listen_url=bad))
    secret = with_query(pg_url, listen_url=quote("postgresql://bot:s3cret@db:5432/x", safe=""))
    assert "s3cret" not in shown_url(secret)
    # A pool of the caller's own must not prepare either.
    preparing = AsyncConnectionPool(pg_url, kwargs={"autocommit": True}, open=False)
    with pytest.raises(ConfigError, match="'prepare_threshold': None"):
        PostgresStore(preparing, pooler="transaction")
