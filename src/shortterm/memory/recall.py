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

Everything is read through the facade's owner index, so the cost follows the number of
entries of this server and user, not the size of the whole memory. A durable tier that fails
mid-read degrades the context to what the hot tier holds; the failure is counted and logged.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING

from ..model import Entry, Message, Privacy, ScopeKey, ScopeKind, ServerSettings
from ..model.errors import InvalidInput, StoreUnavailable
from ..prompt.context import Context, ContextItem
from ..prompt.render import (
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

if TYPE_CHECKING:
    from .facade import Memory
    from .turn import Turn

__all__ = ["build_context"]

TokenCounter = Callable[[str], int]


class _Reader:
    """Durable reads for one context build; a failure degrades instead of failing the turn."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self.degraded = False
        self._reads = memory.health.value("read_through")

    def done(self) -> None:
        """A build that reached the durable tier without a failure shows it is back."""
        if not self.degraded and self.memory.health.value("read_through") > self._reads:
            self.memory.health.ok()

    def _failed(self, exc: StoreUnavailable) -> None:
        if not self.degraded:
            self.degraded = True
            self.memory.health.count("degraded_contexts")
        self.memory.health.failed("context", exc)

    async def refresh_settings(self) -> None:
        try:
            await self.memory.refresh_settings()
        except StoreUnavailable as exc:
            self._failed(exc)  # the cached settings stay in use

    async def follow_shared(self) -> bool:
        """Follow the journal mid-build; False when the durable tier failed (the cached
        settings stay in use)."""
        try:
            await self.memory.journal.follow_shared()
        except StoreUnavailable as exc:
            self._failed(exc)
            return False
        return True

    async def get(self, key: ScopeKey) -> Entry | None:
        try:
            return await self.memory.get(key)
        except StoreUnavailable as exc:
            self._failed(exc)
            return await self.memory.cache.get(key, self.memory.clock())

    async def owner(self, kind: ScopeKind, owner_id: str) -> list[Entry]:
        try:
            return await self.memory.owner_entries(kind, owner_id)
        except StoreUnavailable as exc:
            self._failed(exc)
            entries, _ = await self.memory.cache.owner_entries(kind, owner_id, self.memory.clock())
            return entries

    async def counter(self, key: ScopeKey, entry: Entry | None) -> int:
        if entry is not None:
            return entry.turns_since_refresh
        # Nothing live to show, but the counter may still be cached (``get`` read it through).
        turns = await self.memory.cache.counter(key, self.memory.clock())
        return turns or 0


# Newest first: a C-speed key, computed once per entry view.
_newest = attrgetter("_newest")


class _Recall:
    """The visibility rules for one turn."""

    def __init__(self, turn: Turn, settings: ServerSettings) -> None:
        memory = turn.memory
        self.turn = turn
        self.memory = memory
        self.settings = settings
        self.lineage = turn.persona_lineage_id
        self.here_private = turn.server_id is not None and settings.is_private(
            turn.channel_id, turn.parent_channel_id
        )
        self.user_name = turn.user_name or "the user"
        self._labels: dict[str | None, dict[str, str] | None] = {
            turn.server_id: category_labels(settings)
        }

    def labels(self, server_id: str | None) -> dict[str, str] | None:
        if server_id not in self._labels:
            owner = self.memory.known_settings.server(server_id)
            self._labels[server_id] = category_labels(owner)
        return self._labels[server_id]

    def candidates(self, entries: list[Entry], *, server_scope: bool) -> list[Entry]:
        """The entries other than this channel's that the turn may see."""
        channel, lineage = self.turn.channel_id, self.lineage
        # This server's entries need the private check only when something can be private.
        check_all = not server_scope or bool(self.settings.private_channel_ids)
        out = []
        for e in entries:
            if e.key.channel_id == channel:
                continue
            if lineage is not None and e.persona_lineage_id != lineage:
                continue
            if (check_all or e.private) and self.hidden_as_private(e):
                continue
            out.append(e)
        return out

    def hidden_as_private(self, entry: Entry) -> bool:
        server_id = _server_of(entry)
        if server_id is None:
            return False  # direct messages have no private channels
        # Each server's own list decides, so another server's private channels never leak.
        here = server_id == self.turn.server_id
        owner = self.settings if here else self.memory.known_settings.server(server_id)
        if owner.privacy_bypass:
            return False
        if not (entry.private or owner.is_private(entry.key.channel_id, entry.parent_channel_id)):
            return False
        return not (here and self.here_private)

    def shown_messages(self, entry: Entry) -> list[Message]:
        """The messages of ``entry`` this turn may see: never a full-privacy author's, and in
        personal (user-scope) memory only the user's own and the bot's."""
        # Capture already drops both, but a user may choose full privacy in another process
        # after the capture; this process learns it at its next settings refresh.
        hidden = self.memory.known_settings.full_privacy_users
        personal = entry.key.kind == "user"
        user_id = self.turn.user_id
        out = []
        for m in entry.messages:
            author = m.author_id
            if m.privacy is Privacy.FULL or (hidden and author in hidden):
                continue
            if personal and author is not None and m.role == "user" and author != user_id:
                continue
            out.append(m)
        return out

    def origin(self, entry: Entry) -> Origin:
        if entry.key.kind == "server":
            return "this_server"
        in_dm = self.turn.server_id is None
        if _server_of(entry) is None:
            return "another_dm" if in_dm else "a_dm"
        return "a_server" if in_dm else "another_server"

    def plan(self, entry: Entry) -> Recollection | None:
        """What ``entry`` shows this turn, planned once per view of it and per the inputs
        below: the same entry recalled again reuses its quoted, escaped rows."""
        origin = self.origin(entry)
        owner = self.memory.known_settings.server(_server_of(entry))
        # A server entry shown in its own server reads nothing of the user (so one plan
        # serves every user there); elsewhere the user's name appears in the block.
        who = None if origin == "this_server" else self.user_name
        inputs = (
            origin,
            who,
            self.settings,
            owner,
            self.turn.bot_name,
            self.memory.known_settings.full_privacy_version,
        )
        memo = _memo_of(entry)
        if memo.other_inputs == inputs:
            return memo.other
        planned = self._plan(entry, origin)
        memo.other_inputs, memo.other = inputs, planned
        return planned

    def same(self, entry: Entry, labels: dict[str, str] | None) -> Section | None:
        """The live entry's distilled section, built once per view and settings."""
        settings = self.settings
        memo = _memo_of(entry)
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
        return plan_recollection(
            entry,
            where=where,
            messages=self.shown_messages(entry),
            labels=self.labels(_server_of(entry)),
            render_mode=settings.render_mode,
            crude_message_count=min(settings.crude_message_count, self.memory.config.max_messages),
            user_fallback="someone" if entry.key.kind == "server" else self.user_name,
            bot_fallback=self.turn.bot_name,
        )


class _Memo:
    """What one entry view rendered, with the inputs it was rendered under. Kept on the view
    (see ``Entry._memo``), so it is dropped with the view: never shown for a changed or
    forgotten entry. Planned sections are shared: :func:`build_context` copies them before
    a token budget trims anything."""

    __slots__ = ("other", "other_inputs", "same", "same_inputs")

    def __init__(self) -> None:
        self.other_inputs: tuple[object, ...] | None = None
        self.other: Recollection | None = None
        self.same_inputs: ServerSettings | None = None
        self.same: Section | None = None


def _memo_of(entry: Entry) -> _Memo:
    memo: _Memo | None = entry._memo
    if memo is None:
        memo = _Memo()
        object.__setattr__(entry, "_memo", memo)
    return memo


def _server_of(entry: Entry) -> str | None:
    return entry.key.owner_id if entry.key.kind == "server" else entry.server_id


async def _gather(turn: Turn, reader: _Reader) -> tuple[_Recall, bool, list[Entry]]:
    """The rules for this turn under the settings known now, whether the user keeps personal
    memory, and the other channels' entries the turn may see, newest first."""
    memory = turn.memory
    recall = _Recall(turn, turn.settings)
    personal = turn.effective_privacy() is Privacy.NONE
    opted_in = personal and memory.known_settings.user(turn.user_id).cross_server_opt_in
    candidates: list[Entry] = []
    if turn.server_id is not None:
        shared = await reader.owner("server", turn.server_id)
        candidates = recall.candidates(shared, server_scope=True)
        if opted_in:
            # Personal memory from this server is already shown through the shared scope.
            mine = [
                e for e in await reader.owner("user", turn.user_id) if e.server_id != turn.server_id
            ]
            candidates += recall.candidates(mine, server_scope=False)
    elif personal:
        mine = await reader.owner("user", turn.user_id)
        if not opted_in:
            mine = [e for e in mine if e.server_id is None]  # other DMs only
        candidates = recall.candidates(mine, server_scope=False)
    candidates.sort(key=_newest, reverse=True)
    return recall, personal, candidates


async def build_context(
    turn: Turn, *, max_tokens: int | None = None, count_tokens: TokenCounter | None = None
) -> Context:
    """Everything memory contributes to this turn's prompt. See the module docstring."""
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0
    ):
        raise InvalidInput("max_tokens", max_tokens, "None or a non-negative integer")
    if count_tokens is not None and not callable(count_tokens):
        raise InvalidInput("count_tokens", count_tokens, "a callable str -> int, or None")
    memory = turn.memory
    reader = _Reader(memory)
    await reader.refresh_settings()
    recall, personal, candidates = await _gather(turn, reader)
    if memory.cache.journal_due(memory.journal.head) and await reader.follow_shared():
        # A shared hot tier's read returned a settings change newer than our position (a
        # privacy choice or a server's settings another process made after our last
        # follow): the journal is followed, and the entries gathered again under it.
        recall, personal, candidates = await _gather(turn, reader)
    settings = recall.settings
    recollections: list[Recollection] = []
    limit = memory.config.max_other_channels
    for entry in candidates:
        if len(recollections) >= limit:
            break
        planned = recall.plan(entry)
        if planned is not None:  # nothing to show takes no slot
            recollections.append(planned)

    live_key = turn.live_key
    live: Entry | None = None
    if personal or live_key.kind == "server":
        live = await reader.get(live_key)
    labels = recall.labels(turn.server_id)
    same: Section | None = recall.same(live, labels) if live is not None else None

    nudge: ContextItem | None = None
    # The counter first: it is a field read, while the tool guards scan the user's message.
    if await reader.counter(live_key, live) >= settings.refresh_cadence and turn.tool_available():
        nudge = ContextItem(text=nudge_text(settings, labels), kind="nudge")

    reader.done()
    now = memory.clock()
    if max_tokens is not None:
        # A budget drops rows in place, and planned sections are shared with later turns.
        recollections = [r.copy() for r in recollections]
        same = same.copy() if same is not None else None
    other_text, same_text = fit(
        recollections,
        same,
        bot_name=turn.bot_name,
        now=now,
        nudge=nudge.text if nudge is not None else None,
        max_tokens=max_tokens,
        count_tokens=count_tokens or estimate_tokens,
    )
    items: list[ContextItem] = []
    if other_text is not None:
        items.append(ContextItem(text=other_text, kind="other_channels"))
    if same_text is not None:
        items.append(ContextItem(text=same_text, kind="same_channel"))

    depth = settings.content_depth
    stamps = [s.at for r in recollections for s in r.sections if s.at is not None]
    if same_text is not None and same is not None and same.at is not None:
        stamps.append(same.at)
    if stamps and now - max(stamps) <= memory.config.fresh_window_s:
        # Fresh memory matters to the next reply: pull it close to the end of the dialogue.
        fresh = memory.config.fresh_depth
        depth = fresh if depth < 0 else min(fresh, depth)
    return Context(items, nudge, depth, settings.nudge_depth)
