"""A bot process for the cross-process tests, driven line by line over stdin/stdout.

Run as ``python -m tests.crossproc_worker STORE_URL CACHE_URL NAME``. Each input line is a JSON
command ``{"op": ..., ...}``; each output line is ``{"ok": result}`` or ``{"error": text}``.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import shortterm
from shortterm.store.base import DistilledWrite
from tests.workers import serve

CONFIG = shortterm.Config(sweep_interval_s=0, settings_refresh_s=0)


def _key(spec: list[Any]) -> shortterm.ScopeKey:
    return shortterm.ScopeKey(spec[0], spec[1], spec[2], spec[3])


def _entry(entry: shortterm.Entry | None) -> dict[str, Any] | None:
    if entry is None:
        return None
    return {
        "messages": [[m.author_id, m.content] for m in entry.messages],
        "summary": entry.summary,
        "categories": dict(entry.categories),
        "turns": entry.turns_since_refresh,
    }


async def _turn(memory: shortterm.Memory, name: str, i: int, channels: int) -> None:
    user = f"u{i % 7}"
    channel = f"c{i % channels}"
    turn = memory.turn(user_id=user, channel_id=channel, server_id="g1", persona_id="p1")
    await turn.capture(
        history=[shortterm.Message("user", f"{name} turn {i}", author_id=user)],
        replies=[shortterm.Reply(f"reply {i}", persona_id="p1")],
    )
    if i % 10 == 0:
        # A summary of a scope nobody else writes: it must survive the storm around it.
        await memory.set_summary(
            shortterm.ScopeKey.server("g1", f"notes-{name}-{i}"), f"summary {name} {i}"
        )
        # A category merge on a channel the other process is counting on at the same time.
        key = shortterm.ScopeKey.server("g1", "c0", "p1")
        change = DistilledWrite(categories={f"{name}-{i}": f"value {i}"})
        rows = await memory.store.write_distilled(
            [(key, None)], change, reset_counter=None, now=memory.clock()
        )
        await memory.cache.apply_rows(rows, memory.clock())


async def handle(memory: shortterm.Memory, name: str, cmd: dict[str, Any]) -> Any:
    op = cmd["op"]
    if op == "capture":
        turn = memory.turn(
            user_id=cmd["user"], channel_id=cmd["channel"], server_id=cmd.get("server")
        )
        await turn.capture(
            history=[shortterm.Message("user", cmd["text"], author_id=cmd["user"])],
            replies=[shortterm.Reply(cmd.get("reply", "ok"))],
        )
        return None
    if op == "get":
        return _entry(await memory.get(_key(cmd["key"])))
    if op == "set_summary":
        await memory.set_summary(_key(cmd["key"]), cmd["text"])
        return None
    if op == "configure_server":
        settings = shortterm.ServerSettings(refresh_cadence=cmd["cadence"])
        await memory.configure_server(cmd["server"], settings)
        return None
    if op == "cadence":
        return (await memory.server_settings(cmd["server"])).refresh_cadence
    if op == "clear_channel":
        return await memory.clear_channel(cmd["channel"])
    if op == "clear_user":
        return await memory.clear_user(cmd["user"])
    if op == "storm":
        turns, channels = cmd["turns"], cmd["channels"]
        await asyncio.gather(*(_turn(memory, name, i, channels) for i in range(turns)))
        return memory.stats()["degraded_captures"]
    raise ValueError(f"unknown op {op!r}")


async def main(store_url: str, cache_url: str, name: str) -> None:
    async with shortterm.open(store=store_url, cache=cache_url, config=CONFIG) as memory:
        await serve(lambda cmd: handle(memory, name, cmd))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
