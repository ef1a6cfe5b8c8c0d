"""How far one call's data travels through the package: modules entered and returns to them.

One warm call of each operation on SQLite + the in-process tier (the embedded default) is
traced with ``sys.setprofile``. Only calls into ``shortterm`` count; a resumed coroutine is
not a new call. Consecutive calls inside one module collapse into one visit; ``modules`` is
how many distinct modules the call entered, ``returns`` how many visits went back to a module
entered before (the back-and-forth a reader follows)::

    python benchmarks/trace_paths.py            # a table
    python benchmarks/trace_paths.py --path capture   # and the modules visited, in order
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import FrameType
from typing import Any

import shortterm

PACKAGE = str(Path(shortterm.__file__).resolve().parent) + "/"


class Trace:
    """The modules of ``shortterm`` one call enters, in order, consecutive repeats collapsed."""

    def __init__(self) -> None:
        self.visits: list[str] = []
        self._started: set[int] = set()
        self._frames: list[FrameType] = []  # keeps ids unique while tracing

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        path = frame.f_code.co_filename
        if not path.startswith(PACKAGE):
            return
        if id(frame) in self._started:
            return  # a coroutine resumed, not a new call
        self._started.add(id(frame))
        self._frames.append(frame)
        module = path[len(PACKAGE) :].removesuffix(".py")
        if not self.visits or self.visits[-1] != module:
            self.visits.append(module)

    @property
    def modules(self) -> int:
        return len(set(self.visits))

    @property
    def returns(self) -> int:
        seen: set[str] = set()
        back = 0
        for module in self.visits:
            back += module in seen
            seen.add(module)
        return back


async def traced(call: Callable[[], Awaitable[object]]) -> Trace:
    trace = Trace()
    sys.setprofile(trace)
    try:
        await call()
    finally:
        sys.setprofile(None)
    return trace


async def main(show: str | None) -> None:
    history = [
        shortterm.Message("user", f"message {i} about the trip", author_id=f"u{i % 3}")
        for i in range(10)
    ]
    replies = [shortterm.Reply("a reply")]
    with tempfile.TemporaryDirectory() as tmp:
        config = shortterm.Config(sweep_interval_s=0)
        async with shortterm.open(f"sqlite:///{Path(tmp) / 't.db'}", config=config) as memory:
            for c in range(3):  # other channels' memory for the context to gather
                t = memory.turn(user_id="u0", channel_id=f"other{c}", server_id="g1")
                await t.capture(history, replies)
                await t.call_tool("update_short_term_memory", {"summary": f"plans {c}"})

            def turn() -> shortterm.Turn:
                return memory.turn(user_id="u0", channel_id="c1", server_id="g1")

            for _ in range(2):  # warm: the same calls once before they are traced
                await turn().capture(history, replies)
                await turn().context()
                await turn().call_tool("update_short_term_memory", {"summary": "warm"})
            paths: dict[str, Callable[[], Awaitable[object]]] = {
                "capture": lambda: turn().capture(history, replies),
                "tool call": lambda: turn().call_tool(
                    "update_short_term_memory", {"summary": "traced"}
                ),
                "context": lambda: turn().context(),
                "clear_channel": lambda: memory.clear_channel("other0"),
            }
            print(f"{'path':<14} {'modules':>7} {'returns':>7}")
            for name, call in paths.items():
                trace = await traced(call)
                print(f"{name:<14} {trace.modules:>7} {trace.returns:>7}")
                if show == name:
                    print("  " + " → ".join(trace.visits))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", choices=("capture", "tool call", "context", "clear_channel"))
    asyncio.run(main(parser.parse_args().path))
