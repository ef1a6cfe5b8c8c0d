"""The memory facade: composes a hot tier and a durable tier behind the public API.

Everything acknowledged is written through and awaited: when a method returns, its write is
committed. A capture's own durable part (scope rows, counter step) may be buffered by a write-behind
(SQLite under the in-process tier, see write_behind.py), which is committed with or before every
acknowledged write, and before every forget and durable read. Reads hit the hot tier; a miss reads
through the durable tier unless the hot tier knows it is complete. Settings are cached in the
process. Every forget, settings change and distilled write is journaled; before a call returns, the
process applies what others journaled (a cheap check when nothing moved), and every write is fenced
at the journal position it began at, so no write in flight undoes a forget (docs/design.md,
"Forgetting").

Longer than our other modules on purpose: it is the one boundary every read, write and forget
passes, and they share one state (journal position, unsure scopes, settings). What stands
alone lives beside it: opening.py, follower.py, admin.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Mapping,
    Sequence,
)
from types import EllipsisType, TracebackType
from typing import Any, Concatenate, NamedTuple, ParamSpec, TypeVar, cast

from ..cache.base import HotTier, HydrationSink
from ..model import (
    DistilledWrite,
    Entry,
    Message,
    Privacy,
    ScopeKey,
    ScopeKind,
    ScopeMeta,
    ScopeRow,
    ServerSettings,
    ServerSummary,
    UserSettings,
    check_id,
    check_optional_id,
)
from ..model.config import Config
from ..model.errors import InvalidInput, StoreUnavailable
from ..model.fence import (
    WriteFence,
    channel_target,
    private_target,
    server_channel_target,
    user_target,
)
from ..model.text import clean_text, truncate
from ..store.base import BatchTouch, Forgotten, HydrationSource, Store
from ..tool.slug import slugify
from . import admin
from .follower import JournalFollower
from .health import Health
from .known_settings import KnownSettings
from .turn import Turn
from .write_behind import WriteBehind

__all__ = ["Memory", "open"]

log = logging.getLogger("shortterm")

_M = TypeVar("_M", bound="Memory")
_P = ParamSpec("_P")
_R = TypeVar("_R")


def one_call(
    method: Callable[Concatenate[_M, _P], Awaitable[_R]],
) -> Callable[Concatenate[_M, _P], Coroutine[Any, Any, _R]]:
    """Runs a public method as one hot-tier operation: once the hot tier fails during it,
    its later hot-tier steps fail at once (see ``HotTier.operation``)."""

    @functools.wraps(method)
    async def call(self: _M, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self.cache.operation():
            return await method(self, *args, **kwargs)

    return call


Clock = Callable[[], float]

_SETTINGS_OVERLAP_S = 5.0  # the least look-back of a settings refresh
# A forget whose commit may have landed is retried after these pauses, then at the next call.
_FORGET_RETRY_PAUSES_S = (0.05, 0.25)


class _UnsureForget(NamedTuple):
    """A forget of ours whose outcome is unknown: what :meth:`Memory._forget` was given."""

    targets: Sequence[str]
    durable: Callable[[], Awaitable[Forgotten]]
    hot: Callable[[], Awaitable[int]]
    after: Callable[[], None] | None


class Memory:
    """Working memory for one bot process. Create it with :func:`shortterm.open`."""

    def __init__(self, *, store: Store, cache: HotTier, config: Config, clock: Clock) -> None:
        self.store = store
        self.cache = cache
        self.config = config
        self.clock = clock
        self.known_settings = KnownSettings()
        self.health = Health()
        self._metas: dict[tuple[Any, ...], ScopeMeta] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._closed = False
        self.journal = JournalFollower(self, self._hydrate)
        # Scopes whose last durable write may or may not have landed: read through once.
        self._unsure: set[tuple[str, str, str, str | None]] = set()
        # Our forgets whose commit may or may not have landed: retried before the next call.
        self.unsure_forgets: list[_UnsureForget] = []
        self.hydration_s = 0.0
        self.write_behind = (
            WriteBehind(
                self,
                window_s=config.write_behind_ms / 1000,
                max_turns=config.write_behind_turns,
            )
            if WriteBehind.applies(self)
            else None
        )

    # -- lifecycle ------------------------------------------------------------------------

    async def _start(self, *, hydrate: bool = True) -> None:
        await self.store.migrate()
        now = self.clock()
        # The position first: whatever is journaled while we load is read again later.
        await self.journal.start()
        # Read before the hydration: another process committing from here on breaks the
        # write-behind's proof that the hot tier holds every row it must show.
        quiet = getattr(self.store, "foreign_epoch", None)
        known = self.known_settings
        known.put_servers(await self.store.server_settings_since(0.0))
        known.put_users(await self.store.user_settings_since(0.0))
        known.checked_at = now
        if hydrate:
            await self._hydrate(now)
            if self.write_behind is not None and self.cache.complete and quiet is not None:
                await self.write_behind.prove_whole(quiet)
        if self.config.sweep_interval_s > 0:
            self._sweeper = asyncio.get_running_loop().create_task(
                self._sweep_forever(), name="shortterm-sweeper"
            )

    async def _hydrate(self, now: float) -> None:
        """Load every row whose summary or categories are still live, with no messages."""
        started = time.perf_counter()
        evictions = self.cache.stats().get("evictions", 0)
        rows = 0
        fence = WriteFence(self.journal.head)
        # A bulk load creates objects that all stay alive; the cyclic collector would walk
        # the growing heap again and again for nothing, so it pauses until the load is done.
        collecting = gc.isenabled()
        gc.disable()
        since, batch_rows = now - self.config.summary_ttl_s, self.config.hydrate_batch_rows
        store, cache = self.store, self.cache
        try:
            if isinstance(store, HydrationSource) and isinstance(cache, HydrationSink):
                # Plain tuples from the cursor to the records: no row objects per row.
                async for plain in store.iter_hydration(since=since, batch_rows=batch_rows):
                    await cache.apply_hydration(plain, now, fence)
                    rows += len(plain)
            else:
                async for batch in store.iter_distilled(since=since, batch_rows=batch_rows):
                    await cache.apply_rows(batch, now, fence)
                    rows += len(batch)
        finally:
            if collecting:
                gc.enable()
        self.health.count("hydrated_rows", rows)
        self.cache.set_complete(self.cache.stats().get("evictions", 0) == evictions)
        self.hydration_s = time.perf_counter() - started
        log.info("shortterm hydrated %d rows in %.3f s", rows, self.hydration_s)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.sweep_interval_s)
            await self.sweep()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self.journal.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        if self.write_behind is not None:
            await self.write_behind.close()
        await self.cache.close()
        await self.store.close()

    async def flush(self) -> None:
        """Commit the captures' buffered durable work now (the write-behind's scope rows and counter
        steps, see ``Config.write_behind_ms``). Every acknowledged write (a distilled one in its own
        transaction), forget, durable read and :meth:`close` does this first; a no-op when nothing
        is buffered or there is no write-behind. A failure is counted (``lost_counter_steps``), not
        raised."""
        if self.write_behind is not None:
            await self.write_behind.flush()

    async def __aenter__(self) -> Memory:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- settings -------------------------------------------------------------------------

    def scope_meta(self, parts: tuple[Any, ...]) -> ScopeMeta:
        """One shared ScopeMeta per distinct value: every turn in a channel has the same."""
        meta = self._metas.get(parts)
        if meta is None:
            if len(self._metas) >= 4096:
                self._metas.clear()
            meta = self._metas[parts] = ScopeMeta(*parts)
        return meta

    async def begin_write(self, triggerer: str | None = None) -> WriteFence:
        """Where a write begins: follow the journal, then the position to fence the write at.
        Call it before reading what the write is computed from."""
        followed = await self.journal.follow()
        return WriteFence(self.journal.head, triggerer, store_down=not followed)

    async def refresh_settings(self) -> None:
        """Follow the journal; and pick up settings other processes changed the old way, at
        most one query pair per interval (rows written by earlier versions)."""
        await self.journal.follow()
        now, known = self.clock(), self.known_settings
        if not known.due(now, self.config.settings_refresh_s):
            return
        # Overlap the window so a write stamped just before our last check is not missed: the
        # writer takes its timestamp before it commits, so with a short interval (0 re-reads
        # on every turn) the overlap must still cover a commit in flight and clock skew.
        since = known.checked_at - max(self.config.settings_refresh_s, _SETTINGS_OVERLAP_S)
        known.checked_at = now
        known.put_servers(await self.store.server_settings_since(since))
        known.put_users(await self.store.user_settings_since(since))

    @one_call
    async def configure_server(self, server_id: str, settings: ServerSettings) -> None:
        check_id("server_id", server_id)
        if not isinstance(settings, ServerSettings):
            raise InvalidInput("settings", settings, "a shortterm.ServerSettings")
        if settings.crude_message_count > self.config.max_messages:
            raise InvalidInput(
                "crude_message_count",
                settings.crude_message_count,
                f"an integer from 1 to max_messages ({self.config.max_messages})",
            )
        if len(settings.categories) > self.config.max_categories:
            raise InvalidInput(
                "categories",
                [c.label for c in settings.categories],
                f"at most max_categories ({self.config.max_categories}) categories",
            )
        seen: dict[str, str] = {}
        for category in settings.categories:
            slug = slugify(category.label)
            if slug in seen:
                raise InvalidInput(
                    "categories",
                    [c.label for c in settings.categories],
                    f"labels with distinct field names ({seen[slug]!r} and {category.label!r} "
                    f"both become {slug!r})",
                )
            seen[slug] = category.label
        await self.flush()
        before = self.known_settings.server(server_id).private_channel_ids
        seq = await self.store.save_server_settings(server_id, settings, now=self.clock())
        self.known_settings.put_server(server_id, settings)
        newly = sorted(settings.private_channel_ids - before)
        await self._record_settings(seq, [private_target(server_id, c) for c in newly])
        await self.journal.caught_up_to(seq)

    async def server_settings(self, server_id: str) -> ServerSettings:
        check_id("server_id", server_id)
        await self.refresh_settings()
        return self.known_settings.server(server_id)

    @one_call
    async def configure_user(self, user_id: str, settings: UserSettings) -> None:
        """Store a user's choice. ``Privacy.FULL`` is a forget: what was kept of them is
        purged in the same transaction that stores the choice, and it holds in every process
        on the same memory before this returns here (others follow the journal)."""
        check_id("user_id", user_id)
        if not isinstance(settings, UserSettings):
            raise InvalidInput("settings", settings, "a shortterm.UserSettings")
        if settings.privacy is Privacy.FULL:
            await self._forget_user(user_id, keep=settings)
            return
        await self.flush()
        seq = await self.store.save_user_settings(user_id, settings, now=self.clock())
        self.known_settings.put_users({user_id: settings})
        # No personal memory from now on: a user-scope write in flight was computed before.
        narrowed = settings.privacy is not Privacy.NONE
        await self._record_settings(seq, [user_target(user_id)] if narrowed else [])
        await self.journal.caught_up_to(seq)

    async def _record_settings(self, seq: int, targets: Sequence[str]) -> None:
        """Our settings change ``seq``, on a shared hot tier: other processes' next owner
        read returns it and they follow the journal before they render; ``targets`` fence the
        writes in flight (see ``HotTier.record_settings``). It is saved already, so a hot
        tier that fails here fails nothing: the others then learn it from the journal."""
        try:
            await self.cache.record_settings(seq, targets, self.clock())
        except StoreUnavailable as exc:
            self.health.failed("hot tier update", exc)

    async def user_settings(self, user_id: str) -> UserSettings:
        check_id("user_id", user_id)
        await self.refresh_settings()
        return self.known_settings.user(user_id)

    # -- turns ----------------------------------------------------------------------------

    def turn(self, **kwargs: Any) -> Turn:
        """Start a turn (no I/O). See :class:`shortterm.Turn` for the arguments."""
        if self._closed:
            raise InvalidInput("memory", "closed", "an open Memory (this one was closed)")
        return Turn(self, **kwargs)

    # -- reads ----------------------------------------------------------------------------

    @one_call
    async def get(self, key: ScopeKey) -> Entry | None:
        """What ``key`` remembers now, or ``None`` when nothing is live."""
        if not isinstance(key, ScopeKey):
            raise InvalidInput("key", key, "a shortterm.ScopeKey")
        await self.journal.follow()
        now = self.clock()
        if self._unsure:
            await self._settle(key.kind, key.owner_id, now)
        entry = await self.cache.get(key, now)
        cache = self.cache
        if (
            entry is None
            and not cache.complete
            and await cache.counter(key, now) is None
            and await self.read_through(key, now) is not None
        ):
            entry = await cache.get(key, now)
        return entry

    async def read_through(self, key: ScopeKey, now: float) -> ScopeRow | None:
        """Load one scope's durable row and mirror it in the hot tier, fenced: a forget that
        lands while the row is in flight wins over it."""
        await self.flush()
        fence = WriteFence(self.journal.head)
        row = await self.store.load(key)
        self.health.count("read_through")
        if row is not None:
            await self.cache.apply_rows([row], now, fence)
        return row

    async def owner_entries(self, kind: str, owner_id: str) -> list[Entry]:
        """Live entries of one owner, re-read from the durable tier when the hot tier may
        have dropped some of them."""
        now = self.clock()
        if self._unsure:
            await self._settle(kind, owner_id, now)
        entries, complete = await self.cache.owner_entries(kind, owner_id, now)  # type: ignore[arg-type]
        if not complete:
            await self.flush()
            fence = WriteFence(self.journal.head)
            rows = await self.store.load_owner(kind, owner_id)  # type: ignore[arg-type]
            self.health.count("read_through")
            await self.cache.apply_rows(rows, now, fence)
            await self.cache.mark_complete(kind, owner_id)  # type: ignore[arg-type]
            entries, _ = await self.cache.owner_entries(kind, owner_id, now)  # type: ignore[arg-type]
        return entries

    async def _settle(self, kind: str, owner_id: str, now: float) -> None:
        """Read through this owner's scopes whose last write had an unknown outcome, so the
        hot tier never disagrees with the durable tier for longer than one call."""
        for kt in [t for t in self._unsure if t[0] == kind and t[1] == owner_id]:
            await self.flush()
            fence = WriteFence(self.journal.head)
            row = await self.store.load(ScopeKey._unchecked(*kt))  # type: ignore[arg-type]
            self._unsure.discard(kt)
            if row is not None:
                await self.cache.apply_rows([row], now, fence)

    # -- administration: listing, export, import -----------------------------------------

    async def find_rows(
        self,
        *,
        kind: ScopeKind | None = None,
        server_id: str | None = None,
        channel_id: str | None = None,
        user_id: str | None = None,
        persona_id: str | EllipsisType | None = ...,
    ) -> list[ScopeRow]:
        """Durable rows matching every filter given, sorted by key: see :func:`admin.find_rows`."""
        await self.flush()
        return await admin.find_rows(
            self.store,
            kind=kind,
            server_id=server_id,
            channel_id=channel_id,
            user_id=user_id,
            persona_id=persona_id,
        )

    async def servers(self, *, after: str | None = None, limit: int = 100) -> list[ServerSummary]:
        """The servers with durable shared rows, a page at a time: see :func:`admin.servers`."""
        await self.flush()
        return await admin.servers(self.store, after=after, limit=limit)

    def export_rows(self, *, batch_rows: int = 1000) -> AsyncIterator[list[ScopeRow]]:
        """Stream every durable row in batches: see :func:`admin.export_rows`."""
        rows = admin.export_rows(self.store, batch_rows=batch_rows)  # checks its argument now
        return self._flushed_first(rows)

    async def _flushed_first(
        self, rows: AsyncIterator[list[ScopeRow]]
    ) -> AsyncIterator[list[ScopeRow]]:
        await self.flush()
        async for batch in rows:
            yield batch

    async def import_rows(self, rows: Sequence[ScopeRow]) -> list[ScopeRow]:
        """Write whole durable rows (a restore), all of them or none, and mirror them in the
        hot tier. A stored row with the same key is replaced. User-scope rows of users whose
        privacy setting forbids personal memory (partial or full) are left out. Returns the
        rows written, as stored."""
        if isinstance(rows, str | bytes) or not isinstance(rows, Sequence):
            raise InvalidInput("rows", rows, "a sequence of ScopeRow")
        seen: set[tuple[str, str, str, str | None]] = set()
        for i, row in enumerate(rows):
            if not isinstance(row, ScopeRow):
                raise InvalidInput(f"rows[{i}]", row, "a shortterm.store.base.ScopeRow")
            if row.key.astuple in seen:
                raise InvalidInput(f"rows[{i}].key", row.key, "keys that appear once per call")
            seen.add(row.key.astuple)
        await self.refresh_settings()
        await self.flush()
        fence = WriteFence(self.journal.head)
        known = self.known_settings
        allowed = [
            r
            for r in rows
            if r.key.kind == "server" or known.user(r.key.owner_id).privacy is Privacy.NONE
        ]
        if self.write_behind is not None:
            self.write_behind.note_private(r.key for r in allowed if r.meta.private)
        written = await self.store.put_rows(allowed, fence=fence)
        self.health.count("fenced_writes", len(allowed) - len(written))
        await self.cache.apply_rows(written, self.clock(), fence)
        return written

    # -- edits ----------------------------------------------------------------------------

    def _clean_value(self, field: str, value: object) -> str:
        if not isinstance(value, str):
            raise InvalidInput(field, value, "a string")
        return truncate(clean_text(value.strip()), self.config.max_summary_chars)

    @one_call
    async def set_summary(self, key: ScopeKey, text: str | None) -> Entry | None:
        """Replace the summary of one scope (an admin edit; ``None`` clears it). Durable."""
        if not isinstance(key, ScopeKey):
            raise InvalidInput("key", key, "a shortterm.ScopeKey")
        summary = None if text is None else self._clean_value("summary", text) or None
        change = DistilledWrite(summary=summary, set_summary=True)
        fence = await self.begin_write()
        await self.write_distilled([(key, None)], change, reset_counter=None, fence=fence)
        return await self.cache.get(key, self.clock())

    @one_call
    async def set_categories(self, key: ScopeKey, values: Mapping[str, str]) -> Entry | None:
        """Replace the category values of one scope (an admin edit; blank values are dropped)."""
        if not isinstance(key, ScopeKey):
            raise InvalidInput("key", key, "a shortterm.ScopeKey")
        if not isinstance(values, Mapping):
            raise InvalidInput("values", values, "a mapping of category slug to text")
        cleaned: dict[str, str | None] = {}
        for slug, text in values.items():
            check_id("category slug", slug)
            cleaned[slug] = self._clean_value(f"categories[{slug!r}]", text) or None
        change = DistilledWrite(categories=cleaned, replace_categories=True)
        fence = await self.begin_write()
        await self.write_distilled([(key, None)], change, reset_counter=None, fence=fence)
        return await self.cache.get(key, self.clock())

    # -- the write paths: every caller (turn, tool, importer, surfaces) goes through these --

    async def write_capture(
        self,
        scopes: Sequence[tuple[ScopeKey, tuple[Message, ...]]],
        meta: ScopeMeta,
        *,
        increment: ScopeKey | None,
        fence: WriteFence,
        now: float,
    ) -> bool:
        """The one capture write: ensure the scopes' durable rows (and step the counter of
        ``increment``) in one fenced statement, then replace their messages in the hot tier,
        fenced again where they land. A scope a forget overtook is dropped in both tiers.
        During a durable outage the hot tier is still written (fenced) and the lost counter
        step is counted. Returns whether every scope was written.

        With a write-behind, a capture whose scopes the hot tier already mirrors writes the
        hot tier only (stepping the counter there) and buffers its durable part; a cold scope
        (whose durable row may hold values the hot tier lacks) is written through as above."""
        wb = self.write_behind
        if wb is not None:
            if meta.private:
                wb.note_private(key for key, _ in scopes)
            if not fence.store_down and not self._unsure:
                cold = wb.cold_keys([key for key, _ in scopes], meta, now)
                if cold is not None:
                    return await self._capture_behind(wb, scopes, meta, increment, fence, now, cold)
        durable: dict[tuple[Any, ...], ScopeRow] | None
        try:
            if fence.store_down:
                raise StoreUnavailable(self.journal.error)
            rows = await self.store.touch(
                [(k, meta) for k, _ in scopes], increment=increment, now=now, fence=fence
            )
            self.health.ok()
            if wb is not None:
                rows = wb.with_pending(rows)  # the hot counter keeps the buffered steps
            durable = {r.key.astuple: r for r in rows}
        except StoreUnavailable as exc:
            # Capture serves from the hot tier during an outage; the counter step is lost
            # and counted, never reported as done.
            self.health.failed("capture", exc)
            self.health.count("degraded_captures")
            durable = None
        hot: list[tuple[ScopeKey, tuple[Message, ...], ScopeRow | None]]
        if durable is None:
            hot = [(key, messages, None) for key, messages in scopes]
        else:
            # A scope the durable tier's fence refused is not written here either.
            hot = [
                (key, messages, row)
                for key, messages in scopes
                if (row := durable.get(key.astuple)) is not None
            ]
        applied = len(hot) == len(scopes)
        if hot and await self.cache.capture_scopes(hot, meta, now, fence) < len(hot):
            applied = False
        if not applied:
            self.health.count("fenced_writes")
        return applied

    async def _capture_behind(
        self,
        wb: WriteBehind,
        scopes: Sequence[tuple[ScopeKey, tuple[Message, ...]]],
        meta: ScopeMeta,
        increment: ScopeKey | None,
        fence: WriteFence,
        now: float,
        cold: frozenset[tuple[str, str, str, str | None]],
    ) -> bool:
        """The hot half of a capture now, the durable half buffered. Every scope is
        buffered, even one the hot tier's fence refused: the flush's fence refuses it too."""
        hot = [(key, messages, None) for key, messages in scopes]
        applied = await self.cache.capture_scopes(hot, meta, now, fence, step=increment)
        if wb.add([key for key, _ in scopes], meta, increment, fence, now, cold):
            await wb.flush()  # the turn bound: this capture pays for the batch
        if applied < len(hot):
            self.health.count("fenced_writes")
            return False
        return True

    async def write_distilled(
        self,
        scopes: Sequence[tuple[ScopeKey, ScopeMeta | None]],
        change: DistilledWrite,
        *,
        reset_counter: ScopeKey | None,
        fence: WriteFence,
    ) -> list[ScopeRow]:
        """The one distilled write (tool call, admin edit): all scopes in one fenced durable
        transaction, journaled for other processes, then mirrored in the hot tier. Returns
        the rows written (fewer than ``scopes`` when a forget overtook the write).

        A failure that leaves the outcome unknown (the connection dropped mid-commit) raises
        ``StoreUnavailable`` with ``maybe_applied``; the scopes are then dropped from the hot
        tier and read through on their next use, so neither tier is believed over the other.
        """
        wb = self.write_behind
        if wb is not None:
            wb.note_private(k for k, meta in scopes if meta and meta.private)
        now = self.clock()
        if fence.store_down:
            await self.flush()
            raise StoreUnavailable(self.journal.error)
        try:
            if wb is None:
                rows = await self.store.write_distilled(
                    scopes, change, reset_counter=reset_counter, now=now, fence=fence
                )
            else:
                # The buffered touches commit in the same transaction, first: their steps
                # land before a reset, never after it.
                store = cast(BatchTouch, self.store)
                rows = await wb.commit_with(
                    lambda touches: store.write_distilled_after(
                        touches, scopes, change, reset_counter=reset_counter, now=now, fence=fence
                    )
                )
        except StoreUnavailable as exc:
            if exc.maybe_applied:
                # It may have landed: the next read of these scopes asks the durable tier
                # (keeping the hot tier's messages, which exist nowhere else).
                self._unsure.update(key.astuple for key, _ in scopes)
            raise
        if len(rows) < len(scopes):
            self.health.count("fenced_writes")
        try:
            await self.cache.apply_rows(rows, now, fence)
        except StoreUnavailable as exc:
            # Committed, so done. A hot tier that missed it must not keep serving the old
            # values: drop them (best effort) and read through from now on.
            self.health.failed("hot tier update", exc)
            self.cache.set_complete(False)
            for row in rows:
                with contextlib.suppress(StoreUnavailable):
                    await self.cache.delete(row.key)
        return rows

    # -- deletion: every forget is journaled durably, then applied here, then followed ------

    async def _forget(
        self,
        targets: Sequence[str],
        durable: Callable[[], Awaitable[Forgotten]],
        hot: Callable[[], Awaitable[int]],
        after: Callable[[], None] | None = None,
    ) -> int:
        """The one forget: durable journal + delete (raises if it failed: nothing was
        acknowledged), then the hot tier — its fence first, so nothing in flight can land
        after the eviction — then the journal up to our entry, then ``after``. Buffered
        captures flush first; one still in flight is refused by the flush's fence if this
        forget covers it. A commit whose outcome is unknown is retried (see
        :meth:`_retry_forget`)."""
        await self.flush()
        try:
            forgotten = await durable()
        except StoreUnavailable as exc:
            # Nothing was acknowledged, but nothing stale is shown meanwhile either: evict,
            # and let the caller see the error and retry.
            with contextlib.suppress(StoreUnavailable):
                await hot()
            if not exc.maybe_applied:
                raise
            forgotten = await self._retry_forget(_UnsureForget(targets, durable, hot, after), exc)
        return await self._forgotten(targets, forgotten, hot, after)

    async def _forgotten(
        self,
        targets: Sequence[str],
        forgotten: Forgotten,
        hot: Callable[[], Awaitable[int]],
        after: Callable[[], None] | None,
    ) -> int:
        await self.cache.record_forget(forgotten.seq, targets, self.clock())
        evicted = await hot()
        await self.journal.caught_up_to(forgotten.seq)
        if after is not None:
            after()
        return max(int(forgotten.rows), int(evicted))

    async def _retry_forget(self, forget: _UnsureForget, exc: StoreUnavailable) -> Forgotten:
        """A forget whose commit may have landed (the connection dropped after COMMIT was
        sent): if it did, its tombstones are missing from a shared hot tier, and a write in
        flight could land after our eviction and stay. So it is done again — a forget is
        idempotent, and the retry's new journal entry fences every write that began before
        it. If the durable tier keeps failing, the forget stays pending and is retried at the
        start of this process's next call (:meth:`settle_forgets`), and the caller is told
        the forget may have been saved."""
        for pause in _FORGET_RETRY_PAUSES_S:
            await asyncio.sleep(pause)
            try:
                return await forget.durable()
            except StoreUnavailable:
                continue
        self.unsure_forgets.append(forget)
        raise StoreUnavailable(
            f"{exc}. The forget may have been saved: retry it to be sure (this process "
            "retries it before its next call)",
            maybe_applied=True,
        ) from exc

    async def settle_forgets(self) -> None:
        """Retry our forgets whose outcome is unknown, before a call serves anything (the
        journal follower calls this first). One that fails again stays pending, and its
        hot-tier eviction is repeated: what landed since is dropped meanwhile."""
        pending, self.unsure_forgets = self.unsure_forgets, []
        for forget in pending:
            try:
                forgotten = await forget.durable()
                await self._forgotten(forget.targets, forgotten, forget.hot, forget.after)
            except StoreUnavailable as exc:
                self.unsure_forgets.append(forget)
                self.health.failed("forget retry", exc)
                with contextlib.suppress(StoreUnavailable):
                    await forget.hot()

    @one_call
    async def clear_channel(self, channel_id: str) -> int:
        """Forget a channel: every user, persona and scope of it, in both tiers."""
        check_id("channel_id", channel_id)
        return await self._forget(
            [channel_target(channel_id)],
            lambda: self.store.forget_channel(channel_id, now=self.clock()),
            lambda: self.cache.delete_channel(channel_id),
        )

    @one_call
    async def clear_user(self, user_id: str) -> int:
        """Forget a user: their user-scope rows and entries, every message they wrote from
        every other entry (server scopes, other users' scopes), and their settings row —
        except a FULL privacy choice, which is kept so that it stays honoured. Returns the
        number of scopes deleted plus entries scrubbed."""
        check_id("user_id", user_id)
        stored = self.known_settings.stored_user(user_id)
        keep = stored if stored is not None and stored.privacy is Privacy.FULL else None
        return await self._forget_user(user_id, keep=keep)

    async def _forget_user(self, user_id: str, *, keep: UserSettings | None) -> int:
        async def hot() -> int:
            deleted = await self.cache.delete_owner("user", user_id)
            return deleted + await self.cache.scrub_author(user_id, self.clock())

        def after() -> None:
            if keep is None:
                self.known_settings.drop_user(user_id)
            else:
                self.known_settings.put_users({user_id: keep})

        return await self._forget(
            [user_target(user_id)],
            lambda: self.store.forget_user(user_id, keep=keep, now=self.clock()),
            hot,
            after,
        )

    @one_call
    async def clear_server_channel(
        self, server_id: str, channel_id: str, persona_id: str | None = None
    ) -> int:
        """Forget one server-scope entry (a channel's shared memory for one persona)."""
        check_id("server_id", server_id)
        check_id("channel_id", channel_id)
        check_optional_id("persona_id", persona_id)
        return await self._forget(
            [server_channel_target(server_id, channel_id, persona_id)],
            lambda: self.store.forget_server_channel(
                server_id, channel_id, persona_id, now=self.clock()
            ),
            lambda: self.cache.delete(ScopeKey.server(server_id, channel_id, persona_id)),
        )

    async def sweep(self) -> int:
        """Drop expired hot entries now; returns how many."""
        return await self.cache.sweep(self.clock())

    async def janitor(self, retention_days: int | None = None) -> int:
        """Delete durable rows untouched for ``retention_days`` (default from the config)."""
        days = self.config.janitor_retention_days if retention_days is None else retention_days
        if isinstance(days, bool) or not isinstance(days, int) or days < 0:
            raise InvalidInput("retention_days", retention_days, "a non-negative integer")
        await self.flush()
        return await self.store.janitor(untouched_since=self.clock() - days * 86400)

    # -- observability --------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counters of both tiers: entries, bytes, hits, misses, evictions, expirations, ..."""
        out: dict[str, Any] = dict(self.cache.stats())
        out.update(self.health.counts())
        out["lost_counter_steps"] = 0
        if self.write_behind is not None:
            out.update(self.write_behind.stats())
        out["hydration_s"] = round(self.hydration_s, 6)
        out["degraded"] = self.health.degraded
        return out
