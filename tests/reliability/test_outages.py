"""PostgreSQL or Redis unreachable mid-run, through a loopback proxy the test cuts.

With the durable tier down, captures keep serving from the hot tier, ``call_tool`` says it
saved nothing, ``context()`` renders what the hot tier holds, other durable operations raise
``StoreUnavailable``, and ``stats()`` counts every failure. With the shared Redis tier down,
every operation that needs it raises ``StoreUnavailable`` (a tool call that committed says
so truthfully). Nothing hangs: each operation ends within its configured timeout, and
everything works again once the service is back.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import TypeVar
from urllib.parse import quote

import psycopg
import pytest

import shortterm
from shortterm import Config, Message, Reply, ScopeKey, ServerSettings, StoreUnavailable
from shortterm.cache.redis.client import failure_bound_s
from shortterm.tool import texts
from tests.reliability.conftest import through
from tests.reliability.proxy import Mode, Proxy
from tests.support import FakeClock, with_query

T = TypeVar("T")

G, P = "g1", "p1"
HERE, THERE = "c-here", "c-there"
# Client-side bounds used through the proxy; an operation cut off in flight may take up to
# 10 s more while psycopg asks the silent server to cancel the query (see the store's docs).
PG_BOUNDS = "operation_timeout_s=1&pool_timeout_s=1&pool_reconnect_timeout_s=0.5&connect_timeout=1"
PG_CANCEL_S = 10.0
REDIS_BOUNDS = "socket_timeout=0.5&socket_connect_timeout=0.5"
SLACK_S = 1.5
REDIS_SLACK_S = 0.3


def config() -> Config:
    return Config(sweep_interval_s=0, settings_refresh_s=30)


async def _within(limit_s: float, awaitable: Awaitable[T]) -> T:
    started = time.monotonic()
    result = await awaitable
    elapsed = time.monotonic() - started
    assert elapsed < limit_s, f"took {elapsed:.1f} s, the bound is {limit_s:.1f} s"
    return result


async def _raises_within(limit_s: float, awaitable: Awaitable[object]) -> StoreUnavailable:
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as info:
        await awaitable
    elapsed = time.monotonic() - started
    assert elapsed < limit_s, f"took {elapsed:.1f} s, the bound is {limit_s:.1f} s"
    return info.value


def _turn(memory: shortterm.Memory, channel: str, user: str = "u1") -> shortterm.Turn:
    return memory.turn(
        user_id=user, channel_id=channel, server_id=G, persona_id=P, user_name="Ana",
        bot_name="Tomo", channel_name=channel,
    )  # fmt: skip


async def _say(memory: shortterm.Memory, channel: str, text: str) -> None:
    turn = _turn(memory, channel)
    await turn.capture(
        history=[Message("user", text, author_id="u1", speaker="Ana")],
        replies=[Reply(f"re: {text}", persona_name="Tomo")],
    )


async def _row_counter(pg_url: str, schema: str, key: ScopeKey) -> tuple[int, str | None]:
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        cur = await conn.execute(
            f'SELECT turns_since_refresh, summary FROM "{schema}".scopes WHERE kind = %s '
            "AND owner_id = %s AND channel_id = %s AND persona_id IS NOT DISTINCT FROM %s",
            (key.kind, key.owner_id, key.channel_id, key.persona_id),
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row[0]), row[1]


@pytest.fixture
def redis_cache_url(redis_url: str, prefix: str) -> str:
    return with_query(redis_url, prefix=quote(prefix))


@pytest.mark.parametrize("mode", ["reset", "blackhole"])
@pytest.mark.parametrize("tier", ["inprocess", "redis"])
async def test_postgres_down_captures_serve_tools_refuse_contexts_degrade_then_recover(
    pg_url: str, schema: str, pg_proxy: Proxy, redis_cache_url: str, tier: str, mode: Mode
) -> None:
    clock = FakeClock()
    store_url = with_query(through(pg_url, pg_proxy), schema=schema) + "&" + PG_BOUNDS
    cache_url = "memory://" if tier == "inprocess" else redis_cache_url
    server_here = ScopeKey.server(G, HERE, P)
    first_bound = 1 + PG_CANCEL_S + SLACK_S if mode == "blackhole" else 1 + SLACK_S
    bound = 1 + SLACK_S
    async with shortterm.open(
        store=store_url, cache=cache_url, clock=clock, config=config()
    ) as memory:
        await _say(memory, THERE, "the hike is on Saturday")
        await _say(memory, HERE, "before the outage")
        result = await _turn(memory, HERE).call_tool(texts.TOOL_NAME, {"summary": "first"})
        assert result.ok
        await _say(memory, HERE, "still before")
        assert (await _row_counter(pg_url, schema, server_here)) == (1, "first")

        pg_proxy.cut(mode)
        # A capture: served from the hot tier, counted as degraded, never raised.
        await _within(first_bound, _say(memory, HERE, "during the outage"))
        entry = await memory.cache.get(server_here, clock())
        assert entry is not None and entry.messages[0].content == "during the outage"
        assert entry.summary == "first" and entry.turns_since_refresh == 1  # no step taken
        stats = memory.stats()
        assert stats["degraded_captures"] == 1 and stats["store_errors"] == 1
        assert stats["degraded"] is True

        # A tool call: refused with a message for the model, nothing claimed.
        result = await _within(
            bound, _turn(memory, HERE).call_tool(texts.TOOL_NAME, {"summary": "lost"})
        )
        assert result == shortterm.ToolResult(False, texts.STORE_DOWN)
        assert memory.stats()["upgrades"] == 1 and memory.stats()["store_errors"] == 2

        # A context: the settings refresh fails, the hot tier still renders.
        clock.advance(31)
        ctx = await _within(bound, _turn(memory, HERE).context())
        kinds = {item.kind: item.text for item in ctx.items}
        assert "the hike is on Saturday" in kinds["other_channels"]
        assert "first" in kinds["same_channel"]
        assert memory.stats()["degraded_contexts"] == 1

        # Everything else that must be durable raises, and reports nothing as done.
        await _raises_within(bound, memory.configure_server(G, ServerSettings(refresh_cadence=2)))
        assert (await memory.server_settings(G)).refresh_cadence == 5
        await _raises_within(bound, memory.set_summary(server_here, "admin edit"))
        await _raises_within(bound, memory.clear_channel("c-elsewhere"))
        # store_errors counts the failed durable calls memory absorbed (the capture, the tool
        # call, each read of the context); the ones it raised are the caller's to see.
        assert memory.stats()["store_errors"] >= 3

        pg_proxy.restore()
        # The next capture counts again, the next tool call succeeds.
        await _within(bound, _say(memory, HERE, "after the outage"))
        assert memory.stats()["degraded_captures"] == 1
        assert memory.stats()["degraded"] is False
        assert (await _row_counter(pg_url, schema, server_here)) == (2, "first")
        result = await _turn(memory, HERE).call_tool(texts.TOOL_NAME, {"summary": "second"})
        assert result.ok
        assert (await _row_counter(pg_url, schema, server_here)) == (0, "second")
        assert (await _row_counter(pg_url, schema, ScopeKey.user("u1", HERE, P)))[1] == "second"
        await memory.configure_server(G, ServerSettings(refresh_cadence=2))
        assert (await memory.server_settings(G)).refresh_cadence == 2


@pytest.mark.parametrize("mode", ["reset", "blackhole"])
async def test_redis_down_every_hot_operation_raises_quickly_and_nothing_lies(
    pg_url: str,
    schema: str,
    redis_url: str,
    prefix: str,
    redis_proxy: Proxy,
    mode: Mode,
) -> None:
    clock = FakeClock()
    store_url = with_query(pg_url, schema=schema)
    cache_url = with_query(through(redis_url, redis_proxy), prefix=quote(prefix))
    cache_url += "&" + REDIS_BOUNDS
    server_here = ScopeKey.server(G, HERE, P)
    # What docs/reliability.md promises: the bound derived from the settings (two attempts of
    # one socket timeout each, plus the backoff cap: 1.2 s), with 0.3 s for the scheduler.
    bound = failure_bound_s(socket_timeout_s=0.5, retries=1) + REDIS_SLACK_S
    assert bound == pytest.approx(1.5)
    async with shortterm.open(
        store=store_url, cache=cache_url, clock=clock, config=config()
    ) as memory:
        await _say(memory, THERE, "the hike is on Saturday")
        await _say(memory, HERE, "before the outage")

        redis_proxy.cut(mode)
        await _raises_within(bound, _say(memory, HERE, "during the outage"))
        await _raises_within(bound, _turn(memory, HERE).context())
        await _raises_within(bound, _turn(memory, HERE).maintenance_due())
        await _raises_within(bound, memory.get(server_here))
        # The tool call commits to PostgreSQL first; the hot tier failing afterwards does not
        # turn a durable success into a reported failure (nor the other way round).
        result = await _within(
            bound, _turn(memory, HERE).call_tool(texts.TOOL_NAME, {"summary": "durable"})
        )
        assert result.ok
        assert (await _row_counter(pg_url, schema, server_here))[1] == "durable"
        # Settings live in the durable tier only.
        await _within(bound, memory.configure_server(G, ServerSettings(refresh_cadence=3)))
        # A clear deletes the durable rows, then says the hot tier could not be cleared.
        await _raises_within(bound, memory.clear_channel(THERE))
        # The hot update after the tool's commit failed: the hot tier's error, not the
        # durable tier's, which answered every call.
        assert memory.stats()["cache_errors"] >= 1
        assert memory.stats()["store_errors"] == 0
        assert not memory.stats()["degraded"]

        redis_proxy.restore()
        await _within(bound, memory.clear_channel(THERE))  # the retry the error asked for
        assert await memory.get(ScopeKey.server(G, THERE, P)) is None
        await _within(bound, _say(memory, HERE, "after the outage"))
        entry = await memory.get(server_here)
        assert entry is not None
        assert entry.messages[0].content == "after the outage"
        assert entry.summary == "durable"  # the capture mirrored the newer durable row
        assert (await memory.server_settings(G)).refresh_cadence == 3


@pytest.mark.parametrize(
    "query", ["operation_timeout_s=0", "operation_timeout_s=inf", "pool_reconnect_timeout_s=x"]
)
def test_bad_timeouts_are_config_errors(query: str) -> None:
    from shortterm.store.postgres import PostgresStore

    with pytest.raises(shortterm.ConfigError, match=query.split("=")[0]):
        PostgresStore.from_url(f"postgresql://postgres@127.0.0.1/test?{query}")


def test_the_pool_gives_up_reconnecting_quickly_by_default() -> None:
    from shortterm.store.postgres import PostgresStore

    store = PostgresStore.from_url("postgresql://postgres@127.0.0.1/test")
    assert store.pool.reconnect_timeout == 2.0 and store.operation_timeout_s == 30.0


def test_the_redis_bound_is_derived_from_the_settings() -> None:
    from shortterm.cache.redis import RedisCache

    tight = RedisCache.from_url("redis://127.0.0.1:6379/0?socket_timeout=0.5", config())
    assert tight.call_timeout_s == pytest.approx(1.2)
    assert tight.client.connection_pool.connection_kwargs["socket_timeout"] == 0.5
    plain = RedisCache.from_url("redis://127.0.0.1:6379/0?retries=2", config())
    kwargs = plain.client.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == 5.0 and kwargs["socket_connect_timeout"] == 5.0
    assert plain.call_timeout_s == pytest.approx(3 * 5.0 + 2 * 0.2)
