"""A bot (or admin) process for the LISTEN liveness tests, driven by JSON lines on stdin.

``python -m tests.reliability.listen_worker STORE_URL``: PostgreSQL and an in-process hot
tier, so that a forget made elsewhere reaches this process only by following the journal.
Each command is ``{"op": ...}`` and each answer ``{"ok": result}`` or ``{"error": text}``;
times are ``time.monotonic()``, one clock for every process of the machine.

A ``capture`` with ``"report": true`` answers twice: ``"began"`` as soon as its write fence
is read (the test may stop the process from then on: the capture is in flight), then
``null`` when it is done.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import shortterm
from shortterm import Message, Reply, ScopeKey
from shortterm.model.fence import WriteFence
from shortterm.store.postgres import PostgresStore
from tests.workers import serve

CONFIG = shortterm.Config(sweep_interval_s=0)
G, P = "g1", "p1"


class Bot:
    def __init__(self, memory: shortterm.Memory) -> None:
        self.memory = memory
        self.report = False  # say "began" at the next fence read
        original = memory.engine.begin_write

        async def reporting(triggerer: str | None = None) -> WriteFence:
            fence = await original(triggerer)
            if self.report:
                self.report = False
                print(json.dumps({"ok": "began"}), flush=True)
            return fence

        memory.engine.begin_write = reporting  # type: ignore[method-assign]

    async def handle(self, cmd: dict[str, Any]) -> Any:
        op, memory = cmd["op"], self.memory
        if op == "capture":
            turn = memory.turn(user_id=cmd["user"], channel_id=cmd["channel"], server_id=G,
                               persona_id=P)  # fmt: skip
            history = [Message("user", text, author_id=who) for who, text in cmd["said"]]
            self.report = bool(cmd.get("report"))
            await turn.capture(history=history, replies=[Reply("noted")])
            return None
        if op == "clear_channel":
            started = time.monotonic()
            await memory.clear_channel(cmd["channel"])
            return [started, time.monotonic()]
        if op == "clear_user":
            started = time.monotonic()
            await memory.clear_user(cmd["user"])
            return [started, time.monotonic()]
        if op == "listening":  # until the LISTEN connection has proved itself alive
            store = memory.store
            assert isinstance(store, PostgresStore)
            deadline = time.monotonic() + 30
            while not store.listening:
                assert time.monotonic() < deadline, "the LISTEN connection never proved alive"
                await asyncio.sleep(0.01)
            return True
        if op == "read":
            # Everything the given scopes hold now, as one text to search.
            texts = []
            for kind, owner, channel in cmd["keys"]:
                entry = await memory.get(ScopeKey(kind, owner, channel, P))
                if entry is not None:
                    texts += [m.content for m in entry.messages]
            return "\n".join(texts)
        raise ValueError(f"unknown op {op!r}")


async def main(store_url: str) -> None:
    async with shortterm.open(store=store_url, cache="memory://", config=CONFIG) as memory:
        bot = Bot(memory)
        await serve(bot.handle)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
