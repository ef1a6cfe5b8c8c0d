"""The in-memory reference store: the contract's semantics in plain Python.

Nothing survives the process (``store="memory://"``): for tests, notebooks and as the yardstick
the conformance suite holds every other backend to.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping, Sequence

from ..model import ScopeKey, ScopeKind, ServerSettings, UserSettings
from .base import DistilledWrite, ScopeMeta, ScopeRow

__all__ = ["MemoryStore", "merge_categories"]

Tup = tuple[str, str, str, str | None]


def merge_categories(current: Mapping[str, str], change: DistilledWrite) -> dict[str, str] | None:
    """The category map after ``change``, or ``None`` when the change leaves it alone."""
    if change.categories is None:
        return None
    merged = {} if change.replace_categories else dict(current)
    for slug, value in change.categories.items():
        if value is None:
            merged.pop(slug, None)
        else:
            merged[slug] = value
    return merged


def _server_of(key: ScopeKey) -> str | None:
    return key.owner_id if key.kind == "server" else None


def _keep_known(old: ScopeMeta, new: ScopeMeta) -> ScopeMeta:
    """Metadata a write does not know (``None``) keeps its stored value, as in SQL COALESCE."""
    return ScopeMeta(
        server_id=new.server_id if new.server_id is not None else old.server_id,
        server_name=new.server_name if new.server_name is not None else old.server_name,
        channel_name=new.channel_name if new.channel_name is not None else old.channel_name,
        parent_channel_id=new.parent_channel_id
        if new.parent_channel_id is not None
        else old.parent_channel_id,
        private=new.private,
        persona_lineage_id=new.persona_lineage_id
        if new.persona_lineage_id is not None
        else old.persona_lineage_id,
    )


class MemoryStore:
    def __init__(self) -> None:
        self._rows: dict[Tup, ScopeRow] = {}
        self._servers: dict[str, tuple[ServerSettings, float]] = {}
        self._users: dict[str, tuple[UserSettings, float]] = {}
        self.closed = False

    async def migrate(self) -> None:
        return None

    def _upsert(
        self, key: ScopeKey, meta: ScopeMeta | None, now: float, **changes: object
    ) -> ScopeRow:
        row = self._next_row(key, meta, now, **changes)
        self._rows[key.astuple] = row
        return row

    def _next_row(
        self, key: ScopeKey, meta: ScopeMeta | None, now: float, **changes: object
    ) -> ScopeRow:
        """The row ``key`` would hold after the change; nothing is stored yet."""
        old = self._rows.get(key.astuple)
        if meta is None:
            meta = old.meta if old else ScopeMeta(server_id=_server_of(key))
        elif old is not None:
            meta = _keep_known(old.meta, meta)
        if old is None:
            row = ScopeRow(key=key, meta=meta, updated_at=now)
            row = dataclasses.replace(row, **changes) if changes else row  # type: ignore[arg-type]
        else:
            row = dataclasses.replace(
                old,
                meta=meta,
                revision=old.revision + 1,
                updated_at=now,
                **changes,  # type: ignore[arg-type]
            )
        return row

    async def touch(
        self,
        scopes: Sequence[tuple[ScopeKey, ScopeMeta]],
        *,
        increment: ScopeKey | None,
        now: float,
    ) -> list[ScopeRow]:
        out = []
        for key, meta in scopes:
            row = self._upsert(key, meta, now)
            if increment is not None and key == increment:
                row = self._rows[key.astuple] = dataclasses.replace(
                    row, turns_since_refresh=row.turns_since_refresh + 1
                )
            out.append(row)
        return out

    async def write_distilled(
        self,
        scopes: Sequence[tuple[ScopeKey, ScopeMeta | None]],
        change: DistilledWrite,
        *,
        reset_counter: ScopeKey | None,
        now: float,
    ) -> list[ScopeRow]:
        out = []
        for key, meta in scopes:
            old = self._rows.get(key.astuple)
            changes: dict[str, object] = {}
            if change.set_summary:
                changes["summary"] = change.summary
                changes["summary_at"] = None if change.summary is None else now
            merged = merge_categories(old.categories if old else {}, change)
            if merged is not None:
                changes["categories"] = merged
                changes["categories_at"] = now if merged else None
            if reset_counter is not None and key == reset_counter:
                changes["turns_since_refresh"] = 0
                changes["refresh_epoch"] = (old.refresh_epoch if old else 0) + 1
            out.append(self._next_row(key, meta, now, **changes))
        # Every row is computed before any is stored: all scopes change, or none does.
        for row in out:
            self._rows[row.key.astuple] = row
        return out

    async def load(self, key: ScopeKey) -> ScopeRow | None:
        return self._rows.get(key.astuple)

    async def load_owner(self, kind: ScopeKind, owner_id: str) -> list[ScopeRow]:
        return [r for t, r in self._rows.items() if t[0] == kind and t[1] == owner_id]

    async def iter_distilled(
        self, *, since: float, batch_rows: int
    ) -> AsyncIterator[list[ScopeRow]]:
        batch: list[ScopeRow] = []
        for row in list(self._rows.values()):
            live_summary = row.summary is not None and (row.summary_at or 0) > since
            live_cats = bool(row.categories) and (row.categories_at or 0) > since
            if live_summary or live_cats:
                batch.append(row)
                if len(batch) >= batch_rows:
                    yield batch
                    batch = []
        if batch:
            yield batch

    def _delete(self, doomed: list[Tup]) -> int:
        for t in doomed:
            del self._rows[t]
        return len(doomed)

    async def delete_channel(self, channel_id: str) -> int:
        return self._delete([t for t in self._rows if t[2] == channel_id])

    async def delete_user_scopes(self, user_id: str) -> int:
        return self._delete([t for t in self._rows if t[0] == "user" and t[1] == user_id])

    async def delete_server_channel(
        self, server_id: str, channel_id: str, persona_id: str | None
    ) -> int:
        doomed = ("server", server_id, channel_id, persona_id)
        return self._delete([t for t in self._rows if t == doomed])

    async def janitor(self, *, untouched_since: float) -> int:
        return self._delete([t for t, r in self._rows.items() if r.updated_at < untouched_since])

    async def save_server_settings(
        self, server_id: str, settings: ServerSettings, *, now: float
    ) -> None:
        self._servers[server_id] = (settings, now)

    async def server_settings_since(self, since: float) -> dict[str, ServerSettings]:
        return {sid: s for sid, (s, at) in self._servers.items() if at >= since}

    async def save_user_settings(self, user_id: str, settings: UserSettings, *, now: float) -> None:
        self._users[user_id] = (settings, now)

    async def user_settings_since(self, since: float) -> dict[str, UserSettings]:
        return {uid: s for uid, (s, at) in self._users.items() if at >= since}

    async def close(self) -> None:
        self.closed = True
