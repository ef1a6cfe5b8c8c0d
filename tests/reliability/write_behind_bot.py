"""A bot process with the write-behind on, for the cross-process and crash tests.

``python -m tests.reliability.write_behind_bot STORE_URL MODE WINDOW_MS TURNS [unfenced]``

``capture`` mode: captures in channel ``c`` (user ``u``, server ``g``) until the file
``STORE_PATH.stop`` exists, printing each capture's fence position once it returned, then
closes (its last flush) and prints ``closed``. When ``STORE_PATH.hold`` appears, its next
capture is held unflushed: it prints ``held`` after it and stops everything (its event loop
blocked, so no flush can run) until the file is gone, so that a clear the test makes meanwhile
certainly lands between a capture and its flush. ``tool`` mode: the same, with a tool call every
fifth turn, printing ``tool N`` once it was acknowledged (the crash test kills it). ``unfenced``
is a deliberate break (the flush skips the fence check), to show the tests catch one.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import shortterm
from shortterm import Message, Reply
from shortterm.model.fence import WriteFence
from shortterm.store.base import BufferedTouch
from shortterm.store.sqlite import SQLiteStore
from shortterm.tool import texts


def break_the_fence() -> None:
    original = SQLiteStore.touch_batch

    async def unfenced(self: SQLiteStore, touches: list[BufferedTouch]) -> Any:
        never = [t._replace(fence=WriteFence(2**62, t.fence.triggerer)) for t in touches]
        return await original(self, never)

    SQLiteStore.touch_batch = unfenced  # type: ignore[method-assign]


async def main(url: str, mode: str, window_ms: int, turns: int) -> None:
    stop = Path(url.removeprefix("sqlite:///") + ".stop")
    hold = Path(url.removeprefix("sqlite:///") + ".hold")
    held = False
    config = shortterm.Config(
        sweep_interval_s=0, write_behind_ms=window_ms, write_behind_turns=turns
    )
    rng = random.Random(os.getpid())
    async with shortterm.open(store=url, config=config) as memory:
        assert memory.write_behind is not None or window_ms == 0
        positions: list[int] = []
        original = memory.engine.begin_write

        async def recording(triggerer: str | None = None) -> WriteFence:
            fence = await original(triggerer)
            positions.append(fence.position)
            return fence

        memory.engine.begin_write = recording  # type: ignore[method-assign]
        print("ready", flush=True)
        i = 0
        while not stop.exists():  # noqa: ASYNC240 (a test worker: one stat per turn)
            turn = memory.turn(user_id="u", channel_id="c", server_id="g")
            if mode == "tool" and i % 5 == 4:
                result = await turn.call_tool(texts.TOOL_NAME, {"summary": f"v{i}"})
                if result.ok:
                    print(f"tool {i}", flush=True)
            else:
                holding = not held and hold.exists()  # noqa: ASYNC240 (as above)
                if holding and memory.write_behind is not None:
                    await memory.write_behind.flush()  # the held capture alone is buffered
                positions.clear()
                await turn.capture(
                    history=[Message("user", f"m{i}", author_id="u")], replies=[Reply("ok")]
                )
                print(f"capture {positions[0]}", flush=True)
                if holding:
                    held = True
                    print("held", flush=True)
                    while hold.exists():  # noqa: ASYNC240 (blocking on purpose: no flush runs)
                        time.sleep(0.005)  # noqa: ASYNC251
            i += 1
            if rng.random() < 0.3:
                await asyncio.sleep(rng.random() * 0.003)
    print("closed", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 5 and sys.argv[5] == "unfenced":
        break_the_fence()
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
