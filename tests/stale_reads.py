"""How late a process still serves what another process just forgot: the watch that the
forget-window tests share (a LISTEN connection that dies, a pooler that cannot LISTEN)."""

from __future__ import annotations

import asyncio
import time

import shortterm
from shortterm import ScopeKey
from shortterm.store.postgres import PostgresStore
from tests.workers import Worker


def shows(entry: shortterm.Entry | None, token: str) -> bool:
    return entry is not None and any(token in m.content for m in entry.messages)


async def late_reads(
    memory: shortterm.Memory,
    clearer: Worker,
    channel: str,
    key: ScopeKey,
    token: str,
    *,
    watch_s: float = 2.0,
) -> list[float]:
    """The other process clears ``channel`` while this one reads ``key`` every 2 ms: for each
    read that began after the clear returned and still served ``token``, how long after.
    A read ``watch_s`` after the clear returned ends the watch, served or not."""
    reads: list[tuple[float, bool]] = []
    returned: float | None = None

    async def watch() -> None:
        while True:
            started = time.monotonic()
            shown = shows(await memory.get(key), token)
            reads.append((started, shown))
            if returned is not None and started > returned and not shown:
                return
            if returned is not None and started > returned + watch_s:
                return
            await asyncio.sleep(0.002)

    watcher = asyncio.create_task(watch())
    try:
        returned = (await clearer.call("clear_channel", channel=channel))[1]
        await watcher
    finally:
        watcher.cancel()
    assert returned is not None
    return [started - returned for started, shown in reads if shown and started > returned]


async def until_listening(memory: shortterm.Memory) -> None:
    """Until the journal's listener has proved itself alive (its heartbeat answered)."""
    store = memory.store
    assert isinstance(store, PostgresStore)
    deadline = time.monotonic() + 30
    while not store.listening:
        assert time.monotonic() < deadline, "the journal's listener never proved itself alive"
        await asyncio.sleep(0.01)
