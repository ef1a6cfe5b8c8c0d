"""Saving a server's or a user's settings: durable and journaled, then known here, then
announced on a shared hot tier, so every process on the same memory applies them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from ..model import Privacy, ServerSettings, UserSettings
from ..model.errors import StoreUnavailable
from ..model.fence import private_target, user_target
from .follower import JournalFollower
from .health import Health
from .known_settings import KnownSettings
from .tiers import Tiers

__all__ = ["SettingsWriter"]


class SettingsWriter:
    """The settings changes of one engine."""

    def __init__(
        self,
        tiers: Tiers,
        *,
        clock: Callable[[], float],
        health: Health,
        journal: JournalFollower,
        known: KnownSettings,
        flush: Callable[[], Awaitable[None]],
    ) -> None:
        self._tiers = tiers
        self._clock = clock
        self._health = health
        self._journal = journal
        self._known = known
        self._flush = flush  # the write-behind's buffer, committed before an acknowledged write

    async def save_server(self, server_id: str, settings: ServerSettings) -> None:
        """A server's settings (checked by the caller); a channel made private fences the
        writes in flight there."""
        await self._flush()
        before = self._known.server(server_id).private_channel_ids
        seq = await self._tiers.store.save_server_settings(server_id, settings, now=self._clock())
        self._known.put_server(server_id, settings)
        newly = sorted(settings.private_channel_ids - before)
        await self._announce(seq, [private_target(server_id, c) for c in newly])
        await self._journal.caught_up_to(seq)

    async def save_user(self, user_id: str, settings: UserSettings) -> None:
        """A user's settings short of full privacy (that one is a forget)."""
        await self._flush()
        seq = await self._tiers.store.save_user_settings(user_id, settings, now=self._clock())
        self._known.put_users({user_id: settings})
        # No personal memory from now on: a user-scope write in flight was computed before.
        narrowed = settings.privacy is not Privacy.NONE
        await self._announce(seq, [user_target(user_id)] if narrowed else [])
        await self._journal.caught_up_to(seq)

    async def _announce(self, seq: int, targets: Sequence[str]) -> None:
        """Our settings change ``seq``, on a shared hot tier: other processes' next owner
        read returns it and they follow the journal before they render; ``targets`` fence the
        writes in flight (see ``HotTier.record_settings``). It is saved already, so a hot
        tier that fails here fails nothing: the others then learn it from the journal."""
        try:
            await self._tiers.cache.record_settings(seq, targets, self._clock())
        except StoreUnavailable as exc:
            self._health.failed("hot tier update", exc)
