"""Forgetting: every forget is journaled durably, then applied here, then followed.

A forget deletes in the durable tier (and journals itself in the same transaction), then fences
and evicts the hot tier, so nothing in flight can land after the eviction, then reads the
journal up to its own entry. A forget whose commit may have landed but is not known to have is
retried, and stays pending (retried before this process's next call) while the durable tier
keeps failing: a forget that returned is never undone (docs/design.md, "Forgetting").
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence

from ...model import ScopeKey, UserSettings
from ...model.errors import StoreUnavailable
from ...model.fence import channel_target, server_channel_target, user_target
from ...store.base import Forgotten
from ..rules import kept_on_clear as kept_on_clear  # a rule, re-exported for the facade
from .parts import EngineParts
from .unsure import UnsureForget, UnsureForgets

# UnsureForget(s) are defined in .unsure (the follower needs them without this module)
__all__ = ["Forgetting", "UnsureForget", "UnsureForgets"]

# A forget whose commit may have landed is retried after these pauses, then at the next call.
_FORGET_RETRY_PAUSES_S = (0.05, 0.25)


class Forgetting:
    """The forgets of one engine, and those of unknown outcome still to settle."""

    def __init__(self, parts: EngineParts, unsure: UnsureForgets) -> None:
        self._parts = parts
        self.unsure = unsure

    async def forget(
        self,
        targets: Sequence[str],
        durable: Callable[[], Awaitable[Forgotten]],
        hot: Callable[[], Awaitable[int]],
        after: Callable[[], None] | None = None,
        horizon: float | None = None,
    ) -> int:
        """The one forget: durable journal + delete (raises if it failed: nothing was
        acknowledged), then the hot tier — its fence first, so nothing in flight can land
        after the eviction — then the journal up to our entry, then ``after``. Buffered
        captures flush first (inside ``durable``: see engine/durable.py); one still in flight
        is refused by the flush's fence if this forget covers it. A commit whose outcome is
        unknown is retried (see :meth:`_retry`)."""
        try:
            forgotten = await durable()
        except StoreUnavailable as exc:
            # Nothing was acknowledged, but nothing stale is shown meanwhile either: evict,
            # and let the caller see the error and retry.
            with contextlib.suppress(StoreUnavailable):
                await hot()
            if not exc.maybe_applied:
                raise
            forgotten = await self._retry(UnsureForget(targets, durable, hot, after, horizon), exc)
        return await self._forgotten(targets, forgotten, hot, after, horizon)

    async def _forgotten(
        self,
        targets: Sequence[str],
        forgotten: Forgotten,
        hot: Callable[[], Awaitable[int]],
        after: Callable[[], None] | None,
        horizon: float | None = None,
    ) -> int:
        parts = self._parts
        if horizon is not None:
            # Before the hot tier: a capture of this process that starts from here on drops
            # what the forget covers, whatever the platform passes back.
            for target in targets:
                parts.journal.horizons.record(target, horizon)
        await parts.tiers.cache.record_forget(forgotten.seq, targets, parts.clock())
        evicted = await hot()
        await parts.journal.caught_up_to(forgotten.seq)
        if after is not None:
            after()
        return max(int(forgotten.rows), int(evicted))

    async def _retry(self, forget: UnsureForget, exc: StoreUnavailable) -> Forgotten:
        """A forget whose commit may have landed (the connection dropped after COMMIT was
        sent): if it did, its tombstones are missing from a shared hot tier, and a write in
        flight could land after our eviction and stay. So it is done again — a forget is
        idempotent, and the retry's new journal entry fences every write that began before
        it. If the durable tier keeps failing, the forget stays pending and is retried at the
        start of this process's next call (:meth:`settle`), and the caller is told the forget
        may have been saved."""
        for pause in _FORGET_RETRY_PAUSES_S:
            await asyncio.sleep(pause)
            try:
                return await forget.durable()
            except StoreUnavailable:
                continue
        self.unsure.add(forget)
        raise StoreUnavailable(
            f"{exc}. The forget may have been saved: retry it to be sure (this process "
            "retries it before its next call)",
            maybe_applied=True,
        ) from exc

    async def settle(self) -> None:
        """Retry our forgets whose outcome is unknown, before a call serves anything (the
        journal follower calls this first). One that fails again stays pending, and its
        hot-tier eviction is repeated: what landed since is dropped meanwhile."""
        for forget in self.unsure.take():
            try:
                forgotten = await forget.durable()
                await self._forgotten(
                    forget.targets, forgotten, forget.hot, forget.after, forget.horizon
                )
            except StoreUnavailable as exc:
                self.unsure.add(forget)
                self._parts.health.failed("forget retry", exc)
                with contextlib.suppress(StoreUnavailable):
                    await forget.hot()

    # -- what can be forgotten ------------------------------------------------------------

    def _horizon(self, at: float | None) -> float:
        """A forget's horizon: the platform's time of the command when the caller knows it,
        the memory's clock otherwise."""
        return self._parts.clock() if at is None else at

    async def channel(self, channel_id: str, *, at: float | None = None) -> int:
        tiers, durable, clock = self._parts.tiers, self._parts.durable, self._parts.clock
        horizon = self._horizon(at)
        return await self.forget(
            [channel_target(channel_id)],
            lambda: durable.forget_channel(channel_id, now=clock(), horizon=horizon),
            lambda: tiers.cache.delete_channel(channel_id),
            horizon=horizon,
        )

    async def user(
        self, user_id: str, *, keep: UserSettings | None, at: float | None = None
    ) -> int:
        """A user's scopes and their messages everywhere (and the bot's answers to them);
        ``keep``: the settings row that stays (a full-privacy choice), else none does."""
        tiers, durable, clock = self._parts.tiers, self._parts.durable, self._parts.clock
        horizon = self._horizon(at)

        async def hot() -> int:
            deleted = await tiers.cache.delete_owner("user", user_id)
            return deleted + await tiers.cache.scrub_author(user_id, clock())

        known = self._parts.known

        def after() -> None:
            if keep is None:
                known.drop_user(user_id)
            else:
                known.put_users({user_id: keep})

        return await self.forget(
            [user_target(user_id)],
            lambda: durable.forget_user(user_id, keep=keep, now=clock(), horizon=horizon),
            hot,
            after,
            horizon=horizon,
        )

    async def server_channel(self, server_id: str, channel_id: str, persona_id: str | None) -> int:
        tiers, durable, clock = self._parts.tiers, self._parts.durable, self._parts.clock
        return await self.forget(
            [server_channel_target(server_id, channel_id, persona_id)],
            lambda: durable.forget_server_channel(server_id, channel_id, persona_id, now=clock()),
            lambda: tiers.cache.delete(ScopeKey.server(server_id, channel_id, persona_id)),
        )
