"""Leaving ``async with`` closes: one exit for the memory and for its opening."""

from __future__ import annotations

from types import TracebackType

__all__ = ["ClosedOnExit"]


class ClosedOnExit:
    """An async context manager whose exit is :meth:`close`."""

    async def close(self) -> None:
        raise NotImplementedError

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
