"""A turn's own guards: one upgrade per turn, one at a time, and explicit long-term intent.

Whether the tool may be used is decided by :func:`rules.refusal` over a snapshot; the guard
holds the turn's part of it (what happened on this turn so far) and, when several processes
serve the turn, the :class:`SharedGuard` they share. A shared claim is a lease: a process that
dies mid-call leaves it to be taken over (:class:`Lapsed`) once its deadline passed.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Protocol

from ...intent import has_long_term_intent
from .. import rules
from ..turn_args import TurnArgs

__all__ = ["Lapsed", "SharedGuard", "TurnGuard"]


@dataclass(frozen=True, slots=True)
class Lapsed:
    """The turn's upgrade claim, taken over from owners that missed their deadline (a process
    that died mid-call): their writes may have landed, so the durable tier decides before
    this call writes (``Engine.take_over_upgrade``). ``since``: a journal position older than
    any of their writes; ``targets``: the fence targets their writes carry."""

    since: int
    targets: tuple[str, ...]


class SharedGuard(Protocol):
    """The one-upgrade-per-turn guard of a turn that several processes serve (the sidecar's
    Redis turn registry). A :class:`TurnGuard` only holds in one process; with a shared
    guard, a tool call also claims the turn's upgrade where every process sees it,
    atomically, just before it writes."""

    @property
    def targets(self) -> tuple[str, ...]:
        """The fence targets this call's write must carry: whoever takes the claim over after
        its deadline fences them, so the write cannot land after that."""
        ...

    async def claim(self) -> str | Lapsed | None:
        """``None`` when this call may write now, :class:`Lapsed` when it may once the
        durable tier says the lapsed owners' writes did not land; otherwise the refusal for
        the model."""
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

    @property
    def targets(self) -> tuple[str, ...]:
        """The fence targets the upgrade's write carries for the shared guard (see there)."""
        return () if self._shared is None else self._shared.targets

    async def claim(self) -> str | Lapsed | None:
        """Take the turn's upgrade for a write about to begin: ``None`` (or :class:`Lapsed`,
        see there) when taken (a parallel call on this turn is then refused until
        :meth:`release`), otherwise the refusal the shared guard gave."""
        if self._shared is not None:
            taken = await self._shared.claim()  # other processes serving this turn see it too
            if isinstance(taken, str):
                return taken
            self._in_flight = True
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
