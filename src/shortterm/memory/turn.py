"""A turn: one bot generation in one channel for one persona, triggered by one user.

The turn carries the per-turn guards (one upgrade per turn, long-term-memory intent) and knows
its two scopes: the user scope follows the user, the server scope is the channel's shared
memory. The *live* scope (same-channel summary, cadence counter) is the server scope in a
guild and the user scope in a DM.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ..intent import has_long_term_intent
from ..model import (
    Message,
    Privacy,
    Reply,
    ScopeKey,
    ScopeMeta,
    ServerSettings,
    check_id,
    check_optional_id,
    check_optional_text,
)
from ..model.errors import InvalidInput
from ..model.fence import WriteFence
from ..model.text import truncate
from ..prompt.context import Context
from . import tool_call as _tool
from .guards import SharedGuard
from .guards import refusal as _tool_refusal
from .recall import build_context

if TYPE_CHECKING:
    from .facade import Memory

__all__ = ["Turn"]

T = TypeVar("T")
_PRIVACY_ORDER = (Privacy.NONE, Privacy.PARTIAL, Privacy.FULL)

# The triggering text is only scanned for intent; nothing longer is useful for that.
_MAX_USER_MESSAGE_CHARS = 20_000
_MAX_NAME_CHARS = 200


class Turn:
    """Create with ``memory.turn(...)``; every argument is keyword-only.

    Only ``user_id`` and ``channel_id`` are required. ``server_id=None`` means a DM.
    """

    def __init__(
        self,
        memory: Memory,
        *,
        user_id: str,
        channel_id: str,
        server_id: str | None = None,
        persona_id: str | None = None,
        persona_lineage_id: str | None = None,
        user_message: str = "",
        user_name: str | None = None,
        bot_name: str = "Assistant",
        server_name: str | None = None,
        channel_name: str | None = None,
        parent_channel_id: str | None = None,
        provider: str | None = None,
        has_tools: bool = True,
        privacy: Privacy = Privacy.NONE,
        locale: str | None = None,
    ) -> None:
        self.memory = memory
        self.user_id = check_id("user_id", user_id)
        self.channel_id = check_id("channel_id", channel_id)
        # Optional arguments are mostly left out: the None test is inline, so leaving one
        # out costs nothing.
        self.server_id = None if server_id is None else check_id("server_id", server_id)
        self.persona_id = None if persona_id is None else check_id("persona_id", persona_id)
        self.persona_lineage_id = (
            None
            if persona_lineage_id is None
            else check_id("persona_lineage_id", persona_lineage_id)
        )
        self.parent_channel_id = (
            None if parent_channel_id is None else check_id("parent_channel_id", parent_channel_id)
        )
        if not isinstance(user_message, str):
            raise InvalidInput("user_message", user_message, "a string")
        self.user_message = (
            user_message
            if len(user_message) <= _MAX_USER_MESSAGE_CHARS
            else user_message[:_MAX_USER_MESSAGE_CHARS]
        )
        self.user_name = check_optional_text("user_name", user_name, _MAX_NAME_CHARS)
        if bot_name != "Assistant":
            if not isinstance(bot_name, str) or not bot_name.strip():
                raise InvalidInput("bot_name", bot_name, "a non-blank string")
            bot_name = check_optional_text("bot_name", bot_name, _MAX_NAME_CHARS) or bot_name
        self.bot_name = bot_name
        self.server_name = check_optional_text("server_name", server_name, _MAX_NAME_CHARS)
        self.channel_name = check_optional_text("channel_name", channel_name, _MAX_NAME_CHARS)
        if provider is not None:
            if not isinstance(provider, str):
                raise InvalidInput("provider", provider, "a provider name or None")
            provider = provider.lower() or None
        self.provider = provider
        if has_tools is not True and has_tools is not False:
            raise InvalidInput("has_tools", has_tools, "True or False")
        self.has_tools = has_tools
        if type(privacy) is not Privacy:
            raise InvalidInput("privacy", privacy, "a shortterm.Privacy value")
        self.privacy = privacy
        if locale is not None and (not isinstance(locale, str) or not locale.strip()):
            raise InvalidInput("locale", locale, "a locale tag such as 'en' or 'pt-BR', or None")
        self.locale = locale
        self.upgraded = False  # one successful upgrade per turn
        self._upgrading = False  # an upgrade of this turn is being written
        self._shared: SharedGuard | None = None  # set when several processes serve the turn
        self._intent: bool | None = None

    # -- scopes ---------------------------------------------------------------------------

    @property
    def is_dm(self) -> bool:
        return self.server_id is None

    def user_key(self, persona_id: str | None = None) -> ScopeKey:
        persona = check_optional_id("persona_id", persona_id)
        return ScopeKey._unchecked("user", self.user_id, self.channel_id, persona)

    def server_key(self, persona_id: str | None = None) -> ScopeKey | None:
        if self.server_id is None:
            return None
        persona = check_optional_id("persona_id", persona_id)
        return ScopeKey._unchecked("server", self.server_id, self.channel_id, persona)

    @property
    def live_key(self) -> ScopeKey:
        """The scope that holds this channel's summary and cadence counter for the persona."""
        if self.server_id is None:
            return ScopeKey._unchecked("user", self.user_id, self.channel_id, self.persona_id)
        return ScopeKey._unchecked("server", self.server_id, self.channel_id, self.persona_id)

    @property
    def settings(self) -> ServerSettings:
        """The server's cached settings (defaults in a DM or when never configured)."""
        return self.memory.known_settings.server(self.server_id)

    def effective_privacy(self) -> Privacy:
        """The stricter of the level passed for this turn and the user's stored choice."""
        stored = self.memory.known_settings.stored_user(self.user_id)
        if stored is None or stored.privacy is Privacy.NONE:
            return self.privacy
        return max(self.privacy, stored.privacy, key=_PRIVACY_ORDER.index)

    def tool_possible(self, settings: ServerSettings | None = None) -> bool:
        """Whether this kind of turn could ever be offered the tool (provider, tools, server
        switch); the per-turn guards come on top. Only such turns advance the counter.
        ``settings``: the turn's server settings, when the caller already has them."""
        if self.provider is not None and self.provider in self.memory.config.tool_less_providers:
            return False
        return self.has_tools and (settings or self.settings).stm_enabled

    @property
    def long_term_intent(self) -> bool:
        """The user explicitly asked for something to be remembered permanently."""
        if self._intent is None:
            self._intent = has_long_term_intent(self.user_message, self.locale)
        return self._intent

    def tool_available(self) -> bool:
        """Whether the upgrade tool (and the cadence nudge) may be offered right now."""
        return _tool_refusal(self) is None

    # -- write path 2: the summary upgrade tool -------------------------------------------

    def tools(self, format: str = "openai") -> list[dict[str, Any]]:
        """The ``update_short_term_memory`` definition in ``format`` ("openai",
        "openai-responses", "anthropic", "gemini", "mcp"), as a one-item list; ``[]`` when
        this turn may not use it."""
        return _tool.tools(self, format)

    async def call_tool(self, name: str, args: object) -> _tool.ToolResult:
        """Run a tool call the model made (``args``: a dict or a JSON string). ``ok`` is true
        only after the update is durable; otherwise ``message`` says why, for the model."""
        with self.memory.cache.operation():
            return await _tool.call_tool(self, name, args)

    async def maintenance_due(self) -> bool:
        """True when the tool is offered and the live counter reached the server's cadence."""
        with self.memory.cache.operation():
            return await _tool.maintenance_due(self)

    def meta(self, lineage: str | None, settings: ServerSettings | None = None) -> ScopeMeta:
        private = False
        if self.server_id is not None:
            settings = settings or self.settings
            private = settings.is_private(self.channel_id, self.parent_channel_id)
        parts = (
            self.server_id,
            self.server_name,
            self.channel_name,
            self.parent_channel_id,
            private,
            lineage,
        )
        return self.memory.scope_meta(parts)

    # -- the read path --------------------------------------------------------------------

    async def context(
        self,
        *,
        max_tokens: int | None = None,
        count_tokens: Callable[[str], int] | None = None,
    ) -> Context:
        """What memory adds to this turn's prompt: the other-channel block, the same-channel
        block and, when the tool is offered and the cadence is reached, the nudge.

        ``max_tokens`` bounds the items and the nudge together (counted by ``count_tokens``,
        by default a conservative estimate): the oldest raw messages go first, distilled
        memory last. A failing durable tier degrades the result to what the hot tier holds
        (counted in ``memory.stats()["degraded_contexts"]``) instead of failing the turn.
        Splice the result into the dialogue with :func:`shortterm.inject`.
        """
        with self.memory.cache.operation():
            return await build_context(self, max_tokens=max_tokens, count_tokens=count_tokens)

    # -- write path 1: passive capture ----------------------------------------------------

    async def capture(
        self,
        history: Sequence[Message] = (),
        replies: Sequence[Reply] = (),
        *,
        stopped: bool = False,
        fence: WriteFence | None = None,
    ) -> None:
        """Keep the recent dialogue of this turn.

        Replaces the messages of the user scope and, in a guild, the server scope with the
        newest ``max_messages`` of ``history + replies``; summaries and categories stay. One
        entry per distinct reply persona. Skipped for stopped turns, turns without replies and
        full-privacy users; full-privacy authors are dropped. Advances the live counter.

        ``fence``: for a surface that builds ``history`` from the stored messages, the
        ``memory.begin_write(user_id)`` it took before reading them, so that a forget landing
        after that read drops this capture. By default the capture takes its own.
        """
        with self.memory.cache.operation():
            await self._capture(history, replies, stopped=stopped, fence=fence)

    async def _capture(
        self,
        history: Sequence[Message],
        replies: Sequence[Reply],
        *,
        stopped: bool,
        fence: WriteFence | None = None,
    ) -> None:
        history = _checked("history", history, Message)
        replies = _checked("replies", replies, Reply)
        memory = self.memory
        # The fence first: the privacy choices read below are those of this position, and
        # any forget after it drops what it covers from this capture, in both tiers.
        if fence is None:
            fence = await memory.begin_write(self.user_id)
        elif type(fence) is not WriteFence:
            raise InvalidInput("fence", fence, "None or what memory.begin_write() returned")
        known, config = memory.known_settings, memory.config
        now = memory.clock()
        if known.due(now, config.settings_refresh_s):
            await memory.refresh_settings()
            now = memory.clock()
        privacy = self.effective_privacy()
        if stopped or not replies or privacy is Privacy.FULL:
            memory.health.count("captures_skipped")
            return
        cap = config.max_message_chars
        kept = self._admitted(history, now, cap)
        admitted = len(kept)
        for r in replies:
            text = r.text
            if text and not text.isspace():
                speaker = r.persona_name or self.bot_name
                kept.append(Message._unchecked("assistant", _cap(text, cap), None, speaker, now))
        if len(kept) == admitted:
            memory.health.count("captures_skipped")  # every reply was blank
            return
        limit = config.max_messages
        dialogue = tuple(kept[-limit:] if len(kept) > limit else kept)
        # The user's personal scope keeps only what they and the bot said: other people's
        # messages never follow this user to another server.
        uid = self.user_id
        own = tuple(
            [m for m in dialogue if (a := m.author_id) is None or a == uid or m.role == "assistant"]
        )
        if len(own) == len(dialogue):
            own = dialogue  # one tuple for both scopes
        personas: dict[str | None, str | None] = {}
        for r in replies:
            pid = r.persona_id if r.persona_id is not None else self.persona_id
            if pid not in personas:
                personas[pid] = r.persona_lineage_id or self.persona_lineage_id
        settings = self.settings
        counts = self.tool_possible(settings) and not self.upgraded
        channel, server = self.channel_id, self.server_id
        for pid, lineage in personas.items():
            meta = self.meta(lineage, settings)
            scopes: list[tuple[ScopeKey, tuple[Message, ...]]] = []
            user_key = ScopeKey._unchecked("user", uid, channel, pid)
            if privacy is not Privacy.PARTIAL:
                scopes.append((user_key, own))
            live = user_key
            if server is not None:
                live = ScopeKey._unchecked("server", server, channel, pid)
                scopes.append((live, dialogue))
            if not scopes:
                continue  # a partial-privacy user in a DM: nothing personal is kept
            # Every persona's write carries the same fence: a forget landing during the first
            # one's write also drops the next ones.
            await memory.write_capture(
                scopes, meta, increment=live if counts else None, fence=fence, now=now
            )
        memory.health.count("captures")

    def _admitted(self, history: Sequence[Message], now: float, cap: int) -> list[Message]:
        """History minus full-privacy authors and blank messages, stamped and capped."""
        full_users = self.memory.known_settings.full_privacy_users
        full = Privacy.FULL
        kept = []
        for m in history:
            if m.privacy is full or (full_users and m.author_id in full_users):
                continue
            content = m.content
            if not content or content.isspace():
                continue
            if m.at is None or len(content) > cap:
                m = Message._unchecked(
                    m.role,
                    _cap(content, cap),
                    m.author_id,
                    m.speaker,
                    now if m.at is None else m.at,
                    m.message_id,
                    m.privacy,
                )
            kept.append(m)
        return kept


def _cap(text: str, cap: int) -> str:
    return text if len(text) <= cap else truncate(text, cap)


def _checked(name: str, items: object, kind: type[T]) -> list[T]:
    if type(items) is list and all(map(isinstance, items, repeat(kind))):
        return cast("list[T]", items)  # the usual call: a list of the right things
    if isinstance(items, str | bytes) or not isinstance(items, Sequence):
        raise InvalidInput(name, items, f"a list of shortterm.{kind.__name__}")
    if not all(map(isinstance, items, repeat(kind))):
        for i, item in enumerate(items):
            if not isinstance(item, kind):
                raise InvalidInput(f"{name}[{i}]", item, f"a shortterm.{kind.__name__}")
    return list(items)
