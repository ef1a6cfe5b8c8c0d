"""Counting the Redis commands a stretch of code sends, as the client packs them (each
command of a pipeline on its own): for benchmarks and the tests that bound them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["counted_commands"]


@contextlib.contextmanager
def counted_commands(tally: list[int]) -> Iterator[None]:
    """Adds to ``tally[0]`` every command any asyncio Redis client packs while inside."""
    from redis.asyncio.connection import AbstractConnection

    pack = AbstractConnection.pack_command

    def counted(self: Any, *args: Any) -> Any:
        tally[0] += 1
        return pack(self, *args)

    AbstractConnection.pack_command = counted  # type: ignore[method-assign]
    try:
        yield
    finally:
        AbstractConnection.pack_command = pack  # type: ignore[method-assign]
