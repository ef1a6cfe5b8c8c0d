"""The write-behind of a capture's durable part: its scope rows and cadence counter step.

It is the durable tier the engine writes to (a :class:`~.durable.Durable`, in front of the
store) when one applies: every durable read, acknowledged write and forget through it commits
the buffer first, or (a distilled write) with itself, so the engine never asks whether there
is one.

On SQLite every statement runs on the process's one thread, and a capture's upsert was half of
its cost. With an unshared hot tier that already mirrors a scope, the capture writes the hot
tier (stepping the counter there) and leaves its durable part here; the buffered touches are
committed together, in one transaction, when the window (``write_behind_ms``) elapses, when
``write_behind_turns`` captures are pending, inside every acknowledged distilled write's own
transaction (``commit_with``), before every other acknowledged write, forget and durable read,
and on close.

A scope the hot tier does not hold (cold) is deferred too while this process can prove that
its durable row, if any, holds nothing the hot tier would have to show at once: the hot tier
is complete (every live summary and category row is in it), no other connection has committed
since the proof began (the store's ``foreign_epoch``), and the row cannot be private unless the
capture itself is (every private row is known from the open on, and every private write since).
What such a row may still hold, a counter and names from before, comes back with the flush.

What a crash can lose: the counter steps and scope-row ensures of at most one window. Never an
acknowledged write (those commit the buffer first, or with themselves, and are awaited),
never a forget: each buffered touch
keeps its captures' fence (captures are coalesced only at the same journal position), and the
flush refuses a touch a later forget covers, atomically with the write (see
``BatchTouch.touch_batch``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ...cache.base import HoldsScopes
from ...model import ScopeKey, ScopeMeta, ScopeRow
from ...model.config import Config
from ...model.errors import StoreUnavailable
from ...model.fence import WriteFence
from ...store.base import BatchTouch, BufferedTouch, TouchedBatch
from .. import rules
from .durable import Durable
from .health import Health
from .tiers import Tiers

if TYPE_CHECKING:
    from .follower import JournalFollower

__all__ = ["HoldsScopes", "WriteBehind"]

log = logging.getLogger("shortterm")

T = TypeVar("T")

KeyTuple = tuple[str, str, str, str | None]


@dataclass(slots=True)
class _Pending:
    key: ScopeKey
    meta: ScopeMeta
    steps: int
    fence: WriteFence
    now: float
    cold: bool


_NONE_COLD: frozenset[KeyTuple] = frozenset()


class WriteBehind(Durable):
    """The durable tier with a buffer: touches coalesced per scope and fence targets,
    flushed one batch at a time."""

    buffers = True

    def __init__(
        self,
        tiers: Tiers,
        config: Config,
        health: Health,
        clock: Callable[[], float],
        journal: JournalFollower,  # its position: where flushed rows are mirrored
    ) -> None:
        super().__init__(tiers, health)
        self._clock = clock
        self._journal = journal
        self._window_s = config.write_behind_ms / 1000
        self._max_turns = config.write_behind_turns
        # Keyed by everything a touch's fence depends on (scope, triggerer, server, thread
        # parent, position), so a coalesced touch is fenced exactly as each of its captures
        # would be: a forget refuses the captures it covers and none that began after it.
        self._pending: dict[tuple[Any, ...], _Pending] = {}
        self._steps: dict[KeyTuple, int] = {}  # pending counter steps per scope
        self._turns = 0
        self._lock = asyncio.Lock()  # one flush at a time
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self.lost_steps = 0
        self.flushes = 0
        # The proof that a cold scope may be deferred: the store's foreign_epoch when it
        # began (None: not proven), and every scope whose durable row may be private.
        self._quiet_epoch: int | None = None
        self._private: set[KeyTuple] = set()

    @staticmethod
    def applies(config: Config, tiers: Tiers) -> bool:
        """Only a store that batches touches, under a hot tier no other process writes (a
        shared tier must see every counter step at once)."""
        return (
            config.write_behind_ms > 0
            and isinstance(tiers.store, BatchTouch)
            and isinstance(tiers.cache, HoldsScopes)
            and not tiers.cache.shared
        )

    def quiet_mark(self) -> int:
        """The store's ``foreign_epoch``, read before a hydration: another process committing
        from here on breaks the proof that the hot tier holds every row it must show."""
        return cast(BatchTouch, self._tiers.store).foreign_epoch  # checked by ``applies``

    async def hydrated(self, mark: int | None) -> None:
        """After a hydration that left the hot tier complete: cold scopes may be deferred
        from now on, while the store's ``foreign_epoch`` stays at ``mark`` (read before the
        hydration began, so a commit during it breaks the proof)."""
        if mark is None or not self._tiers.cache.complete:
            return
        store = cast(BatchTouch, self._tiers.store)  # checked by ``applies``
        self._private = set(await store.private_scope_keys())
        self._quiet_epoch = mark

    async def _behind(
        self, plan: rules.CapturePlan, fence: WriteFence, now: float, append: int | None
    ) -> bool | None:
        """A capture whose scopes the hot tier mirrors (or may be proven to, see
        :meth:`cold_keys`) writes the hot tier only, stepping the counter there, and its
        durable part is buffered; any other is written through (``None``). Every scope is
        buffered, even one the hot tier's fence refused: the flush's fence refuses it too."""
        scopes, meta, increment = plan
        keys = [key for key, _ in scopes]
        cold = self.cold_keys(keys, meta, now)
        if cold is None:
            return None
        hot = [(key, messages, None) for key, messages in scopes]
        applied = await self._tiers.cache.capture_scopes(
            hot, meta, now, fence, step=increment, append=append
        )
        if self.add(keys, meta, increment, fence, now, cold):
            await self.flush()  # the turn bound: this capture pays for the batch
        return applied == len(hot)

    async def write_distilled(
        self, plan: rules.DistilledPlan, *, now: float, fence: WriteFence
    ) -> list[ScopeRow]:
        """The buffered touches commit in the distilled write's own transaction, first:
        their steps land before a reset, never after it."""
        scopes, change, reset = plan
        self.note_private(k for k, meta in scopes if meta and meta.private)
        batch = cast(BatchTouch, self._tiers.store)  # checked by ``applies``
        return await self.commit_with(
            lambda touches: batch.write_distilled_after(
                touches, scopes, change, reset_counter=reset, now=now, fence=fence
            )
        )

    def note_private(self, keys: Iterable[ScopeKey]) -> None:
        """Scopes this process is writing a private flag to: from now on their durable row
        may be private, so a public capture of them is written through."""
        self._private.update(key.astuple for key in keys)

    def cold_keys(
        self, keys: Sequence[ScopeKey], meta: ScopeMeta, now: float
    ) -> frozenset[KeyTuple] | None:
        """The keys of ``keys`` the hot tier does not hold, when a capture of them may still
        be deferred; ``None`` when it must be written through."""
        m = self._tiers
        holds = cast(HoldsScopes, m.cache).holds  # checked by ``applies``
        cold = [key.astuple for key in keys if not holds(key, now)]
        if not cold:
            return _NONE_COLD
        if (
            self._quiet_epoch is None
            or cast(BatchTouch, m.store).foreign_epoch != self._quiet_epoch
            or not m.cache.complete
            or (not meta.private and not self._private.isdisjoint(cold))
        ):
            return None
        return frozenset(cold)

    @property
    def pending(self) -> int:
        """Buffered touches (coalesced), not yet committed."""
        return len(self._pending)

    def add(
        self,
        keys: Sequence[ScopeKey],
        meta: ScopeMeta,
        increment: ScopeKey | None,
        fence: WriteFence,
        now: float,
        cold: frozenset[KeyTuple] = _NONE_COLD,
    ) -> bool:
        """Buffer one capture's durable part (``cold``: the keys the hot tier did not hold);
        True when the turn bound is reached (the caller then flushes)."""
        live = increment.astuple if increment is not None else None
        triggerer = fence.triggerer
        for key in keys:
            kt = key.astuple
            step = int(kt == live)
            slot = (kt, triggerer, meta.server_id, meta.parent_channel_id, fence.position)
            p = self._pending.get(slot)
            if p is None:
                self._pending[slot] = _Pending(key, meta, step, fence, now, kt in cold)
            else:
                p.steps += step
                p.cold = p.cold or kt in cold
                # Newest metadata, but the private flag is sticky.
                p.meta = (
                    dataclasses.replace(meta, private=True)
                    if p.meta.private and not meta.private
                    else meta
                )
                p.now = max(p.now, now)
            if step:
                self._steps[kt] = self._steps.get(kt, 0) + 1
        self._turns += 1
        if self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self._window_s, self._due)
        return self._turns >= self._max_turns

    def _due(self) -> None:
        self._timer = None
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self.flush(), name="shortterm-write-behind"
            )

    def with_pending(self, rows: list[ScopeRow]) -> list[ScopeRow]:
        """``rows`` as the hot tier should mirror them: the durable counter is the truth,
        plus the steps still buffered here."""
        steps = self._steps
        if not steps:
            return rows
        return [
            dataclasses.replace(r, turns_since_refresh=r.turns_since_refresh + extra)
            if (extra := steps.get(r.key.astuple))
            else r
            for r in rows
        ]

    async def flush(self) -> None:
        """Commit every buffered touch in one transaction, then mirror the rows in the hot
        tier when another process wrote meanwhile. A failure is counted and logged, never
        raised: those steps were never acknowledged, and nothing else is lost."""
        if not self._pending:
            return  # the usual case before a forget or a durable read: nothing to wait for
        async with self._lock:
            if not self._pending:
                return
            with contextlib.suppress(StoreUnavailable):  # counted and logged by _commit
                await self._commit(self._touch_alone)

    async def commit_with(
        self, write: Callable[[Sequence[BufferedTouch]], Awaitable[tuple[TouchedBatch, T]]]
    ) -> T:
        """Run an acknowledged write that commits every buffered touch in its own transaction
        (one commit for both, the touches first), and return what it returns. When it fails,
        the touches are committed alone (the write's own trouble must not cost them) and the
        failure is raised."""
        async with self._lock:
            if not self._pending:
                done, result = await write(())
                return result
            touches, fence = self._take()
            try:
                done, result = await write(touches)
            except StoreUnavailable:
                with contextlib.suppress(StoreUnavailable):  # counted and logged there
                    await self._commit(self._touch_alone, (touches, fence))
                raise
            await self._settled(touches, done, fence)
            return result

    async def _touch_alone(self, touches: Sequence[BufferedTouch]) -> tuple[TouchedBatch, None]:
        store = cast(BatchTouch, self._tiers.store)  # checked by ``applies``
        return await store.touch_batch(touches), None

    def _take(self) -> tuple[list[BufferedTouch], WriteFence]:
        """Empty the buffer into touches, with the fence their rows are mirrored at (taken
        before they are written: a forget landing meanwhile wins); under ``_lock``."""
        batch = self._pending
        self._pending, self._turns = {}, 0
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        touches = [
            BufferedTouch(p.key, p.meta, p.steps, p.fence, p.now, p.cold) for p in batch.values()
        ]
        return touches, WriteFence(self._journal.head)

    async def _commit(
        self,
        write: Callable[[Sequence[BufferedTouch]], Awaitable[tuple[TouchedBatch, T]]],
        taken: tuple[list[BufferedTouch], WriteFence] | None = None,
    ) -> T:
        """Hand the buffer's touches (or those ``taken`` already) to ``write``; under
        ``_lock``. A failure loses their steps: counted, logged and raised."""
        touches, fence = taken if taken is not None else self._take()
        try:
            done, result = await write(touches)
        except StoreUnavailable as exc:
            lost = sum(t.steps for t in touches)
            self.lost_steps += lost
            self._steps_taken(touches)
            self._health.failed("write-behind flush", exc)
            log.warning(
                "shortterm lost %d buffered counter steps (%d scopes): %s", lost, len(touches), exc
            )
            raise
        await self._settled(touches, done, fence)
        return result

    async def _settled(
        self, touches: Sequence[BufferedTouch], done: TouchedBatch, fence: WriteFence
    ) -> None:
        """After ``touches`` committed: the hot tier mirrors what other processes wrote."""
        self._steps_taken(touches)
        self._health.ok()
        self.flushes += 1
        if done.written < len(touches):
            self._health.count("fenced_writes", len(touches) - done.written)
        if done.rows:
            # Another process wrote meanwhile (or a cold scope had a row): mirror it.
            rows = self.with_pending(list(done.rows))
            await self._tiers.cache.apply_rows(rows, self._clock(), fence)

    def _steps_taken(self, touches: Sequence[BufferedTouch]) -> None:
        """The touches' steps are no longer pending (committed, or lost)."""
        steps = self._steps
        for t in touches:
            if t.steps:
                kt = t.key.astuple
                left = steps.get(kt, 0) - t.steps
                if left > 0:
                    steps[kt] = left
                else:
                    steps.pop(kt, None)

    async def close(self) -> None:
        """Flush what is buffered and wait for a flush in progress."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        await self.flush()
        task = self._task
        if task is not None and not task.done():
            await task

    def stats(self) -> dict[str, int]:
        return {
            "lost_counter_steps": self.lost_steps,
            "write_behind_flushes": self.flushes,
            "write_behind_pending": len(self._pending),
        }
