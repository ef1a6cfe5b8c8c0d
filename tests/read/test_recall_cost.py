"""A turn's context costs about the same in a server of 1,000 channels as in one of 10: the
other channels are read from the hot tier's recall order only as far as the context shows.

Counted, not timed: the Redis commands a context sends (as the client packs them, a
pipeline's one by one), and the entries the in-process tier hands out for it (its ``hits``).
The wall-time and instruction curves are benchmarks (``benchmarks/bench_context_channels.py``).
"""

from __future__ import annotations

import shortterm
from shortterm import Config, Message, ScopeKey, ServerSettings
from shortterm.bench.redis_commands import counted_commands
from shortterm.store.base import ScopeMeta, ScopeRow
from tests.read.test_recall_order import FullScan
from tests.support import T0, FakeClock


async def populate(memory: shortterm.Memory, server: str, channels: int) -> None:
    """Every channel live: the ten newest a minute apart, the others over the ten hours
    before; every third holds a summary (straight into the hot tier: a big server builds in
    a second)."""
    for i in range(channels):
        at = T0 - 60 * (i + 1) if i < 10 else T0 - 600 - (i - 10) * (36_000 / channels)
        key = ScopeKey.server(server, f"c{i}", None)
        meta = ScopeMeta(server_id=server, channel_name=f"chan-{i}")
        row = None
        if i % 3 == 0:
            row = ScopeRow(key=key, meta=meta, summary=f"plans {i}", summary_at=at - 600)
        said = (
            Message("user", f"about channel {i}", author_id="u7", speaker="Ana", at=at - 10),
            Message("assistant", f"noted {i}", speaker="Tomo", at=at),
        )
        await memory.cache.capture(key, said, meta, row, at)


async def context(memory: shortterm.Memory, server: str, i: int) -> str:
    turn = memory.turn(user_id="u7", channel_id=f"c{i % 3}", server_id=server, bot_name="Tomo")
    return str((await turn.context()).items)


async def per_context(memory: shortterm.Memory, channels: int) -> tuple[float, float, str]:
    """Redis commands and hot-tier hits per context in a server of ``channels`` (a server of
    its own), and its contexts' text: the same at every size, the three newest channels."""
    server = f"g{channels}"
    await memory.configure_server(server, ServerSettings())
    await populate(memory, server, channels)
    for i in range(6):  # warm: the owner read through once, the renderings kept
        await context(memory, server, i)
    tally = [0]
    hits = memory.cache.stats()["hits"]
    with counted_commands(tally):
        texts = [await context(memory, server, i) for i in range(30)]
    hits = memory.cache.stats()["hits"] - hits
    # The full read of every entry gives the same contexts.
    inner = memory.cache
    memory.cache = FullScan(inner)  # type: ignore[assignment]
    try:
        assert [await context(memory, server, i) for i in range(3)] == texts[:3]
    finally:
        memory.cache = inner
    return tally[0] / 30, hits / 30, "".join(texts[:3]).replace(server, "g")


async def test_redis_commands_per_context_do_not_grow_with_the_server(
    scale_urls: tuple[str, str], clock: FakeClock
) -> None:
    async with shortterm.open(*scale_urls, config=Config(sweep_interval_s=0), clock=clock) as m:
        small, _, shown = await per_context(m, 10)
        middle, _, _ = await per_context(m, 50)
        big, _, shown_big = await per_context(m, 1000)
    assert shown_big == shown
    assert big <= 2 * small, (small, big)
    assert middle <= 53, middle  # what a context sent before the groups' marks (at 50)


async def test_in_process_reads_do_not_grow_with_the_server(db_url: str, clock: FakeClock) -> None:
    async with shortterm.open(db_url, config=Config(sweep_interval_s=0), clock=clock) as m:
        _, small, shown = await per_context(m, 10)
        _, big, shown_big = await per_context(m, 1000)
    assert shown_big == shown
    assert big <= 2 * small, (small, big)
