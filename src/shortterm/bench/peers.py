"""The same per-turn work on the libraries a bot developer might pick instead, when installed.

None of them is a dependency of shortterm (``pip install -e '.[bench]'`` in a shortterm checkout
brings them). Each
peer gets what it lacks for free: the owner index and the recency order that pick the three
other channels come from plain dicts, so only the peer's own storage calls are measured. A
peer does *less* than shortterm (no TTLs, privacy, lineage, rendering, counters, durability of
summaries); the ratio says what the extra work costs, not that the peers are slow.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ..model import Message
from .core import T0, Workload

__all__ = ["render_peers", "run_peers"]

Scope = tuple[str, str, str, str | None]


def _scopes(t: dict[str, Any]) -> tuple[Scope, list[Scope]]:
    user = ("user", t["user_id"], t["channel_id"], t["persona_id"])
    if t["server_id"] is None:
        return user, [user]
    server = ("server", t["server_id"], t["channel_id"], t["persona_id"])
    return server, [user, server]


class _Index:
    """What every peer is given: per-owner scopes in write order."""

    def __init__(self) -> None:
        self.by_owner: dict[tuple[str, str], dict[Scope, None]] = {}

    def wrote(self, scope: Scope) -> None:
        owned = self.by_owner.setdefault((scope[0], scope[1]), {})
        owned.pop(scope, None)
        owned[scope] = None

    def others(self, live: Scope) -> list[Scope]:
        owned = self.by_owner.get((live[0], live[1]), {})
        return [s for s in reversed(owned) if s[2] != live[2]][:3]


async def _drive(
    turns: int,
    capture: Callable[[Scope, list[Message]], Awaitable[None]],
    read: Callable[[Scope], Awaitable[object]],
) -> float:
    work, index = Workload(), _Index()
    samples = []
    for _ in range(turns):
        t = work.turn()
        said = [*work.history(t["user_id"], T0), Message("assistant", work.filler[:300], at=T0)]
        live, writes = _scopes(t)
        start = time.perf_counter_ns()
        await read(live)
        for other in index.others(live):
            await read(other)
        for scope in writes:
            await capture(scope, said[-10:])
            index.wrote(scope)
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1000


async def _langchain(turns: int, tmp: Path) -> float:
    from langchain_core.chat_history import InMemoryChatMessageHistory
    from langchain_core.messages import AIMessage, HumanMessage

    histories: dict[Scope, InMemoryChatMessageHistory] = {}

    async def capture(scope: Scope, said: list[Message]) -> None:
        history = histories.setdefault(scope, InMemoryChatMessageHistory())
        history.clear()
        history.add_messages(
            [HumanMessage(m.content) if m.role == "user" else AIMessage(m.content) for m in said]
        )

    async def read(scope: Scope) -> object:
        history = histories.get(scope)
        return history.messages if history is not None else []

    return await _drive(turns, capture, read)


async def _agents_sqlite(turns: int, tmp: Path) -> float:
    from agents.memory import SQLiteSession

    # One session object per scope, as the SDK intends; each holds a connection, so only the
    # most recently used few hundred stay open (the process would run out of descriptors).
    sessions: OrderedDict[Scope, SQLiteSession] = OrderedDict()
    path = str(tmp / "agents-sessions.db")

    def session(scope: Scope) -> SQLiteSession:
        found = sessions.get(scope)
        if found is None:
            found = sessions[scope] = SQLiteSession(":".join(str(p) for p in scope), path)
            if len(sessions) > 256:
                sessions.popitem(last=False)[1].close()
        sessions.move_to_end(scope)
        return found

    async def capture(scope: Scope, said: list[Message]) -> None:
        s = session(scope)
        await s.clear_session()
        await s.add_items([{"role": m.role, "content": m.content} for m in said])

    async def read(scope: Scope) -> object:
        return await session(scope).get_items(limit=10)

    try:
        return await _drive(turns, capture, read)
    finally:
        for s in sessions.values():
            s.close()


async def _langgraph_memory(turns: int, tmp: Path) -> float:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.memory import InMemorySaver

    saver = InMemorySaver()

    def config(scope: Scope) -> Any:
        return {"configurable": {"thread_id": ":".join(str(p) for p in scope), "checkpoint_ns": ""}}

    async def capture(scope: Scope, said: list[Message]) -> None:
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": [(m.role, m.content) for m in said]}
        checkpoint["channel_versions"] = {"messages": 1}
        saver.put(config(scope), checkpoint, {}, {"messages": 1})

    async def read(scope: Scope) -> object:
        return saver.get_tuple(config(scope))

    return await _drive(turns, capture, read)


PEERS: dict[str, Callable[[int, Path], Awaitable[float]]] = {
    "LangChain InMemoryChatMessageHistory": _langchain,
    "OpenAI Agents SDK SQLiteSession": _agents_sqlite,
    "LangGraph InMemorySaver (checkpointer)": _langgraph_memory,
}


async def run_peers(turns: int, tmp: Path) -> dict[str, Any]:
    """Median µs per turn (reads of the live and three other scopes, then the scope writes)
    for each peer that is installed; a peer that is absent or fails says why."""
    out: dict[str, Any] = {"turns": turns, "peers": {}}
    for name, peer in PEERS.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # peers' deprecation notices are not ours
                out["peers"][name] = {"median_us": await peer(turns, tmp)}
        except ModuleNotFoundError as exc:
            out["peers"][name] = {"skipped": f"not installed ({exc.name})"}
        except Exception as exc:
            out["peers"][name] = {"skipped": f"failed: {type(exc).__name__}: {exc}"}
    return out


def render_peers(peers: dict[str, Any], ours_us: float | None = None) -> str:
    lines = [
        f"The per-turn storage work (read the live scope and three other channels, write the "
        f"turn's scopes) over {peers['turns']:,} chat-day turns.",
        "",
        "| library | median µs per turn | shortterm ÷ peer | note |",
        "|---|---:|---:|---|",
    ]
    if ours_us is not None:
        lines.append(
            f"| shortterm (context + capture, SQLite + in-process) | {ours_us:.1f} | 1.00 | "
            "also renders, filters privacy and lineage, counts, keeps TTLs |"
        )
    for name, result in peers["peers"].items():
        if "median_us" in result:
            ratio = f"{ours_us / result['median_us']:.2f}" if ours_us is not None else "—"
            lines.append(f"| {name} | {result['median_us']:.1f} | {ratio} | |")
        else:
            lines.append(f"| {name} | — | — | {result['skipped']} |")
    return "\n".join(lines)
