"""Shared fixtures: a fake clock, and factories for every store and hot-tier backend.

Backends that need a service (PostgreSQL, Redis) read ``SHORTTERM_TEST_POSTGRES_URL`` /
``SHORTTERM_TEST_REDIS_URL``. Unset, their tests skip with the reason; with
``SHORTTERM_TEST_REQUIRE_SERVICES=1`` (CI) a missing service is a failure instead.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import redis.asyncio as aioredis

import shortterm
from shortterm.cache.base import HotTier
from shortterm.cache.inprocess import InProcessCache
from shortterm.model.config import Config
from shortterm.store.base import Store
from shortterm.store.reference import ReferenceStore
from shortterm.store.sqlite import SQLiteStore
from tests.cluster_support import Cluster, redis_url_for, require_redis_server, running_cluster
from tests.pgbouncer_support import running_pgbouncer
from tests.support import (
    CacheFactory,
    FakeClock,
    StoreFactory,
    clear_redis_prefix,
    drop_postgres_schema,
    service_url,
    with_query,
)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


STORE_BACKENDS = ["memory", "sqlite", "postgres", "pgbouncer"]  # pgbouncer: PostgreSQL through it
CACHE_BACKENDS = ["inprocess", "redis", "redis-cluster"]


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[Cluster]:
    """Three Redis Cluster masters of our own (Debian's redis-server), for the session."""
    require_redis_server()
    with running_cluster() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def pgbouncer_url() -> Iterator[str]:
    """The test PostgreSQL through a PgBouncer in transaction mode of our own (Debian's
    pgbouncer), for the session: the URL, without ``pooler=transaction``."""
    with running_pgbouncer(service_url("SHORTTERM_TEST_POSTGRES_URL", "PostgreSQL")) as url:
        yield url


@pytest.fixture(params=STORE_BACKENDS)
async def store_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[StoreFactory]:
    """Opens (migrated) stores of one backend that all share the same durable state."""
    opened: list[Store] = []
    shared = ReferenceStore()
    pg_url = ""
    schema = f"t_{uuid.uuid4().hex[:16]}"  # one schema per test, shared by its stores
    store_url = ""
    if request.param == "postgres":
        pg_url = store_url = service_url("SHORTTERM_TEST_POSTGRES_URL", "PostgreSQL")
    elif request.param == "pgbouncer":
        pg_url = service_url("SHORTTERM_TEST_POSTGRES_URL", "PostgreSQL")
        store_url = with_query(request.getfixturevalue("pgbouncer_url"), pooler="transaction")

    async def make() -> Store:
        store: Store
        if request.param == "memory":
            store = shared
        elif request.param == "sqlite":
            store = SQLiteStore(tmp_path / "conformance.db")
        elif request.param in ("postgres", "pgbouncer"):
            from shortterm.store.postgres import PostgresStore

            store = PostgresStore.from_url(store_url, schema=schema)
        else:  # pragma: no cover - a backend added to STORE_BACKENDS without a branch here
            raise AssertionError(request.param)
        await store.migrate()
        opened.append(store)
        return store

    yield make
    for store in opened:
        if store is not shared:
            await store.close()
    if pg_url:
        await drop_postgres_schema(pg_url, schema)


@pytest.fixture(params=CACHE_BACKENDS)
async def cache_factory(request: pytest.FixtureRequest) -> AsyncIterator[CacheFactory]:
    opened: list[HotTier] = []
    prefixes: list[str] = []
    redis_url = ""
    if request.param in ("redis", "redis-cluster"):
        redis_url = redis_url_for(request, request.param)

    async def make(**overrides: int) -> HotTier:
        cfg = Config().replace(**overrides) if overrides else Config()
        cache: HotTier
        if request.param == "inprocess":
            cache = InProcessCache(
                crude_ttl_s=cfg.crude_ttl_s,
                summary_ttl_s=cfg.summary_ttl_s,
                max_entries=cfg.max_entries,
                max_bytes=cfg.max_bytes,
            )
        elif request.param in ("redis", "redis-cluster"):
            from shortterm.cache.redis import RedisCache

            prefix = f"stm-test:{uuid.uuid4().hex[:16]}:"  # a fresh, empty cache per call
            prefixes.append(prefix)
            cache = RedisCache.from_url(with_query(redis_url, prefix=quote(prefix)), cfg)
        else:  # pragma: no cover - a backend added to CACHE_BACKENDS without a branch here
            raise AssertionError(request.param)
        opened.append(cache)
        return cache

    yield make
    for cache in opened:
        await cache.close()
    for prefix in prefixes:
        await clear_redis_prefix(redis_url, prefix)


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'stm.db'}"


@pytest.fixture
def config() -> Config:
    return Config(sweep_interval_s=0)


@pytest.fixture
async def memory(db_url: str, clock: FakeClock, config: Config) -> AsyncIterator[shortterm.Memory]:
    async with shortterm.open(store=db_url, clock=clock, config=config) as mem:
        yield mem


@pytest.fixture
async def scale_urls() -> AsyncIterator[tuple[str, str]]:
    """A PostgreSQL store URL on a fresh schema and a Redis URL with a fresh prefix, both
    removed after the test: what several bot processes would share."""
    pg_url = service_url("SHORTTERM_TEST_POSTGRES_URL", "PostgreSQL")
    redis_url = service_url("SHORTTERM_TEST_REDIS_URL", "Redis")
    tag = uuid.uuid4().hex[:16]
    schema, prefix = f"t_{tag}", f"stm-test:{tag}:"
    yield with_query(pg_url, schema=schema), with_query(redis_url, prefix=quote(prefix))
    await drop_postgres_schema(pg_url, schema)
    await clear_redis_prefix(redis_url, prefix)


@pytest.fixture
async def cluster_scale_urls(redis_cluster: Cluster) -> AsyncIterator[tuple[str, str]]:
    """:func:`scale_urls` with the hot tier on the session's Redis Cluster."""
    pg_url = service_url("SHORTTERM_TEST_POSTGRES_URL", "PostgreSQL")
    tag = uuid.uuid4().hex[:16]
    schema, prefix = f"t_{tag}", f"stm-test:{tag}:"
    yield with_query(pg_url, schema=schema), with_query(redis_cluster.url, prefix=quote(prefix))
    await drop_postgres_schema(pg_url, schema)


@pytest.fixture(params=["sqlite", "postgres"])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A durable store URL several processes can share: a SQLite file, or a fresh PostgreSQL
    schema (removed after the test)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.db'}"
        return
    pg_url = service_url("SHORTTERM_TEST_POSTGRES_URL", "PostgreSQL")
    schema = f"t_{uuid.uuid4().hex[:16]}"
    yield with_query(pg_url, schema=schema)
    await drop_postgres_schema(pg_url, schema)


@pytest.fixture(params=["sqlite+inprocess", "postgres+redis", "postgres+cluster"])
def tiers(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(store, cache) URLs: one process's default, and the tiers several processes share
    (on one Redis node, and on a Redis Cluster)."""
    if request.param == "sqlite+inprocess":
        return f"sqlite:///{tmp_path / 'stm.db'}", "memory://"
    shared = "scale_urls" if request.param == "postgres+redis" else "cluster_scale_urls"
    store, cache = request.getfixturevalue(shared)
    return str(store), str(cache)


# -- services: a private PostgreSQL schema and Redis prefix per test, removed after it --------


@pytest.fixture
def pg_url() -> str:
    return service_url("SHORTTERM_TEST_POSTGRES_URL", "PostgreSQL")


@pytest.fixture
def redis_url() -> str:
    return service_url("SHORTTERM_TEST_REDIS_URL", "Redis")


@pytest.fixture
async def schema(pg_url: str) -> AsyncIterator[str]:
    """A PostgreSQL schema name of this test's own (dropped after it)."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    yield name
    await drop_postgres_schema(pg_url, name)


@pytest.fixture
async def prefix(redis_url: str) -> AsyncIterator[str]:
    """A Redis key prefix of this test's own (its keys deleted after it)."""
    name = f"stm-test:{uuid.uuid4().hex[:16]}:"
    yield name
    await clear_redis_prefix(redis_url, name)


@pytest.fixture
async def admin(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """A plain Redis client, for a test to look at or change the server directly."""
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    await client.aclose()
