"""The in-process hot tier: one dict in LRU order, a TTL heap, and dict-of-set indexes.

Over 500 lines on purpose: the dict, the heap and the indexes must change together, so the
one class that owns them stays in one file; split, an index could drift from the dict.

Every removal (expiry, eviction, clear) goes through :meth:`InProcessCache._remove`, so the
indexes can never keep a key the dict has dropped. Records are mutable and private; readers
get frozen :class:`Entry` views, built once and reused until the record changes or a value in
it expires.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import sys
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from operator import attrgetter
from types import MappingProxyType
from typing import Any

from ..model import Entry, Message, ScopeKey, ScopeKind, ScopeMeta, ScopeRow
from ..model.fence import (
    EVERY_TARGET,
    JOURNAL_RETENTION_S,
    WriteFence,
    scope_targets,
    user_target,
)
from ..model.rows import HydrationRow, hydration_scope_row

__all__ = ["InProcessCache"]

KeyTuple = tuple[str, str, str, str | None]
Owner = tuple[str, str]

# Rough resident cost in bytes of a record and of one message beside its text; only the
# relative size matters for the byte ceiling, and these track CPython within ~20%. Measured
# (bench.core.measure_memory, 10 messages of 300 characters): 5558 bytes an entry against
# 5590 estimated; a hydrated record with a 980-character summary: 1800 against 1680.
_RECORD_BYTES = 700
_MESSAGE_BYTES = 190
_INF = float("inf")
_AUTHOR_LIST_MAX = 1024  # records an author's index list may stand for before it is a set
# Owners tracked for completeness, beyond one per cached entry: enough for a burst of new
# users, without letting a flood of distinct owners grow memory past the tier's ceilings.
_OWNER_SLACK = 1024
_author = attrgetter("author_id")
_content = attrgetter("content")


class _Record:
    """One cached scope. Mutable and private: readers only ever see :class:`Entry` views."""

    __slots__ = (
        "_key",
        "categories",
        "categories_at",
        "expires_at",
        "messages",
        "messages_at",
        "meta",
        "revision",
        "size",
        "summary",
        "summary_at",
        "touched_at",
        "turns",
        "view",
        "view_until",
    )

    _EMPTY: Mapping[str, str] = MappingProxyType({})

    def __init__(
        self,
        key: ScopeKey | KeyTuple,
        meta: ScopeMeta,
        summary: str | None = None,
        summary_at: float | None = None,
        categories: Mapping[str, str] = _EMPTY,
        categories_at: float | None = None,
        turns: int = 0,
        revision: int = 0,
        touched_at: float = 0.0,
        expires_at: float = 0.0,
        size: int = _RECORD_BYTES,
    ) -> None:
        # Hydration passes the plain key tuple: the ScopeKey is built on the first view.
        self._key = key
        self.meta = meta
        self.messages: tuple[Message, ...] = ()
        self.messages_at: float | None = None
        self.summary = summary
        self.summary_at = summary_at
        self.categories = categories
        self.categories_at = categories_at
        self.turns = turns
        self.revision = revision
        self.touched_at = touched_at
        self.expires_at = expires_at
        self.size = size
        self.view: Entry | None = None
        self.view_until = 0.0

    @property
    def key(self) -> ScopeKey:
        key = self._key
        if isinstance(key, ScopeKey):
            return key
        key = self._key = ScopeKey._unchecked(*key)  # type: ignore[arg-type]
        return key


class InProcessCache:
    def __init__(
        self,
        *,
        crude_ttl_s: float,
        summary_ttl_s: float,
        max_entries: int,
        max_bytes: int,
    ) -> None:
        self.crude_ttl_s = crude_ttl_s
        self.summary_ttl_s = summary_ttl_s
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[KeyTuple, _Record] = OrderedDict()
        # Owner → its records (not just keys): the read path walks an owner's records on every
        # turn, and a key lookup per record would hash each key tuple again.
        self._by_owner: dict[Owner, dict[KeyTuple, _Record]] = {}
        # A channel with one scope maps to its bare key tuple: a set of one costs ~200 bytes.
        self._by_channel: dict[str, KeyTuple | set[KeyTuple]] = {}
        # Author -> the keys of the records holding their messages, as a list that may also
        # hold stale keys (a record dropped, or an author no longer in it): a list slot is 8
        # bytes where a set's is ~50, and ten authors per entry made the sets the biggest
        # index. Complete all the same: every live record holding an author's message is in
        # that author's list. Stale keys are dropped when a list outgrows twice its live
        # count (kept per author) plus 8, and an author's list goes when the count is zero.
        # An author in more than _AUTHOR_LIST_MAX records (a bot's own id, say) gets an exact
        # set instead, so no compaction ever scans more than a few thousand records at once.
        self._by_author: dict[str, list[KeyTuple] | set[KeyTuple]] = {}
        self._author_live: dict[str, int] = {}
        self._heap: list[tuple[float, int, KeyTuple]] = []
        self._seq = itertools.count()
        self._incomplete: set[Owner] = set()
        self._complete = False  # a miss needs no durable read
        self._owners_ok = False  # owners not in _incomplete are complete
        # Otherwise only the owners re-read since are, least recently marked dropped first.
        self._complete_owners: OrderedDict[Owner, None] = OrderedDict()
        self._bytes = 0
        self._counts = dict.fromkeys(
            ("hits", "misses", "stores", "evictions", "expirations", "invalidations", "fenced"),
            0,
        )
        # The fence: each target's newest forget, the order they came in (for pruning), and
        # the newest sequence seen — a write that began at or after it needs no lookup.
        self._tombs: dict[str, int] = {}
        self._tomb_log: deque[tuple[float, str, int]] = deque()
        self._tomb_head = 0
        # Hydration shares one ScopeMeta per distinct value (a channel's scopes carry the same).
        self._metas: dict[tuple[Any, ...], ScopeMeta] = {}

    # -- views and expiry -----------------------------------------------------------------

    def _view(self, rec: _Record, now: float) -> Entry | None:
        if rec.view is not None and now < rec.view_until:
            return rec.view
        until = _INF
        messages: tuple[Message, ...] = ()
        if rec.messages and rec.messages_at is not None:
            t = rec.messages_at + self.crude_ttl_s
            if now < t:
                messages, until = rec.messages, t
        summary = None
        if rec.summary is not None and rec.summary_at is not None:
            t = rec.summary_at + self.summary_ttl_s
            if now < t:
                summary, until = rec.summary, min(until, t)
        categories: Mapping[str, str] = {}
        if rec.categories and rec.categories_at is not None:
            t = rec.categories_at + self.summary_ttl_s
            if now < t:
                categories, until = rec.categories, min(until, t)
        if not messages and summary is None and not categories:
            return None
        m = rec.meta
        rec.view = Entry(
            key=rec.key,
            messages=messages,
            summary=summary,
            categories=categories,
            turns_since_refresh=rec.turns,
            messages_at=rec.messages_at if messages else None,
            summary_at=rec.summary_at if summary is not None else None,
            categories_at=rec.categories_at if categories else None,
            server_id=m.server_id,
            server_name=m.server_name,
            channel_name=m.channel_name,
            parent_channel_id=m.parent_channel_id,
            private=m.private,
            persona_lineage_id=m.persona_lineage_id,
        )
        rec.view_until = until
        return rec.view

    def _reschedule(
        self, kt: KeyTuple, rec: _Record, pending: list[tuple[float, int, KeyTuple]] | None = None
    ) -> None:
        # The latest expiry of its values (plain comparisons: this runs on every capture).
        expires = -_INF
        if rec.messages and rec.messages_at is not None:
            expires = rec.messages_at + self.crude_ttl_s
        if rec.summary is not None and rec.summary_at is not None:
            t = rec.summary_at + self.summary_ttl_s
            if t > expires:
                expires = t
        if rec.categories and rec.categories_at is not None:
            t = rec.categories_at + self.summary_ttl_s
            if t > expires:
                expires = t
        if expires == -_INF:
            # A record with no values still mirrors the durable counter for a while.
            expires = rec.touched_at + self.crude_ttl_s
        if expires != rec.expires_at:
            rec.expires_at = expires
            item = (expires, next(self._seq), kt)
            if pending is not None:
                pending.append(item)  # the caller heapifies a whole batch at once
                return
            heapq.heappush(self._heap, item)
            if len(self._heap) > 2 * len(self._entries) + 1024:
                self._compact_heap()

    def _compact_heap(self) -> None:
        # Lazy deletion leaves stale items behind; rebuild from the live records only.
        self._heap = [(r.expires_at, next(self._seq), kt) for kt, r in self._entries.items()]
        heapq.heapify(self._heap)

    # -- index maintenance ----------------------------------------------------------------

    def _insert(self, kt: KeyTuple, rec: _Record) -> None:
        self._entries[kt] = rec
        _add_owner(self._by_owner, kt, rec)
        _add_channel(self._by_channel, kt[2], kt)
        self._bytes += rec.size

    def _remove(self, kt: KeyTuple, reason: str) -> None:
        rec = self._entries.pop(kt)
        _discard_owner(self._by_owner, kt)
        _discard_channel(self._by_channel, kt[2], kt)
        if rec.messages:
            for author in set(map(_author, rec.messages)):
                if author is not None:
                    self._unindex_author(author, kt)
        self._bytes -= rec.size
        self._counts[reason] += 1
        if reason == "evictions":
            owner = (kt[0], kt[1])
            self._complete = False
            if not self._owners_ok:
                self._complete_owners.pop(owner, None)
            elif len(self._incomplete) < len(self._entries) + _OWNER_SLACK:
                self._incomplete.add(owner)
            else:
                # Remembering every evicted owner would grow without bound under a flood of
                # distinct owners; forget them all and trust only owners re-read from now on.
                self._owners_ok = False
                self._incomplete.clear()

    def _set_messages(self, kt: KeyTuple, rec: _Record, messages: tuple[Message, ...]) -> None:
        # The authors are recomputed from the messages rather than kept beside them: a set
        # per record would cost more memory than the index it serves.
        authors = set(map(_author, messages))
        previous = set(map(_author, rec.messages)) if rec.messages else set()
        rec.messages = messages  # first: a compaction below checks the record's new messages
        if authors != previous:
            for a in previous - authors:
                if a is not None:
                    self._unindex_author(a, kt)
            for a in authors - previous:
                if a is not None:
                    self._index_author(a, kt)
        self._resize(rec)

    def _index_author(self, author: str, kt: KeyTuple) -> None:
        live = self._author_live[author] = self._author_live.get(author, 0) + 1
        keys = self._by_author.get(author)
        if keys is None:
            self._by_author[author] = [kt]
        elif type(keys) is set:
            keys.add(kt)
        else:
            keys.append(kt)  # type: ignore[union-attr]
            if len(keys) > 2 * live + 8 or live > _AUTHOR_LIST_MAX:
                # Amortized: at least `live` stale keys were added since the last compaction;
                # and a list is never longer than 2 * _AUTHOR_LIST_MAX + 9 to scan.
                fresh = self._holding(author, keys)
                if live > _AUTHOR_LIST_MAX:
                    self._by_author[author] = set(fresh)
                else:
                    keys[:] = fresh  # type: ignore[index]

    def _holding(self, author: str, keys: list[KeyTuple] | set[KeyTuple]) -> list[KeyTuple]:
        """The keys, once each, of the live records that hold a message of ``author``."""
        entries = self._entries
        return [
            k
            for k in dict.fromkeys(keys)
            if (r := entries.get(k)) is not None and author in map(_author, r.messages)
        ]

    def _unindex_author(self, author: str, kt: KeyTuple) -> None:
        live = self._author_live[author] - 1
        if not live:
            del self._author_live[author]
            del self._by_author[author]  # every key left in it is stale
            return
        self._author_live[author] = live
        keys = self._by_author[author]
        if type(keys) is set:
            keys.discard(kt)
        elif len(keys) > 2 * live + 8:  # a list keeps stale keys until it outgrows this
            keys[:] = self._holding(author, keys)  # type: ignore[index]

    def _resize(self, rec: _Record) -> None:
        size = _RECORD_BYTES + _MESSAGE_BYTES * len(rec.messages)
        size += sum(map(len, map(_content, rec.messages)))
        if rec.summary:
            size += len(rec.summary)
        for slug, text in rec.categories.items():
            size += len(slug) + len(text) + 100
        self._bytes += size - rec.size
        rec.size = size

    def _mirror(self, rec: _Record, row: ScopeRow) -> None:
        rec.meta = row.meta
        rec.summary = row.summary
        rec.summary_at = row.summary_at
        rec.categories = row.categories
        rec.categories_at = row.categories_at
        rec.turns = row.turns_since_refresh
        rec.revision = row.revision

    def _enforce_bounds(self, keep: KeyTuple) -> None:
        entries = self._entries
        while len(entries) > self.max_entries or self._bytes > self.max_bytes:
            oldest = next(iter(entries))
            if oldest == keep:
                if len(entries) == 1:
                    return
                entries.move_to_end(keep)
                continue
            self._remove(oldest, "evictions")

    # -- the contract ---------------------------------------------------------------------

    async def get(self, key: ScopeKey, now: float) -> Entry | None:
        kt = key.astuple
        rec = self._entries.get(kt)
        if rec is None:
            self._counts["misses"] += 1
            return None
        view = self._view(rec, now)
        if view is None:
            if now >= rec.expires_at:
                self._remove(kt, "expirations")
            self._counts["misses"] += 1
            return None
        self._entries.move_to_end(kt)
        self._counts["hits"] += 1
        return view

    async def counter(self, key: ScopeKey, now: float) -> int | None:
        rec = self._entries.get(key.astuple)
        return None if rec is None or now >= rec.expires_at else rec.turns

    async def scope_keys(self, *, batch: int) -> AsyncIterator[list[ScopeKey]]:
        """Every key held, in batches (see ``ScopeLister``): a snapshot of the keys, so a
        change meanwhile never breaks the walk."""
        keys = list(self._entries)
        for start in range(0, len(keys), batch):
            yield [ScopeKey._unchecked(*kt) for kt in keys[start : start + batch]]  # type: ignore[arg-type]

    def holds(self, key: ScopeKey, now: float) -> bool:
        """Whether this tier has mirrored the durable row of ``key`` and still holds it (a
        live record): a capture may then defer its durable part (a write-behind). Not for
        a missing record even on a complete tier: another process may have written the row
        since (its sticky private flag must be mirrored before this tier serves the entry)."""
        rec = self._entries.get(key.astuple)
        return rec is not None and now < rec.expires_at

    async def capture(
        self,
        key: ScopeKey,
        messages: tuple[Message, ...],
        meta: ScopeMeta,
        row: ScopeRow | None,
        now: float,
        fence: WriteFence | None = None,
    ) -> bool:
        return self._capture(key, messages, meta, row, now, fence, False)

    async def capture_scopes(
        self,
        scopes: Sequence[tuple[ScopeKey, tuple[Message, ...], ScopeRow | None]],
        meta: ScopeMeta,
        now: float,
        fence: WriteFence | None = None,
        step: ScopeKey | None = None,
    ) -> int:
        stepped = step.astuple if step is not None else None
        applied = 0
        for key, messages, row in scopes:
            applied += self._capture(key, messages, meta, row, now, fence, key.astuple == stepped)
        return applied

    def _capture(
        self,
        key: ScopeKey,
        messages: tuple[Message, ...],
        meta: ScopeMeta,
        row: ScopeRow | None,
        now: float,
        fence: WriteFence | None,
        step: bool,
    ) -> bool:
        kt = key.astuple
        if fence is not None and self._tomb_head > fence.position:
            # Everything below runs without a suspension point: the check and the write are
            # one step, so no forget can land between them.
            if self._covered(key, meta.server_id, meta.parent_channel_id, fence):
                self._counts["fenced"] += 1
                return False
            messages = self._without_forgotten_authors(messages, fence)
        rec = self._entries.get(kt)
        if rec is None:
            rec = _Record(key, meta)
            self._insert(kt, rec)
        elif row is not None and row.revision < rec.revision:
            return False  # a newer write of this scope already landed
        else:
            self._entries.move_to_end(kt)
            if rec.meta.private and not meta.private:
                meta = dataclasses.replace(meta, private=True)  # the flag is sticky
            rec.meta = meta
        if row is not None:
            self._mirror(rec, row)
        if step:
            rec.turns += 1  # the durable step follows in the write-behind
        rec.messages_at = now
        rec.touched_at = now
        self._set_messages(kt, rec, messages)
        rec.view = None
        self._reschedule(kt, rec)
        self._counts["stores"] += 1
        if len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            self._enforce_bounds(kt)
        return True

    def _covered(
        self, key: ScopeKey, server_id: str | None, parent: str | None, fence: WriteFence
    ) -> bool:
        tombs, position = self._tombs, fence.position
        if tombs.get(EVERY_TARGET, 0) > position:
            return True  # the journal had a gap after it began (see JournalFollower)
        targets = scope_targets(key, server_id, parent, fence.triggerer)
        return any(tombs.get(t, 0) > position for t in targets)

    def _without_forgotten_authors(
        self, messages: tuple[Message, ...], fence: WriteFence
    ) -> tuple[Message, ...]:
        tombs, position = self._tombs, fence.position
        gone = {
            a
            for a in {m.author_id for m in messages}
            if a is not None and tombs.get(user_target(a), 0) > position
        }
        return tuple(m for m in messages if m.author_id not in gone) if gone else messages

    # A shared tier's own (see HotTier): here the other processes follow the journal.
    async def record_settings(self, seq: int, targets: Sequence[str], now: float) -> None:
        pass

    def journal_due(self, head: int) -> bool:
        return False

    async def restore_floor(self, journal_head: Callable[[], Awaitable[int]]) -> int:
        return 0

    async def record_forget(self, seq: int, targets: Sequence[str], now: float) -> None:
        tombs, log = self._tombs, self._tomb_log
        for t in targets:
            if tombs.get(t, 0) < seq:
                tombs[t] = seq
            log.append((now, t, seq))
        self._tomb_head = max(self._tomb_head, seq)
        while log and log[0][0] < now - JOURNAL_RETENTION_S:
            _at, t, old = log.popleft()
            if tombs.get(t) == old:
                del tombs[t]

    async def apply_rows(
        self, rows: Sequence[ScopeRow], now: float, fence: WriteFence | None = None
    ) -> None:
        self._apply(rows, now, fence)

    def _apply(self, rows: Sequence[ScopeRow], now: float, fence: WriteFence | None) -> None:
        if fence is not None and self._tomb_head > fence.position:
            rows = [
                r
                for r in rows
                if not self._covered(r.key, r.meta.server_id, r.meta.parent_channel_id, fence)
            ]
        entries = self._entries
        pending: list[tuple[float, int, KeyTuple]] = []
        kt: KeyTuple | None = None
        by_owner, by_channel, seq = self._by_owner, self._by_channel, self._seq
        crude_ttl, summary_ttl = self.crude_ttl_s, self.summary_ttl_s
        for row in rows:
            kt = row.key.astuple
            rec = entries.get(kt)
            if rec is None:
                rec = _Record(row.key, row.meta)
                entries[kt] = rec
                _add_owner(by_owner, kt, rec)
                _add_channel(by_channel, kt[2], kt)
                summary, categories = row.summary, row.categories
                rec.summary, rec.summary_at = summary, row.summary_at
                rec.categories, rec.categories_at = categories, row.categories_at
                rec.turns, rec.revision, rec.touched_at = row.turns_since_refresh, row.revision, now
                size = _RECORD_BYTES + (len(summary) if summary else 0)
                expires = now + crude_ttl
                if summary is not None and row.summary_at is not None:
                    expires = row.summary_at + summary_ttl
                if categories:
                    size += sum(len(k) + len(v) + 100 for k, v in categories.items())
                    if row.categories_at is not None:
                        later = row.categories_at + summary_ttl
                        expires = later if summary is None or later > expires else expires
                rec.size = size
                self._bytes += size
                rec.expires_at = expires
                pending.append((expires, next(seq), kt))
                continue
            if row.revision > rec.revision:
                self._refresh(kt, rec, row, now, pending)
        self._push(pending)
        if kt is not None:
            self._enforce_bounds(kt)

    def _refresh(
        self,
        kt: KeyTuple,
        rec: _Record,
        row: ScopeRow,
        now: float,
        pending: list[tuple[float, int, KeyTuple]],
    ) -> None:
        """Mirror a newer durable row into a cached record, keeping its messages."""
        self._entries.move_to_end(kt)
        self._mirror(rec, row)
        rec.touched_at = now
        self._resize(rec)
        rec.view = None
        self._reschedule(kt, rec, pending)

    def _push(self, pending: list[tuple[float, int, KeyTuple]]) -> None:
        heap = self._heap
        if len(pending) > len(heap):  # a first, big batch: one O(n) heapify beats n pushes
            heap.extend(pending)
            heapq.heapify(heap)
        else:
            for item in pending:
                heapq.heappush(heap, item)

    async def apply_hydration(
        self, rows: Sequence[HydrationRow], now: float, fence: WriteFence | None = None
    ) -> None:
        """:meth:`apply_rows` for rows as plain tuples (model.rows.HydrationRow): the open's
        bulk load, so a new scope costs one record, its key tuple and its index slots, with
        no row, key or meta object built per row and thrown away."""
        if fence is not None and self._tomb_head > fence.position:
            rows = [r for r in rows if not self._covered_row(r, fence)]
        entries, seq, metas = self._entries, self._seq, self._metas
        by_owner, by_channel = self._by_owner, self._by_channel
        pending: list[tuple[float, int, KeyTuple]] = []
        crude_ttl, summary_ttl = self.crude_ttl_s, self.summary_ttl_s
        record, empty, intern = _Record, _Record._EMPTY, sys.intern
        added = 0
        kt: KeyTuple | None = None
        for r in rows:
            # The cursor gives each row fresh copies of ids that repeat across many rows.
            kind, owner = intern(r[0]), intern(r[1])
            channel, persona = r[2], r[3] if r[3] is None else intern(r[3])
            kt = (kind, owner, channel, persona)
            rec = entries.get(kt)
            if rec is not None:  # rare at open: the general path, in the rows' order
                if r[15] > rec.revision:
                    self._refresh(kt, rec, hydration_scope_row(r), now, pending)
                continue
            parts = r[4:10]
            meta = metas.get(parts)
            if meta is None:
                meta = metas[parts] = ScopeMeta(r[4], r[5], r[6], r[7], bool(r[8]), r[9])
            summary, summary_at, categories, categories_at = r[10], r[11], r[12], r[13]
            # The expiry _reschedule would give: the latest live value, else a plain counter.
            size = _RECORD_BYTES
            expires = -_INF
            if summary is not None:
                size += len(summary)
                if summary_at is not None:
                    expires = summary_at + summary_ttl
            if categories:
                size += sum(len(k) + len(v) + 100 for k, v in categories.items())
                if categories_at is not None and categories_at + summary_ttl > expires:
                    expires = categories_at + summary_ttl
            else:
                categories = empty
            if expires == -_INF:
                expires = now + crude_ttl
            rec = entries[kt] = record(
                kt, meta, summary, summary_at, categories, categories_at, r[14], r[15], now,
                expires, size,
            )  # fmt: skip
            held = by_owner.get((kind, owner))
            if held is None:
                by_owner[(kind, owner)] = {kt: rec}
            else:
                held[kt] = rec
            if channel in by_channel:
                _add_channel(by_channel, channel, kt)
            else:
                by_channel[channel] = kt  # inline: most channels hold one scope
            added += size
            pending.append((expires, next(seq), kt))
        self._bytes += added
        if len(metas) > 65536:
            metas.clear()  # only shares objects; a later batch simply builds them again
        self._push(pending)
        if kt is not None:
            self._enforce_bounds(kt)

    def _covered_row(self, r: HydrationRow, fence: WriteFence) -> bool:
        key = ScopeKey._unchecked(r[0], r[1], r[2], r[3])  # type: ignore[arg-type]
        return self._covered(key, r[4], r[7], fence)

    async def owner_entries(
        self, kind: ScopeKind, owner_id: str, now: float
    ) -> tuple[list[Entry], bool]:
        owner = (kind, owner_id)
        out: list[Entry] = []
        expired: list[KeyTuple] = []
        held = self._by_owner.get(owner)
        for kt, rec in held.items() if held is not None else ():
            view = rec.view
            if view is None or now >= rec.view_until:
                view = self._view(rec, now)  # changed or partly expired since last read
            if view is not None:
                out.append(view)
            elif now >= rec.expires_at:
                expired.append(kt)
        for kt in expired:
            self._remove(kt, "expirations")
        self._counts["hits"] += len(out)
        if self._complete:
            return out, True
        if self._owners_ok:
            return out, owner not in self._incomplete
        return out, owner in self._complete_owners

    async def mark_complete(self, kind: ScopeKind, owner_id: str) -> None:
        owner = (kind, owner_id)
        if self._owners_ok:
            self._incomplete.discard(owner)
            return
        complete = self._complete_owners
        complete[owner] = None
        complete.move_to_end(owner)
        if len(complete) > len(self._entries) + _OWNER_SLACK:
            complete.popitem(last=False)  # that owner is simply re-read once more

    async def delete(self, key: ScopeKey) -> bool:
        kt = key.astuple
        if kt not in self._entries:
            return False
        self._remove(kt, "invalidations")
        return True

    async def delete_channel(self, channel_id: str) -> int:
        doomed = _channel_keys(self._by_channel, channel_id)
        for kt in doomed:
            self._remove(kt, "invalidations")
        return len(doomed)

    async def delete_owner(self, kind: ScopeKind, owner_id: str) -> int:
        doomed = list(self._by_owner.get((kind, owner_id), ()))
        for kt in doomed:
            self._remove(kt, "invalidations")
        return len(doomed)

    async def drop_all(self) -> int:
        """Drop every entry: the tier can no longer prove what it holds (a journal gap).
        It is incomplete afterwards, so reads go to the durable tier until it is reloaded."""
        doomed = list(self._entries)
        for kt in doomed:
            self._remove(kt, "invalidations")
        self.set_complete(False)
        return len(doomed)

    async def forget_user_target(self, target: str, now: float) -> int:
        """Drop the personal entries and the messages of the user whose digest is
        ``target`` (a follower learning of a purge, which names the user by digest only).
        Rare, so it may look at every owner and author."""
        owners = [o for o in self._by_owner if o[0] == "user" and user_target(o[1]) == target]
        authors = [a for a in self._by_author if user_target(a) == target]
        changed = 0
        for _kind, owner_id in owners:
            changed += await self.delete_owner("user", owner_id)
        for author_id in authors:
            changed += await self.scrub_author(author_id, now)
        return changed

    @property
    def shared(self) -> bool:
        """False: this tier lives in one process, so it must follow the others' forgets."""
        return False

    async def scrub_author(self, author_id: str, now: float) -> int:
        touched = 0
        for kt in self._holding(author_id, self._by_author.get(author_id, [])):
            rec = self._entries[kt]
            self._set_messages(kt, rec, tuple(m for m in rec.messages if m.author_id != author_id))
            rec.view = None
            self._reschedule(kt, rec)
            touched += 1
        return touched

    async def sweep(self, now: float) -> int:
        heap, entries = self._heap, self._entries
        removed = 0
        while heap and heap[0][0] <= now:
            expires, _, kt = heapq.heappop(heap)
            rec = entries.get(kt)
            if rec is not None and rec.expires_at == expires:
                self._remove(kt, "expirations")
                removed += 1
        return removed

    @property
    def complete(self) -> bool:
        return self._complete

    def set_complete(self, value: bool) -> None:
        # After a full hydration every owner is complete too, until something is evicted.
        self._complete = value
        self._owners_ok = value
        self._complete_owners.clear()
        self._metas.clear()  # hydration is over
        if value:
            self._incomplete.clear()

    def stats(self) -> dict[str, int]:
        return {"entries": len(self._entries), "bytes": self._bytes, **self._counts}

    def operation(self) -> AbstractContextManager[None]:
        return nullcontext()  # in-process calls do not time out

    async def close(self) -> None:
        self._entries.clear()
        self._by_owner.clear()
        self._by_channel.clear()
        self._by_author.clear()
        self._author_live.clear()
        self._heap.clear()
        self._incomplete.clear()
        self._complete_owners.clear()
        self._bytes = 0


def _add_owner(index: dict[Owner, dict[KeyTuple, _Record]], kt: KeyTuple, rec: _Record) -> None:
    held = index.get((kt[0], kt[1]))
    if held is None:
        index[(kt[0], kt[1])] = {kt: rec}
    else:
        held[kt] = rec


def _discard_owner(index: dict[Owner, dict[KeyTuple, _Record]], kt: KeyTuple) -> None:
    owner = (kt[0], kt[1])
    held = index.get(owner)
    if held is not None:
        held.pop(kt, None)
        if not held:
            del index[owner]


def _add_channel(index: dict[str, KeyTuple | set[KeyTuple]], channel: str, kt: KeyTuple) -> None:
    keys = index.get(channel)
    if keys is None:
        index[channel] = kt
    elif type(keys) is tuple:
        if keys != kt:
            index[channel] = {keys, kt}
    else:
        keys.add(kt)  # type: ignore[union-attr]


def _discard_channel(
    index: dict[str, KeyTuple | set[KeyTuple]], channel: str, kt: KeyTuple
) -> None:
    keys = index.get(channel)
    if keys is None:
        return
    if type(keys) is tuple:
        if keys == kt:
            del index[channel]
        return
    keys.discard(kt)  # type: ignore[union-attr]
    if len(keys) == 1:
        index[channel] = next(iter(keys))
    elif not keys:
        del index[channel]


def _channel_keys(index: dict[str, KeyTuple | set[KeyTuple]], channel: str) -> list[KeyTuple]:
    keys = index.get(channel)
    if keys is None:
        return []
    return [keys] if type(keys) is tuple else list(keys)  # type: ignore[arg-type]
