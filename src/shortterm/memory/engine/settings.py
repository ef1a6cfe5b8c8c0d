"""Saving a server's or a user's settings: durable and journaled, then known here, then
announced on a shared hot tier, so every process on the same memory applies them."""

from __future__ import annotations

from collections.abc import Sequence

from ...model import ServerSettings, UserSettings
from ...model.errors import StoreUnavailable
from ...model.fence import private_target, user_target
from .. import rules
from .parts import EngineParts

__all__ = ["SettingsWriter"]


class SettingsWriter:
    """The settings changes of one engine."""

    def __init__(self, parts: EngineParts) -> None:
        self._parts = parts

    async def save_server(self, server_id: str, settings: ServerSettings) -> None:
        """A server's settings (checked by the caller); a channel made private fences the
        writes in flight there."""
        parts = self._parts
        before = parts.known.server(server_id).private_channel_ids
        seq = await parts.durable.save_server_settings(server_id, settings, now=parts.clock())
        parts.known.put_server(server_id, settings)
        newly = sorted(settings.private_channel_ids - before)
        await self._announce(seq, [private_target(server_id, c) for c in newly])
        await parts.journal.caught_up_to(seq)

    async def save_user(self, user_id: str, settings: UserSettings) -> None:
        """A user's settings short of full privacy (that one is a forget)."""
        parts = self._parts
        seq = await parts.durable.save_user_settings(user_id, settings, now=parts.clock())
        parts.known.put_users({user_id: settings})
        # No personal memory from now on: a user-scope write in flight was computed before.
        narrowed = not rules.keeps_personal(settings)
        await self._announce(seq, [user_target(user_id)] if narrowed else [])
        await parts.journal.caught_up_to(seq)

    async def _announce(self, seq: int, targets: Sequence[str]) -> None:
        """Our settings change ``seq``, on a shared hot tier: other processes' next owner
        read returns it and they follow the journal before they render; ``targets`` fence the
        writes in flight (see ``HotTier.record_settings``). It is saved already, so a hot
        tier that fails here fails nothing: the others then learn it from the journal."""
        parts = self._parts
        try:
            await parts.tiers.cache.record_settings(seq, targets, parts.clock())
        except StoreUnavailable as exc:
            parts.health.failed("hot tier update", exc)
