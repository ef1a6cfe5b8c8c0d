"""A bot or admin process for the forget-at-the-edges tests, driven by JSON lines on stdin.

``python -m tests.reliability.edge_worker STORE_URL CACHE_URL [WRITE_BEHIND_MS]``; each command
is ``{"op": ...}`` and each answer ``{"ok": result}`` or ``{"error": text}``. The process's
clock can be moved (``shift``), so that what it journals looks as old as a test needs: a
forget made "eight days ago" is one the janitor prunes at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from typing import Any

import shortterm
from shortterm import Message, Reply, ScopeKey
from shortterm.model.errors import StoreUnavailable
from tests.workers import serve

P = "p1"


class Clock:
    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


def turn_of(memory: shortterm.Memory, cmd: dict[str, Any]) -> shortterm.Turn:
    return memory.turn(
        user_id=cmd["user"],
        channel_id=cmd["channel"],
        server_id=cmd.get("server"),
        persona_id=P,
        user_name=cmd["user"],
        bot_name="Tomo",
        channel_name=cmd["channel"],
    )


def _shown(entry: shortterm.Entry | None) -> str:
    if entry is None:
        return ""
    parts = [entry.summary or ""] + [m.content for m in entry.messages]
    return "\n".join(parts)


async def handle(memory: shortterm.Memory, clock: Clock, cmd: dict[str, Any]) -> Any:
    op = cmd["op"]
    if op == "capture":
        turn = turn_of(memory, cmd)
        said = [Message("user", cmd["text"], author_id=cmd["user"], speaker=cmd["user"])]
        try:
            await turn.capture(history=said, replies=[Reply(cmd.get("reply", "ok"))])
        except StoreUnavailable as exc:  # the test made the durable tier fail on purpose
            return f"unavailable: {exc}"
        if "summary" in cmd:
            result = await turn.call_tool("update_short_term_memory", {"summary": cmd["summary"]})
            assert result.ok, result.message
        return None
    if op == "get":  # what the user scope of (user, channel) shows now
        return _shown(await memory.get(ScopeKey.user(cmd["user"], cmd["channel"], P)))
    if op == "context":
        ctx = await turn_of(memory, cmd).context()
        return "\n".join(item.text for item in ctx.items)
    if op == "clear_channel":
        return await memory.clear_channel(cmd["channel"])
    if op == "clear_user":
        return await memory.clear_user(cmd["user"])
    if op == "janitor":
        return await memory.janitor(retention_days=cmd["days"])
    if op == "shift":  # seconds added to this process's clock from now on
        clock.offset = float(cmd["seconds"])
        return None
    if op == "stats":
        stats = memory.stats()
        return {k: stats[k] for k in ("degraded", "journal_errors", "store_errors")} | {
            "gaps": memory.journal.gaps
        }
    raise ValueError(f"unknown op {op!r}")


async def main(
    store_url: str, cache_url: str, write_behind_ms: str = "50", ttl_s: str = ""
) -> None:
    clock = Clock()
    config = shortterm.Config(sweep_interval_s=0, write_behind_ms=int(write_behind_ms))
    if ttl_s:
        config = dataclasses.replace(config, crude_ttl_s=int(ttl_s), summary_ttl_s=int(ttl_s))
    async with shortterm.open(
        store=store_url, cache=cache_url, config=config, clock=clock
    ) as memory:
        await serve(lambda cmd: handle(memory, clock, cmd))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
