"""The in-process tier's recall order: each owner's records sorted by when they last held
something new, so a turn reads an owner newest first and stops once its context is full.

A record's *score* is the newest time among the values it holds (its messages' capture, its
summary's and its categories' writes): the entry's :attr:`~shortterm.model.Entry.updated_at`
while they are all live, and never below it (a value that expires only lowers it). Each owner
keeps a list of its records ascending by ``(score, order)``, ``order`` falling with each
record added (so among equal scores the list, read backwards, gives the records in the order
the owner's index holds them, the order the old full read broke ties in). A record changed
moves in its list (a bisection and a short move: a capture goes to the end); a record removed
is only marked, and the list is compacted once most of it is marked. A record holding nothing
has no place in the list. An owner's list is built at its first read (and again after a bulk
load added records to it), so a hydration, and an owner never read, pay nothing for it.

:class:`InProcessRecent` merges the lists of a turn's owners newest first: an entry is given
out once no unread record can be newer (each unread one is at most its score), so the first
few come from the ends of the lists whatever their length.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from ..model import Entry
from .base import Owner, Recent

if TYPE_CHECKING:
    from .inprocess_records import Record

__all__ = ["InProcessRecent", "OwnerOrder", "score"]

_INF = float("inf")
ORDER_KEY = attrgetter("rscore", "order")
_COMPACT_MIN = 16  # marked records a list keeps before it is worth compacting


def score(rec: Record) -> float:
    """The newest time among the values ``rec`` holds, live or not (``-inf``: none); the
    rule of ``RecordBook._deadlines`` for which values it holds."""
    best = -_INF
    if rec.messages and rec.messages_at is not None:
        best = rec.messages_at
    at = rec.summary_at
    if rec.summary is not None and at is not None and at > best:
        best = at
    at = rec.categories_at
    if rec.categories and at is not None and at > best:
        best = at
    return best


class OwnerOrder:
    """One owner's records ascending by ``(score, order)`` (see the module docstring)."""

    __slots__ = ("dead", "items", "known")

    def __init__(self, items: list[Record], known: int) -> None:
        self.items = items
        self.dead = 0  # items whose record left the list (removed, or holding nothing)
        # How many of the owner's records this order has seen added and not removed: a bulk
        # load adds records behind its back, and a count that differs from the owner's
        # tells the next read to build the order again.
        self.known = known

    @classmethod
    def build(cls, held: Iterable[Record], orders: Iterator[int]) -> OwnerOrder:
        """The order of an owner's records, given in the order the owner's index holds
        them: built at its first read (a bulk load never pays for it), and again when a
        bulk load added records since."""
        items = []
        known = 0
        for rec in held:
            known += 1
            rec.order = next(orders)
            rec.rscore = new = score(rec)
            rec.listed = new != -_INF
            if rec.listed:
                items.append(rec)
        items.sort(key=ORDER_KEY)
        return cls(items, known)

    def add(self, rec: Record) -> None:
        """List ``rec`` at its score (set, finite)."""
        items = self.items
        rec.listed = True
        if not items or ORDER_KEY(items[-1]) < (rec.rscore, rec.order):
            items.append(rec)  # the usual case: a capture is the owner's newest write
        else:
            insort(items, rec, key=ORDER_KEY)

    def move(self, rec: Record, new: float) -> None:
        """Give a listed record a new score (``-inf``: it leaves the list)."""
        items = self.items
        if items[-1] is rec:
            items.pop()
        else:
            at = bisect_left(items, (rec.rscore, rec.order), key=ORDER_KEY)
            if items[at] is not rec:  # pragma: no cover - the list's invariant broken
                raise AssertionError("a listed record is not where its score puts it")
            del items[at]
        rec.listed = False
        rec.rscore = new
        if new != -_INF:
            self.add(rec)

    def drop(self, rec: Record) -> None:
        """``rec`` leaves the list: marked now, taken out when the list is compacted."""
        rec.listed = False
        self.dead += 1
        if self.dead > _COMPACT_MIN and 2 * self.dead > len(self.items):
            self.items = [r for r in self.items if r.listed]
            self.dead = 0


class InProcessRecent(Recent):
    """Newest first over the lists of a turn's owners (see the module docstring)."""

    def __init__(
        self,
        orders: Callable[[Owner], OwnerOrder | None],
        owners: Sequence[Owner],
        now: float,
        view: Callable[[Record, float], Entry | None],
        expired: Callable[[Record], None],
        incomplete: list[Owner],
        counts: dict[str, int],
    ) -> None:
        self.incomplete = incomplete
        self._orders = orders
        self._owners: Sequence[Owner] | None = owners
        self._counts = counts
        self._now = now
        self._view = view
        self._expired = expired
        # Per owner: its list, the position of its next unread record, its rank. Taken at the
        # first step, not before: the tier may change while the caller awaits something
        # else, and the steps themselves never suspend, so nothing changes between them.
        self._streams: list[list[Any]] = []
        # Read but not given out yet: (-updated_at, rank, -order, entry), smallest first.
        self._pending: list[tuple[float, int, int, Entry]] = []

    def _start(self, owners: Sequence[Owner]) -> None:
        self._owners = None
        for rank, owner in enumerate(owners):
            order = self._orders(owner)
            if order is not None and order.items:
                self._streams.append([order.items, len(order.items) - 1, rank])

    async def __anext__(self) -> Entry:
        if self._owners is not None:
            self._start(self._owners)
        streams = self._streams
        if len(streams) == 1 and not self._pending:
            # One owner (a guild turn without the opt-in): its list is the order, so long as
            # no record read has a value expired since it was placed.
            stream = streams[0]
            items, at, now = stream[0], stream[1], self._now
            while at >= 0:
                rec = items[at]
                at -= 1
                if not rec.listed:
                    continue
                view = self._live_view(rec, now)
                if view is None:
                    continue
                stream[1] = at
                if view._newest == rec.rscore:
                    self._counts["hits"] += 1
                    return view
                heapq.heappush(self._pending, (-view._newest, stream[2], -rec.order, view))
                break
            else:
                stream[1] = at
                raise StopAsyncIteration
        entry = self._next()
        if entry is None:
            raise StopAsyncIteration
        return entry

    def _live_view(self, rec: Any, now: float) -> Entry | None:
        """The record's view while it shows something; ``None`` otherwise (an expired
        record is handed to the tier's expiry on the way)."""
        view = rec.view if rec.view is not None and now < rec.view_until else None
        if view is None:
            view = self._view(rec, now)
            if view is None and now >= rec.expires_at:
                self._expired(rec)
        return view

    def _next(self) -> Entry | None:
        pending, now = self._pending, self._now
        while True:
            # The stream whose next unread record could come first, and how early.
            best: list[Any] | None = None
            bound: tuple[float, int, int] | None = None
            for stream in self._streams:
                items, at, rank = stream
                while at >= 0 and not items[at].listed:
                    at -= 1  # removed since it was listed
                stream[1] = at
                if at < 0:
                    continue
                rec = items[at]
                b = (-rec.rscore, rank, -rec.order)
                if bound is None or b < bound:
                    best, bound = stream, b
            if pending and (bound is None or pending[0][:3] < bound):
                self._counts["hits"] += 1
                return heapq.heappop(pending)[3]
            if best is None:
                return None
            items, at, rank = best
            rec = items[at]
            best[1] = at - 1
            view = self._live_view(rec, now)
            if view is None:
                continue
            newest = view._newest
            if not pending and newest == rec.rscore:
                # Its key is its bound, the least of all: it comes next (the usual case).
                self._counts["hits"] += 1
                return view
            heapq.heappush(pending, (-newest, rank, -rec.order, view))
