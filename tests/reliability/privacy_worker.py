"""One bot process for the cross-process privacy test, driven by JSON lines on stdin.

``python -m tests.reliability.privacy_worker STORE_URL CACHE_URL``; each command is
``{"op": ...}`` and each answer ``{"ok": result}`` or ``{"error": text}``.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import shortterm
from shortterm import Message, Privacy, Reply, ServerSettings, UserSettings
from tests.workers import serve

CONFIG = shortterm.Config(sweep_interval_s=0, settings_refresh_s=0)


def _turn(memory: shortterm.Memory, cmd: dict[str, Any]) -> shortterm.Turn:
    return memory.turn(
        user_id=cmd["user"],
        channel_id=cmd["channel"],
        server_id=cmd.get("server"),
        parent_channel_id=cmd.get("parent"),
        persona_id="p1",
        user_name=cmd["user"],
        bot_name="Tomo",
        channel_name=cmd["channel"],
    )


async def handle(memory: shortterm.Memory, cmd: dict[str, Any]) -> Any:
    op = cmd["op"]
    if op == "capture":
        history = [Message("user", text, author_id=who, speaker=who) for who, text in cmd["said"]]
        turn = _turn(memory, cmd)
        await turn.capture(history=history, replies=[Reply(cmd["reply"])])
        if "summary" in cmd:  # durable, so it outlives the process (messages do not)
            result = await turn.call_tool("update_short_term_memory", {"summary": cmd["summary"]})
            assert result.ok, result.message
        return None
    if op == "context":
        ctx = await _turn(memory, cmd).context()
        return "\n".join(item.text for item in ctx.items)
    if op == "private":
        settings = ServerSettings(private_channel_ids=frozenset(cmd["channels"]))
        await memory.configure_server(cmd["server"], settings)
        return None
    if op == "opt_in":
        await memory.configure_user(cmd["user"], UserSettings(Privacy.NONE, True))
        return None
    raise ValueError(f"unknown op {op!r}")


async def main(store_url: str, cache_url: str) -> None:
    async with shortterm.open(store=store_url, cache=cache_url, config=CONFIG) as memory:
        await serve(lambda cmd: handle(memory, cmd))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
