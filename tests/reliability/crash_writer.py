"""The writer the crash test SIGKILLs: ``python -m tests.reliability.crash_writer URL SEED START``.

It prints ``ready`` once open, then runs operations ``START, START+1, ...`` one at a time and
prints the index of each only after the call returned (a tool call only when it said ``ok``).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import shortterm
from shortterm import Message, Privacy, Reply, ServerSettings, UserSettings
from tests.reliability.crash_ops import G, H, P, op_for


async def run(memory: shortterm.Memory, op: dict[str, Any]) -> None:
    j, kind = op["j"], op["op"]
    if kind in ("tool_g", "tool_h", "capture"):
        server, channel = (G, f"c{j}") if kind != "tool_h" else (H, f"d{j}")
        turn = memory.turn(user_id=f"u{j}", channel_id=channel, server_id=server, persona_id=P)
        if kind == "capture":
            await turn.capture(
                history=[Message("user", f"line {op['i']}", author_id=f"u{j}")],
                replies=[Reply(f"reply {op['i']}")],
            )
            return
        args = {"summary": f"v{op['i']}"} if kind == "tool_g" else op["args"]
        result = await turn.call_tool("update_short_term_memory", args)
        if not result.ok:
            raise RuntimeError(f"tool call {op} refused: {result.message}")
    elif kind == "server":
        settings = ServerSettings(refresh_cadence=op["cadence"], nudge_text=f"nudge {op['i']}")
        await memory.configure_server(op["server"], settings)
    elif kind == "user":
        settings_u = UserSettings(Privacy(op["privacy"]), cross_server_opt_in=op["opt_in"])
        await memory.configure_user(op["user"], settings_u)
    elif kind == "clear_channel":
        await memory.clear_channel(op["channel"])
    elif kind == "clear_user":
        await memory.clear_user(f"u{j}")
    elif kind == "clear_server_channel":
        await memory.clear_server_channel(G, f"c{j}", P)


async def main(url: str, seed: int, start: int) -> None:
    config = shortterm.Config(sweep_interval_s=0)
    async with shortterm.open(store=url, config=config) as memory:
        print("ready", flush=True)
        i = start
        while True:
            await run(memory, op_for(seed, i))
            print(i, flush=True)
            i += 1


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
