"""The reference implementation of the Store protocol: the contract's semantics in plain Python.

``ReferenceStore`` is what the conformance suite (tests/conformance) is checked against: where
SQLite or PostgreSQL behave differently from it, they are wrong. Nothing survives the process
(``store="memory://"``): for tests and notebooks too.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

from ..model import fence as fencing
from ..model.keys import ScopeKey, ScopeKind
from ..model.rows import DistilledWrite, ScopeMeta, ScopeRow, ServerSummary, merge_categories
from ..model.settings import ServerSettings, UserSettings
from .base import Forgotten, TouchScopes, WriteScopes
from .settings_fence import server_settings_targets, user_settings_targets

__all__ = ["ReferenceStore"]

KeyTuple = tuple[str, str, str, str | None]


def _server_of(key: ScopeKey) -> str | None:
    return key.owner_id if key.kind == "server" else None


def _unindex(index: dict[Any, set[KeyTuple]], name: Any, t: KeyTuple) -> None:
    keys = index[name]
    keys.discard(t)
    if not keys:
        del index[name]


class ReferenceStore:
    def __init__(self) -> None:
        self._rows: dict[KeyTuple, ScopeRow] = {}
        # Secondary indexes keep owner and channel queries O(k), as the SQL indexes do.
        self._by_owner: dict[tuple[str, str], set[KeyTuple]] = {}
        self._by_channel: dict[str, set[KeyTuple]] = {}
        # The ids of servers owning rows, sorted, for keyset pages; and each row's creation
        # order (an SQL row id's twin), which breaks ties when picking a server's name.
        self._server_ids: list[str] = []
        self._born: dict[KeyTuple, int] = {}
        self._births = itertools.count()
        self._servers: dict[str, tuple[ServerSettings, float]] = {}
        self._users: dict[str, tuple[UserSettings, float]] = {}
        # The journal and the fence: every forget's newest sequence per target.
        self._journal: list[fencing.JournalEntry] = []
        self._horizons: dict[str, float] = {}
        self._fence: dict[str, int] = {}
        self._seqs = itertools.count(1)
        self._head = 0  # the newest sequence journaled: a write fenced at it needs no lookup
        self.closed = False

    def _append(
        self,
        kind: fencing.JournalKind,
        subject: Sequence[str | None],
        targets: Sequence[str],
        horizon: float | None = None,
    ) -> int:
        seq = self._head = next(self._seqs)
        entry = fencing.JournalEntry(seq, kind, tuple(subject), tuple(targets), horizon=horizon)
        self._journal.append(entry)
        for t in targets:
            self._fence[t] = seq
            if horizon is not None:
                self._horizons[t] = max(horizon, self._horizons.get(t, horizon))
        return seq

    def _fenced(
        self, key: ScopeKey, meta: ScopeMeta | None, fence: fencing.WriteFence | None
    ) -> bool:
        if fence is None or fence.position >= self._head:
            return False  # nothing was journaled after the write began
        server_id = meta.server_id if meta is not None else _server_of(key)
        parent = meta.parent_channel_id if meta is not None else None
        targets = fencing.fence_targets(key, server_id, parent, fence)
        return any(self._fence.get(t, 0) > fence.position for t in targets)

    async def migrate(self) -> list[str]:
        return []

    def _next_row(
        self,
        key: ScopeKey,
        meta: ScopeMeta | None,
        now: float,
        *,
        inc: int = 0,
        changes: dict[str, Any] | None = None,
    ) -> ScopeRow:
        """The row ``key`` would hold after the change, as the SQL backends' single upsert
        statement computes it; nothing is stored yet (:meth:`_store` does)."""
        old = self._rows.get(key.astuple)
        if old is None:
            if meta is None:
                meta = ScopeMeta(server_id=_server_of(key))
            row = ScopeRow._unchecked(key, meta, None, None, {}, None, inc, 0, 1, now)
        else:
            if meta is None or meta is old.meta or meta == old.meta:
                meta = old.meta
            else:
                meta = meta.over(old.meta)
            row = ScopeRow._unchecked(
                key,
                meta,
                old.summary,
                old.summary_at,
                old.categories,
                old.categories_at,
                old.turns_since_refresh + inc,
                old.refresh_epoch,
                old.revision + 1,
                now,
            )
        return dataclasses.replace(row, **changes) if changes else row

    def _store(self, row: ScopeRow) -> ScopeRow:
        kt = row.key.astuple
        if kt not in self._rows:
            owner = (kt[0], kt[1])
            if owner not in self._by_owner and kt[0] == "server":
                bisect.insort(self._server_ids, kt[1])
            self._by_owner.setdefault(owner, set()).add(kt)
            self._by_channel.setdefault(kt[2], set()).add(kt)
            self._born[kt] = next(self._births)
        self._rows[kt] = row
        return row

    async def touch(
        self,
        scopes: TouchScopes,
        *,
        increment: ScopeKey | None,
        now: float,
        fence: fencing.WriteFence | None = None,
    ) -> list[ScopeRow]:
        live = increment.astuple if increment is not None else None
        return [
            self._store(self._next_row(key, meta, now, inc=int(key.astuple == live)))
            for key, meta in scopes
            if not self._fenced(key, meta, fence)
        ]

    async def write_distilled(
        self,
        scopes: WriteScopes,
        change: DistilledWrite,
        *,
        reset_counter: ScopeKey | None,
        now: float,
        fence: fencing.WriteFence | None = None,
    ) -> list[ScopeRow]:
        out = []
        for key, meta in scopes:
            if self._fenced(key, meta, fence):
                continue
            old = self._rows.get(key.astuple)
            changes: dict[str, Any] = {}
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
            out.append(self._next_row(key, meta, now, changes=changes))
        # Every row is computed before any is stored: all scopes change, or none does.
        for row in out:
            self._store(row)
            if fence is not None:
                self._append("edit", row.key.astuple, ())
        return out

    async def load(self, key: ScopeKey) -> ScopeRow | None:
        return self._rows.get(key.astuple)

    async def load_many(self, keys: Sequence[ScopeKey]) -> list[ScopeRow | None]:
        rows = self._rows
        return [rows.get(key.astuple) for key in keys]

    async def load_owner(self, kind: ScopeKind, owner_id: str) -> list[ScopeRow]:
        return [self._rows[t] for t in self._by_owner.get((kind, owner_id), ())]

    async def load_channel(self, channel_id: str) -> list[ScopeRow]:
        return [self._rows[t] for t in self._by_channel.get(channel_id, ())]

    async def list_servers(self, *, after: str | None, limit: int) -> list[ServerSummary]:
        ids = self._server_ids
        start = 0 if after is None else bisect.bisect_right(ids, after)
        out = []
        for server_id in ids[start : start + limit]:
            rows = [self._rows[t] for t in self._by_owner[("server", server_id)]]
            named = [
                (r.updated_at, self._born[r.key.astuple], r.meta.server_name)
                for r in rows
                if r.meta.server_name is not None
            ]
            out.append(
                ServerSummary(
                    server_id=server_id,
                    server_name=max(named)[2] if named else None,
                    entries=len(rows),
                    updated_at=max(r.updated_at for r in rows),
                )
            )
        return out

    async def iter_rows(self, *, batch_rows: int) -> AsyncIterator[list[ScopeRow]]:
        rows = list(self._rows.values())
        for start in range(0, len(rows), batch_rows):
            yield rows[start : start + batch_rows]

    async def put_rows(
        self, rows: Sequence[ScopeRow], *, fence: fencing.WriteFence | None = None
    ) -> list[ScopeRow]:
        out = []
        for row in rows:
            if self._fenced(row.key, row.meta, fence):
                continue
            old = self._rows.get(row.key.astuple)
            revision = old.revision + 1 if old is not None else 1
            out.append(dataclasses.replace(row, categories=dict(row.categories), revision=revision))
        for row in out:
            self._store(row)
            if fence is not None:
                self._append("edit", row.key.astuple, ())
        return out

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

    def _delete(self, doomed: Iterable[KeyTuple]) -> int:
        count = 0
        for t in list(doomed):
            if self._rows.pop(t, None) is None:
                continue
            count += 1
            del self._born[t]
            _unindex(self._by_owner, (t[0], t[1]), t)
            _unindex(self._by_channel, t[2], t)
            if t[0] == "server" and (t[0], t[1]) not in self._by_owner:
                del self._server_ids[bisect.bisect_left(self._server_ids, t[1])]
        return count

    async def forget_channel(
        self, channel_id: str, *, now: float, horizon: float | None = None
    ) -> Forgotten:
        target = fencing.channel_target(channel_id)
        seq = self._append("channel", [channel_id], [target], now if horizon is None else horizon)
        return Forgotten(seq, self._delete(self._by_channel.get(channel_id, ())))

    async def forget_user(
        self, user_id: str, *, keep: UserSettings | None, now: float, horizon: float | None = None
    ) -> Forgotten:
        target = fencing.user_target(user_id)
        seq = self._append("user", [target], [target], now if horizon is None else horizon)
        self._journal = [
            e
            for e in self._journal
            if not (e.kind == "edit" and e.subject[:2] == ("user", user_id))
        ]
        if keep is None:
            self._users.pop(user_id, None)
        else:
            self._users[user_id] = (keep, now)
        return Forgotten(seq, self._delete(self._by_owner.get(("user", user_id), ())))

    async def forget_server_channel(
        self, server_id: str, channel_id: str, persona_id: str | None, *, now: float
    ) -> Forgotten:
        target = fencing.server_channel_target(server_id, channel_id, persona_id)
        seq = self._append("server_channel", [server_id, channel_id, persona_id], [target])
        return Forgotten(seq, self._delete([("server", server_id, channel_id, persona_id)]))

    async def janitor(self, *, untouched_since: float) -> int:
        return self._delete([t for t, r in self._rows.items() if r.updated_at < untouched_since])

    def journal_moved(self) -> bool:
        return False  # one process owns this store: it journals nothing it does not know

    async def journal_since(
        self, seq: int, *, limit: int = 1000, forgets_only: bool = False
    ) -> list[fencing.JournalEntry]:
        start = bisect.bisect_right([e.seq for e in self._journal], seq)
        entries = self._journal[start:]
        if forgets_only:
            entries = [e for e in entries if e.kind != "edit"]
        return entries[:limit]

    async def journal_head(self) -> int:
        return self._journal[-1].seq if self._journal else 0

    def own_entry(self, seq: int) -> fencing.JournalEntry | None:
        """The entry this store journaled lately at ``seq`` (a forget, a settings change, an
        upgrade's fence), known without a read; ``None`` otherwise (see store/own_entries.py)."""
        for entry in reversed(self._journal):  # from the newest: the one asked for is recent
            if entry.seq <= seq:
                return entry if entry.seq == seq else None
        return None

    async def horizons(self) -> list[tuple[str, float]]:
        return list(self._horizons.items())

    async def journal_rewound(self, past: int, *, now: float) -> int:
        floor = max(past, self._head) + 1
        self._seqs = itertools.count(floor + 1)
        return self._append("pruned", [str(floor)], [fencing.EVERY_TARGET])

    async def fence_upgrade(
        self, scopes: Sequence[ScopeKey], *, since: int, targets: Sequence[str], now: float
    ) -> int | None:
        subjects = {k.astuple for k in scopes}
        for e in reversed(self._journal):
            if e.seq <= since:
                break
            if e.kind == "edit" and e.subject in subjects:
                return None
        return self._append("turn", [], targets)

    async def save_server_settings(
        self, server_id: str, settings: ServerSettings, *, now: float
    ) -> int:
        old = self._servers.get(server_id)
        was_private = old[0].private_channel_ids if old is not None else frozenset()
        self._servers[server_id] = (settings, now)
        targets = server_settings_targets(server_id, settings, was_private)
        return self._append("server_settings", [server_id], targets)

    async def server_settings_since(self, since: float) -> dict[str, ServerSettings]:
        return {sid: s for sid, (s, at) in self._servers.items() if at >= since}

    async def save_user_settings(self, user_id: str, settings: UserSettings, *, now: float) -> int:
        self._users[user_id] = (settings, now)
        return self._append("user_settings", [], user_settings_targets(user_id, settings))

    async def user_settings_since(self, since: float) -> dict[str, UserSettings]:
        return {uid: s for uid, (s, at) in self._users.items() if at >= since}

    async def close(self) -> None:
        self.closed = True
