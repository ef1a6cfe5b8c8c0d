"""Our forgets of unknown outcome: what the forget code adds and the journal follower settles.

A module of its own: the follower asks it before it follows, and the forget code reaches the
follower (through the engine's parts), so neither may hold it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple

from ...store.base import Forgotten

__all__ = ["UnsureForget", "UnsureForgets"]


class UnsureForget(NamedTuple):
    """A forget of ours whose outcome is unknown: what
    :meth:`~shortterm.memory.engine.forget.Forgetting.forget` was given."""

    targets: Sequence[str]
    durable: Callable[[], Awaitable[Forgotten]]
    hot: Callable[[], Awaitable[int]]
    after: Callable[[], None] | None
    horizon: float | None = None


class UnsureForgets:
    """Our forgets whose commit may or may not have landed, oldest first: retried before this
    process serves anything (the journal follower asks :attr:`pending` before it follows)."""

    def __init__(self) -> None:
        self._forgets: list[UnsureForget] = []
        # A plain flag, not a property: every call of this process reads it.
        self.pending = False

    def add(self, forget: UnsureForget) -> None:
        self._forgets.append(forget)
        self.pending = True

    def take(self) -> list[UnsureForget]:
        """Every pending forget, leaving none (one that fails again is added back)."""
        taken, self._forgets, self.pending = self._forgets, [], False
        return taken

    def listed(self) -> tuple[UnsureForget, ...]:
        return tuple(self._forgets)
