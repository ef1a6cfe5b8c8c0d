"""Two OS processes sharing one PostgreSQL schema and one Redis prefix: what one bot process
writes, another sees, and concurrent turns in both never lose a counter step or a summary."""

from __future__ import annotations

import asyncio

from shortterm.model import ScopeKey
from shortterm.store.postgres import PostgresStore
from tests.workers import Worker

WORKER = "tests.crossproc_worker"


async def _pair(urls: tuple[str, str]) -> tuple[Worker, Worker]:
    # Both open (and so migrate the fresh schema) at the same time.
    a, b = await asyncio.gather(Worker.start(WORKER, *urls, "a"), Worker.start(WORKER, *urls, "b"))
    return a, b


def _spec(key: ScopeKey) -> list[str | None]:
    return [key.kind, key.owner_id, key.channel_id, key.persona_id]


async def test_captures_summaries_settings_and_clears_cross_processes(
    scale_urls: tuple[str, str],
) -> None:
    a, b = await _pair(scale_urls)
    try:
        server_c1 = _spec(ScopeKey.server("g1", "c1"))
        user_c1 = _spec(ScopeKey.user("u1", "c1"))
        await a.call("capture", user="u1", channel="c1", server="g1", text="hello from a")
        seen = await b.call("get", key=server_c1)
        assert seen["messages"] == [["u1", "hello from a"], [None, "ok"]]
        assert seen["turns"] == 1

        await b.call("set_summary", key=server_c1, text="b wrote this summary")
        seen = await a.call("get", key=server_c1)
        assert seen["summary"] == "b wrote this summary"
        assert seen["messages"][0] == ["u1", "hello from a"]

        await a.call("configure_server", server="g1", cadence=3)
        assert await b.call("cadence", server="g1") == 3
        await b.call("configure_server", server="g1", cadence=8)
        assert await a.call("cadence", server="g1") == 8

        await b.call("clear_channel", channel="c1")
        assert await a.call("get", key=server_c1) is None
        assert await a.call("get", key=user_c1) is None

        await a.call("capture", user="u1", channel="c2", server="g1", text="u1 speaks")
        await a.call("capture", user="u2", channel="c2", server="g1", text="u2 speaks")
        await b.call("clear_user", user="u1")
        seen = await a.call("get", key=_spec(ScopeKey.server("g1", "c2")))
        assert "u1" not in [author for author, _ in seen["messages"]]
        assert await a.call("get", key=_spec(ScopeKey.user("u1", "c2"))) is None
    finally:
        await asyncio.gather(a.stop(), b.stop())


async def test_concurrent_turns_in_two_processes_lose_nothing(
    scale_urls: tuple[str, str],
) -> None:
    turns, channels = 500, 5
    a, b = await _pair(scale_urls)
    try:
        degraded = await asyncio.gather(
            a.call("storm", turns=turns, channels=channels),
            b.call("storm", turns=turns, channels=channels),
        )
        assert list(degraded) == [0, 0]
        per_channel = 2 * turns // channels
        store = PostgresStore.from_url(scale_urls[0])
        try:
            for c in range(channels):
                key = ScopeKey.server("g1", f"c{c}", "p1")
                row = await store.load(key)
                assert row is not None and row.turns_since_refresh == per_channel
                for worker in (a, b):  # the shared hot tier agrees with the durable tier
                    seen = await worker.call("get", key=_spec(key))
                    assert seen["turns"] == per_channel
            slugs = {f"{name}-{i}" for name in "ab" for i in range(0, turns, 10)}
            row = await store.load(ScopeKey.server("g1", "c0", "p1"))
            assert row is not None and set(row.categories) == slugs
            seen = await b.call("get", key=_spec(ScopeKey.server("g1", "c0", "p1")))
            assert set(seen["categories"]) == slugs
            for name, reader in (("a", b), ("b", a)):
                for i in range(0, turns, 10):
                    key = ScopeKey.server("g1", f"notes-{name}-{i}")
                    seen = await reader.call("get", key=_spec(key))
                    assert seen["summary"] == f"summary {name} {i}"
        finally:
            await store.close()
    finally:
        await asyncio.gather(a.stop(), b.stop())
