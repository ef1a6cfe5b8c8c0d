"""The connection budget: a server that refuses more connections than a process already holds.

Each process holds its pool (up to ``pool_max_size``) and one LISTEN connection; when the
server has no room for more (``max_connections``, here a role's ``CONNECTION LIMIT``), a wait
for a pooled connection ends within its bound as a ``StoreUnavailable`` naming the pool and
the server's refusal, a capture meanwhile is served from the hot tier within that bound
(counted, logged), and ``/readyz`` answers 503 with the reason until the pool serves again.

The pool's one connection is kept busy by a forget that waits for the fence lock, held by an
administrator's session; the role's other connection is the LISTEN connection.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

import shortterm
from shortterm import Message, Reply, StoreUnavailable
from shortterm.sidecar import SidecarSettings, create_app
from shortterm.store.postgres import PostgresStore
from tests.support import with_query

LIMIT = 2  # the role's connections: the pool's first one and the LISTEN connection
SLACK_S = 1.0  # a loaded machine, beyond the bound under test
TOKEN = "budget-test-token-0123456789"
CONFIG = shortterm.Config(sweep_interval_s=0)


@pytest.fixture
async def role_url(pg_url: str, schema: str) -> AsyncIterator[str]:
    """``pg_url`` as a fresh role allowed ``LIMIT`` connections (dropped after the test, with
    the test's schema, which it owns)."""
    role, password = f"stm_budget_{uuid.uuid4().hex[:12]}", uuid.uuid4().hex
    dbname = conninfo_to_dict(pg_url).get("dbname") or "postgres"
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as admin:
        await admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} CONNECTION LIMIT {}").format(
                sql.Identifier(role), sql.Literal(password), sql.Literal(LIMIT)
            )
        )
        await admin.execute(
            sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(
                sql.Identifier(dbname), sql.Identifier(role)
            )
        )
    parts = urlsplit(pg_url)
    netloc = f"{role}:{password}@{parts.netloc.rsplit('@', 1)[-1]}"
    try:
        yield urlunsplit(parts._replace(netloc=netloc))
    finally:
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as admin:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            await admin.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
            )
            await admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            await admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


async def _proved(store: PostgresStore) -> None:
    """Until the LISTEN connection (the role's second) has proved itself alive."""
    store.journal_moved()  # starts it
    deadline = time.monotonic() + 30
    while not store.listening:
        assert time.monotonic() < deadline, "the LISTEN connection never proved itself alive"
        await asyncio.sleep(0.01)


@asynccontextmanager
async def _pool_busy(store: PostgresStore, pg_url: str) -> AsyncIterator[None]:
    """The pool's one connection held by a forget that waits for the fence lock."""
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as admin:
        await admin.execute("SELECT pg_advisory_lock(%s)", (store._fence_lock,))
        forget = asyncio.create_task(store.forget_channel("held", now=time.time()))
        deadline = time.monotonic() + 10
        while not await _waiting_for_lock(admin):
            assert time.monotonic() < deadline, "the forget never waited for the fence lock"
            await asyncio.sleep(0.01)
        try:
            yield
        finally:
            await admin.execute("SELECT pg_advisory_unlock(%s)", (store._fence_lock,))
            await forget


async def _waiting_for_lock(admin: psycopg.AsyncConnection[tuple[object, ...]]) -> bool:
    cur = await admin.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    )
    row = await cur.fetchone()
    return row is not None and bool(row[0])


async def _ready(app: object) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        return await client.get("/readyz", headers={"Authorization": f"Bearer {TOKEN}"})


async def test_an_exhausted_pool_fails_within_its_bound_and_turns_readyz_503(
    role_url: str, pg_url: str, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = with_query(role_url, schema=schema, pool_max_size=6, pool_timeout_s=1)
    async with shortterm.open(store=url, cache="memory://", config=CONFIG) as memory:
        store = memory.store
        assert isinstance(store, PostgresStore)
        await _proved(store)
        app = create_app(memory, SidecarSettings(token=TOKEN))
        assert (await _ready(app)).status_code == 200
        async with _pool_busy(store, pg_url):
            started = time.monotonic()
            with pytest.raises(StoreUnavailable) as caught:
                await store.journal_head()
            assert 1.0 <= time.monotonic() - started < 1.0 + SLACK_S
            message = str(caught.value)
            assert "no connection free within 1 s (pool_timeout_s)" in message
            assert "the pool (pool_max_size=6) is exhausted" in message
            assert "too many connections for role" in message  # the server's own words
            assert not caught.value.maybe_applied

            # A capture is served by the hot tier within the same bound, counted and logged.
            turn = memory.turn(user_id="u1", channel_id="c1", server_id="g1")
            started = time.monotonic()
            with caplog.at_level(logging.WARNING, logger="shortterm"):
                await turn.capture(
                    history=[Message("user", "hi", author_id="u1")], replies=[Reply("ok")]
                )
            assert time.monotonic() - started < 1.0 + SLACK_S
            assert memory.stats()["degraded_captures"] == 1
            assert "no connection free within 1 s" in caplog.text

            await asyncio.sleep(1.1)  # past the second a verdict is kept
            ready = await _ready(app)
            assert ready.status_code == 503
            assert "no connection free within 1 s" in ready.json()["store"]
            assert "too many connections for role" in ready.json()["store"]
        await store.journal_head()  # the pool serves again
        await asyncio.sleep(1.1)
        assert (await _ready(app)).status_code == 200


async def test_the_operation_bound_bounds_the_pool_wait_too(role_url: str, schema: str) -> None:
    url = with_query(role_url, schema=schema, pool_timeout_s=30, operation_timeout_s=1)
    store = PostgresStore.from_url(url)
    try:
        await store.migrate()
        await _proved(store)
        async with store.pool.connection():  # its one connection, held past any bound of ours
            started = time.monotonic()
            with pytest.raises(StoreUnavailable) as caught:
                await store.journal_head()
            assert time.monotonic() - started < 1.0 + SLACK_S
            message = str(caught.value)
            assert "no connection free within 1 s (operation_timeout_s)" in message
            assert "pool_max_size=4" in message  # the default
            assert "too many connections for role" in message
    finally:
        await store.close()
