"""The durable tier contract.

A store keeps one row per scope key (summary, categories, cadence counter, lineage, value
timestamps, display metadata) plus server and user settings. Every method is one logical
operation, atomic, and durable when it returns. Backends wrap driver errors in
``StoreUnavailable``. Crude messages never reach a store: they live in the hot tier only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import NamedTuple, Protocol, TypeAlias, runtime_checkable

from ..model.fence import JOURNAL_RETENTION_S, JournalEntry, WriteFence
from ..model.keys import ScopeKey, ScopeKind
from ..model.rows import DistilledWrite, HydrationRow, ScopeMeta, ScopeRow, ServerSummary
from ..model.settings import ServerSettings, UserSettings

# The row types live in the model (the tiers share them without importing each other);
# they are re-exported here, where they were first defined.
__all__ = [
    "JOURNAL_RETENTION_S",
    "LOAD_MANY_KEYS",
    "BatchTouch",
    "BufferedTouch",
    "Distilled",
    "DistilledWrite",
    "Forgotten",
    "HydrationSource",
    "ScopeMeta",
    "ScopeRow",
    "ServerSummary",
    "Store",
    "TouchScopes",
    "TouchedBatch",
    "WriteScopes",
]

LOAD_MANY_KEYS = 2000
"""The keys :meth:`Store.load_many` reads in one statement (a SQL backend's chunk): a journal
follower's page of entries names at most this many scopes, so it costs one load."""

TouchScopes: TypeAlias = Sequence[tuple[ScopeKey, ScopeMeta]]
"""The scopes a capture touches, each with its metadata."""

WriteScopes: TypeAlias = Sequence[tuple[ScopeKey, ScopeMeta | None]]
"""The scopes a distilled write changes; a ``None`` metadata keeps what is stored."""


class Distilled(NamedTuple):
    """A distilled write as a store hands it to its parts: the scopes (a ``None`` meta keeps
    the stored one), the change, and the scope whose counter resets."""

    scopes: WriteScopes
    change: DistilledWrite
    reset: ScopeKey | None


class Forgotten(NamedTuple):
    """What a forget did: its journal sequence number and the durable rows it deleted
    (``rows`` counts scope rows only: not journal, fence or settings rows)."""

    seq: int
    rows: int


class BufferedTouch(NamedTuple):
    """Captures of one scope, coalesced by a write-behind: ensure the row with ``meta`` and
    add ``steps`` to its counter. Only captures with the same ``fence`` (position and
    triggerer) are coalesced, so the touch is refused exactly when each of them would be;
    ``now`` is the newest."""

    key: ScopeKey
    meta: ScopeMeta
    steps: int
    fence: WriteFence
    now: float
    cold: bool = False  # the hot tier did not hold the scope: its stored row comes back


class TouchedBatch(NamedTuple):
    """What a batch touch did: how many touches it wrote (the others were fenced), and the
    rows as stored, for the hot tier to mirror — empty when the store knows that nobody else
    wrote since its previous batch, so the rows are what this process expects."""

    written: int
    rows: list[ScopeRow]


@runtime_checkable
class BatchTouch(Protocol):
    """An optional capability: a store that can apply many buffered touches at once (SQLite,
    whose every statement costs the process's one thread). Only such a store gets a
    write-behind; the others keep one awaited :meth:`Store.touch` per capture."""

    foreign_epoch: int
    """How many times this store has seen that another connection committed (it only grows).
    While it stays the same, nothing but this process changed what is stored."""

    async def touch_batch(self, touches: Sequence[BufferedTouch]) -> TouchedBatch:
        """Apply every touch in one transaction, each fenced as :meth:`Store.touch` fences
        (a touch covered by a forget journaled after its ``fence.position`` is left out,
        checked atomically with the write). The rows come back when another connection
        committed since the previous batch, and a ``cold`` touch's row whenever it existed
        before the batch."""

    async def write_distilled_after(
        self,
        touches: Sequence[BufferedTouch],
        scopes: WriteScopes,
        change: DistilledWrite,
        *,
        reset_counter: ScopeKey | None,
        now: float,
        fence: WriteFence | None = None,
    ) -> tuple[TouchedBatch, list[ScopeRow]]:
        """:meth:`touch_batch` then :meth:`Store.write_distilled`, in one transaction: an
        acknowledged write commits the buffered touches with it (one commit, not two)."""

    async def private_scope_keys(self) -> list[tuple[str, str, str, str | None]]:
        """The key tuples of every stored row whose private flag is set."""


@runtime_checkable
class HydrationSource(Protocol):
    """An optional capability: a store that can stream hydration as plain
    :data:`~shortterm.model.rows.HydrationRow` tuples (the open's bulk load, with no row
    object per row); the others are read through :meth:`Store.iter_distilled`."""

    def iter_hydration(
        self, *, since: float, batch_rows: int
    ) -> AsyncIterator[list[HydrationRow]]: ...


class Store(Protocol):
    """What the memory facade needs from a durable backend.

    Conventions for every method: a list of rows "in order" follows the order of the
    ``scopes`` argument; "no promised order" means callers must not rely on one. A delete
    count is the number of scope rows removed (rows that did not exist count nothing; journal,
    fence and settings rows never count). :class:`~shortterm.store.reference.ReferenceStore`
    is the reference the conformance suite checks every backend against."""

    async def migrate(self) -> list[str]:
        """Apply pending schema migrations, each in its own transaction; returns the names of
        the ones applied now (``["0001_initial"]``), empty when the schema was up to date."""

    async def touch(
        self,
        scopes: TouchScopes,
        *,
        increment: ScopeKey | None,
        now: float,
        fence: WriteFence | None = None,
    ) -> list[ScopeRow]:
        """Ensure each scope's row exists with ``meta`` written, and add one to the counter of
        ``increment`` (one of ``scopes``) — all in one transaction. Returns the rows, in order.
        With ``fence``, a scope covered by a forget journaled after ``fence.position`` is left
        alone and missing from the result (checked atomically with the write). The private
        flag is sticky: a write never turns a private row public."""

    async def write_distilled(
        self,
        scopes: WriteScopes,
        change: DistilledWrite,
        *,
        reset_counter: ScopeKey | None,
        now: float,
        fence: WriteFence | None = None,
    ) -> list[ScopeRow]:
        """Apply ``change`` to every scope (creating rows as needed) and zero the counter of
        ``reset_counter``: all or nothing. Returns the rows, in order. A ``None`` meta (an
        admin edit) keeps the stored metadata. With ``fence``, fenced scopes are skipped as in
        :meth:`touch`, and each written row is journaled as an ``edit`` for followers."""

    async def load(self, key: ScopeKey) -> ScopeRow | None:
        """The stored row of ``key``, or ``None`` when there is none."""

    async def load_many(self, keys: Sequence[ScopeKey]) -> list[ScopeRow | None]:
        """The stored row of each key, in order, ``None`` where there is none (a key given
        twice comes back twice): one statement per :data:`LOAD_MANY_KEYS` keys, not one per
        key, each its own snapshot (no transaction spans two). No statement for no keys."""

    async def load_owner(self, kind: ScopeKind, owner_id: str) -> list[ScopeRow]:
        """Every row of one owner (a user's personal rows, or a server's), in no promised
        order; empty when there are none."""

    async def load_channel(self, channel_id: str) -> list[ScopeRow]:
        """Every row of one channel: all users, personas and both kinds (the channel index),
        in no promised order; empty when there are none."""

    async def list_servers(self, *, after: str | None, limit: int) -> list[ServerSummary]:
        """The servers owning server-scope rows, by id ascending, whose id sorts after
        ``after`` (a keyset page; ``None``: from the start), at most ``limit`` of them. Ids
        sort by code point (PostgreSQL: by the database's collation). One range over the key
        index, so the cost follows the page's rows, not the table."""

    def iter_rows(self, *, batch_rows: int) -> AsyncIterator[list[ScopeRow]]:
        """Stream every row, in batches of at most ``batch_rows`` (export), in the order the
        rows were created (SQL backends: by row id). No empty batch is yielded. Each batch is its
        own short query, so no transaction stays open while the caller works on one."""

    async def put_rows(
        self, rows: Sequence[ScopeRow], *, fence: WriteFence | None = None
    ) -> list[ScopeRow]:
        """Write whole rows as given (import): metadata, values, their timestamps, the counter
        and ``updated_at`` replace what is stored; ``revision`` grows past the stored one.
        All rows or none, in one transaction. Keys must be distinct. Returns the rows as
        stored, in order."""

    def iter_distilled(self, *, since: float, batch_rows: int) -> AsyncIterator[list[ScopeRow]]:
        """Stream, in batches, the rows whose summary or categories were written after
        ``since`` (hydration), in no promised order; no empty batch is yielded. Memory use is
        bounded by ``batch_rows``."""

    async def forget_channel(
        self, channel_id: str, *, now: float, horizon: float | None = None
    ) -> Forgotten:
        """Journal the forget (with its fence target and its ``horizon``, the moment it
        covers: ``now`` when ``None``; the target's stored horizon becomes the newer of the
        two) and delete every row of the channel, in one transaction; when it returns, no
        purged byte is left where the backend can promise it (SQLite: file, WAL and shared
        memory). Returns the entry's sequence number and the scope rows deleted."""

    async def forget_user(
        self, user_id: str, *, keep: UserSettings | None, now: float, horizon: float | None = None
    ) -> Forgotten:
        """Journal the forget (with its ``horizon``, as :meth:`forget_channel`) and delete the
        user's personal rows, the journal entries that name them and their settings row — or,
        with ``keep`` (a FULL choice), store ``keep`` as their settings in the same
        transaction. Returns the entry's sequence number and
        the personal scope rows deleted."""

    async def forget_server_channel(
        self, server_id: str, channel_id: str, persona_id: str | None, *, now: float
    ) -> Forgotten:
        """Journal the forget and delete that one server-scope row; returns the entry's
        sequence number and 1 or 0 rows (0: there was no such row, the entry is kept)."""

    def journal_moved(self) -> bool:
        """Cheap, no I/O worth counting: False only when no other process can have journaled
        anything since the last call (True when the backend cannot tell)."""

    async def journal_since(
        self, seq: int, *, limit: int = 1000, forgets_only: bool = False
    ) -> list[JournalEntry]:
        """Journal entries with a sequence number above ``seq``, oldest first (ascending
        ``seq``), at most ``limit``; empty when there are none. ``forgets_only``: without the
        distilled writes (``edit``), as a shared hot tier's repair reads them."""

    async def journal_head(self) -> int:
        """The newest journal sequence number (0 for none)."""

    async def horizons(self) -> list[tuple[str, float]]:
        """Every kept forget horizon, as (target digest, epoch seconds): the newest per
        target, kept ``HORIZON_RETENTION_S`` after it was last written (the journal's
        prune drops older ones)."""

    async def journal_rewound(self, past: int, *, now: float) -> int:
        """The journal went back below ``past``, a position a follower had applied (a
        PostgreSQL standby promoted without its newest entries, a restored backup): entries
        since may reuse numbers up to ``past``, which a follower there would never read.
        Journal a ``pruned`` entry through a *floor* above ``past`` and above every number
        handed out, so numbers stay increasing and every follower that passed the journal's
        end reloads, and fence every write that began before it. Returns its sequence."""

    async def fence_upgrade(
        self, scopes: Sequence[ScopeKey], *, since: int, targets: Sequence[str], now: float
    ) -> int | None:
        """Decide, once, a turn's upgrade whose claim was taken over from owners that missed
        their deadline: ``None`` when an ``edit`` of one of ``scopes`` was journaled after
        ``since`` (an owner's write landed, or may have); otherwise journal a ``turn`` entry
        fencing ``targets`` (what the owners' writes carry) and return its sequence number.
        Atomic with every fenced write: none of theirs lands after the check, whether it was
        in flight or not sent yet."""

    async def janitor(self, *, untouched_since: float) -> int:
        """Delete rows whose ``updated_at`` is older than ``untouched_since`` (the SQL backends
        also drop journal and fence entries past their retention); returns the scope rows
        deleted."""

    async def save_server_settings(
        self, server_id: str, settings: ServerSettings, *, now: float
    ) -> int:
        """Store the settings and journal the change (fencing every channel that turns
        private) in one transaction; returns the journal sequence number."""

    async def server_settings_since(self, since: float) -> dict[str, ServerSettings]:
        """Settings of the servers changed at or after ``since`` (all of them for 0), keyed by
        server id; each one's categories in their stored order."""

    async def save_user_settings(self, user_id: str, settings: UserSettings, *, now: float) -> int:
        """Store the settings and journal the change; returns the sequence number."""

    async def user_settings_since(self, since: float) -> dict[str, UserSettings]:
        """Settings of the users changed at or after ``since`` (all of them for 0), keyed by
        user id."""

    async def close(self) -> None:
        """Release the connections (idempotent); every later operation fails with
        ``StoreUnavailable``."""
