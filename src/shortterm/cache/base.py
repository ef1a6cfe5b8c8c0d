"""The hot tier contract.

A hot tier holds one record per scope key: the crude messages (cache-only by design) and a
mirror of the durable row (summary, categories, counter, metadata). Two clocks decide what is
live: messages expire ``crude_ttl_s`` after the last capture; summary and categories expire
``summary_ttl_s`` after they were *written* (captures never refresh them). Reads return only
live values, and ``None`` when nothing is live.

Every query by owner, channel or message author costs O(k) in the k entries it touches. A tier
that may drop entries (LRU eviction under its bounds) reports an owner as incomplete until the
facade re-reads that owner from the durable tier.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractContextManager
from typing import NamedTuple, Protocol, runtime_checkable

from ..model import Entry, Message, ScopeKey, ScopeKind, ScopeMeta, ScopeRow
from ..model.fence import JournalEntry, WriteFence
from ..model.rows import HydrationRow

__all__ = [
    "HoldsScopes",
    "HotTier",
    "HydrationSink",
    "JournalReader",
    "OwnEntry",
    "Owner",
    "PrivateTier",
    "Recent",
    "RecentOrder",
    "ScopeLister",
]

Owner = tuple[ScopeKind, str]  # (kind, owner id)


class OwnEntry(NamedTuple):
    """A process's own newest journal entry as its store wrote it, and the newest forget
    before it that the process applied (``after``): a repair moving the marks past the
    entry replays it from memory into each group whose mark is at ``after`` or past it, so
    a forget that commits just as the durable tier goes away still moves them."""

    entry: JournalEntry
    after: int


class JournalReader(Protocol):
    """What a shared tier's repair reads of the durable journal (every store has it)."""

    async def journal_head(self) -> int: ...

    async def journal_since(
        self, seq: int, *, limit: int = 1000, forgets_only: bool = False
    ) -> list[JournalEntry]: ...


class HotTier(Protocol):
    """What the memory facade needs from a hot tier (each tier subclasses it, for the
    methods it provides in terms of the others).

    A delete count is the number of entries removed, live or expired but not yet swept;
    lists of entries come in no promised order."""

    async def get(self, key: ScopeKey, now: float) -> Entry | None:
        """The live view of ``key``, or ``None``."""

    async def counter(self, key: ScopeKey, now: float) -> int | None:
        """The cached cadence counter of ``key``; ``None`` when the key is not cached."""

    async def live(self, key: ScopeKey, now: float) -> tuple[Entry | None, int | None]:
        """:meth:`get` and :meth:`counter` in one read."""

    async def capture(
        self,
        key: ScopeKey,
        messages: tuple[Message, ...],
        meta: ScopeMeta,
        row: ScopeRow | None,
        now: float,
        fence: WriteFence | None = None,
    ) -> bool:
        """Replace the messages of ``key`` (already capped by the caller) and, with ``row``,
        mirror its durable values. A capture whose row is older than the cached revision is
        ignored: a later write already landed. With ``fence``, the capture is dropped when a
        forget recorded after ``fence.position`` covers the scope, and messages of authors
        purged since, and the bot's answers to them, are dropped from it — checked in the
        same atomic step as the write.
        The private flag is sticky. Returns whether the capture was applied. One scope of
        :meth:`capture_scopes`: every tier has this one write path."""
        return await self.capture_scopes([(key, messages, row)], meta, now, fence) == 1

    async def capture_scopes(
        self,
        scopes: Sequence[tuple[ScopeKey, tuple[Message, ...], ScopeRow | None]],
        meta: ScopeMeta,
        now: float,
        fence: WriteFence | None = None,
        step: ScopeKey | None = None,
        append: int | None = None,
    ) -> int:
        """:meth:`capture` of every scope of one turn in one call (one round trip on a
        shared tier), each with its own durable row or ``None``. ``step`` names the scope
        whose cadence counter this tier steps itself, because its durable step is deferred
        (a write-behind; only an unshared tier is given one). With ``append`` (a count),
        the messages follow the live stored ones instead of replacing them, a stored message
        whose ``message_id`` one of them carries is dropped, and the newest ``append`` are
        kept, all in the same atomic step, so concurrent appending turns in any number of
        processes are all kept; a durable row older than the stored one is then not mirrored
        but the messages are still added. Returns how many scopes were applied."""

    async def apply_rows(
        self, rows: Sequence[ScopeRow], now: float, fence: WriteFence | None = None
    ) -> None:
        """Mirror durable rows, keeping cached messages; older revisions never win. With
        ``fence``, rows covered by a forget recorded after it are skipped (atomically).
        Returns nothing: a skipped row is not an error."""

    async def record_forget(self, seq: int, targets: Sequence[str], now: float) -> None:
        """Remember forget ``seq``'s targets (before its entries are evicted), so a write that
        began before it can no longer land. Kept for the journal's retention."""

    async def record_settings(self, seq: int, targets: Sequence[str], now: float) -> None:
        """A settings change ``seq`` made by this process. A shared tier remembers it as the
        newest one (its owner reads report it, see :meth:`journal_due`) and fences its targets
        like a forget's; a tier of one process does nothing (the others follow the journal)."""

    def journal_due(self, head: int) -> bool:
        """Whether the tier learned, in a round trip it made anyway, of something a process at
        journal position ``head`` has not applied, or must repair: a newer settings change, or
        a part of the tier behind what the process knows was forgotten (see :meth:`repair`).
        Cheap and synchronous; always false for an unshared tier."""

    def followed(self, forgets: int) -> None:
        """The newest forget (or settings change) this process's journal follower applied: a
        shared tier serves nothing from a part of itself that has not applied it."""

    async def repair(
        self, journal: JournalReader, now: float, *, to: int = 0, own: OwnEntry | None = None
    ) -> int:
        """A shared tier that may lose its data, or go back in time, without notice (Redis
        restarted from a snapshot, a replica promoted) replays from the durable journal the
        forgets it lost, up to what :meth:`followed` said (or ``to``), and resets a part that lost
        everything (fencing every write that began before the journal's end). ``own``: the
        entry ``to`` names, known without reading it. Returns the journal position the process
        may stand on; 0 when there is nothing to do."""

    async def forget_user_target(self, target: str, now: float) -> int:
        """A follower's purge of the user named by digest ``target``: their personal entries,
        and their messages and the bot's answers to them everywhere (as :meth:`scrub_author`).
        Returns how many entries changed."""

    @property
    def shared(self) -> bool:
        """True when every process sees this tier (Redis): forgets made elsewhere are already
        applied to it. False for a tier that must follow the journal itself."""

    async def owner_entries(
        self, kind: ScopeKind, owner_id: str, now: float
    ) -> tuple[list[Entry], bool]:
        """Live entries of one owner, in no promised order, and whether the tier is sure it
        holds all of them (False: the facade must re-read the owner from the durable tier)."""

    async def mark_complete(self, kind: ScopeKind, owner_id: str) -> None:
        """The facade re-read this owner from the durable tier."""

    async def delete(self, key: ScopeKey) -> bool:
        """Drop the entry of ``key``; returns whether there was one."""

    async def delete_channel(self, channel_id: str) -> int:
        """Drop every entry of one channel (all users, personas, both kinds); returns how
        many."""

    async def delete_owner(self, kind: ScopeKind, owner_id: str) -> int:
        """Drop every entry of one owner; returns how many."""

    async def scrub_author(self, author_id: str, now: float) -> int:
        """Remove every message written by ``author_id`` from every entry, and every bot
        message that answers one of them (``model.dialogue``: a bot message answers the
        nearest user message before it); answers to others stay. Returns how many entries
        changed."""

    async def sweep(self, now: float) -> int:
        """Drop entries with nothing live left at ``now``; returns how many."""

    @property
    def complete(self) -> bool:
        """True while the tier holds every durable row that has live values (after a full
        hydration and before any eviction): a miss then needs no durable read."""

    def set_complete(self, value: bool) -> None:
        """Set :attr:`complete` (the facade, after a full hydration); a tier that cannot be
        complete (a shared one) ignores True."""

    def stats(self) -> dict[str, int]:
        """Counters for monitoring: at least ``entries`` and ``bytes``, plus the tier's own
        (hits, misses, stores, evictions, ...). Cheap and synchronous."""

    def operation(self) -> AbstractContextManager[None]:
        """Marks one facade call (a context, a capture, a tool call, a clear): a tier whose
        server stopped answering fails the rest of the call at once instead of waiting out
        its timeouts again for every later step."""

    async def close(self) -> None:
        """Release the tier's resources (idempotent)."""


@runtime_checkable
class PrivateTier(Protocol):
    """A hot tier that lives in one process (the in-process tier): it follows the other
    processes' forgets through the journal, so when the journal has a gap it cannot prove
    what it holds and must be able to let go of all of it. A shared tier never needs this:
    the forgetting process changes it itself."""

    async def drop_all(self) -> int:
        """Drop every entry (not the fence's tombstones) and become incomplete; returns how
        many entries were dropped."""


@runtime_checkable
class ScopeLister(Protocol):
    """A hot tier that can list the scopes it holds, a batch at a time (the distiller's
    candidates: crude messages live in the hot tier only). Never on a turn's path."""

    def scope_keys(self, *, batch: int) -> AsyncIterator[list[ScopeKey]]:
        """Every key the tier holds, in batches of about ``batch``; a key may come twice
        (a tier changing meanwhile), a key written meanwhile may be missed."""
        ...


@runtime_checkable
class HydrationSink(Protocol):
    """A hot tier that can build its entries straight from plain
    :data:`~shortterm.model.rows.HydrationRow` tuples (paired with a store that is a
    ``HydrationSource``); the others are given rows through :meth:`HotTier.apply_rows`."""

    async def apply_hydration(
        self, rows: Sequence[HydrationRow], now: float, fence: WriteFence | None = None
    ) -> None:
        """:meth:`HotTier.apply_rows` for rows as plain tuples."""
        ...


@runtime_checkable
class HoldsScopes(Protocol):
    """A hot tier that can say, without I/O, whether it mirrors a scope's durable state
    (what lets a capture defer its durable part: a write-behind)."""

    def holds(self, key: ScopeKey, now: float) -> bool:
        """Whether the tier holds a live record of ``key`` mirroring its durable row."""
        ...


class Recent(ABC):
    """The live entries of a few owners in recall order, read only as far as the caller
    iterates (``async for``): newest first by :attr:`Entry.updated_at`; entries of the same
    time in the order of the owners given, then in an order of the tier's own that stays the
    same from one read to the next. A caller that stops early leaves the rest unread."""

    incomplete: list[Owner]
    """The owners whose entries the tier may not all hold (it evicted some, or a shared tier
    cannot vouch for them): the facade re-reads them from the durable tier, then reads
    again. Set when the read is returned."""

    live: Entry | None = None
    """With ``live=`` given and :attr:`live_read`, that scope's live entry (``None``: none)."""

    live_read: bool = False
    """Whether the tier read ``live`` with its first round trip (a shared tier does, so the
    turn needs no read of its own; a private tier's lookup costs nothing and it leaves it)."""

    def __aiter__(self) -> Recent:
        return self

    @abstractmethod
    async def __anext__(self) -> Entry: ...


@runtime_checkable
class RecentOrder(Protocol):
    """A hot tier that keeps each owner's entries in recall order, so that a turn reads
    only as many as its context shows, whatever the owner's size (``memory.turn.recall``)."""

    async def recent(
        self, owners: Sequence[Owner], now: float, *, page: int, live: ScopeKey | None = None
    ) -> Recent:
        """The live entries of ``owners`` in recall order (see :class:`Recent`). ``page``:
        how many the caller expects to look at (a shared tier reads about that many per
        round trip); ``live``: a scope whose entry the caller needs too (one of an owner
        given), which a shared tier reads in the same round trip."""
        ...
