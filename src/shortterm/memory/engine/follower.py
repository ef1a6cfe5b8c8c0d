"""Following the forget journal: this process's position in it, and catching up.

Every forget, settings change and distilled write is journaled durably. Before a call returns,
the facade applies what other processes journaled since its position (a cheap check when
nothing moved); a write is fenced at that position, so only what comes later can overtake it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import TypeAlias, cast

from ...cache.base import OwnEntry, PrivateTier
from ...model import ScopeKey
from ...model.errors import StoreUnavailable
from ...model.fence import EVERY_TARGET, JournalEntry, WriteFence, user_target
from ...model.horizons import Horizons
from ...model.keys import ScopeKind
from ...model.rows import ScopeRow
from ...store.base import LOAD_MANY_KEYS
from .health import Health
from .known_settings import KnownSettings
from .tiers import Tiers
from .unsure import UnsureForgets

__all__ = ["DEGRADED_FOLLOW_WAIT_S", "JournalFollower"]

log = logging.getLogger("shortterm")

# Entries read at once: a page's edits name at most as many scopes as one batched load reads,
# so a page costs two statements (the read and the load) however many edits it holds.
_JOURNAL_PAGE = LOAD_MANY_KEYS

EditedKey: TypeAlias = tuple[ScopeKind, str, str, str | None]  # an edited scope's astuple

# While the durable tier is failing, how long a call waits for its journal read before it goes
# on degraded (the read continues in the background): the bound an outage adds to a call.
DEGRADED_FOLLOW_WAIT_S = 0.1


class JournalFollower:
    """The journal position of one engine: every forget and settings change up to ``head``
    is reflected in this process (hot tier, tombstones, settings)."""

    def __init__(
        self,
        tiers: Tiers,
        *,
        clock: Callable[[], float],
        health: Health,
        known: KnownSettings,
        reload: Callable[[float], Awaitable[None]],
        unsure_forgets: UnsureForgets,
        settle_forgets: Callable[[], Awaitable[None]],
    ) -> None:
        self._tiers = tiers
        self._clock = clock
        self._health = health
        self._known = known
        self._reload = reload  # loads the durable rows into an emptied private hot tier
        # Our forgets of unknown outcome, retried before anything is followed.
        self._unsure_forgets = unsure_forgets
        self._settle_forgets = settle_forgets
        self.head = 0
        # Every forget's horizon this process knows (loaded at the start, then followed):
        # what a capture may no longer take from the platform's history.
        self.horizons = Horizons()
        # The entry at ``head`` as read, to recognise it again (None: the position was taken
        # without reading it); see _past_our_position.
        self._at_head: JournalEntry | None = None
        self.rewinds = 0  # times the journal was found gone back below our position
        # The newest entry that is not a distilled write (a forget, a prune, a settings
        # change): a shared hot tier serves nothing from a part that has not applied it.
        self.forgets = 0
        self._own_under_way: set[int] = set()  # our entries whose caught_up_to runs
        self.behind = False  # a journal read failed: read it on the next call
        self.error = ""  # why the last journal read failed
        self.gaps = 0  # journal gaps met: times the private hot tier was dropped and reloaded
        self._probe: asyncio.Task[bool] | None = None  # a journal read while degraded

    async def start(self) -> None:
        """Take the journal's current end as our position, and the current state as seen."""
        store = self._tiers.store
        self.head = await store.journal_head()
        # Read after the position: a forget committed between the two is in both, never in
        # neither (catch_up records the horizons of the entries after our position).
        self.horizons.record_all(await store.horizons())
        # Not knowing which entries were forgets, take them all as such: a shared hot tier
        # then replays into every part short of our position what it lost (see repair).
        self._forgot(self.head)
        self.head = max(self.head, await self._tiers.cache.repair(store, self._clock()))
        store.journal_moved()

    async def follow(self) -> bool:
        """Apply what other processes journaled since our position. Costs a cheap check
        (SQLite's WAL-index header, a PostgreSQL NOTIFY flag) unless something moved. Returns
        False when the durable tier is failing: our position stays, and a write fenced at it
        can only be dropped too often, never resurrect anything; the journal is read once it
        is back."""
        if self._unsure_forgets.pending:
            await self._settle_forgets()
        if self._health.degraded:
            return await self._follow_degraded()
        tiers = self._tiers
        try:
            if tiers.store.journal_moved() or self.behind or tiers.cache.journal_due(self.head):
                self.behind = True
                await self.follow_shared()
                self.behind = False
        except StoreUnavailable as exc:
            self._failed(exc)
            return False
        return True

    async def follow_shared(self) -> None:
        """:meth:`catch_up`, after what a shared hot tier reported (``HotTier.journal_due``):
        the tier repaired where it is short of what we know was forgotten (or reset where it
        lost everything), and our position brought up to its marks and past any newer
        settings change its reads returned. A read may call it mid-call."""
        tiers = self._tiers
        mark = await tiers.cache.repair(tiers.store, self._clock())
        await self.catch_up()
        # Every entry up to a mark was committed when it was set, and catch_up applied
        # those still kept: the position may stand on the mark even if its entry is gone.
        if mark > self.head:
            self.head, self._at_head = mark, None

    def _forgot(self, seq: int) -> None:
        if seq > self.forgets:
            self.forgets = seq
            self._tiers.cache.followed(seq)

    def _failed(self, exc: StoreUnavailable) -> None:
        self.error = str(exc)
        self._health.count("journal_errors")
        self._health.failed("journal read", exc, counted=False)

    async def _follow_degraded(self) -> bool:
        """A process that knows the durable tier failed still reads the journal before it
        answers: one that only reads would otherwise never learn the tier is back, and would
        serve what others forgot meanwhile. The read is waited for at most
        ``DEGRADED_FOLLOW_WAIT_S``; a read that fails says the tier is down (False: the call
        skips its durable work). A slower one goes on in the background, and meanwhile calls
        do not wait for it again: their own durable work finds out whether the tier is back
        (True), as a hung read may hold a connection that a healed network will not revive."""
        self.behind = True
        probe = self._probe
        if probe is None or probe.done():
            probe = self._probe = asyncio.get_running_loop().create_task(
                self._probe_journal(), name="shortterm-journal-probe"
            )
            try:
                return await asyncio.wait_for(asyncio.shield(probe), DEGRADED_FOLLOW_WAIT_S)
            except TimeoutError:
                pass
        return True

    async def _probe_journal(self) -> bool:
        try:
            await self.follow_shared()
        except StoreUnavailable as exc:
            self._failed(exc)
            return False
        self.behind = False
        self._health.ok()  # the journal answered: the durable tier is back
        return True

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with suppress(asyncio.CancelledError):
                await self._probe

    async def catch_up(self, own: int | None = None) -> None:
        """Apply every journal entry after our position, a page at a time: one read, and one
        batched load of the scopes the page's edits name. ``own``: the sequence of an entry
        this process wrote and already applied (a purge's scan of every entry need not run
        twice). A ``pruned`` entry newer than our position means entries we never applied
        are gone: a private hot tier is then dropped and reloaded (see :meth:`_gap`)."""
        gap = False
        store = self._tiers.store
        checked = self.head == 0  # position 0 is no entry: nothing to recognise
        while True:
            # The first read starts at our own entry, to see that the journal still has it.
            head, known = self.head, self._at_head
            entries = await store.journal_since(head if checked else head - 1, limit=_JOURNAL_PAGE)
            # Whether the journal may hold more is the page's length as read: dropping our own
            # entry from the first page below must not end the catch-up one entry short.
            full_page = len(entries) == _JOURNAL_PAGE
            if not checked:
                checked = True
                entries, rewound = self._checked(entries, head, known)
                if rewound:
                    await self._rewound()
                    continue  # the new entry is read next, and is a gap here too
            if not entries:
                break
            now = self._clock()
            reload = False
            horizons = self.horizons
            # The rows the page's edits name, in one statement read after the page: see _mirror.
            rows = await self._edited_rows(entries, own)
            run: dict[EditedKey, int] = {}  # edits since the last other entry: key → its seq
            for entry in entries:
                if entry.horizon is not None:
                    for target in entry.targets:
                        horizons.record(target, entry.horizon)
                if entry.kind == "edit":
                    key = _edited(entry)
                    if key in rows and entry.seq != own:
                        run[key] = entry.seq
                    continue
                if run:  # before the entry that may forget them
                    await self._mirror(run, rows, now)
                    run = {}
                if entry.seq != own:  # own: see caught_up_to
                    self._forgot(entry.seq)
                if entry.kind == "pruned":
                    gap |= _missed(entry, self.head)
                elif entry.seq != own:
                    reload |= await self._apply(entry, now)
            if run:
                await self._mirror(run, rows, now)
            if reload:
                await self._reload_settings()
            # Only now: a write fenced at the new position relies on all of the above.
            if entries[-1].seq > self.head:
                self.head, self._at_head = entries[-1].seq, entries[-1]
            self._health.count("journal_entries", len(entries))
            if not full_page:
                break
        if gap:
            await self._gap()

    def _checked(
        self, entries: list[JournalEntry], head: int, known: JournalEntry | None
    ) -> tuple[list[JournalEntry], bool]:
        """The entries after ``head`` of a read from ``head - 1``, and whether the journal
        went back below it (see :func:`_past_our_position`). A catch-up that another one
        overtook meanwhile decides nothing: that one read on from its own position."""
        if self.head != head:
            return [e for e in entries if e.seq > head], False
        if known is None and entries and entries[0].seq == head:
            self._at_head = entries[0]  # recognised from now on
        return _past_our_position(entries, head, known)

    async def _rewound(self) -> None:
        """The journal went back below our position: entries written since may reuse the
        numbers we passed, and a read after our position would skip them, forgets included.
        The store moves the journal past us with a ``pruned`` entry through a floor above
        every number used (``Store.journal_rewound``); this process, and every other that
        passed the journal's end, then meets it as a gap and reloads."""
        self.rewinds += 1
        log.warning(
            "shortterm's journal went back below this process's position %d (a PostgreSQL "
            "failover that lost entries, or a restored backup): moving it forward and "
            "reloading what this process holds",
            self.head,
        )
        await self._tiers.store.journal_rewound(self.head, now=self._clock())

    async def _gap(self) -> None:
        """Entries we never applied were pruned (or the journal was created anew): what they
        forgot cannot be known. A private hot tier fences every write that began before now,
        drops everything it holds (crude messages included: nothing proves them innocent),
        and reloads the durable rows; settings are re-read whatever the tier."""
        self.gaps += 1
        log.warning(
            "shortterm missed pruned journal entries (position %d): reloading the hot tier",
            self.head,
        )
        # The pruned entries' horizons are in the horizon table, which outlives the journal.
        self.horizons.record_all(await self._tiers.store.horizons())
        cache = self._tiers.cache
        if isinstance(cache, PrivateTier):  # only an unshared tier is one
            now = self._clock()
            await cache.record_forget(self.head, [EVERY_TARGET], now)
            await cache.drop_all()
            await self._reload(now)
        await self._reload_settings()

    async def _apply(self, entry: JournalEntry, now: float) -> bool:
        """Reflect one journal entry here; returns whether settings must be reloaded."""
        cache, kind, subject = self._tiers.cache, entry.kind, entry.subject
        if kind in ("user_settings", "server_settings"):
            if entry.targets and not cache.shared:
                await cache.record_forget(entry.seq, entry.targets, now)
            return True
        if cache.shared:
            return kind == "user"  # the forgetting process already changed the shared tier
        if entry.targets:
            await cache.record_forget(entry.seq, entry.targets, now)
        if kind == "channel" and subject[0] is not None:
            await cache.delete_channel(subject[0])
        elif kind == "user" and subject[0] is not None:
            await cache.forget_user_target(subject[0], now)
            return True
        elif kind == "server_channel" and subject[0] is not None and subject[1] is not None:
            await cache.delete(ScopeKey.server(subject[0], subject[1], subject[2]))
        return False  # an edit: see _mirror

    async def _edited_rows(
        self, entries: list[JournalEntry], own: int | None
    ) -> dict[EditedKey, ScopeRow | None]:
        """The stored rows of the scopes a page's edits name, by key (``None``: no row), in
        one statement; none for a shared hot tier (the writing process changed it)."""
        if self._tiers.cache.shared:
            return {}
        keys = {
            key: None
            for e in entries
            if e.kind == "edit" and e.seq != own and (key := _edited(e)) is not None
        }
        if not keys:
            return {}
        # Keys of our own rows (validated when written): the unchecked constructor.
        loaded = await self._tiers.store.load_many([ScopeKey._unchecked(*k) for k in keys])
        return dict(zip(keys, loaded, strict=True))

    async def _mirror(
        self, run: dict[EditedKey, int], rows: dict[EditedKey, ScopeRow | None], now: float
    ) -> None:
        """A private hot tier takes the rows of a run of edits (entries with no other entry
        between them), each key once, fenced at the run's last entry. The rows were read after
        the page, so each is at least as new as every entry of it: a row that a forget later
        in the page covers was deleted or written again after that forget (and comes back
        only if written again); mirrored here before the forget, the forget then takes it.
        No forget lies inside a run, so one fence at its end refuses exactly what each
        edit's own fence would."""
        cache = self._tiers.cache
        found = []
        for key in run:
            row = rows[key]
            if row is None:
                await cache.delete(ScopeKey._unchecked(*key))
            else:
                found.append(row)
        if found:
            await cache.apply_rows(found, now, WriteFence(max(run.values())))

    async def _reload_settings(self) -> None:
        store = self._tiers.store
        servers = await store.server_settings_since(0.0)
        users = await store.user_settings_since(0.0)
        self._known.replace(servers, users)

    async def caught_up_to(self, seq: int) -> None:
        """After our own forget or settings change ``seq``: read the journal up to it, so
        entries other processes wrote before it are applied too and our position can pass
        it; then a shared hot tier moves its marks past it (replaying it, and any other
        forget a part of it is short of, in one step per part with the mark's move)."""
        self._own_under_way.add(seq)
        try:
            if self.head == seq - 1:
                # No other entry can lie between: nothing else to apply.
                self.head, self._at_head = seq, None
            elif self.head < seq:
                await self.catch_up(own=seq)
            tiers = self._tiers
            if tiers.cache.shared:
                # The forget is applied already: a tier that fails here only keeps its marks
                # short, so its readers repair it (see repair) before they serve from it. Our
                # own reads meanwhile still compare the marks with what we knew before: the
                # marks catch up before we know the forget, so no read asks for another one.
                own = _own_entry(tiers.store, seq, self._forget_before(seq))
                await tiers.cache.repair(tiers.store, self._clock(), to=seq, own=own)
            self._forgot(seq)
        finally:
            self._own_under_way.discard(seq)

    def _forget_before(self, seq: int) -> int:
        """The newest forget before our entry ``seq`` (once the position has reached it):
        one applied, or one of ours whose own :meth:`caught_up_to` is under way (its
        position moved, but it is applied only once the tier's marks have moved)."""
        return max([self.forgets, *(s for s in self._own_under_way if s < seq)])


def _own_entry(store: object, seq: int, after: int) -> OwnEntry | None:
    """Our entry ``seq`` as the store wrote it, when the store keeps it (an optional
    capability: ``own_entry``), with ``after``, the newest forget before it: a group whose
    mark is there or past it lacks this entry only, and the repair replays it with no read
    of the journal."""
    known = getattr(store, "own_entry", None)
    entry = known(seq) if known is not None and after < seq else None
    return None if entry is None else OwnEntry(entry, after)


def _past_our_position(
    entries: list[JournalEntry], head: int, known: JournalEntry | None
) -> tuple[list[JournalEntry], bool]:
    """The entries after ``head`` among a read from ``head - 1``, and whether the journal
    went back below ``head``. The read finds our entry first (``known``: as we read it, if
    we did), unless a prune deleted it (its ``pruned`` entry follows, read as usual), a purge
    took it with the user's edits (the purge's entry follows), or the journal lost it: a
    standby promoted without it, a backup restored. Another entry under its number is a loss
    too. A full page that shows none of these decides nothing (the next catch-up will)."""
    if entries and entries[0].seq == head:
        here = entries[0]
        same = known is None or (
            (here.kind, here.subject, here.targets, here.at)
            == (known.kind, known.subject, known.targets, known.at)
        )
        return entries[1:], not same
    explained = any(e.kind == "pruned" and _through(e) >= head for e in entries)
    # A purge deletes the edits of the user's personal scopes with it (the journal keeps no
    # purged id): our entry may have been one.
    if known is not None and known.kind == "edit" and known.subject[:1] == ("user",):
        purged = user_target(known.subject[1] or "")
        explained |= any(e.kind == "user" and e.subject == (purged,) for e in entries)
    return entries, not explained and len(entries) < _JOURNAL_PAGE


def _edited(entry: JournalEntry) -> EditedKey | None:
    """The scope an ``edit`` entry names, as a key tuple (``None``: not a scope's)."""
    subject = entry.subject
    if len(subject) != 4:
        return None
    kind, owner, channel, persona = subject
    if kind not in ("user", "server") or owner is None or channel is None:
        return None
    return (cast("ScopeKind", kind), owner, channel, persona)


def _missed(entry: JournalEntry, head: int) -> bool:
    """Whether a ``pruned`` entry deleted an entry after ``head`` (one we never applied)."""
    return _through(entry) > head


def _through(entry: JournalEntry) -> float:
    """The newest sequence a ``pruned`` entry names (unreadable: every one)."""
    try:
        return int(entry.subject[0] or "")
    except (IndexError, ValueError):
        return float("inf")
