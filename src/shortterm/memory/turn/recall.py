"""The read path: which remembered entries a turn may see, gathered into a :class:`Context`.

Who sees what (the rules are in ``docs/prompt-format.md`` too):

* **Same channel**: the live scope's summary or category notes (the server scope in a guild,
  the user scope in a DM), whether or not the turn can use tools.
* **Other channels, in a guild**: this server's shared memory of its other channels; with the
  user's cross-server opt-in also the user's own memory from other servers and DMs, showing
  only the user's and the bot's messages.
* **Other channels, in a DM**: the user's other DMs; with the opt-in also their server
  channels (again only their own and the bot's messages).
* A persona lineage on the turn limits recall to entries of that lineage.
* A user with partial (or full) privacy gets no personal (user-scope) recall at all.
* **Private channels**: an entry is hidden outside private channels when its channel or its
  parent is private now (by the settings of the server the entry belongs to) or was private
  when it was captured, unless that server allows it (``privacy_bypass``). Inside a private
  channel, the same server's private entries are visible; other servers' never are.

The rules themselves are in rules.py; this module reads and renders. The other channels are
read from the hot tier's recall order (``cache.base.RecentOrder``): this server's and the
user's entries newest first, only as far as the block fills, so a server's size does not
decide a turn's cost; the rules filter each entry as it comes, so an entry they hide just
takes the next one. A hot tier without that order gives every entry of the two owners, sorted
here. A durable tier that fails mid-read degrades the context to what the hot tier holds; the
failure is counted and logged.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from operator import attrgetter
from typing import TYPE_CHECKING, TypeVar

from ...cache.base import HotTier, Owner, Recent, RecentOrder
from ...model import Entry, ScopeKey, ScopeKind
from ...model.errors import CacheUnavailable, InvalidInput, StoreUnavailable
from ...prompt.context import Context, ContextItem
from ...prompt.render import (
    Origin,
    Recollection,
    Section,
    category_labels,
    describe,
    distilled_section,
    estimate_tokens,
    fit,
    nudge_text,
    plan_recollection,
)
from .. import rules
from ..engine.known_settings import KnownSettings
from ..engine.renders import RenderCache
from ..turn_args import TurnArgs
from .guards import TurnGuard

if TYPE_CHECKING:
    from ..engine.engine import Engine

__all__ = ["build_context"]

TokenCounter = Callable[[str], int]
_T = TypeVar("_T")


class _Reader:
    """Durable reads for one context build; a durable failure degrades instead of failing the
    turn. A degraded context is served from the hot tier, so a failure of the hot tier itself
    fails the build: counted and logged as the hot tier's, never as the durable tier's."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.degraded = False
        self._reads = engine.health.value("read_through")

    def done(self) -> None:
        """The build is served, every hot-tier read of it answered: a degraded one is counted
        now (one that failed later was not served), and one that reached the durable tier
        without a failure shows it is back."""
        health = self.engine.health
        health.cache_ok()
        if self.degraded:
            health.count("degraded_contexts")
        elif health.value("read_through") > self._reads:
            health.ok()

    def _failed(self, exc: StoreUnavailable) -> None:
        """A read that falls back to the hot tier failed: a durable failure degrades the
        build, the hot tier's own is raised (there is nothing to fall back to)."""
        if isinstance(exc, CacheUnavailable):
            self.engine.health.cache_failed("context", exc)
            raise exc
        self.degraded = True
        self.engine.health.failed("context", exc)

    async def _hot(self, read: Awaitable[_T]) -> _T:
        """A read of the hot tier alone; its failure is the hot tier's."""
        try:
            return await read
        except CacheUnavailable as exc:
            self.engine.health.cache_failed("context", exc)
            raise

    async def refresh_settings(self) -> None:
        try:
            await self.engine.refresh_settings()
        except StoreUnavailable as exc:
            self._failed(exc)  # the cached settings stay in use

    async def follow_shared(self) -> bool:
        """Follow the journal mid-build; False when the durable tier failed (the cached
        settings stay in use)."""
        try:
            await self.engine.journal.follow_shared()
        except StoreUnavailable as exc:
            self._failed(exc)
            return False
        return True

    async def live(self, key: ScopeKey) -> tuple[Entry | None, int]:
        try:
            return await self.engine.live(key, followed=True)  # refresh_settings followed
        except StoreUnavailable as exc:
            self._failed(exc)
            entry = await self._hot(self.engine.tiers.cache.get(key, self.engine.clock()))
            return entry, await self.counter(key, entry)

    async def recent(
        self, cache: RecentOrder, owners: list[Owner], page: int, live: ScopeKey | None
    ) -> Recent:
        """The owners' entries in recall order; an owner the hot tier may not hold wholly
        is re-read from the durable tier first (``Engine.owner_entries``' rule), and a
        durable failure leaves the read to what the hot tier holds."""
        engine = self.engine

        try:
            for kind, owner_id in owners:
                await engine.settle_owner(kind, owner_id)
            recent = await cache.recent(owners, engine.clock(), page=page, live=live)
            if recent.incomplete:
                for kind, owner_id in recent.incomplete:
                    await engine.complete_owner(kind, owner_id)
                recent = await cache.recent(owners, engine.clock(), page=page, live=live)
        except StoreUnavailable as exc:
            self._failed(exc)
            recent = await self._hot(cache.recent(owners, engine.clock(), page=page, live=live))
        return recent

    async def owner(self, kind: ScopeKind, owner_id: str) -> list[Entry]:
        try:
            return await self.engine.owner_entries(kind, owner_id)
        except StoreUnavailable as exc:
            self._failed(exc)
            entries, _ = await self._hot(
                self.engine.tiers.cache.owner_entries(kind, owner_id, self.engine.clock())
            )
            return entries

    async def counter(self, key: ScopeKey, entry: Entry | None) -> int:
        if entry is not None:
            return entry.turns_since_refresh
        # Nothing live to show, but the counter may still be cached (``get`` read it through).
        turns = await self._hot(self.engine.tiers.cache.counter(key, self.engine.clock()))
        return turns or 0


# Newest first: a C-speed key, computed once per entry view.
_newest = attrgetter("_newest")
# Whether a hot tier keeps a recall order, by the tier's id: asked once per tier (a runtime
# protocol check costs tens of microseconds, more than the rest of a small server's read).
_ORDERED: dict[int, tuple[HotTier, RecentOrder | None]] = {}


class _Recall:
    """What one turn may see under one snapshot (the rules in rules.py), and its renderings."""

    def __init__(
        self,
        snap: rules.Snapshot,
        known: KnownSettings,
        renders: RenderCache,
        opted_in: bool = False,
    ) -> None:
        args, settings = snap.args, snap.settings
        self.snap = snap
        self.opted_in = opted_in
        self.args = args
        self.settings = settings
        self.known = known
        self.renders = renders
        self.here_private = rules.here_private(snap)
        self.lineage = args.persona_lineage_id
        self.user_name = args.user_name or "the user"
        self._labels: dict[str | None, dict[str, str] | None] = {
            args.server_id: category_labels(settings)
        }

    def labels(self, server_id: str | None) -> dict[str, str] | None:
        if server_id not in self._labels:
            owner = self.known.server(server_id)
            self._labels[server_id] = category_labels(owner)
        return self._labels[server_id]

    def visible(self, e: Entry) -> bool:
        """Whether an entry of another channel is one the turn may see (``False`` for this
        channel's): one of the turn's persona lineage, if it names one, that
        ``rules.hidden_as_private`` does not hide. Asked lazily, newest first, until the
        block is full: most of an owner's entries are never asked about."""
        if e.key.channel_id == self.args.channel_id:
            return False
        lineage = self.lineage
        if lineage is not None and e.persona_lineage_id != lineage:
            return False
        # This server's entries need the private check only when something can be private.
        if e.private or e.key.kind == "user" or self.settings.private_channel_ids:
            server_id = rules.server_of(e)
            here = self.args.server_id
            # Each server's own list decides: another server's private channels never leak.
            owner = self.settings if server_id == here else self.known.server(server_id)
            if rules.hidden_as_private(e, owner, here_server=here, here_private=self.here_private):
                return False
        return True

    def personal(self, e: Entry) -> bool:
        """Whether one of the user's own entries is one the turn may recall at all
        (``rules.recalled_personal``: other servers and DMs, as the opt-in allows)."""
        return bool(rules.recalled_personal(self.snap, self.opted_in, [e]))

    def plan(self, entry: Entry) -> Recollection | None:
        """What ``entry`` shows this turn, planned once per view of it and per the inputs
        below: the same entry recalled again reuses its quoted, escaped rows."""
        origin = rules.origin(entry, self.args.server_id is None)
        known = self.known
        owner = known.server(rules.server_of(entry))
        # A server entry shown in its own server reads nothing of the user (so one plan
        # serves every user there); elsewhere the user's name appears in the block.
        who = None if origin == "this_server" else self.user_name
        inputs = (
            origin,
            who,
            self.settings,
            owner,
            self.args.bot_name,
            known.full_privacy_version,
        )
        memo = self.renders.of(entry)
        if memo.other_inputs == inputs:
            return memo.other
        planned = self._plan(entry, origin)
        memo.other_inputs, memo.other = inputs, planned
        return planned

    def same(self, entry: Entry, labels: dict[str, str] | None) -> Section | None:
        """The live entry's distilled section, built once per view and settings."""
        settings = self.settings
        memo = self.renders.of(entry)
        if memo.same_inputs is settings:
            return memo.same
        memo.same_inputs, memo.same = settings, distilled_section(entry, labels)
        return memo.same

    def _plan(self, entry: Entry, origin: Origin) -> Recollection | None:
        settings = self.settings
        where = describe(
            origin,
            channel_id=entry.key.channel_id,
            channel_name=entry.channel_name,
            user_name=self.user_name,
        )
        # Capture already drops full-privacy authors, but a user may choose full privacy in
        # another process after the capture; this process learns it at its next refresh.
        shown = rules.shown_messages(entry, self.args.user_id, self.known.full_privacy_users)
        return plan_recollection(
            entry,
            where=where,
            messages=shown,
            labels=self.labels(rules.server_of(entry)),
            render_mode=settings.render_mode,
            crude_message_count=min(settings.crude_message_count, self.snap.config.max_messages),
            user_fallback="someone" if entry.key.kind == "server" else self.user_name,
            bot_fallback=self.args.bot_name,
        )


class _Sorted(Recent):
    """Recall order for a hot tier without one: the owners' entries, sorted here."""

    def __init__(self, entries: list[Entry], live: ScopeKey | None) -> None:
        self.incomplete = []
        # Sorting before filtering gives the same order (the sort is stable), and the filter
        # (``_Recall.visible``) then runs only until the block is full.
        self._entries = iter(sorted(entries, key=_newest, reverse=True))
        if live is not None:
            kt = live.astuple
            self.live = next((e for e in entries if e.key.astuple == kt), None)
            self.live_read = True

    async def __anext__(self) -> Entry:
        for entry in self._entries:
            return entry
        raise StopAsyncIteration


async def _gather(
    engine: Engine, args: TurnArgs, reader: _Reader
) -> tuple[_Recall, Recent, ScopeKey]:
    """The rules for this turn under the settings known now, the entries of the owners the
    turn reads, newest first (the ones it may see are picked from them by
    ``_Recall.personal`` and ``_Recall.visible``), and the channel's live scope."""
    snap = engine.snapshot(args)
    known = engine.known_settings
    opted_in = known.user(args.user_id).cross_server_opt_in  # rules.reads_personal weighs it
    recall = _Recall(snap, known, engine.renders, opted_in)
    owners: list[Owner] = []
    if args.server_id is not None:
        owners.append(("server", args.server_id))
    if rules.reads_personal(snap, opted_in):
        owners.append(("user", args.user_id))
    live_key = rules.live_scope(snap, args.persona_id)
    cache = engine.tiers.cache
    # The live entry comes with the owners' read on a shared tier: a second read of the same
    # record would be another round trip (a private tier's read is a dict lookup instead).
    live: ScopeKey | None = None
    if cache.shared and rules.reads_live(snap) and (live_key.kind, live_key.owner_id) in owners:
        live = live_key
    probed = _ORDERED.get(id(cache))
    if probed is None or probed[0] is not cache:
        if len(_ORDERED) > 64:
            _ORDERED.clear()  # tiers opened and closed (tests): each is simply asked again
        ordered = cache if isinstance(cache, RecentOrder) else None
        probed = _ORDERED[id(cache)] = (cache, ordered)
    order = probed[1]
    if order is not None:
        page = engine.config.max_other_channels + 2  # the live channel's own, and one hidden
        return recall, await reader.recent(order, owners, page, live), live_key
    entries: list[Entry] = []
    for kind, owner_id in owners:
        entries += await reader.owner(kind, owner_id)
    return recall, _Sorted(entries, live), live_key


async def _recollections(engine: Engine, recall: _Recall, candidates: Recent) -> list[Recollection]:
    """Up to ``max_other_channels`` other conversations the turn may see, newest first:
    candidates are read only until the block is full."""
    recollections: list[Recollection] = []
    limit = engine.config.max_other_channels
    if not limit:
        return recollections
    visible, personal = recall.visible, recall.personal
    try:
        # No await between the steps but the tier's own (a private tier's never suspend, so
        # its order cannot change under the walk).
        async for entry in candidates:
            if entry.key.kind == "user" and not personal(entry):
                continue
            if not visible(entry):
                continue
            planned = recall.plan(entry)
            if planned is not None:  # nothing to show takes no slot
                recollections.append(planned)
                if len(recollections) >= limit:
                    break
    except CacheUnavailable as exc:
        engine.health.cache_failed("context", exc)
        raise
    return recollections


async def build_context(
    engine: Engine,
    args: TurnArgs,
    guard: TurnGuard,
    *,
    max_tokens: int | None = None,
    count_tokens: TokenCounter | None = None,
) -> tuple[Context, tuple[Entry | None] | None]:
    """Everything memory contributes to this turn's prompt (see the module docstring), and
    what the channel's live scope held as it was read for it (in a 1-tuple; ``None`` when
    the turn may not read it)."""
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0
    ):
        raise InvalidInput("max_tokens", max_tokens, "None or a non-negative integer")
    if count_tokens is not None and not callable(count_tokens):
        raise InvalidInput("count_tokens", count_tokens, "a callable str -> int, or None")
    reader = _Reader(engine)
    await reader.refresh_settings()
    recall, candidates, live_key = await _gather(engine, args, reader)
    if engine.tiers.cache.journal_due(engine.journal.head) and await reader.follow_shared():
        # A shared hot tier's read returned a settings change newer than our position (a
        # privacy choice or a server's settings another process made after our last
        # follow): the journal is followed, and the entries gathered again under it.
        recall, candidates, live_key = await _gather(engine, args, reader)
    settings = recall.settings
    recollections = await _recollections(engine, recall, candidates)

    live: Entry | None = candidates.live
    seen: tuple[Entry | None] | None = None
    if rules.reads_live(recall.snap):
        if live is not None:
            counter = live.turns_since_refresh
        else:
            live, counter = await reader.live(live_key)
        seen = (live,)
    else:
        counter = await reader.counter(live_key, None)
    labels = recall.labels(args.server_id)
    same: Section | None = recall.same(live, labels) if live is not None else None

    nudge: ContextItem | None = None
    # The counter first: it is a field read, while the tool guards scan the user's message.
    if counter >= settings.refresh_cadence and guard.refusal(recall.snap) is None:
        nudge = ContextItem(text=nudge_text(settings, labels), kind="nudge")

    reader.done()
    now = engine.clock()
    if max_tokens is not None:
        # A budget drops rows in place, and planned sections are shared with later turns.
        recollections = [r.copy() for r in recollections]
        same = same.copy() if same is not None else None
    other_text, same_text = fit(
        recollections,
        same,
        bot_name=args.bot_name,
        now=now,
        nudge=nudge.text if nudge is not None else None,
        max_tokens=max_tokens,
        count_tokens=count_tokens or estimate_tokens,
    )
    items: list[ContextItem] = []
    if other_text is not None:
        # Never blank: the block's own header and footer frame it.
        items.append(ContextItem._unchecked(other_text, "other_channels"))
    if same_text is not None:
        items.append(ContextItem(text=same_text, kind="same_channel"))

    depth = settings.content_depth
    stamps = [s.at for r in recollections for s in r.sections if s.at is not None]
    if same_text is not None and same is not None and same.at is not None:
        stamps.append(same.at)
    if stamps and now - max(stamps) <= engine.config.fresh_window_s:
        # Fresh memory matters to the next reply: pull it close to the end of the dialogue.
        fresh = engine.config.fresh_depth
        depth = fresh if depth < 0 else min(fresh, depth)
    # Depths from checked settings and config, all within the context's bounds.
    return Context._unchecked(tuple(items), nudge, depth, settings.nudge_depth), seen
