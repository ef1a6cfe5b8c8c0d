"""Opening memory: ``await shortterm.open(...)`` or ``async with shortterm.open(...) as memory``."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from typing import Any

from ..cache.base import HotTier
from ..model.config import Config
from ..model.errors import InvalidInput
from ..store.base import Store
from .backends import DEFAULT_STORE_URL, make_cache, make_store
from .closing import ClosedOnExit
from .engine.engine import Clock
from .facade import Memory

__all__ = ["Opening", "open"]


class Opening(ClosedOnExit):
    """``await shortterm.open(...)`` or ``async with shortterm.open(...) as memory``."""

    def __init__(self, factory: Callable[[], Memory], *, hydrate: bool = True) -> None:
        self._factory = factory
        self._hydrate = hydrate
        self._memory: Memory | None = None

    async def _open(self) -> Memory:
        memory = self._factory()
        try:
            await memory.start(hydrate=self._hydrate)
        except BaseException:
            await memory.close()
            raise
        self._memory = memory
        return memory

    def __await__(self) -> Generator[Any, None, Memory]:
        return self._open().__await__()

    async def __aenter__(self) -> Memory:
        return await self._open()

    async def close(self) -> None:
        """Close the memory this opened (nothing when it failed to open)."""
        if self._memory is not None:
            await self._memory.close()


def open(
    store: str | Store = DEFAULT_STORE_URL,
    cache: str | HotTier = "memory://",
    *,
    config: Config | None = None,
    clock: Clock | None = None,
    hydrate: bool = True,
) -> Opening:
    """Open working memory: apply migrations and hydrate the rows still inside their TTL.

    ``store`` and ``cache`` are URLs (``sqlite:///shortterm.db``, ``memory://``,
    ``postgresql://…``, ``redis://…``) or backend objects you built yourself.
    ``hydrate=False`` skips the bulk load: reads then go to the durable tier on a miss, so a
    short-lived process (an admin command) costs what it touches, not the size of the store.
    """
    cfg = config if config is not None else Config()
    if not isinstance(cfg, Config):
        raise InvalidInput("config", config, "a shortterm.Config")
    if clock is not None and not callable(clock):
        raise InvalidInput("clock", clock, "a callable returning epoch seconds")
    chosen_clock: Clock = clock if clock is not None else time.time
    if not isinstance(hydrate, bool):
        raise InvalidInput("hydrate", hydrate, "True or False")

    def factory() -> Memory:
        st = make_store(store) if isinstance(store, str) else store
        ca = make_cache(cache, cfg) if isinstance(cache, str) else cache
        return Memory(store=st, cache=ca, config=cfg, clock=chosen_clock)

    return Opening(factory, hydrate=hydrate)
