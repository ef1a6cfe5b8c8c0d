"""A turn's own guards: one upgrade per turn, one at a time, and explicit long-term intent.

Whether the tool may be used is decided by :func:`rules.refusal` over a snapshot; the guard
holds the turn's part of it (what happened on this turn so far) and, when several processes
serve the turn, the :class:`SharedGuard` they share.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

from ..intent import has_long_term_intent
from . import rules
from .turn_args import TurnArgs

__all__ = ["SharedGuard", "TurnGuard"]


class SharedGuard(Protocol):
    """The one-upgrade-per-turn guard of a turn that several processes serve (the sidecar's
    Redis turn registry). A :class:`TurnGuard` only holds in one process; with a shared
    guard, a tool call also claims the turn's upgrade where every process sees it,
    atomically, just before it writes."""

    async def claim(self) -> str | None:
        """``None`` when this call may write now; otherwise the refusal for the model."""
        ...

    def settle(self, upgraded: bool) -> Awaitable[object]:
        """Release the claim: the upgrade landed (or may have), or it did not. Called as soon
        as that is known, so the release can travel with the hot tier's next round trip; the
        result is awaited before the call returns."""
        ...


class TurnGuard:
    """The per-turn state the tool rules read: whether the turn was upgraded, whether an
    upgrade is being written, and (scanned once, when first asked) long-term intent."""

    def __init__(
        self, args: TurnArgs, *, upgraded: bool = False, shared: SharedGuard | None = None
    ) -> None:
        self._args = args
        self.upgraded = upgraded  # one successful upgrade per turn
        self._in_flight = False  # an upgrade of this turn is being written
        self._shared = shared
        self._settling: Awaitable[object] | None = None  # the shared release, once under way
        self._intent: bool | None = None

    @property
    def in_flight(self) -> bool:
        return self._in_flight

    def long_term_intent(self) -> bool:
        """The user explicitly asked for something to be remembered permanently."""
        if self._intent is None:
            self._intent = has_long_term_intent(self._args.user_message, self._args.locale)
        return self._intent

    def refusal(self, snap: rules.Snapshot) -> str | None:
        """Why the turn may not update short-term memory now, or ``None``."""
        return rules.refusal(
            snap,
            long_term_intent=self.long_term_intent,
            upgraded=self.upgraded,
            in_flight=self._in_flight,
        )

    async def claim(self) -> str | None:
        """Take the turn's upgrade for a write about to begin: ``None`` when taken (a
        parallel call on this turn is then refused until :meth:`release`), otherwise the
        refusal the shared guard gave."""
        if self._shared is not None:
            taken = await self._shared.claim()  # other processes serving this turn see it too
            if taken is not None:
                return taken
        self._in_flight = True
        return None

    def committed(self, upgraded: bool) -> None:
        """The write committed (``upgraded``: every scope of it): the shared claim's release
        can start now, before the hot tier is updated, and go with that update."""
        self.upgraded = self.upgraded or upgraded
        if self._shared is not None and self._settling is None:
            self._settling = self._shared.settle(self.upgraded)

    async def release(self) -> None:
        """After the write: the claim is given back, with whether the turn is now upgraded."""
        self._in_flight = False
        if self._shared is not None:
            settling, self._settling = self._settling, None
            await (settling if settling is not None else self._shared.settle(self.upgraded))
