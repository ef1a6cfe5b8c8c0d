"""The servers' and users' settings as this process knows them.

Read on every turn, so lookups are plain dictionary reads; the facade keeps them current
from the journal (and, for rows written by earlier versions, a periodic look-back).
"""

from __future__ import annotations

from collections.abc import Mapping, Set

from ...model import ServerSettings, UserSettings
from .. import rules

__all__ = ["KnownSettings"]

_DEFAULT_SERVER = ServerSettings()
_DEFAULT_USER = UserSettings()


class KnownSettings:
    """Cached settings, with the full-privacy users kept apart for the per-message check."""

    def __init__(self) -> None:
        self._servers: dict[str, ServerSettings] = {}
        self._users: dict[str, UserSettings] = {}
        self._full_privacy: set[str] = set()
        # Bumped whenever the set changes: what was rendered under an older set is stale.
        self.full_privacy_version = 0
        # Bumped on every change: a snapshot taken under an older version is stale.
        self.version = 0
        self.checked_at = 0.0  # when the last look-back ran

    def server(self, server_id: str | None) -> ServerSettings:
        """A server's settings; the defaults in a DM or when never configured."""
        if server_id is None:
            return _DEFAULT_SERVER
        return self._servers.get(server_id, _DEFAULT_SERVER)

    def user(self, user_id: str) -> UserSettings:
        """A user's settings; the defaults when never configured."""
        return self._users.get(user_id, _DEFAULT_USER)

    def stored_user(self, user_id: str) -> UserSettings | None:
        """A user's stored settings, or ``None`` when they never chose any."""
        return self._users.get(user_id)

    @property
    def full_privacy_users(self) -> Set[str]:
        """The users who chose ``Privacy.FULL`` (a live view: read, never kept)."""
        return self._full_privacy

    def due(self, now: float, interval_s: float) -> bool:
        """Whether a look-back is due ``interval_s`` after the last one."""
        return now - self.checked_at >= interval_s

    def put_server(self, server_id: str, settings: ServerSettings) -> None:
        self._servers[server_id] = settings
        self.version += 1

    def put_servers(self, changed: Mapping[str, ServerSettings]) -> None:
        self._servers.update(changed)
        self.version += 1

    def put_users(self, changed: Mapping[str, UserSettings]) -> None:
        self.version += 1
        for user_id, settings in changed.items():
            self._users[user_id] = settings
            full = self._full_privacy
            if rules.is_forgotten(settings):
                if user_id not in full:
                    full.add(user_id)
                    self.full_privacy_version += 1
            elif user_id in full:
                full.discard(user_id)
                self.full_privacy_version += 1

    def drop_user(self, user_id: str) -> None:
        self.version += 1
        self._users.pop(user_id, None)
        if user_id in self._full_privacy:
            self._full_privacy.discard(user_id)
            self.full_privacy_version += 1

    def replace(
        self, servers: Mapping[str, ServerSettings], users: Mapping[str, UserSettings]
    ) -> None:
        """Take a complete reload: settings deleted elsewhere are gone here too."""
        self.version += 1
        self._servers = dict(servers)
        self._users = {}
        self._full_privacy = set()
        self.full_privacy_version += 1
        self.put_users(users)
