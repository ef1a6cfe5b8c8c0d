"""What a settings change fences, the same in every backend: the writes still in flight that
were computed under the settings it replaces and must not land."""

from __future__ import annotations

from collections.abc import Set

from ..model.fence import private_target, user_target
from ..model.keys import Privacy
from ..model.settings import ServerSettings, UserSettings

__all__ = ["server_settings_targets", "user_settings_targets"]


def server_settings_targets(
    server_id: str, settings: ServerSettings, was_private: Set[str]
) -> list[str]:
    """The channels that turn private: a write in flight made while they were public carries
    a public flag."""
    return [
        private_target(server_id, c) for c in sorted(settings.private_channel_ids - was_private)
    ]


def user_settings_targets(user_id: str, settings: UserSettings) -> list[str]:
    """PARTIAL or FULL: no personal memory from now on, so a write in flight that carries the
    user's target (computed under NONE) is refused."""
    return [user_target(user_id)] if settings.privacy is not Privacy.NONE else []
