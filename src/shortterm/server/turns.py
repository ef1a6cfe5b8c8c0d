"""Turns that outlive one request: a bounded registry keyed by unguessable ids.

A bot starts a turn with one request, may call the tool with another and captures with a
third. The same :class:`shortterm.Turn` object serves all of them, so its per-turn guards (one
upgrade per turn) hold across requests. Ids come from :func:`secrets.token_urlsafe`; an id
expires ``ttl_s`` seconds after its last use, and at most ``max_turns`` are kept, the least
recently used evicted first.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from ..turn import Turn
from .errors import NotFound

__all__ = ["TurnNotFound", "TurnRegistry"]

ID_BYTES = 24  # 192 bits: 32 URL-safe characters


class TurnNotFound(NotFound):
    """No live turn has this id (never issued, expired, evicted or already captured)."""

    def __init__(self, turn_id: str) -> None:
        shown = turn_id if len(turn_id) <= 64 else turn_id[:61] + "..."
        super().__init__(
            f"turn {shown!r} is unknown or expired (ids live for a while after their last use, "
            "and end with their capture): start a new turn"
        )


@dataclass(slots=True)
class _Slot:
    turn: Turn
    expires_at: float


class TurnRegistry:
    """Live turns by id. Not thread-safe: it lives on the server's event loop.

    Every use pushes the expiry forward by the same ``ttl_s`` and moves the id to the end, so
    the order of the dict is both recency and expiry order: expired ids are always at the
    front, and purging them costs nothing per live id.
    """

    def __init__(self, *, ttl_s: float, max_turns: int, clock: Callable[[], float]) -> None:
        self.ttl_s = ttl_s
        self.max_turns = max_turns
        self._clock = clock
        self._slots: OrderedDict[str, _Slot] = OrderedDict()
        self.evicted = 0
        self.expired = 0

    def __len__(self) -> int:
        return len(self._slots)

    def _purge(self, now: float) -> None:
        slots = self._slots
        while slots:
            first = next(iter(slots.values()))
            if first.expires_at > now:
                break
            slots.popitem(last=False)
            self.expired += 1

    def add(self, turn: Turn) -> str:
        now = self._clock()
        self._purge(now)
        while len(self._slots) >= self.max_turns:
            self._slots.popitem(last=False)
            self.evicted += 1
        turn_id = secrets.token_urlsafe(ID_BYTES)
        self._slots[turn_id] = _Slot(turn, now + self.ttl_s)
        return turn_id

    def get(self, turn_id: str) -> Turn:
        """The live turn with this id (its expiry pushed forward), or :class:`TurnNotFound`."""
        now = self._clock()
        self._purge(now)
        slot = self._slots.get(turn_id)
        if slot is None:
            raise TurnNotFound(turn_id)
        slot.expires_at = now + self.ttl_s
        self._slots.move_to_end(turn_id)
        return slot.turn

    def discard(self, turn_id: str) -> None:
        self._slots.pop(turn_id, None)
