"""PostgreSQL specifics beyond the conformance suite: NUL bytes, schemas and URL options,
concurrent migrators, and connections dropped under the store's feet."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest

import shortterm
from shortterm.model import Category, ScopeKey, ServerSettings
from shortterm.model.errors import ConfigError, StoreUnavailable
from shortterm.model.text import clean_text
from shortterm.store import migrations
from shortterm.store.base import DistilledWrite, ScopeMeta
from shortterm.store.postgres import PostgresStore
from shortterm.store.reference import ReferenceStore
from tests.support import T0, FakeClock, drop_postgres_schema, with_query

S = ScopeKey.server("g1", "c1", "p1")
META = ScopeMeta(server_id="g1", server_name="Guild", channel_name="general")
POLL_S, POLL_LIMIT = 0.02, 250  # bounded waits for the server to act on a signal


async def _admin(url: str) -> psycopg.AsyncConnection[tuple[object, ...]]:
    return await psycopg.AsyncConnection.connect(url, autocommit=True)


async def _backends(admin: psycopg.AsyncConnection[tuple[object, ...]], app: str) -> list[int]:
    cur = await admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app,)
    )
    return [int(r[0]) for r in await cur.fetchall()]  # type: ignore[call-overload]


async def _terminate_all(admin: psycopg.AsyncConnection[tuple[object, ...]], app: str) -> None:
    pids = await _backends(admin, app)
    assert pids, "the store has no server connection to drop"
    await admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,))
    for _ in range(POLL_LIMIT):  # the server needs a moment to end them
        if not set(pids) & set(await _backends(admin, app)):
            return
        await asyncio.sleep(POLL_S)
    raise AssertionError("terminated backends did not go away")


async def test_nul_bytes_become_replacement_characters_everywhere(pg_url: str, schema: str) -> None:
    store = PostgresStore.from_url(pg_url, schema=schema)
    try:
        await store.migrate()
        nasty = ScopeMeta(server_id="g1", server_name="Gu\x00ild", channel_name="gen\x00eral")
        change = DistilledWrite(
            summary="sum\x00mary", set_summary=True, categories={"mo\x00od": "ca\x00lm"}
        )
        [row] = await store.write_distilled([(S, nasty)], change, reset_counter=None, now=T0)
        loaded = await store.load(S)
        assert loaded == row
        assert row.summary == "sum\ufffdmary"
        assert dict(row.categories) == {"mo\ufffdod": "ca\ufffdlm"}
        assert (row.meta.server_name, row.meta.channel_name) == ("Gu\ufffdild", "gen\ufffderal")
        merged = DistilledWrite(categories={"mo\x00od": None, "topic": "lone \ud800 surrogate"})
        [row] = await store.write_distilled([(S, None)], merged, reset_counter=None, now=T0 + 1)
        assert dict(row.categories) == {"topic": clean_text("lone \ud800 surrogate")}

        settings = ServerSettings(
            tool_description="notes", categories=(Category("Mood", "How it feels"),)
        )
        object.__setattr__(settings, "nudge_text", "nudge\x00text")  # past the model's cleaning
        await store.save_server_settings("g1", settings, now=T0)
        saved = (await store.server_settings_since(0))["g1"]
        assert saved.nudge_text == "nudge\ufffdtext"
        assert saved.categories == settings.categories
    finally:
        await store.close()


async def test_schema_comes_from_the_url_and_isolates(pg_url: str, schema: str) -> None:
    other = f"{schema}_b"
    a = PostgresStore.from_url(with_query(pg_url, schema=schema))
    b = PostgresStore.from_url(pg_url, schema=other)
    try:
        await asyncio.gather(a.migrate(), b.migrate())
        await a.touch([(S, META)], increment=S, now=T0)
        assert await b.load(S) is None
        assert (await a.load(S)) is not None
        assert await a.schema_version() == len(migrations.load("postgresql"))
    finally:
        await a.close()
        await b.close()
        await drop_postgres_schema(pg_url, other)


async def test_concurrent_migrators_apply_each_migration_once(pg_url: str, schema: str) -> None:
    stores = [PostgresStore.from_url(pg_url, schema=schema) for _ in range(4)]
    try:
        await asyncio.gather(*(s.migrate() for s in stores))
        async with await _admin(pg_url) as admin:
            cur = await admin.execute(f'SELECT version FROM "{schema}".schema_migrations')
            versions = [r[0] for r in await cur.fetchall()]
        assert versions == [m.version for m in migrations.load("postgresql")]
    finally:
        for s in stores:
            await s.close()


@pytest.mark.parametrize(
    "query",
    [
        "schema=bad-name",
        "pool_max_size=lots",
        "pool_min_size=0",
        "schema=1starts_with_digit",
        "pool_timeout_s=0",
        "pool_timeout_s=soon",
    ],
)
def test_bad_url_options_are_config_errors(pg_url: str, query: str) -> None:
    with pytest.raises(ConfigError):
        PostgresStore.from_url(with_query(pg_url, **dict([query.split("=")])))


def test_other_schemes_are_refused() -> None:
    with pytest.raises(ConfigError, match="not a PostgreSQL URL"):
        PostgresStore.from_url("mysql://localhost/db")


async def test_an_unreachable_server_is_store_unavailable() -> None:
    store = PostgresStore.from_url(
        "postgresql://postgres@127.0.0.1:9/test?connect_timeout=1&pool_timeout_s=0.2"
    )
    try:
        with pytest.raises(StoreUnavailable, match="PostgreSQL migration failed"):
            await store.migrate()
    finally:
        await store.close()
    with pytest.raises(StoreUnavailable, match="closed"):
        await store.load(S)


async def test_a_connection_dropped_mid_write_fails_it_and_the_pool_recovers(
    pg_url: str, schema: str
) -> None:
    app = f"stm-{uuid.uuid4().hex[:12]}"
    store = PostgresStore.from_url(with_query(pg_url, application_name=app), schema=schema)
    admin = await _admin(pg_url)
    locker = await psycopg.AsyncConnection.connect(pg_url)
    try:
        await store.migrate()
        await store.touch([(S, META)], increment=S, now=T0)
        # Hold the row lock so the store's next write is stuck inside the server...
        await locker.execute(
            f'SELECT 1 FROM "{schema}".scopes WHERE channel_id = %s FOR UPDATE', ("c1",)
        )
        write = asyncio.create_task(store.touch([(S, META)], increment=S, now=T0 + 1))
        for _ in range(POLL_LIMIT):
            cur = await admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                "AND wait_event_type = 'Lock'",
                (app,),
            )
            if (await cur.fetchone())[0]:  # type: ignore[index]
                break
            await asyncio.sleep(POLL_S)
        else:
            raise AssertionError("the write never reached the lock")
        # ...then drop its connection: the write must fail, loudly.
        await _terminate_all(admin, app)
        with pytest.raises(StoreUnavailable, match="capture upsert failed"):
            await write
        await locker.rollback()
        row = await store.load(S)  # the pool hands out a working connection again
        assert row is not None and row.turns_since_refresh == 1  # nothing half-applied
        [row] = await store.touch([(S, META)], increment=S, now=T0 + 2)
        assert row.turns_since_refresh == 2
    finally:
        await locker.close()
        await admin.close()
        await store.close()


async def test_dropped_idle_connections_fail_one_operation_then_recover(
    pg_url: str, schema: str
) -> None:
    app = f"stm-{uuid.uuid4().hex[:12]}"
    url = with_query(pg_url, application_name=app, pool_min_size=3)
    store = PostgresStore.from_url(url, schema=schema)
    admin = await _admin(pg_url)
    try:
        await store.migrate()
        await asyncio.gather(*(store.touch([(S, META)], increment=S, now=T0) for _ in range(6)))
        await _terminate_all(admin, app)
        with pytest.raises(StoreUnavailable):
            await store.touch([(S, META)], increment=S, now=T0 + 1)
        [row] = await store.touch([(S, META)], increment=S, now=T0 + 2)
        assert row.turns_since_refresh == 7  # the failed write did not count
    finally:
        await admin.close()
        await store.close()


async def test_the_facade_runs_on_postgres(pg_url: str, schema: str) -> None:
    url = with_query(pg_url, schema=schema)
    clock = FakeClock()
    config = shortterm.Config(sweep_interval_s=0)
    key = ScopeKey.server("333", "222", "7")
    async with shortterm.open(store=url, clock=clock, config=config) as memory:
        turn = memory.turn(user_id="111", channel_id="222", server_id="333", persona_id="7")
        await turn.capture(
            history=[shortterm.Message("user", "Hike on Saturday?", author_id="111")],
            replies=[shortterm.Reply("Ridge trail, 8am.", persona_id="7")],
        )
        await memory.set_summary(key, "Hike\x00 planned.")
    clock.advance(60)
    async with shortterm.open(store=url, clock=clock, config=config) as memory:
        entry = await memory.get(key)  # hydrated from PostgreSQL; messages were cache-only
        assert entry is not None and entry.summary == "Hike\ufffd planned."
        assert entry.messages == () and entry.turns_since_refresh == 1
        assert await memory.clear_channel("222") == 2  # the user and the server scope
        assert await memory.get(key) is None


async def test_a_scope_given_twice_is_applied_twice_in_order(pg_url: str, schema: str) -> None:
    store = PostgresStore.from_url(pg_url, schema=schema)
    reference = ReferenceStore()
    try:
        await store.migrate()
        for s in (store, reference):
            rows = await s.touch([(S, META), (S, META)], increment=S, now=T0)
            assert [r.turns_since_refresh for r in rows] == [1, 2]
    finally:
        await store.close()
