"""``needs_raw``: the mark of the adapter tests that read items back in the shape added.

The shapes travel in ``Message.raw``; until the engine carries it through a capture (a reply's
too) and the Redis codec, those tests are expected to fail (strict: once it does, they must
pass).
"""

from __future__ import annotations

import asyncio
import json

import pytest

import shortterm
from shortterm.cache.redis import codec

__all__ = ["needs_raw"]


def _engine_carries_raw() -> bool:
    m = shortterm.Message("user", "x", at=1.0, raw="[1]")
    (back,) = codec.decode_messages([json.loads(codec.message_json(m))])
    if back.raw != "[1]":
        return False

    async def capture() -> bool:
        async with await shortterm.open(store="memory://", cache="memory://") as memory:
            turn = memory.turn(user_id="u", channel_id="c")
            await turn.capture([], [shortterm.Reply("a", raw="[1]")])
            entry = await memory.get(turn.live_key)
            return entry is not None and entry.messages[-1].raw == "[1]"

    return asyncio.run(capture())


needs_raw = pytest.mark.xfail(
    not _engine_carries_raw(),
    reason="the engine does not carry Message.raw through a capture and the Redis codec yet",
    strict=True,
)
