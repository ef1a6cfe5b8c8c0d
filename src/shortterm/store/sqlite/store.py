"""The SQLite store: the Store protocol, by calling the parts that do the work.

Each part has one job: :mod:`.connection` opens the file and guards and transacts every
operation, :mod:`.commits` tells whether another connection committed, :mod:`.journaling`
writes and reads the forget journal, :mod:`.settings` keeps the settings and :mod:`.scopes`
the scope rows; :mod:`.schema` migrates. The parts' operations are plain calls (every
statement runs on the loop thread): each coroutine here is the operation's only one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

from ...model.errors import ConfigError
from ...model.fence import JournalEntry, WriteFence
from ...model.keys import ScopeKey, ScopeKind
from ...model.rows import DistilledWrite, HydrationRow, ScopeRow, ServerSummary
from ...model.settings import ServerSettings, UserSettings
from ..base import BufferedTouch, Distilled, Forgotten, TouchedBatch, TouchScopes, WriteScopes
from . import schema
from .commits import CommitWatch
from .connection import Connection, Guard
from .journaling import Journaling
from .scopes import Scopes
from .settings import Settings
from .url import parse_url

__all__ = ["SQLiteStore"]


class SQLiteStore:
    """A durable store in one SQLite file. Use :meth:`from_url` or pass a path."""

    journal_moved: Callable[[], bool]
    """Whether another connection committed since the last call (:meth:`CommitWatch.moved`):
    only then can the journal hold entries we have not read."""

    def __init__(
        self, path: str | Path, *, synchronous: str = "NORMAL", busy_timeout_ms: int = 5000
    ) -> None:
        self._connection = connection = Connection(
            path, synchronous=synchronous, busy_timeout_ms=busy_timeout_ms
        )
        # The guard the parts run their operations under: the connection's own, unless a
        # subclass wraps _guard (tests inject failures so).
        guard: Guard = self._guard
        self._commits = CommitWatch(connection, guard)
        self._journal = Journaling(connection, guard)
        self._settings = Settings(connection, guard)
        self._scopes = Scopes(connection, guard, self._commits)
        # Asked before every read and write: the watch's own method, with no call in between.
        self.journal_moved = self._commits.moved

    @classmethod
    def from_url(cls, url: str) -> SQLiteStore:
        path, options = parse_url(url)
        unknown = set(options) - {"synchronous", "busy_timeout_ms"}
        if unknown:
            raise ConfigError(f"unknown sqlite URL option(s) {sorted(unknown)} in {url!r}")
        return cls(
            path,
            synchronous=options.get("synchronous", "NORMAL"),
            busy_timeout_ms=int(options.get("busy_timeout_ms", "5000")),
        )

    @property
    def path(self) -> str:
        return self._connection.path

    @property
    def foreign_epoch(self) -> int:
        """How many times this store has seen that another connection committed (it only
        grows): while it stays the same, nothing but this process changed what is stored."""
        return self._commits.foreign_epoch

    @property
    def unscrubbed_forgets(self) -> int:
        """Forgets whose WAL could not be truncated at once (a reader held it)."""
        return self._journal.unscrubbed_forgets

    @property
    def _db(self) -> sqlite3.Connection:
        return self._connection.db

    @property
    def _guard(self) -> Guard:
        return self._connection.guard

    # -- schema and upkeep ----------------------------------------------------------------

    async def migrate(self) -> list[str]:
        return self._guard("migration", lambda: schema.migrate(self._connection))

    def schema_version(self) -> int:
        return self._guard("schema query", lambda: schema.version(self._connection))

    def checkpoint(self) -> None:
        """Fold the WAL into the main file and truncate it (tests and backups)."""
        self._connection.checkpoint()

    def integrity_check(self) -> str:
        return self._connection.integrity_check()

    async def close(self) -> None:
        if not self._connection.closed:
            self._connection.close()
            self._commits.close()  # after: closing its descriptor drops the process's locks

    # -- scopes ---------------------------------------------------------------------------

    async def touch(
        self,
        scopes: TouchScopes,
        *,
        increment: ScopeKey | None,
        now: float,
        fence: WriteFence | None = None,
    ) -> list[ScopeRow]:
        return self._scopes.touch(scopes, increment, now, fence)

    async def touch_batch(self, touches: Sequence[BufferedTouch]) -> TouchedBatch:
        """A write-behind's flush (see :meth:`Scopes.touch_batch`)."""
        return self._scopes.touch_batch(touches)

    async def write_distilled(
        self,
        scopes: WriteScopes,
        change: DistilledWrite,
        *,
        reset_counter: ScopeKey | None,
        now: float,
        fence: WriteFence | None = None,
    ) -> list[ScopeRow]:
        return self._scopes.write_distilled(Distilled(scopes, change, reset_counter), now, fence)

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
        """:meth:`touch_batch` then :meth:`write_distilled`, in one transaction."""
        write = Distilled(scopes, change, reset_counter)
        return self._scopes.write_distilled_after(touches, write, now, fence)

    async def load(self, key: ScopeKey) -> ScopeRow | None:
        return self._scopes.load(key)

    async def load_many(self, keys: Sequence[ScopeKey]) -> list[ScopeRow | None]:
        return self._scopes.load_many(keys)

    async def load_owner(self, kind: ScopeKind, owner_id: str) -> list[ScopeRow]:
        return self._scopes.load_owner(kind, owner_id)

    async def load_channel(self, channel_id: str) -> list[ScopeRow]:
        return self._scopes.load_channel(channel_id)

    async def list_servers(self, *, after: str | None, limit: int) -> list[ServerSummary]:
        return self._scopes.list_servers(after, limit)

    def iter_rows(self, *, batch_rows: int) -> AsyncIterator[list[ScopeRow]]:
        return self._scopes.iter_rows(batch_rows)

    async def put_rows(
        self, rows: Sequence[ScopeRow], *, fence: WriteFence | None = None
    ) -> list[ScopeRow]:
        return self._scopes.put_rows(rows, fence)

    def iter_distilled(self, *, since: float, batch_rows: int) -> AsyncIterator[list[ScopeRow]]:
        return self._scopes.iter_distilled(since, batch_rows)

    def iter_hydration(self, *, since: float, batch_rows: int) -> AsyncIterator[list[HydrationRow]]:
        """:meth:`iter_distilled` as plain :data:`HydrationRow` tuples (model.rows)."""
        return self._scopes.iter_hydration(since, batch_rows)

    async def private_scope_keys(self) -> list[tuple[str, str, str, str | None]]:
        return self._scopes.private_scope_keys()

    # -- the journal ----------------------------------------------------------------------

    async def forget_channel(
        self, channel_id: str, *, now: float, horizon: float | None = None
    ) -> Forgotten:
        return self._journal.forget_channel(channel_id, now, now if horizon is None else horizon)

    async def forget_user(
        self, user_id: str, *, keep: UserSettings | None, now: float, horizon: float | None = None
    ) -> Forgotten:
        return self._journal.forget_user(user_id, keep, now, now if horizon is None else horizon)

    async def forget_server_channel(
        self, server_id: str, channel_id: str, persona_id: str | None, *, now: float
    ) -> Forgotten:
        return self._journal.forget_server_channel(server_id, channel_id, persona_id, now)

    async def janitor(self, *, untouched_since: float) -> int:
        return self._journal.janitor(untouched_since)

    async def journal_since(
        self, seq: int, *, limit: int = 1000, forgets_only: bool = False
    ) -> list[JournalEntry]:
        return self._journal.since(seq, limit, forgets_only)

    async def journal_head(self) -> int:
        return self._journal.head()

    def own_entry(self, seq: int) -> JournalEntry | None:
        """The entry this store journaled lately at ``seq`` (a forget, a settings change, an
        upgrade's fence), known without a read; ``None`` otherwise (see store/own_entries.py)."""
        return self._connection.own_entries.get(seq)

    async def horizons(self) -> list[tuple[str, float]]:
        return self._journal.horizons()

    async def journal_rewound(self, past: int, *, now: float) -> int:
        return self._journal.rewound(past, now)

    async def fence_upgrade(
        self, scopes: Sequence[ScopeKey], *, since: int, targets: Sequence[str], now: float
    ) -> int | None:
        return self._journal.fence_upgrade(scopes, since, targets, now)

    # -- settings -------------------------------------------------------------------------

    async def save_server_settings(
        self, server_id: str, settings: ServerSettings, *, now: float
    ) -> int:
        return self._settings.save_server(server_id, settings, now)

    async def server_settings_since(self, since: float) -> dict[str, ServerSettings]:
        return self._settings.servers_since(since)

    async def save_user_settings(self, user_id: str, settings: UserSettings, *, now: float) -> int:
        return self._settings.save_user(user_id, settings, now)

    async def user_settings_since(self, since: float) -> dict[str, UserSettings]:
        return self._settings.users_since(since)
