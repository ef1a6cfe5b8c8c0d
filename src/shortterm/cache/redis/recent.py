"""A turn's recall read on the Redis tier: the entries of a few owners newest first, read
only as far as the turn's context goes, whatever the owners' size.

Each group keeps an index of an owner's keys in it (``P{g<k>}o:…``, a sorted set), and every
script that changes a record scores it there by the newest time among what the record holds
(``newest`` in prelude.lua): the entry's ``updated_at`` while all its values are live, and
never below it (a value that expires only lowers it). A read asks every group for the head of
each owner's index (``recent.lua``, one command per owner and group: the index, the group's
mark, and the records named), merges them newest first, and hands an entry out once no unread
key can be newer: so the index's first few keys, whatever its length. The records it needs it
reads by name; those this process needed last time for the owner (and the turn's own scope)
go with the first round trip, so a steady server is read in one round trip. A group's mark
comes with everything read from it: a group short of what this process knows was forgotten
serves nothing (it is repaired and the owners read again, as an owner read does). Entries of
the same time: the owners' order, then the keys' (``member``) byte order.

The owner directory (:mod:`.directory`) still serves a whole owner's read (``owner_entries``):
these indexes are in each group's slot, so a cluster reads them where their records are.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from ...model import Entry, ScopeKey
from ..base import Owner, Recent
from .codec import Fields, Views, member
from .keeper import Keeper
from .scripts import RECENT, Groups

__all__ = ["RecentReads"]

_OWNERS_KEPT = 4096  # owners whose recently needed keys this process remembers

Request = tuple[int, int]  # (owner's rank, group)


class _Stream:
    """The head of one owner's index in one group, as far as it was read."""

    __slots__ = ("asked", "done", "group", "items", "pos", "rank")

    def __init__(self, rank: int, group: int) -> None:
        self.rank = rank
        self.group = group
        self.items: list[tuple[float, str]] = []  # (score, member), newest first
        self.pos = 0  # the next item not looked at
        self.asked = 0  # how many items of the index were asked for
        self.done = False  # the index has no more

    def bound(self) -> float | None:
        """The newest time an entry not looked at yet may have (``None``: no such entry)."""
        if self.pos < len(self.items):
            return self.items[self.pos][0]
        if self.done:
            return None
        return self.items[-1][0] if self.items else float("inf")


class RecentReads:
    """One tier's recall reads, and the keys each owner's last reads needed."""

    def __init__(self, g: Groups, views: Views, keeper: Keeper, counts: dict[str, int]) -> None:
        self._g = g
        self._views = views
        self._keeper = keeper
        self._counts = counts
        self._needed: OrderedDict[Owner, OrderedDict[str, int]] = OrderedDict()
        self.settings_seen = 0  # the newest settings change group 0's copy showed

    async def open(
        self, owners: Sequence[Owner], now: float, page: int, live: ScopeKey | None
    ) -> RedisRecent:
        """The owners' entries newest first (``RecentOrder.recent``): the first round trip
        is made here; a group found short is repaired, and the owners read again."""
        recent = RedisRecent(self, owners, now, max(1, page), live)
        await recent.start()
        if self._g.marks.due and await self._keeper.mend(now):
            recent = RedisRecent(self, owners, now, max(1, page), live)
            await recent.start()
        return recent

    def needed(self, owner: Owner) -> OrderedDict[str, int]:
        """The keys (and their groups) the owner's reads needed lately, least recent first."""
        found = self._needed.pop(owner, None)
        if found is None:
            found = OrderedDict()
        self._needed[owner] = found
        if len(self._needed) > _OWNERS_KEPT:
            self._needed.popitem(last=False)
        return found


class RedisRecent(Recent):
    """One recall read (see the module docstring)."""

    def __init__(
        self,
        reads: RecentReads,
        owners: Sequence[Owner],
        now: float,
        page: int,
        live: ScopeKey | None,
    ) -> None:
        self._reads = reads
        self._g = reads._g
        self._owners = list(owners)
        self._now = now
        self._page = page
        self._batch = page  # records read per later round trip, doubled each time
        self._keep = 2 * page + 2  # keys remembered per owner for the next read
        self._live = live
        self._streams = {
            (rank, group): _Stream(rank, group)
            for rank in range(len(owners))
            for group in self._g.all
        }
        self._fields: dict[str, Fields] = {}  # member -> its record's fields, as read
        # Looked at but not given out yet: (-updated_at, rank, member, entry), least first.
        self._pending: list[tuple[float, int, str, Entry]] = []
        self._active: list[_Stream] = []  # the streams that may still give an entry
        self.incomplete = []

    # -- round trips ----------------------------------------------------------------------

    async def start(self) -> None:
        """The first round trip: every owner's marker and each group's index head, with the
        records the owner's last reads needed and the turn's own scope's."""
        layout = self._g.layout
        wanted: dict[Request, list[str]] = {key: [] for key in self._streams}
        needed = [self._reads.needed(owner) for owner in self._owners]
        for rank, names in enumerate(needed):
            for name, group in names.items():
                wanted[(rank, group)].append(name)
        live: tuple[str, int, int] | None = None  # its member, its owner's rank, its group
        if (
            self._live is not None
            and (owner := (self._live.kind, self._live.owner_id)) in self._owners
        ):
            live = member(self._live), self._owners.index(owner), layout.key_group(self._live)
            if live[0] not in needed[live[1]]:
                wanted[(live[1], live[2])].append(live[0])
        ranges = {key: (self._page, False) for key in self._streams}
        markers = [layout.marker(kind, owner_id) for kind, owner_id in self._owners]
        found = await self._round(wanted, ranges, markers)
        self.incomplete = [o for o, there in zip(self._owners, found, strict=True) if not there]
        if live is not None:
            name, rank, group = live
            fields = self._fields.get(name)
            if fields is not None:  # its group vouched for it
                self.live_read = True
                if fields[0] is not None:
                    self.live = self._reads._views.view(name, fields, self._now)
            # The turn's capture makes it the owner's newest: the next read looks at it first.
            self._note(rank, name, group, True)
        # Groups whose index holds nothing of an owner are done with.
        self._active = [s for s in self._streams.values() if s.items or not s.done]

    async def _round(
        self,
        wanted: dict[Request, list[str]],
        ranges: dict[Request, tuple[int, bool]],
        markers: list[str],
    ) -> list[bool]:
        """One pipeline: ``markers`` (EXISTS each), then for each (owner, group) with work
        the next ``ranges`` items of its index (count, and whether with their records) and
        the records ``wanted``; group 0's settings change with the first owner's. Returns
        whether each marker exists."""
        g, layout = self._g, self._g.layout
        calls: list[tuple[Request, int, bool, list[str]]] = []
        for key in self._streams:
            (count, with_records), names = ranges.get(key, (0, False)), wanted.get(key, [])
            if count or names or (key == (0, 0) and markers):
                calls.append((key, count, with_records, names))

        def build(pipe: Any) -> None:
            for marker in markers:
                pipe.exists(marker)
            for (rank, group), count, with_records, names in calls:
                stream = self._streams[(rank, group)]
                kind, owner_id = self._owners[rank]
                base = layout.base(group)
                keys = [layout.owner_index(group, kind, owner_id), base + "fm"]
                with_sv = (rank, group) == (0, 0) and bool(markers)
                if with_sv:
                    keys.append(base + "sv")
                keys += [f"{base}e:{name}" for name in names]
                span = [str(stream.asked), str(stream.asked + count - 1)] if count else ["", ""]
                args = [*span, ("s" if with_sv else "") + ("r" if with_records else "")]
                g.eval(pipe, RECENT, keys, args)

        replies = await g.batch("recall read", build)
        for (key, count, _, names), reply in zip(calls, replies[len(markers) :], strict=True):
            self._take(key, count, names, reply)
        return [bool(found) for found in replies[: len(markers)]]

    def _take(self, key: Request, count: int, names: list[str], reply: list[Any]) -> None:
        """One group's answer for one owner: its mark first (nothing it sent is used when the
        group cannot vouch for it), its settings change, its index items, the records."""
        mark, settings, flat, listed, *records = reply
        stream = self._streams[key]
        if settings:
            self._reads.settings_seen = max(self._reads.settings_seen, int(settings))
        if not self._g.marks.seen(stream.group, mark):
            # Served once the group is repaired: nothing more of it is looked at.
            for other in self._streams.values():
                if other.group == stream.group:
                    del other.items[other.pos :]
                    other.done = True
            return
        if count:
            items = [(float(flat[i + 1]), flat[i]) for i in range(0, len(flat), 2)]
            stream.items += items
            stream.asked += count
            stream.done = len(items) < count
        for name, fields in (
            *zip(flat[::2], listed, strict=False),
            *zip(names, records, strict=True),
        ):
            self._fields[name] = (fields[0], fields[1], fields[2])

    async def _read_more(self) -> None:
        """One more round trip, for what the merge needs next: the records of the next keys
        to look at (newest first over every group), ``_batch`` of them, and the next items
        of each index with fewer than that left to look at, as many again as it gave, with
        their records. Both double each time, so a read that many keys are hidden from takes
        a few round trips, not one per group."""
        ahead = sorted(
            (-score, stream.rank, name, stream)
            for stream in self._active
            for score, name in stream.items[stream.pos :]
            if name not in self._fields
        )
        batch = self._batch
        wanted: dict[Request, list[str]] = {}
        for _, rank, name, stream in ahead[:batch]:
            wanted.setdefault((rank, stream.group), []).append(name)
        ranges = {
            (stream.rank, stream.group): (max(stream.asked, self._page), True)
            for stream in self._active
            if not stream.done and len(stream.items) - stream.pos < batch
        }
        self._batch *= 2
        await self._round(wanted, ranges, [])

    # -- the merge ------------------------------------------------------------------------

    async def __anext__(self) -> Entry:
        pending, now = self._pending, self._now
        while True:
            best: _Stream | None = None
            bound: tuple[float, int] | None = None
            for stream in self._active:
                newest = stream.bound()
                if newest is None:
                    continue
                b = (-newest, stream.rank)
                if bound is None or b < bound:
                    best, bound = stream, b
            # Strictly before the bound: an unread key of the same time may sort first.
            if pending and (bound is None or pending[0][:2] < bound):
                self._reads._counts["hits"] += 1
                return heapq.heappop(pending)[3]
            if best is None:
                raise StopAsyncIteration
            if best.pos == len(best.items):
                await self._read_more()
                continue
            name = best.items[best.pos][1]
            fields = self._fields.get(name)
            if fields is None:
                await self._read_more()
                continue
            best.pos += 1
            self._note(best.rank, name, best.group, fields[0] is not None)
            if fields[0] is None:
                continue  # listed, but its record is gone (expired, or removed meanwhile)
            entry = self._reads._views.view(name, fields, now)
            if entry is not None:
                heapq.heappush(pending, (-entry._newest, best.rank, name, entry))

    def _note(self, rank: int, name: str, group: int, exists: bool) -> None:
        """Remember that the owner's read needed ``name``, for its next read's first trip."""
        needed = self._reads.needed(self._owners[rank])
        needed.pop(name, None)
        if exists:
            needed[name] = group
            while len(needed) > self._keep:
                needed.popitem(last=False)
