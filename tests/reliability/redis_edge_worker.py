"""A bot (or admin) process for the shared-tier edge tests, driven by JSON lines on stdin.

``python -m tests.reliability.redis_edge_worker STORE_URL CACHE_URL MARK_DIR [NOTIFY_DELAY_S]``;
each command is ``{"op": ...}`` and each answer ``{"ok": result}`` or ``{"error": text}``.
``NOTIFY_DELAY_S`` makes this process learn of each PostgreSQL NOTIFY that much later: a
NOTIFY in flight, or a LISTEN connection that is slow or reconnecting.

``capture`` with ``hold`` holds the capture between its durable touch and its hot-tier
write: it creates ``MARK_DIR/<token>`` once the touch is done, then waits for the test to
create ``MARK_DIR/<token>.go``, so a test lands a forget (or a loss of Redis data) in between.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import time
from pathlib import Path
from typing import Any

import shortterm
from shortterm import Message, Privacy, Reply, ServerSettings, UserSettings
from shortterm.model.errors import StoreUnavailable
from shortterm.tool import texts
from tests.reliability.edge_worker import P, turn_of
from tests.workers import serve

CONFIG = shortterm.Config(sweep_interval_s=0)  # settings refreshed the usual way (30 s)
G = "g1"

# Set for one capture: its marker file (the release file is the same name + ".go").
_HOLD: contextvars.ContextVar[Path | None] = contextvars.ContextVar("hold", default=None)
_RELEASE_WAIT_S = 60.0


def _hold_hot_writes(memory: shortterm.Memory) -> None:
    original = memory.cache.capture_scopes

    async def held(*args: Any, **kwargs: Any) -> int:
        marker = _HOLD.get()
        if marker is not None:
            marker.touch()  # the durable touch is done: its fence position is old now
            release = marker.with_name(marker.name + ".go")
            for _ in range(int(_RELEASE_WAIT_S / 0.01)):
                if release.exists():
                    break
                await asyncio.sleep(0.01)
        return await original(*args, **kwargs)

    memory.cache.capture_scopes = held  # type: ignore[method-assign]


def _delay_notify(memory: shortterm.Memory, delay_s: float) -> None:
    store = memory.store
    moved = store.journal_moved
    since: list[float] = []  # when the pending announcement arrived

    def late() -> bool:
        if moved() and not since:
            since.append(time.monotonic())
        if since and time.monotonic() - since[0] >= delay_s:
            since.clear()
            return True
        return False

    store.journal_moved = late  # type: ignore[method-assign]


async def _capture(memory: shortterm.Memory, marks: Path, cmd: dict[str, Any]) -> None:
    turn = turn_of(memory, cmd)
    # Stamped when sent, as a platform does: a forget after it covers it (its horizon).
    said = Message("user", cmd["text"], author_id=cmd["user"], speaker=cmd["user"], at=time.time())
    history = [said]
    hold = _HOLD.set(marks / cmd["token"] if cmd.get("hold") else None)
    try:
        await turn.capture(history=history, replies=[Reply("noted")])
    finally:
        _HOLD.reset(hold)


async def _forget(call: Any) -> str:
    """A forget, reported as "done" or as the error text the caller would see."""
    try:
        await call
    except StoreUnavailable as exc:
        return f"failed: {exc}"
    return "done"


async def handle(memory: shortterm.Memory, marks: Path, cmd: dict[str, Any]) -> Any:
    op = cmd["op"]
    if op == "capture":
        await _capture(memory, marks, cmd)
        return None
    if op == "summary":
        result = await turn_of(memory, cmd).call_tool(texts.TOOL_NAME, {"summary": cmd["text"]})
        return result.ok
    if op == "context":
        ctx = await turn_of(memory, cmd).context()
        return "\n".join(item.text for item in ctx.items)
    if op == "get":  # the raw entry of one scope, as this process sees it
        key = (
            shortterm.ScopeKey.server(G, cmd["channel"], P)
            if cmd.get("kind", "server") == "server"
            else shortterm.ScopeKey.user(cmd["user"], cmd["channel"], P)
        )
        return repr(await memory.get(key))
    if op == "clear_channel":
        return await _forget(memory.clear_channel(cmd["channel"]))
    if op == "clear_user":
        return await _forget(memory.clear_user(cmd["user"]))
    if op == "user":
        privacy = Privacy[cmd.get("privacy", "NONE")]
        await memory.configure_user(cmd["user"], UserSettings(privacy, cmd.get("opt_in", False)))
        return None
    if op == "private":
        settings = ServerSettings(private_channel_ids=frozenset(cmd["channels"]))
        await memory.configure_server(cmd["server"], settings)
        return None
    if op == "pending":  # this process's forgets of unknown outcome, still to retry
        return len(getattr(memory, "unsure_forgets", ()))
    if op == "pooled":  # the store's pool serves again (no longer connecting on its own)
        return not getattr(memory.store, "server_down", False)
    raise ValueError(f"unknown op {op!r}")


async def main(store_url: str, cache_url: str, marks: str, notify_delay_s: float) -> None:
    async with shortterm.open(store=store_url, cache=cache_url, config=CONFIG) as memory:
        _hold_hot_writes(memory)
        if notify_delay_s > 0:
            _delay_notify(memory, notify_delay_s)
        await serve(lambda cmd: handle(memory, Path(marks), cmd))


if __name__ == "__main__":
    delay = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], delay))
