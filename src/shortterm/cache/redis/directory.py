"""The Redis tier's owner directories: listing a key on a write, reading an owner's entries,
and what this process knows of them, to spare round trips.

An owner directory (``P{o:<kind>:<owner>}``, in the owner's own slot) lists every key of one
owner, in any group, scored by its last listing. An owner read fetches the directory, then
the records it lists: two round trips, unless the records it listed last time are fetched
with the directory itself (only names listed anew then cost a second one). A write lists its
key in the owner's directory, in the owner's slot: on a cluster, often another node. A key
this process knows listed is listed again only when its last listing there is older than
``REFRESH_S``, which keeps the directory alive (its expiry is padded by as much) and bounds
how long a key the directory lost meanwhile (an owner forgotten by another process, a
listing pruned) stays unlisted: the next owner read of this process, or that bound, lists
it again. The directory only finds records; what they hold, and whether they exist, is
always read from the records themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...model import Entry, ScopeKey, ScopeKind
from .codec import Views, key_of, member
from .marks import Marks
from .scripts import Groups

__all__ = ["REFRESH_S", "Directories", "Listed", "OwnerRead"]

REFRESH_S = 60.0
_OWNERS_KEPT = 4096  # owners this process keeps a listing of; the least recently used go
# A listed key without a record is pruned only once its listing is older than this: its write
# may still be on its way (record and listing go in one pipeline, to different slots), and a
# process renews a listing only every REFRESH_S, so a live key's listing may be that old.
_PRUNE_GRACE_S = REFRESH_S
_FIELDS = ("meta", "d", "m")  # what an owner read takes of a record

Owner = tuple[str, str]  # (kind, owner id)
Listed = tuple[Owner, list[str]]  # names a write listed in one owner's directory


@dataclass(slots=True)
class _Listing:
    names: set[str] = field(default_factory=set)
    listed_at: float = float("-inf")  # when this process last listed a key there


class _Listings:
    """Per owner: the names its directory listed at our last read or write, and when this
    process last wrote to it."""

    def __init__(self) -> None:
        self._owners: dict[Owner, _Listing] = {}

    def known(self, owner: Owner) -> list[str]:
        """The names to fetch with the owner's directory."""
        listing = self._owners.get(owner)
        return [] if listing is None else list(listing.names)

    def read(self, owner: Owner, names: list[str]) -> None:
        """The directory listed exactly ``names`` (after pruning)."""
        listing = self._owners.pop(owner, None) or _Listing()
        listing.names = set(names)
        self._keep(owner, listing)

    def due(self, owner: Owner, name: str, now: float) -> bool:
        """Whether a write of ``name`` must list it in the owner's directory."""
        listing = self._owners.get(owner)
        return listing is None or name not in listing.names or now - listing.listed_at >= REFRESH_S

    def listed(self, owner: Owner, names: list[str], now: float) -> None:
        """A write listed ``names`` in the owner's directory at ``now`` (its expiry renewed)."""
        listing = self._owners.pop(owner, None) or _Listing()
        listing.names.update(names)
        listing.listed_at = now
        self._keep(owner, listing)

    def drop(self, owner: Owner | None = None) -> None:
        """Forget what we knew of one owner's directory (``None``: of every owner)."""
        if owner is None:
            self._owners.clear()
        else:
            self._owners.pop(owner, None)

    def _keep(self, owner: Owner, listing: _Listing) -> None:
        self._owners[owner] = listing
        if len(self._owners) > _OWNERS_KEPT:
            del self._owners[next(iter(self._owners))]


@dataclass(slots=True)
class OwnerRead:
    entries: list[Entry]
    marked: bool  # the owner's "re-read from the durable tier" marker is set
    settings_seen: int  # the newest settings change, as group 0's copy says


class Directories:
    """The owner directories of one tier."""

    def __init__(self, g: Groups, lifetime_s: float, views: Views) -> None:
        self._g = g
        # Past every record's expiry, and padded by how long a listing may go unrenewed.
        self._directory_ms = int((lifetime_s + REFRESH_S) * 1000)
        self._views = views
        self._listings = _Listings()

    def list_keys(self, pipe: Any, keys: Sequence[ScopeKey], now: float) -> list[Listed]:
        """Queue the listing of ``keys`` in their owners' directories, except those this
        process listed there lately; returns what it queued, for :meth:`noted` once the
        pipeline succeeded."""
        by_owner: dict[Owner, list[str]] = {}
        for key in keys:
            owner, name = (key.kind, key.owner_id), member(key)
            if self._listings.due(owner, name, now):
                by_owner.setdefault(owner, []).append(name)
        layout = self._g.layout
        for (kind, owner_id), names in by_owner.items():
            directory = layout.directory(kind, owner_id)
            pipe.zadd(directory, dict.fromkeys(names, now))
            pipe.pexpire(directory, self._directory_ms)
        return list(by_owner.items())

    def noted(self, listed: list[Listed], now: float) -> None:
        for owner, names in listed:
            self._listings.listed(owner, names, now)

    def drop(self, owner: Owner | None = None) -> None:
        """Forget what we knew of one owner's directory (``None``: of every owner): after a
        delete, the next write lists its key again."""
        self._listings.drop(owner)

    async def read(self, kind: ScopeKind, owner_id: str, now: float, marks: Marks) -> OwnerRead:
        """The owner's directory (and marker, and the settings change) with the records it
        listed last time, in one round trip; the records of keys it lists anew, in a second.
        Only what the directory lists now is returned: a record it no longer lists is not.
        A listed key whose record is gone (and older than the grace) is pruned. Each group
        read gives its mark too: records of a group short of what this process knows was
        forgotten are not returned (``marks`` notes it, and the group is repaired)."""
        g, layout = self._g, self._g.layout
        directory = layout.directory(kind, owner_id)
        owner = (kind, owner_id)
        known = self._listings.known(owner)
        keys = {name: key_of(name) for name in known}
        group_of = {name: layout.key_group(key) for name, key in keys.items()}
        record = layout.record

        def records(pipe: Any, names: Sequence[str], groups: Sequence[int]) -> None:
            for name in names:
                pipe.hmget(record(keys[name], name), _FIELDS)
            for group in groups:
                pipe.get(layout.base(group) + "fm")

        early_groups = sorted(set(group_of.values()))

        def head(pipe: Any) -> None:
            pipe.zrange(directory, 0, -1, withscores=True)
            pipe.exists(layout.marker(kind, owner_id))
            pipe.get(layout.base(0) + "sv")
            records(pipe, known, early_groups)

        listed, marked, seen_raw, *early = await g.batch("owner read", head)
        fields_of = dict(zip(known, early, strict=False))
        vouched = {
            group: marks.seen(group, raw)
            for group, raw in zip(early_groups, early[len(known) :], strict=True)
        }
        new = [name for name, _ in listed if name not in fields_of]
        if new:
            for name in new:
                keys[name] = key = key_of(name)
                group_of[name] = layout.key_group(key)
            late_groups = sorted({group_of[name] for name in new} - set(vouched))
            late = await g.batch("owner read", lambda pipe: records(pipe, new, late_groups))
            fields_of.update(zip(new, late, strict=False))
            for group, raw in zip(late_groups, late[len(new) :], strict=True):
                vouched[group] = marks.seen(group, raw)
        view = self._views.view
        out: list[Entry] = []
        gone: list[str] = []
        for name, score in listed:
            fields = fields_of[name]
            if not vouched[group_of[name]]:
                continue  # served once the group is repaired
            if fields[0] is None:
                if float(score) < now - _PRUNE_GRACE_S:
                    gone.append(name)  # its record expired or was evicted
                continue
            entry = view(name, fields, now)
            if entry is not None:
                out.append(entry)
        if gone:
            await g.calls.call("owner read", lambda: g.client.zrem(directory, *gone))
        self._listings.read(owner, [name for name, _ in listed if name not in gone])
        return OwnerRead(out, bool(marked), int(seen_raw or 0))
