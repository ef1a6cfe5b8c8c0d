"""The durable tier as the engine writes it: a Store in front of the store.

Everything of the engine and its helpers that reads or writes durable rows goes through one
:class:`Durable`, never the store itself. This one writes through; the write-behind
(write_behind.py) is the same front with a buffer: it commits what it holds inside every
durable read, acknowledged write and forget, so no caller flushes and no caller asks whether
there is a buffer. The store is looked up at each call: a wrapper that replaces it (latency,
failures) is in front of every path at once.

A capture is the one write that spans both tiers here (:meth:`Durable.capture`): the durable
rows first, then the hot tier's messages beside them, fenced where each lands.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence

from ...model import (
    Message,
    ScopeKey,
    ScopeKind,
    ScopeRow,
    ServerSettings,
    ServerSummary,
    UserSettings,
)
from ...model.errors import StoreUnavailable
from ...model.fence import WriteFence
from ...store.base import Forgotten
from .. import rules
from .health import Health
from .tiers import Tiers

__all__ = ["Durable"]


class Durable:
    """The store, written through (the write-behind: see write_behind.py)."""

    # Whether a capture may leave its durable part in a buffer (see ``_behind``): a class
    # fact, so a write-through capture pays no call to learn it cannot.
    buffers = False

    def __init__(self, tiers: Tiers, health: Health) -> None:
        # The shared holder, not the tiers themselves: a wrapper may replace one later.
        self._tiers = tiers
        self._health = health

    async def flush(self) -> None:
        """Commit what is buffered (nothing here)."""

    def note_private(self, keys: Iterable[ScopeKey]) -> None:
        """Scopes a private flag is being written to (the write-behind keeps track)."""

    def stats(self) -> dict[str, int]:
        return {"lost_counter_steps": 0}

    def quiet_mark(self) -> int | None:
        """Read before a hydration: what :meth:`hydrated` compares with (the write-behind's
        proof that no other process wrote meanwhile)."""
        return None

    async def hydrated(self, mark: int | None) -> None:
        """After a hydration, with :meth:`quiet_mark` as read before it."""

    async def close(self) -> None:
        """Commit what is buffered; the store itself is closed by its owner."""

    # -- the capture: both tiers --------------------------------------------------------

    async def capture(
        self,
        plan: rules.CapturePlan,
        *,
        fence: WriteFence,
        now: float,
        append: int | None,
        down: str | None,
        trusted: bool,
    ) -> bool:
        """Ensure the plan's durable rows (and step its counter) in one fenced statement,
        then write its messages in the hot tier beside the rows, fenced again where they
        land. A scope a forget overtook is dropped in both tiers. ``down``: the durable tier
        is known to be failing (why): the hot tier is still written (fenced) and the lost
        counter step counted. ``trusted``: the hot tier holds no scope whose last durable
        write had an unknown outcome (the write-behind buffers only then). Returns whether
        every scope was written."""
        scopes, meta, increment = plan
        if meta.private:
            self.note_private(key for key, _ in scopes)
        if self.buffers and down is None and trusted:
            behind = await self._behind(plan, fence, now, append)
            if behind is not None:
                return behind
        rows: list[ScopeRow] | None
        try:
            if down is not None:
                raise StoreUnavailable(down)
            rows = await self._tiers.store.touch(
                [(k, meta) for k, _ in scopes], increment=increment, now=now, fence=fence
            )
            self._health.ok()
            rows = self.with_pending(rows)
        except StoreUnavailable as exc:
            # Capture serves from the hot tier during an outage; the counter step is lost
            # and counted, never reported as done.
            self._health.failed("capture", exc)
            self._health.count("degraded_captures")
            rows = None
        hot: list[tuple[ScopeKey, tuple[Message, ...], ScopeRow | None]]
        if rows is None:
            hot = [(key, messages, None) for key, messages in scopes]
        elif len(rows) == len(scopes):
            # No scope was fenced, and the rows come back in order (``Store.touch``).
            hot = [(key, messages, row) for (key, messages), row in zip(scopes, rows, strict=True)]
        else:
            # A scope the durable tier's fence refused is not written here either.
            durable = {r.key.astuple: r for r in rows}
            hot = [
                (key, messages, row)
                for key, messages in scopes
                if (row := durable.get(key.astuple)) is not None
            ]
        applied = len(hot) == len(scopes)
        cache = self._tiers.cache
        if hot and await cache.capture_scopes(hot, meta, now, fence, append=append) < len(hot):
            applied = False
        return applied

    async def _behind(
        self, plan: rules.CapturePlan, fence: WriteFence, now: float, append: int | None
    ) -> bool | None:
        """The capture with its durable part buffered, when it may be (whether every scope
        was written); ``None``: it is written through. Nothing is buffered here."""
        return None

    def with_pending(self, rows: list[ScopeRow]) -> list[ScopeRow]:
        """``rows`` as the hot tier should mirror them (the write-behind adds its buffered
        counter steps)."""
        return rows

    # -- acknowledged writes --------------------------------------------------------------

    async def write_distilled(
        self, plan: rules.DistilledPlan, *, now: float, fence: WriteFence
    ) -> list[ScopeRow]:
        """The plan's rows in one fenced, journaled transaction (see
        ``Store.write_distilled``)."""
        scopes, change, reset = plan
        self.note_private(k for k, meta in scopes if meta and meta.private)
        return await self._tiers.store.write_distilled(
            scopes, change, reset_counter=reset, now=now, fence=fence
        )

    async def put_rows(
        self, rows: Sequence[ScopeRow], *, fence: WriteFence | None = None
    ) -> list[ScopeRow]:
        self.note_private(r.key for r in rows if r.meta.private)
        await self.flush()
        return await self._tiers.store.put_rows(rows, fence=fence)

    async def forget_channel(
        self, channel_id: str, *, now: float, horizon: float | None = None
    ) -> Forgotten:
        await self.flush()
        return await self._tiers.store.forget_channel(channel_id, now=now, horizon=horizon)

    async def forget_user(
        self, user_id: str, *, keep: UserSettings | None, now: float, horizon: float | None = None
    ) -> Forgotten:
        await self.flush()
        return await self._tiers.store.forget_user(user_id, keep=keep, now=now, horizon=horizon)

    async def forget_server_channel(
        self, server_id: str, channel_id: str, persona_id: str | None, *, now: float
    ) -> Forgotten:
        await self.flush()
        return await self._tiers.store.forget_server_channel(
            server_id, channel_id, persona_id, now=now
        )

    async def janitor(self, *, untouched_since: float) -> int:
        await self.flush()
        return await self._tiers.store.janitor(untouched_since=untouched_since)

    async def save_server_settings(
        self, server_id: str, settings: ServerSettings, *, now: float
    ) -> int:
        await self.flush()
        return await self._tiers.store.save_server_settings(server_id, settings, now=now)

    async def save_user_settings(self, user_id: str, settings: UserSettings, *, now: float) -> int:
        await self.flush()
        return await self._tiers.store.save_user_settings(user_id, settings, now=now)

    # -- durable reads: they see every capture acknowledged before them -------------------

    async def load(self, key: ScopeKey) -> ScopeRow | None:
        await self.flush()
        return await self._tiers.store.load(key)

    async def load_owner(self, kind: ScopeKind, owner_id: str) -> list[ScopeRow]:
        await self.flush()
        return await self._tiers.store.load_owner(kind, owner_id)

    async def load_channel(self, channel_id: str) -> list[ScopeRow]:
        await self.flush()
        return await self._tiers.store.load_channel(channel_id)

    async def list_servers(self, *, after: str | None, limit: int) -> list[ServerSummary]:
        await self.flush()
        return await self._tiers.store.list_servers(after=after, limit=limit)

    async def iter_rows(self, *, batch_rows: int) -> AsyncIterator[list[ScopeRow]]:
        await self.flush()
        async for batch in self._tiers.store.iter_rows(batch_rows=batch_rows):
            yield batch
