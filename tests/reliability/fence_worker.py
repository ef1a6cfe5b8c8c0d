"""A bot (or admin) process for the cross-process forget tests, driven by JSON lines on stdin.

``python -m tests.reliability.fence_worker STORE_URL CACHE_URL``; each command is
``{"op": ...}`` and each answer ``{"ok": result}`` or ``{"error": text}``. Times are
``time.monotonic()``, which is one clock for every process of the machine.

``storm`` writes in channels ``{prefix}{i}`` during time slots shared with the process that
clears them (``clears``): slot ``i`` starts at ``t0 + i * slot_s``. Each write carries a
token and reports when its fence was read.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
from typing import Any

import shortterm
from shortterm import Message, Privacy, Reply, UserSettings
from shortterm.model.fence import WriteFence
from shortterm.tool import texts
from tests.fence_support import TOKEN, Jitter, Seen, with_token
from tests.workers import serve

CONFIG = shortterm.Config(sweep_interval_s=0)
G = "g1"


class Began(Seen):
    """Each token's write, with the moment its fence was read."""

    def __init__(self) -> None:
        super().__init__()
        self.at: dict[str, float] = {}

    def watch(self, memory: shortterm.Memory) -> None:
        engine = memory.engine  # where turns and the facade begin their writes
        original = engine.begin_write

        async def recording(triggerer: str | None = None) -> Any:
            fence = await original(triggerer)
            token = TOKEN.get()
            if token is not None:
                self.at.setdefault(token, time.monotonic())
            return fence

        engine.begin_write = recording  # type: ignore[method-assign]


async def _until(t: float) -> None:
    delay = t - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)


async def storm(memory: shortterm.Memory, began: Began, cmd: dict[str, Any]) -> dict[str, float]:
    rng = random.Random(cmd["seed"])
    t0, slot, prefix = cmd["t0"], cmd["slot_s"], cmd["prefix"]

    async def one_round(i: int) -> None:
        channel = f"{prefix}{i}"
        await _until(t0 + i * slot)

        def turn() -> shortterm.Turn:
            return memory.turn(user_id="u1", channel_id=channel, server_id=G, persona_id="p1")

        async def capture(token: str, personas: tuple[str, ...]) -> None:
            await asyncio.sleep(rng.random() * slot * 0.5)
            await with_token(
                token,
                lambda: turn().capture(
                    history=[Message("user", f"{token} said", author_id="u1")],
                    replies=[Reply(f"{token} reply", persona_id=p) for p in personas],
                ),
            )

        async def tool(token: str) -> None:
            await asyncio.sleep(rng.random() * slot * 0.5)
            await with_token(
                token, lambda: turn().call_tool(texts.TOOL_NAME, {"summary": f"{token} sum"})
            )

        await asyncio.gather(
            capture(f"one{i}x", ("p1",)), capture(f"two{i}x", ("p1", "p2")), tool(f"tool{i}x")
        )

    await asyncio.gather(*(one_round(i) for i in range(cmd["rounds"])))
    return began.at


async def clears(memory: shortterm.Memory, cmd: dict[str, Any]) -> list[list[float]]:
    rng = random.Random(cmd["seed"])
    t0, slot, prefix = cmd["t0"], cmd["slot_s"], cmd["prefix"]
    out = []
    for i in range(cmd["rounds"]):
        await _until(t0 + i * slot + rng.uniform(0.1, 0.9) * slot)
        started = time.monotonic()
        await memory.clear_channel(f"{prefix}{i}")
        out.append([started, time.monotonic()])
    return out


async def chatter(memory: shortterm.Memory, began: Began, cmd: dict[str, Any]) -> dict[str, float]:
    """Turns where each of ``victims`` triggers and where they only take part (several at
    once), until ``until``."""
    victims, i = cmd["victims"], 0

    async def turn_pair(victim: str, channel: str, token: str) -> None:
        mine = memory.turn(user_id=victim, channel_id=channel, server_id=G, persona_id="p1")
        theirs = memory.turn(user_id="bystander", channel_id=channel, server_id=G, persona_id="p1")
        history = [
            Message("user", f"{token} as participant", author_id=victim),
            Message("user", "bystander speaking", author_id="bystander"),
        ]
        await asyncio.gather(
            with_token(
                token,
                lambda: mine.capture(
                    history=[Message("user", f"{token} as triggerer", author_id=victim)],
                    replies=[Reply("noted")],
                ),
            ),
            with_token(token, lambda: theirs.capture(history=history, replies=[Reply("ok")])),
        )

    while time.monotonic() < cmd["until"]:
        i += 1
        picked = victims[i % 2 :: 2]  # half of them at once, the other half next time
        await asyncio.gather(
            *(turn_pair(v, f"talk{(i + k) % 4}", f"{v}-word-{i}x") for k, v in enumerate(picked))
        )
    return began.at


async def handle(memory: shortterm.Memory, began: Began, cmd: dict[str, Any]) -> Any:
    op = cmd["op"]
    if op == "storm":
        return await storm(memory, began, cmd)
    if op == "clears":
        return await clears(memory, cmd)
    if op == "chatter":
        return await chatter(memory, began, cmd)
    if op == "full":  # each user of "users" at its own time, from "at" on, "every" apart
        out = []
        for k, user in enumerate(cmd["users"]):
            await _until(cmd["at"] + k * cmd.get("every", 0.0))
            started = time.monotonic()
            await memory.configure_user(user, UserSettings(Privacy.FULL))
            out.append([started, time.monotonic()])
        return out
    if op == "capture":
        turn = memory.turn(
            user_id=cmd["user"], channel_id=cmd["channel"], server_id=cmd.get("server")
        )
        await turn.capture(
            history=[Message("user", cmd["text"], author_id=cmd["user"])],
            replies=[Reply(cmd.get("reply", "ok"))],
        )
        return None
    if op == "summary":
        turn = memory.turn(
            user_id=cmd["user"], channel_id=cmd["channel"], server_id=cmd.get("server")
        )
        result = await turn.call_tool(texts.TOOL_NAME, {"summary": cmd["text"]})
        return result.ok
    if op == "context":
        turn = memory.turn(
            user_id=cmd["user"], channel_id=cmd["channel"], server_id=cmd.get("server")
        )
        ctx = await turn.context()
        return "\n".join(item.text for item in ctx.items)
    if op == "entries":  # every entry this process can see for the channels named
        seen = []
        for channel in cmd["channels"]:
            for persona in (None, "p1", "p2"):
                for key in (
                    shortterm.ScopeKey.server(G, channel, persona),
                    *(shortterm.ScopeKey.user(u, channel, persona) for u in cmd["users"]),
                ):
                    entry = await memory.get(key)
                    if entry is not None:
                        seen.append(repr(entry))
        return "\n".join(seen)
    raise ValueError(f"unknown op {op!r}")


async def main(store_url: str, cache_url: str, jitter_seed: str | None) -> None:
    async with shortterm.open(store=store_url, cache=cache_url, config=CONFIG) as memory:
        if jitter_seed is not None:
            rng = random.Random(int(jitter_seed))
            memory.store = Jitter(memory.store, rng)  # type: ignore[assignment]
            memory.cache = Jitter(memory.cache, rng)  # type: ignore[assignment]
        if os.environ.get("FENCE_WORKER_BREAK"):  # to show the tests catch a disabled fence

            async def no_fence(triggerer: str | None = None) -> WriteFence:
                await memory.journal.follow()
                return WriteFence(2**62, triggerer)

            memory.engine.begin_write = no_fence  # type: ignore[method-assign]
        began = Began()
        began.watch(memory)
        await serve(lambda cmd: handle(memory, began, cmd))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))
