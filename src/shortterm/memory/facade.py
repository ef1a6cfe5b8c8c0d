"""The memory facade: the public API over one engine (engine.py).

Every public method checks its arguments and makes one engine call; the engine owns the state
(tiers, write-behind, journal position, settings, health) and the write paths. What stands
alone lives beside it: opening.py (``open()``), admin.py (listing and export).
"""

from __future__ import annotations

import asyncio
import functools
import warnings
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Mapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, overload

from ..cache.base import HotTier
from ..model import (
    DistilledWrite,
    Entry,
    Message,
    ScopeKey,
    ScopeMeta,
    ScopeRow,
    ServerSettings,
    ServerSummary,
    UserSettings,
    check_id,
    check_optional_id,
)
from ..model.config import Config
from ..model.errors import InvalidInput
from ..model.fence import WriteFence
from ..model.horizons import HORIZON_AHEAD_S
from ..model.keys import check_time
from ..model.text import clean_text, truncate
from ..store.base import Store
from ..tool.slug import slugify
from . import admin, rules
from .closing import ClosedOnExit
from .engine.engine import Clock, Engine
from .engine.follower import JournalFollower
from .engine.forget import UnsureForget, kept_on_clear
from .engine.health import Health
from .engine.known_settings import KnownSettings
from .engine.write_behind import WriteBehind
from .forwarded import Forwarded
from .turn.guards import SharedGuard
from .turn.turn import Turn
from .turn_args import TurnArgs

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["Memory"]

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
        with self._engine.operation():
            return await method(self, *args, **kwargs)

    return call


def _on_engine(
    method: Callable[Concatenate[Engine, _P], _R],
) -> Callable[Concatenate[Memory, _P], _R]:
    """A method of the facade that is the engine's own (looked up at each call, so a wrapped
    engine method is the one called)."""
    name = method.__name__

    @functools.wraps(method)
    def call(self: Memory, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        forwarded: Callable[_P, _R] = getattr(self._engine, name)
        return forwarded(*args, **kwargs)

    return call


def _deprecated(name: str, plan: str) -> None:
    warnings.warn(
        f"Memory.{name} is deprecated: make a plan ({plan}, see shortterm.memory.rules) "
        "and pass it to Memory.write(plan, fence=...)",
        DeprecationWarning,
        stacklevel=3,
    )


# Only read, never written: whatever a bot stores under these ids is left as it is.
_PING_KEY = ScopeKey.server("shortterm-readyz-probe", "shortterm-readyz-probe")


class Memory(ClosedOnExit):
    """Working memory for one bot process. Create it with :func:`shortterm.open`."""

    def __init__(self, *, store: Store, cache: HotTier, config: Config, clock: Clock) -> None:
        self._engine = Engine(store=store, cache=cache, config=config, clock=clock)
        self._closed = False

    # -- what it is made of (read-only, but the tiers may be wrapped) ---------------------

    @property
    def engine(self) -> Engine:
        """The machinery behind this facade (its turns' engine): for surfaces and tests that
        observe or wrap a write path."""
        return self._engine

    # The tiers may be wrapped (a test adds latency or failures): the engine's parts follow.
    store = Forwarded[Store]("_engine.tiers", writable=True)
    cache = Forwarded[HotTier]("_engine.tiers", writable=True)
    config = Forwarded[Config]("_engine")
    clock = Forwarded[Clock]("_engine")
    known_settings = Forwarded[KnownSettings]("_engine")
    health = Forwarded[Health]("_engine")
    journal = Forwarded[JournalFollower]("_engine")
    write_behind = Forwarded[WriteBehind | None]("_engine")
    hydration_s = Forwarded[float]("_engine")

    @property
    def unsure_forgets(self) -> Sequence[UnsureForget]:
        """Our forgets whose outcome is unknown, retried before the next call."""
        return self._engine.forgets.unsure.listed()

    @property
    def _sweeper(self) -> asyncio.Task[None] | None:
        return self._engine.sweeper

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self, *, hydrate: bool = True) -> None:
        """Apply migrations, take the journal position, load settings and (``hydrate``) the
        live rows. :func:`shortterm.open` calls it."""
        await self._engine.start(hydrate=hydrate)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._engine.close()

    async def flush(self) -> None:
        """Commit the captures' buffered durable work now (the write-behind's scope rows and counter
        steps, see ``Config.write_behind_ms``). Every acknowledged write (a distilled one in its own
        transaction), forget, durable read and :meth:`close` does this first; a no-op when nothing
        is buffered or there is no write-behind. A failure is counted (``lost_counter_steps``), not
        raised."""
        await self._engine.flush()

    async def __aenter__(self) -> Memory:
        return self

    # -- settings -------------------------------------------------------------------------

    scope_meta = _on_engine(Engine.scope_meta)

    async def begin_write(self, triggerer: str | None = None) -> WriteFence:
        """Where a write begins: follow the journal, then the position to fence the write at.
        Call it before reading what the write is computed from."""
        return await self._engine.begin_write(triggerer)

    async def refresh_settings(self) -> None:
        """Follow the journal; and pick up settings other processes changed the old way, at
        most one query pair per interval (rows written by earlier versions)."""
        await self._engine.refresh_settings()

    @one_call
    async def configure_server(self, server_id: str, settings: ServerSettings) -> None:
        check_id("server_id", server_id)
        if not isinstance(settings, ServerSettings):
            raise InvalidInput("settings", settings, "a shortterm.ServerSettings")
        config = self.config
        if settings.crude_message_count > config.max_messages:
            raise InvalidInput(
                "crude_message_count",
                settings.crude_message_count,
                f"an integer from 1 to max_messages ({config.max_messages})",
            )
        if len(settings.categories) > config.max_categories:
            raise InvalidInput(
                "categories",
                [c.label for c in settings.categories],
                f"at most max_categories ({config.max_categories}) categories",
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
        await self._engine.settings.save_server(server_id, settings)

    async def server_settings(self, server_id: str) -> ServerSettings:
        check_id("server_id", server_id)
        await self.refresh_settings()
        return self.known_settings.server(server_id)

    @one_call
    async def configure_user(
        self, user_id: str, settings: UserSettings, *, at: float | None = None
    ) -> None:
        """Store a user's choice. ``Privacy.FULL`` is a forget: what was kept of them is
        purged in the same transaction that stores the choice, and it holds in every process
        on the same memory before this returns here (others follow the journal). Their
        messages written up to ``at`` (see :meth:`clear_channel`) are never captured again."""
        check_id("user_id", user_id)
        if not isinstance(settings, UserSettings):
            raise InvalidInput("settings", settings, "a shortterm.UserSettings")
        horizon = self._horizon("at", at)  # checked whatever the choice: a wrong one is wrong
        engine = self._engine
        if rules.is_forgotten(settings):
            await engine.forgets.user(user_id, keep=settings, at=horizon)
            return
        await engine.settings.save_user(user_id, settings)

    async def user_settings(self, user_id: str) -> UserSettings:
        check_id("user_id", user_id)
        await self.refresh_settings()
        return self.known_settings.user(user_id)

    # -- turns ----------------------------------------------------------------------------

    def turn(self, **kwargs: Any) -> Turn:
        """Start a turn (no I/O). See :class:`shortterm.Turn` for the arguments."""
        return Turn(self._open_engine(), TurnArgs(**kwargs))

    def turn_from(
        self, args: TurnArgs, *, upgraded: bool = False, shared: SharedGuard | None = None
    ) -> Turn:
        """A turn of ``args`` (no I/O): one kept elsewhere and rebuilt (``upgraded``: it was
        upgraded already; ``shared``: the guard the processes serving it share)."""
        if not isinstance(args, TurnArgs):
            raise InvalidInput("args", args, "a shortterm TurnArgs")
        return Turn(self._open_engine(), args, upgraded=upgraded, shared=shared)

    def _open_engine(self) -> Engine:
        """The engine, for a new turn: none on a closed memory."""
        if self._closed:
            raise InvalidInput("memory", "closed", "an open Memory (this one was closed)")
        return self._engine

    # -- reads ----------------------------------------------------------------------------

    @one_call
    async def get(self, key: ScopeKey) -> Entry | None:
        """What ``key`` remembers now, or ``None`` when nothing is live."""
        if not isinstance(key, ScopeKey):
            raise InvalidInput("key", key, "a shortterm.ScopeKey")
        return (await self._engine.live(key))[0]

    read_through = _on_engine(Engine.read_through)
    owner_entries = _on_engine(Engine.owner_entries)

    # -- administration: listing, export, import -----------------------------------------

    async def find_rows(self, **filters: Unpack[admin.RowFilters]) -> list[ScopeRow]:
        """Durable rows matching every filter given (``kind``, ``server_id``, ``channel_id``,
        ``user_id``, ``persona_id``), sorted by key: see :func:`admin.find_rows`."""
        return await admin.find_rows(self._engine.durable, **filters)

    async def servers(self, *, after: str | None = None, limit: int = 100) -> list[ServerSummary]:
        """The servers with durable shared rows, a page at a time: see :func:`admin.servers`."""
        return await admin.servers(self._engine.durable, after=after, limit=limit)

    def export_rows(self, *, batch_rows: int = 1000) -> AsyncIterator[list[ScopeRow]]:
        """Stream every durable row in batches: see :func:`admin.export_rows`."""
        # Checks its argument now; the buffered captures commit when the stream starts.
        return admin.export_rows(self._engine.durable, batch_rows=batch_rows)

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
        return await self._engine.import_rows(rows)

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
        return await self._engine.edit(key, DistilledWrite(summary=summary, set_summary=True))

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
        return await self._engine.edit(key, change)

    # -- the write paths, for surfaces that write scopes themselves (see engine.py) -------

    @overload
    async def write(self, plan: rules.CapturePlan, *, fence: WriteFence) -> bool: ...
    @overload
    async def write(self, plan: rules.DistilledPlan, *, fence: WriteFence) -> list[ScopeRow]: ...

    async def write(
        self, plan: rules.CapturePlan | rules.DistilledPlan, *, fence: WriteFence
    ) -> bool | list[ScopeRow]:
        """Carry out a plan made by :mod:`shortterm.memory.rules` (a surface writing scopes
        itself: an import, a pop, the distiller), fenced at ``fence`` (:meth:`begin_write`,
        taken before reading what the plan was made from). A capture plan returns whether
        every scope was written; a distilled plan, the rows written."""
        engine = self._engine
        if isinstance(plan, rules.CapturePlan):
            return await engine.write_capture(plan, fence=fence, now=self.clock())
        if isinstance(plan, rules.DistilledPlan):
            return await engine.write_distilled(plan, fence=fence)
        raise InvalidInput("plan", plan, "a CapturePlan or DistilledPlan of shortterm.memory.rules")

    async def write_capture(
        self,
        scopes: Sequence[tuple[ScopeKey, tuple[Message, ...]]],
        meta: ScopeMeta,
        *,
        increment: ScopeKey | None,
        fence: WriteFence,
        now: float,
        append: int | None = None,
    ) -> bool:
        """Deprecated: make a ``rules.CapturePlan`` and call :meth:`write`."""
        _deprecated("write_capture", "rules.CapturePlan(scopes, meta, increment)")
        plan = rules.CapturePlan(list(scopes), meta, increment)
        return await self._engine.write_capture(plan, fence=fence, now=now, append=append)

    async def write_distilled(
        self,
        scopes: Sequence[tuple[ScopeKey, ScopeMeta | None]],
        change: DistilledWrite,
        *,
        reset_counter: ScopeKey | None,
        fence: WriteFence,
    ) -> list[ScopeRow]:
        """Deprecated: make a ``rules.DistilledPlan`` and call :meth:`write`."""
        _deprecated("write_distilled", "rules.DistilledPlan(scopes, change, reset_counter)")
        plan = rules.DistilledPlan(list(scopes), change, reset_counter)
        return await self._engine.write_distilled(plan, fence=fence)

    # -- deletion: every forget is journaled durably, then applied here, then followed ------

    async def settle_forgets(self) -> None:
        """Retry our forgets whose outcome is unknown (the journal follower does this first
        on every call)."""
        await self._engine.forgets.settle()

    def _horizon(self, name: str, at: float | None) -> float | None:
        """A forget's ``at``, checked: epoch seconds, not ahead of the memory's clock by more
        than the skew a platform's clock may have (a horizon in the future would swallow the
        channel's next messages)."""
        if at is None:
            return None
        check_time(name, at)
        ahead = float(at) - self.clock()
        if ahead > HORIZON_AHEAD_S:
            raise InvalidInput(
                name,
                at,
                f"the platform's time of the command, not {ahead:.0f} s ahead of this "
                f"memory's clock (at most {HORIZON_AHEAD_S:.0f} s)",
            )
        return float(at)

    @one_call
    async def clear_channel(self, channel_id: str, *, at: float | None = None) -> int:
        """Forget a channel: every user, persona and scope of it, in both tiers; and, since
        the platform keeps its history, every message of it written up to ``at`` is never
        captured again. ``at``: the platform's time of the command, epoch seconds (a
        ``/refresh`` interaction's creation time); the memory's clock when ``None``."""
        check_id("channel_id", channel_id)
        return await self._engine.forgets.channel(channel_id, at=self._horizon("at", at))

    @one_call
    async def clear_user(self, user_id: str, *, at: float | None = None) -> int:
        """Forget a user: their user-scope rows and entries, every message they wrote from
        every other entry (server scopes, other users' scopes) and the bot's answers to them,
        and their settings row — except a FULL privacy choice, which is kept so that it stays
        honoured. Their messages written up to ``at`` (see :meth:`clear_channel`), and the
        bot's answers to those, are never captured again. Returns the number of scopes
        deleted plus entries scrubbed."""
        check_id("user_id", user_id)
        keep = kept_on_clear(self.known_settings.stored_user(user_id))
        return await self._engine.forgets.user(user_id, keep=keep, at=self._horizon("at", at))

    @one_call
    async def clear_server_channel(
        self, server_id: str, channel_id: str, persona_id: str | None = None
    ) -> int:
        """Forget one server-scope entry (a channel's shared memory for one persona)."""
        check_id("server_id", server_id)
        check_id("channel_id", channel_id)
        check_optional_id("persona_id", persona_id)
        return await self._engine.forgets.server_channel(server_id, channel_id, persona_id)

    async def sweep(self) -> int:
        """Drop expired hot entries now; returns how many."""
        return await self.cache.sweep(self.clock())

    async def janitor(self, retention_days: int | None = None) -> int:
        """Delete durable rows untouched for ``retention_days`` (default from the config)."""
        days = self.config.janitor_retention_days if retention_days is None else retention_days
        if isinstance(days, bool) or not isinstance(days, int) or days < 0:
            raise InvalidInput("retention_days", retention_days, "a non-negative integer")
        return await self._engine.durable.janitor(untouched_since=self.clock() - days * 86400)

    # -- observability --------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counters of both tiers: entries, bytes, hits, misses, evictions, expirations, ..."""
        return self._engine.stats()

    async def ping_store(self) -> None:
        """One cheap read of the durable tier (the journal's end), for readiness probes:
        raises :class:`StoreUnavailable` when it does not answer. Changes nothing."""
        await self.store.journal_head()

    async def ping_cache(self) -> None:
        """One cheap read of the hot tier, as an operation of its own (an earlier failure in
        another call does not answer for it), for readiness probes: raises
        :class:`StoreUnavailable` when it does not answer. Reads a key no bot writes."""
        cache = self.cache
        with cache.operation():
            await cache.counter(_PING_KEY, self.clock())
