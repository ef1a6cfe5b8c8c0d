"""The engine: the state of one memory and every path that reads or writes it.

It owns the tiers, the write-behind, the journal follower (the position every write is fenced
at), the health counters and the known settings. A turn hands it a plan (or the arguments to
plan with, see rules.py) and it carries it out: follow the journal once, fence, then the tiers.
It never calls back into a turn. Beside it: forget.py (forgets), settings.py
(settings changes), hydration.py (the bulk load).

Everything acknowledged is committed when its method returns; a capture's own durable part
may be buffered by the write-behind (SQLite under the in-process tier), committed before every
acknowledged write, forget and durable read. Reads hit the hot tier; a miss reads through the
durable tier unless the hot tier knows it is complete. Every forget, settings change and
distilled write is journaled; a call first applies what others journaled, and every write is
fenced at the journal position it began at, so no write in flight undoes a forget
(docs/design.md, "Forgetting").
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from ...cache.base import HotTier
from ...model import (
    DistilledWrite,
    Entry,
    Message,
    Reply,
    ScopeKey,
    ScopeKind,
    ScopeMeta,
    ScopeRow,
)
from ...model.config import Config
from ...model.errors import StoreUnavailable
from ...model.fence import WriteFence
from ...store.base import Store
from .. import rules
from ..turn_args import TurnArgs
from .durable import Durable
from .follower import JournalFollower
from .forget import Forgetting, UnsureForgets
from .health import Health
from .hydration import hydrate
from .known_settings import KnownSettings
from .parts import EngineParts
from .renders import RenderCache
from .settings import SettingsWriter
from .tiers import Tiers
from .write_behind import WriteBehind

__all__ = ["Clock", "Engine"]

Clock = Callable[[], float]
KeyTuple = tuple[str, str, str, str | None]

_SETTINGS_OVERLAP_S = 5.0  # the least look-back of a settings refresh


class Engine:
    """The machinery behind one :class:`shortterm.Memory`."""

    def __init__(self, *, store: Store, cache: HotTier, config: Config, clock: Clock) -> None:
        self.tiers = Tiers(store, cache)
        self.config = config
        self.clock = clock
        self.known_settings = KnownSettings()
        self.health = Health()
        # Keyed by the entry view itself: the in-process tier keeps one per record, and the
        # Redis tier hands back the same view while a record's fields are unchanged.
        self.renders = RenderCache()
        self._last_snapshot: tuple[TurnArgs, int, rules.Snapshot] | None = None
        self.sweeper: asyncio.Task[None] | None = None
        # Scopes whose last durable write may or may not have landed: read through once.
        self._unsure: set[KeyTuple] = set()
        self.hydration_s = 0.0
        unsure_forgets = UnsureForgets()
        self.journal = JournalFollower(
            self.tiers,
            clock=clock,
            health=self.health,
            known=self.known_settings,
            reload=self._hydrate,
            unsure_forgets=unsure_forgets,
            settle_forgets=self._settle_forgets,
        )
        # The durable tier every write and durable read goes through: the store, or the
        # write-behind in front of it (which commits its buffer inside each of them).
        self.write_behind = (
            WriteBehind(self.tiers, config, self.health, clock, self.journal)
            if WriteBehind.applies(config, self.tiers)
            else None
        )
        self.durable: Durable = self.write_behind or Durable(self.tiers, self.health)
        parts = EngineParts(
            self.tiers, self.durable, clock, self.health, self.journal, self.known_settings
        )
        self.settings = SettingsWriter(parts)
        self.forgets = Forgetting(parts, unsure_forgets)

    def operation(self) -> AbstractContextManager[None]:
        """One public call as one hot-tier operation (see ``HotTier.operation``)."""
        return self.tiers.cache.operation()

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self, *, hydrate: bool = True) -> None:
        store = self.tiers.store
        await store.migrate()
        now = self.clock()
        # The position first: whatever is journaled while we load is read again later.
        await self.journal.start()
        quiet = self.durable.quiet_mark()  # before the hydration: see Durable.hydrated
        known = self.known_settings
        known.put_servers(await store.server_settings_since(0.0))
        known.put_users(await store.user_settings_since(0.0))
        known.checked_at = now
        if hydrate:
            await self._hydrate(now)
            await self.durable.hydrated(quiet)
        if self.config.sweep_interval_s > 0:
            self.sweeper = asyncio.get_running_loop().create_task(
                self._sweep_forever(), name="shortterm-sweeper"
            )

    async def _hydrate(self, now: float) -> None:
        rows, self.hydration_s = await hydrate(
            self.tiers, self.config, WriteFence(self.journal.head), now
        )
        self.health.count("hydrated_rows", rows)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.sweep_interval_s)
            await self.tiers.cache.sweep(self.clock())

    async def close(self) -> None:
        await self.journal.close()
        if self.sweeper is not None:
            self.sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.sweeper
        await self.durable.close()
        await self.tiers.cache.close()
        await self.tiers.store.close()

    async def _settle_forgets(self) -> None:
        await self.forgets.settle()

    async def flush(self) -> None:
        """Commit the write-behind's buffered touches now (a no-op without one)."""
        await self.durable.flush()

    # -- the journal and settings ---------------------------------------------------------

    def scope_meta(self, parts: tuple[Any, ...]) -> ScopeMeta:
        """One shared ScopeMeta per distinct value: every turn in a channel has the same."""
        return rules.scope_meta(parts)

    async def begin_write(self, triggerer: str | None = None) -> WriteFence:
        """Where a write begins: follow the journal, then the position to fence the write at."""
        followed = await self.journal.follow()
        return WriteFence(self.journal.head, triggerer, store_down=not followed)

    async def refresh_settings(self) -> None:
        """Follow the journal, then :meth:`look_back` when it is due."""
        await self.journal.follow()
        if self.known_settings.due(self.clock(), self.config.settings_refresh_s):
            await self.look_back()

    async def look_back(self) -> None:
        """Pick up settings other processes changed the old way (rows written by earlier
        versions), at most one query pair per interval. The journal is followed by the
        caller, once per call."""
        now, known = self.clock(), self.known_settings
        interval = self.config.settings_refresh_s
        if not known.due(now, interval):
            return
        # Overlap the window so a write stamped just before our last check is not missed: the
        # writer takes its timestamp before it commits, so with a short interval (0 re-reads
        # on every turn) the overlap must still cover a commit in flight and clock skew.
        since = known.checked_at - max(interval, _SETTINGS_OVERLAP_S)
        known.checked_at = now
        known.put_servers(await self.tiers.store.server_settings_since(since))
        known.put_users(await self.tiers.store.user_settings_since(since))

    def snapshot(self, args: TurnArgs) -> rules.Snapshot:
        """The turn under the settings known now. The last one is kept while no setting
        changed: a turn's context and capture share it."""
        known = self.known_settings
        last = self._last_snapshot
        if last is not None and last[0] is args and last[1] == known.version:
            return last[2]
        settings = known.server(args.server_id)
        privacy = rules.effective_privacy(args.privacy, known.stored_user(args.user_id))
        snap = rules.Snapshot(args, settings, privacy, self.config)
        self._last_snapshot = (args, known.version, snap)
        return snap

    # -- reads ----------------------------------------------------------------------------

    async def live(self, key: ScopeKey, *, followed: bool = False) -> tuple[Entry | None, int]:
        """What ``key`` remembers now, and its cadence counter (0 when none is kept);
        ``followed``: the caller followed the journal already during this call."""
        if not followed:
            await self.journal.follow()
        now = self.clock()
        if self._unsure:
            await self._settle(key.kind, key.owner_id, now)
        cache = self.tiers.cache
        entry, counter = await cache.live(key, now)
        if entry is not None:
            return entry, entry.turns_since_refresh
        if counter is not None or cache.complete:
            return None, counter or 0
        row = await self.read_through(key, now)
        if row is None:
            return None, 0
        return await cache.get(key, now), row.turns_since_refresh

    async def read_through(self, key: ScopeKey, now: float) -> ScopeRow | None:
        """Load one scope's durable row and mirror it in the hot tier, fenced: a forget that
        lands while the row is in flight wins over it."""
        fence = WriteFence(self.journal.head)
        row = await self.durable.load(key)
        self.health.count("read_through")
        if row is not None:
            await self.tiers.cache.apply_rows([row], now, fence)
        return row

    async def owner_entries(self, kind: ScopeKind, owner_id: str) -> list[Entry]:
        """Live entries of one owner, re-read from the durable tier when the hot tier may
        have dropped some of them."""
        now = self.clock()
        await self.settle_owner(kind, owner_id)
        cache = self.tiers.cache
        entries, complete = await cache.owner_entries(kind, owner_id, now)
        if not complete:
            await self.complete_owner(kind, owner_id)
            entries, _ = await cache.owner_entries(kind, owner_id, now)
        return entries

    async def settle_owner(self, kind: ScopeKind, owner_id: str) -> None:
        """Before an owner is read: its scopes whose last write had an unknown outcome are
        read through (no I/O when there is none)."""
        if self._unsure:
            await self._settle(kind, owner_id, self.clock())

    async def complete_owner(self, kind: ScopeKind, owner_id: str) -> None:
        """Re-read one owner from the durable tier into the hot tier, which may have dropped
        some of its entries; the hot tier then counts it complete."""
        fence = WriteFence(self.journal.head)
        rows = await self.durable.load_owner(kind, owner_id)
        self.health.count("read_through")
        cache = self.tiers.cache
        await cache.apply_rows(rows, self.clock(), fence)
        await cache.mark_complete(kind, owner_id)

    async def _settle(self, kind: str, owner_id: str, now: float) -> None:
        """Read through this owner's scopes whose last write had an unknown outcome, so the
        hot tier never disagrees with the durable tier for longer than one call."""
        for kt in [t for t in self._unsure if t[0] == kind and t[1] == owner_id]:
            fence = WriteFence(self.journal.head)
            row = await self.durable.load(ScopeKey._unchecked(*kt))  # type: ignore[arg-type]
            self._unsure.discard(kt)
            if row is not None:
                await self.tiers.cache.apply_rows([row], now, fence)

    # -- capture --------------------------------------------------------------------------

    async def capture(
        self,
        args: TurnArgs,
        history: Sequence[Message],
        replies: Sequence[Reply],
        *,
        stopped: bool,
        upgraded: bool,
        fence: WriteFence | None,
        append: bool = False,
    ) -> None:
        """One turn's capture: the fence (and the journal followed) first, so the privacy
        choices it is planned under are those of this position and any later forget drops
        what it covers, in both tiers; then the plan (rules.plan_capture) is written,
        replacing the scopes' messages or, with ``append``, added after them."""
        if fence is None:
            fence = await self.begin_write(args.user_id)
        # The journal was followed where the fence was taken: only the look-back remains.
        now = self.clock()
        if self.known_settings.due(now, self.config.settings_refresh_s):
            await self.look_back()
            now = self.clock()
        horizons = self.journal.horizons
        if len(horizons):  # a forget recorded a horizon: the platform's history may hold it
            history, dropped = rules.outside_horizons(
                history,
                channel_id=args.channel_id,
                triggerer=args.user_id,
                horizons=horizons,
                ids=self.config.message_ids,
            )
            if dropped:
                self.health.count("horizon_dropped", dropped)
        writes = rules.plan_capture(
            self.snapshot(args),
            history,
            replies,
            stopped=stopped,
            full_users=self.known_settings.full_privacy_users,
            upgraded=upgraded,
            now=now,
        )
        if not writes:
            self.health.count("captures_skipped")
            return
        # Every persona's write carries the same fence: a forget landing during the first
        # one's write also drops the next ones.
        durable, health = self.durable, self.health
        down = self.journal.error if fence.store_down else None
        limit = self.config.max_messages if append else None
        for plan in writes:
            if not await durable.capture(
                plan, fence=fence, now=now, append=limit, down=down, trusted=not self._unsure
            ):
                health.count("fenced_writes")
        self.health.count("captures")

    async def write_capture(
        self,
        plan: rules.CapturePlan,
        *,
        fence: WriteFence,
        now: float,
        append: int | None = None,
    ) -> bool:
        """The one capture write (a plan of rules.py), through the durable tier in front of
        the store (see ``Durable.capture``): the durable rows, then the hot tier's messages
        (with ``append``, added after the stored ones: see ``HotTier.capture_scopes``). A
        scope a forget overtook is dropped in both tiers, and a message a forget's horizon
        covers is left out (an import's history is the platform's too). Returns whether every
        scope was written."""
        plan, dropped = rules.plan_outside_horizons(
            plan, self.journal.horizons, self.config.message_ids
        )
        if dropped:
            self.health.count("horizon_dropped", dropped)
        applied = await self.durable.capture(
            plan,
            fence=fence,
            now=now,
            append=append,
            down=self.journal.error if fence.store_down else None,
            trusted=not self._unsure,
        )
        if not applied:
            self.health.count("fenced_writes")
        return applied

    # -- distilled writes -----------------------------------------------------------------

    async def write_distilled(
        self,
        plan: rules.DistilledPlan,
        *,
        fence: WriteFence,
        committed: Callable[[list[ScopeRow]], None] | None = None,
    ) -> list[ScopeRow]:
        """The one distilled write (a plan of rules.py: tool call, admin edit, distiller):
        all scopes in one fenced, journaled durable transaction, then mirrored in the hot tier.
        Returns the rows written (fewer when a forget overtook it); ``committed`` learns them
        between commit and mirror. An unknown outcome (a connection dropped mid-commit) raises
        ``StoreUnavailable`` with ``maybe_applied``, and the scopes are read through on their
        next use."""
        scopes = plan.scopes
        now = self.clock()
        if fence.store_down:
            await self.durable.flush()
            raise StoreUnavailable(self.journal.error)
        try:
            rows = await self.durable.write_distilled(plan, now=now, fence=fence)
        except StoreUnavailable as exc:
            if exc.maybe_applied:
                # It may have landed: the next read of these scopes asks the durable tier
                # (keeping the hot tier's messages, which exist nowhere else).
                self._unsure.update(key.astuple for key, _ in scopes)
            raise
        if len(rows) < len(scopes):
            self.health.count("fenced_writes")
        if committed is not None:
            committed(rows)
        cache = self.tiers.cache
        try:
            await cache.apply_rows(rows, now, fence)
        except StoreUnavailable as exc:
            # Committed, so done. A hot tier that missed it must not keep serving the old
            # values: drop them (best effort) and read through from now on.
            self.health.failed("hot tier update", exc)
            cache.set_complete(False)
            for row in rows:
                with contextlib.suppress(StoreUnavailable):
                    await cache.delete(row.key)
        return rows

    async def take_over_upgrade(
        self, scopes: Sequence[ScopeKey], *, since: int, targets: Sequence[str]
    ) -> bool:
        """A turn's upgrade claim taken over from owners that missed their deadline (their
        process died mid-call): whether one of their writes landed, decided by the durable
        tier once. When none did, their writes (carrying ``targets``) are fenced off for
        good, so the caller's own write is the only one that can land."""
        store = self.tiers.store
        seq = await store.fence_upgrade(scopes, since=since, targets=targets, now=self.clock())
        if seq is None:
            return True
        await self.journal.caught_up_to(seq)  # as after any entry of ours: the marks pass it
        return False

    async def edit(self, key: ScopeKey, change: DistilledWrite) -> Entry | None:
        """An admin edit of one scope, durable; what the scope remembers after it."""
        fence = await self.begin_write()
        await self.write_distilled(rules.DistilledPlan([(key, None)], change, None), fence=fence)
        return await self.tiers.cache.get(key, self.clock())

    async def import_rows(self, rows: Sequence[ScopeRow]) -> list[ScopeRow]:
        """Whole durable rows (checked by the caller), fenced, then mirrored in the hot tier;
        user-scope rows of users who keep no personal memory are left out."""
        await self.refresh_settings()
        fence = WriteFence(self.journal.head)
        known = self.known_settings
        allowed = [r for r in rows if rules.importable(r, known.user(r.key.owner_id))]
        written = await self.durable.put_rows(allowed, fence=fence)
        self.health.count("fenced_writes", len(allowed) - len(written))
        await self.tiers.cache.apply_rows(written, self.clock(), fence)
        return written

    # -- observability --------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.tiers.cache.stats())
        out.update(self.health.counts())
        out.update(self.durable.stats())
        out["hydration_s"] = round(self.hydration_s, 6)
        out["degraded"] = self.health.degraded
        return out
