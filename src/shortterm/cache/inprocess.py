"""The in-process hot tier: the :class:`HotTier` contract over a :class:`RecordBook`.

The records, their indexes and the TTL heap are kept by ``inprocess_records``; this module
holds the contract's operations and the write fence (each target's newest forget), which
the operations check in the same step as their write.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from ..model import Entry, Message, ScopeKey, ScopeKind, ScopeMeta, ScopeRow
from ..model.dialogue import without_authors
from ..model.fence import (
    EVERY_TARGET,
    JOURNAL_RETENTION_S,
    WriteFence,
    fence_targets,
    user_target,
)
from ..model.rows import HydrationRow, hydration_scope_row
from .base import HotTier, JournalReader, OwnEntry, Owner, Recent
from .inprocess_hydration import hydration_keys, insert_new
from .inprocess_recent import InProcessRecent
from .inprocess_records import NO_CATEGORIES, OWNER_SLACK, HeapItem, KeyTuple, Record, RecordBook
from .inprocess_records import channel_keys as _channel_keys

__all__ = ["InProcessCache"]

_NO_DEADLINE = nullcontext()  # reusable: it holds no state


class InProcessCache(RecordBook, HotTier):
    """The hot tier of one process: one dict in LRU order, a TTL heap, dict-of-set indexes."""

    def __init__(
        self,
        *,
        crude_ttl_s: float,
        summary_ttl_s: float,
        max_entries: int,
        max_bytes: int,
    ) -> None:
        super().__init__(
            crude_ttl_s=crude_ttl_s,
            summary_ttl_s=summary_ttl_s,
            max_entries=max_entries,
            max_bytes=max_bytes,
        )
        # The fence: each target's newest forget, the order they came in (for pruning), and
        # the newest sequence seen — a write that began at or after it needs no lookup.
        self._tombs: dict[str, int] = {}
        self._tomb_log: deque[tuple[float, str, int]] = deque()
        self._tomb_head = 0
        # Hydration shares one ScopeMeta per distinct value (a channel's scopes carry the same).
        self._metas: dict[tuple[Any, ...], ScopeMeta] = {}

    def _mirror(self, rec: Record, row: ScopeRow) -> None:
        rec.meta = row.meta
        rec.summary = row.summary
        rec.summary_at = row.summary_at
        rec.categories = row.categories
        rec.categories_at = row.categories_at
        rec.turns = row.turns_since_refresh
        rec.revision = row.revision

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

    async def live(self, key: ScopeKey, now: float) -> tuple[Entry | None, int | None]:
        return await self.get(key, now), await self.counter(key, now)

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

    async def capture_scopes(
        self,
        scopes: Sequence[tuple[ScopeKey, tuple[Message, ...], ScopeRow | None]],
        meta: ScopeMeta,
        now: float,
        fence: WriteFence | None = None,
        step: ScopeKey | None = None,
        append: int | None = None,
    ) -> int:
        stepped = step.astuple if step is not None else None
        applied = 0
        for scope in scopes:
            applied += self._capture(scope, meta, now, fence, scope[0].astuple == stepped, append)
        return applied

    def _capture(
        self,
        scope: tuple[ScopeKey, tuple[Message, ...], ScopeRow | None],
        meta: ScopeMeta,
        now: float,
        fence: WriteFence | None,
        step: bool,
        append: int | None,
    ) -> bool:
        """One scope of a capture (its key, messages and durable row), in one step."""
        key, messages, row = scope
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
            rec = Record(key, meta)
            self._insert(kt, rec)
        elif row is not None and row.revision < rec.revision:
            if append is None:
                return False  # a newer write of this scope already landed
            row = None  # appending: the messages are added, the older mirror is not
            self._entries.move_to_end(kt)
        else:
            self._entries.move_to_end(kt)
            rec.meta = meta.over(rec.meta)  # names it lacks stay; the private flag is sticky
        if append is not None:
            messages = appended(self._live_messages(rec, now), messages, append)
        if row is not None:
            self._mirror(rec, row)
        if step:
            rec.turns += 1  # the durable step follows in the write-behind
        rec.messages_at = now
        rec.touched_at = now
        self._set_messages(kt, rec, messages)
        rec.view = None
        self._place(kt, rec)
        self._reschedule(kt, rec)
        self._counts["stores"] += 1
        if len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            self._enforce_bounds(kt)
        return True

    def _live_messages(self, rec: Record, now: float) -> tuple[Message, ...]:
        at = rec.messages_at
        return rec.messages if at is not None and now < at + self.crude_ttl_s else ()

    def _covered(
        self, key: ScopeKey, server_id: str | None, parent: str | None, fence: WriteFence
    ) -> bool:
        tombs, position = self._tombs, fence.position
        if tombs.get(EVERY_TARGET, 0) > position:
            return True  # the journal had a gap after it began (see JournalFollower)
        targets = fence_targets(key, server_id, parent, fence)
        return any(tombs.get(t, 0) > position for t in targets)

    def _without_forgotten_authors(
        self, messages: tuple[Message, ...], fence: WriteFence
    ) -> tuple[Message, ...]:
        """``messages`` without the authors purged since the write began, and without the
        bot's answers to them (model.dialogue): a purge that landed meanwhile takes both."""
        tombs, position = self._tombs, fence.position
        gone = {
            a
            for a in {m.author_id for m in messages}
            if a is not None and tombs.get(user_target(a), 0) > position
        }
        return without_authors(messages, gone) if gone else messages

    # A shared tier's own (see HotTier): here the other processes follow the journal.
    async def record_settings(self, seq: int, targets: Sequence[str], now: float) -> None:
        pass

    def journal_due(self, head: int) -> bool:
        return False

    def followed(self, forgets: int) -> None:
        """Nothing to do: this process follows the journal into this tier itself."""

    async def repair(
        self, journal: JournalReader, now: float, *, to: int = 0, own: OwnEntry | None = None
    ) -> int:
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
        pending: list[HeapItem] = []
        kt: KeyTuple | None = None
        for row in rows:
            kt = row.key.astuple
            rec = entries.get(kt)
            if rec is None:
                rec = Record(row.key, row.meta)
                self._insert(kt, rec)
            elif row.revision <= rec.revision:
                continue  # older revisions never win
            self._refresh(kt, rec, row, now, pending)
        self._push(pending)
        if kt is not None:
            self._enforce_bounds(kt)

    def _refresh(
        self, kt: KeyTuple, rec: Record, row: ScopeRow, now: float, pending: list[HeapItem]
    ) -> None:
        """Mirror a newer durable row into a cached record, keeping its messages."""
        self._entries.move_to_end(kt)
        self._mirror(rec, row)
        rec.touched_at = now
        self._resize(rec)
        rec.view = None
        self._place(kt, rec)
        self._reschedule(kt, rec, pending)

    async def apply_hydration(
        self, rows: Sequence[HydrationRow], now: float, fence: WriteFence | None = None
    ) -> None:
        """:meth:`apply_rows` for rows as plain tuples (model.rows.HydrationRow): the open's
        bulk load, so a new scope costs one record, its key tuple and its index slots, with
        no row, key or meta object built per row and thrown away."""
        if fence is not None and self._tomb_head > fence.position:
            rows = [r for r in rows if not self._covered_row(r, fence)]
        if not rows:
            return
        columns = list(zip(*rows, strict=True))
        kts = hydration_keys(columns)
        fresh = set(kts)  # isdisjoint walks the smaller side: nothing, on an empty tier
        if len(fresh) == len(kts) and self._entries.keys().isdisjoint(fresh):
            insert_new(self, kts, columns, self._metas, now)  # the open: every key is new
        else:
            self._hydrate_each(rows, kts, now)
        if len(self._metas) > 65536:
            self._metas.clear()  # only shares objects; a later batch simply builds them again
        self._enforce_bounds(kts[-1])

    def _hydrate_each(self, rows: Sequence[HydrationRow], kts: list[KeyTuple], now: float) -> None:
        """The row-by-row load, for a batch that meets records the tier holds already (a
        reload after a journal gap): in the rows' order, a newer revision refreshes."""
        entries, metas = self._entries, self._metas
        pending: list[HeapItem] = []
        for r, kt in zip(rows, kts, strict=True):
            rec = entries.get(kt)
            if rec is not None:
                if r[15] > rec.revision:
                    self._refresh(kt, rec, hydration_scope_row(r), now, pending)
                continue
            parts = r[4:10]
            meta = metas.get(parts)
            if meta is None:
                meta = metas[parts] = ScopeMeta(r[4], r[5], r[6], r[7], bool(r[8]), r[9])
            rec = Record(kt, meta, r[10], r[11], r[12] or NO_CATEGORIES, r[13], r[14], r[15], now)
            self._insert(kt, rec)
            self._reschedule(kt, rec, pending)
        self._push(pending)

    def _covered_row(self, r: HydrationRow, fence: WriteFence) -> bool:
        key = ScopeKey._unchecked(r[0], r[1], r[2], r[3])  # type: ignore[arg-type]
        return self._covered(key, r[4], r[7], fence)

    async def owner_entries(
        self, kind: ScopeKind, owner_id: str, now: float
    ) -> tuple[list[Entry], bool]:
        owner = (kind, owner_id)
        held = self._by_owner.get(owner)
        out: list[Entry] = []
        if held is not None:
            # One pass: a current view is taken as it is (inline: most are), a record that
            # changed or partly expired since it was last read gets a new one.
            view = self._view
            out = [
                v
                for r in held.values()
                if (v := r.view if r.view is not None and now < r.view_until else view(r, now))
                is not None
            ]
            if len(out) < len(held):
                self._drop_expired(held, now)  # some record has nothing live left
        self._counts["hits"] += len(out)
        return out, self._owner_complete(owner)

    async def recent(
        self, owners: Sequence[Owner], now: float, *, page: int, live: ScopeKey | None = None
    ) -> Recent:
        """The owners' entries newest first (``RecentOrder``), each owner's from its recall
        order (``inprocess_recent``); ``page`` and ``live`` are a shared tier's concern."""
        incomplete = [owner for owner in owners if not self._owner_complete(owner)]
        return InProcessRecent(
            self._recall_order,
            owners,
            now,
            self._view,
            self._expire,
            incomplete,
            self._counts,
        )

    def _owner_complete(self, owner: Owner) -> bool:
        if self._complete:
            return True
        if self._owners_ok:
            return owner not in self._incomplete
        return owner in self._complete_owners

    def _expire(self, rec: Record) -> None:
        """A record a read found with nothing live left, past its deadline."""
        self._remove(rec.key.astuple, "expirations")

    def _drop_expired(self, held: dict[KeyTuple, Record], now: float) -> None:
        """Drop an owner's records that hold nothing live and are past their deadline."""
        for kt in [kt for kt, rec in held.items() if now >= rec.expires_at]:
            self._remove(kt, "expirations")

    async def mark_complete(self, kind: ScopeKind, owner_id: str) -> None:
        owner = (kind, owner_id)
        if self._owners_ok:
            self._incomplete.discard(owner)
            return
        complete = self._complete_owners
        complete[owner] = None
        complete.move_to_end(owner)
        if len(complete) > len(self._entries) + OWNER_SLACK:
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
        # The bot's answers to the author go with their messages: they lie in the same lists.
        gone = (author_id,)
        touched = 0
        for kt in self._holding(author_id, self._by_author.get(author_id, [])):
            rec = self._entries[kt]
            self._set_messages(kt, rec, without_authors(rec.messages, gone))
            rec.view = None
            self._place(kt, rec)
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
        return _NO_DEADLINE  # in-process calls do not time out

    async def close(self) -> None:
        self._clear()


def appended(
    stored: tuple[Message, ...], new: tuple[Message, ...], limit: int
) -> tuple[Message, ...]:
    """An appending capture's messages: the stored ones not repeated by ``message_id`` among
    ``new``, then ``new``, the newest ``limit`` of them (capture.lua does the same)."""
    ids = {m.message_id for m in new if m.message_id is not None}
    kept = [m for m in stored if m.message_id is None or m.message_id not in ids]
    merged = (*kept, *new)
    return merged[-limit:] if len(merged) > limit else merged
