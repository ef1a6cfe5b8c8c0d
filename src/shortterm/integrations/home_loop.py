"""Running an adapter's work on the event loop its memory serves on.

A :class:`~shortterm.Memory` on PostgreSQL or Redis belongs to the loop that opened it: their
connections answer futures of that loop only. A framework may call an adapter from a loop of
its own (the Agents SDK's ``Runner.run_sync`` runs on the calling thread's default loop, often
in a worker thread), so the adapter hands its work to the memory's loop when that loop is
running elsewhere, and waits for it without blocking its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..model.errors import ShortTermError

__all__ = ["HomeLoop", "OtherLoop"]

T = TypeVar("T")


class OtherLoop(ShortTermError, RuntimeError):
    """The memory was used from an event loop other than its own, which is not running."""

    def __init__(self, who: str) -> None:
        super().__init__(
            f"{who} ran on an event loop other than its memory's, and the memory's loop is not "
            "running to serve it (PostgreSQL and Redis connections belong to the loop that "
            "opened them): open the memory on the loop the run uses, or keep the memory's loop "
            "running in a thread and pass it as loop="
        )


class HomeLoop:
    """The loop a memory serves on: ``loop``, else the loop running when this is made, else
    the loop of the first call."""

    def __init__(self, who: str, loop: asyncio.AbstractEventLoop | None = None) -> None:
        if loop is not None and not isinstance(loop, asyncio.AbstractEventLoop):
            raise TypeError(f"loop must be an asyncio event loop or None, not {loop!r}")
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
        self.loop = loop
        self._who = who

    async def run(self, work: Callable[[], Awaitable[T]]) -> T:
        """``await work()`` on the memory's loop: here when this is it; handed over (and
        awaited from here) when it runs in another thread; here too when it does not run at
        all (an in-process memory on SQLite serves any loop; one that cannot says so)."""
        here = asyncio.get_running_loop()
        home = self.loop
        if home is None:
            self.loop = home = here
        if home is here:
            return await work()
        if home.is_running():
            future = asyncio.run_coroutine_threadsafe(_awaited(work), home)
            return await asyncio.wrap_future(future)
        try:
            return await work()
        except RuntimeError as exc:
            if "loop" in str(exc) and not isinstance(exc, ShortTermError):
                raise OtherLoop(self._who) from exc
            raise


async def _awaited(work: Callable[[], Awaitable[T]]) -> T:
    return await work()
