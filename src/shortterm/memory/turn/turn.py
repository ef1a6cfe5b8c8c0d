"""A turn: one bot generation in one channel for one persona, triggered by one user.

A turn is its arguments (:class:`TurnArgs`) and its guard (one upgrade per turn, long-term
intent). Each operation takes a snapshot of the turn under the settings known now, plans with
the pure rules (rules.py) and hands the plan to the engine: the turn never touches a tier, and
the engine never calls back into the turn. The user scope follows the user, the server scope is
the channel's shared memory; the *live* scope (same-channel summary, cadence counter) is the
server scope in a guild and the user scope in a DM.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ...model import (
    Message,
    Privacy,
    Reply,
    ScopeKey,
    ScopeMeta,
    ServerSettings,
    check_optional_id,
)
from ...model.errors import InvalidInput
from ...model.fence import WriteFence
from ...prompt.context import Context
from ...tool.spec import ToolSpec
from .. import rules
from ..engine.health import watching
from ..forwarded import Forwarded
from ..turn_args import TurnArgs
from . import tool_call as _tool
from .guards import SharedGuard, TurnGuard
from .recall import build_context

if TYPE_CHECKING:
    from ...model import Entry
    from ..engine.engine import Engine

__all__ = ["Captured", "Turn"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Captured:
    """What :meth:`Turn.capture` did. ``degraded``: the durable tier failed, so the messages
    were kept in the hot tier only (they live until its TTL or a restart, and the turn
    counter's step was lost); ``reason`` is the durable tier's error. Not an exception: the
    turn was captured, as far as it could be."""

    degraded: bool = False
    reason: str | None = None


class Turn:
    """Create with ``memory.turn(...)`` (every argument keyword-only, see :class:`TurnArgs`),
    or rebuild one kept elsewhere with ``memory.turn_from(args, ...)``.

    ``shared``: the guard of a turn several processes serve (see :class:`SharedGuard`);
    ``upgraded``: the turn was upgraded already.
    """

    def __init__(
        self,
        engine: Engine,
        args: TurnArgs,
        *,
        upgraded: bool = False,
        shared: SharedGuard | None = None,
    ) -> None:
        self._engine = engine
        self.args = args
        self.guard = TurnGuard(args, upgraded=upgraded, shared=shared)
        self._live_seen: tuple[Entry | None] | None = None

    # -- what the turn is about (its arguments) -------------------------------------------

    user_id = Forwarded[str]("args")
    channel_id = Forwarded[str]("args")
    server_id = Forwarded[str | None]("args")
    persona_id = Forwarded[str | None]("args")
    persona_lineage_id = Forwarded[str | None]("args")
    user_message = Forwarded[str]("args")
    user_name = Forwarded[str | None]("args")
    bot_name = Forwarded[str]("args")
    server_name = Forwarded[str | None]("args")
    channel_name = Forwarded[str | None]("args")
    parent_channel_id = Forwarded[str | None]("args")
    provider = Forwarded[str | None]("args")
    has_tools = Forwarded[bool]("args")
    privacy = Forwarded[Privacy]("args")
    locale = Forwarded[str | None]("args")

    @property
    def upgraded(self) -> bool:
        """Whether this turn's upgrade landed (or may have): one per turn."""
        return self.guard.upgraded

    @upgraded.setter
    def upgraded(self, value: bool) -> None:
        self.guard.upgraded = value

    def snapshot(self) -> rules.Snapshot:
        """The turn under the settings known now."""
        return self._engine.snapshot(self.args)

    # -- scopes ---------------------------------------------------------------------------

    @property
    def is_dm(self) -> bool:
        return self.args.server_id is None

    def user_key(self, persona_id: str | None = None) -> ScopeKey:
        persona = check_optional_id("persona_id", persona_id)
        return ScopeKey._unchecked("user", self.args.user_id, self.args.channel_id, persona)

    def server_key(self, persona_id: str | None = None) -> ScopeKey | None:
        args = self.args
        if args.server_id is None:
            return None
        persona = check_optional_id("persona_id", persona_id)
        return ScopeKey._unchecked("server", args.server_id, args.channel_id, persona)

    @property
    def live_key(self) -> ScopeKey:
        """The scope that holds this channel's summary and cadence counter for the persona."""
        return rules.live_scope(self.snapshot(), self.args.persona_id)

    @property
    def settings(self) -> ServerSettings:
        """The server's cached settings (defaults in a DM or when never configured)."""
        return self.snapshot().settings

    def effective_privacy(self) -> Privacy:
        """The stricter of the level passed for this turn and the user's stored choice."""
        return self.snapshot().privacy

    def tool_possible(self, settings: ServerSettings | None = None) -> bool:
        """Whether this kind of turn could ever be offered the tool (provider, tools, server
        switch); the per-turn guards come on top. Only such turns advance the counter.
        ``settings``: the turn's server settings, when the caller already has them."""
        snap = self.snapshot()
        if settings is not None:
            snap = snap._replace(settings=settings)
        return rules.tool_possible(snap)

    @property
    def long_term_intent(self) -> bool:
        """The user explicitly asked for something to be remembered permanently."""
        return self.guard.long_term_intent()

    def tool_available(self) -> bool:
        """Whether the upgrade tool (and the cadence nudge) may be offered right now."""
        return self.guard.refusal(self.snapshot()) is None

    def meta(self, lineage: str | None, settings: ServerSettings | None = None) -> ScopeMeta:
        """Where a scope of this turn is written (for a surface that writes one itself)."""
        snap = self.snapshot()
        if settings is not None:
            snap = snap._replace(settings=settings)
        return rules.scope_meta(rules.meta_parts(snap, lineage))

    # -- write path 2: the summary upgrade tool -------------------------------------------

    def tools(self, format: str = "openai") -> list[dict[str, Any]]:
        """The ``update_short_term_memory`` definition in ``format`` ("openai",
        "openai-responses", "anthropic", "gemini", "mcp"), as a one-item list; ``[]`` when
        this turn may not use it."""
        return _tool.tools(self._engine, self.args, self.guard, format)

    def tool_spec(self) -> ToolSpec:
        """The tool's definition for this turn, whether or not it may be offered now."""
        return _tool.spec(self.snapshot())

    async def call_tool(self, name: str, args: object) -> _tool.ToolResult:
        """Run a tool call the model made (``args``: a dict or a JSON string). ``ok`` is true
        only after the update is durable; otherwise ``message`` says why, for the model."""
        engine = self._engine
        with engine.operation():
            return await _tool.call_tool(engine, self.args, self.guard, name, args)

    async def maintenance_due(self) -> bool:
        """True when the tool is offered and the live counter reached the server's cadence."""
        engine = self._engine
        with engine.operation():
            return await _tool.maintenance_due(engine, self.args, self.guard)

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
        engine = self._engine
        with engine.operation():
            ctx, self._live_seen = await build_context(
                engine, self.args, self.guard, max_tokens=max_tokens, count_tokens=count_tokens
            )
        return ctx

    @property
    def live_seen(self) -> tuple[Entry | None] | None:
        """What the channel's live scope (:attr:`live_key`) held when :meth:`context` last
        read it, in a 1-tuple (its entry, or ``None`` for nothing live); ``None`` when no
        context was built, or the turn may not read it. A surface that shows the channel's
        messages beside the context reads them here instead of asking the tier again."""
        return self._live_seen

    # -- write path 1: passive capture ----------------------------------------------------

    async def capture(
        self,
        history: Sequence[Message] = (),
        replies: Sequence[Reply] = (),
        *,
        stopped: bool = False,
        fence: WriteFence | None = None,
        append: bool = False,
    ) -> Captured:
        """Keep the recent dialogue of this turn.

        Replaces the messages of the user scope and, in a guild, the server scope with the
        newest ``max_messages`` of ``history + replies``; summaries and categories stay.
        With ``append``, ``history`` is only this turn's new messages and they are added
        after the stored ones instead (a stored message with the same ``message_id`` is
        replaced), the newest ``max_messages`` kept, inside the hot tier's atomic write: turns
        captured at the same moment by several processes are all kept. For a surface that
        knows only what is new (the Agents SDK and LangChain adapters); a chat platform's
        recent history (the Discord path) is a replacing capture. One
        entry per distinct reply persona. Skipped for stopped turns, turns without replies and
        full-privacy users; full-privacy authors are dropped. Advances the live counter.

        ``fence``: for a surface that builds ``history`` from the stored messages, the
        ``memory.begin_write(user_id)`` it took before reading them, so that a forget landing
        after that read drops this capture. By default the capture takes its own.

        Returns :class:`Captured`: ``degraded`` when the durable tier failed and the messages
        were kept in the hot tier only (``memory.stats()`` counts it as well).
        """
        history = _checked("history", history, Message)
        replies = _checked("replies", replies, Reply)
        if fence is not None and type(fence) is not WriteFence:
            raise InvalidInput("fence", fence, "None or what memory.begin_write() returned")
        if type(append) is not bool:
            raise InvalidInput("append", append, "True or False")
        engine = self._engine
        with engine.operation(), watching() as seen:
            await engine.capture(
                self.args,
                history,
                replies,
                stopped=stopped,
                upgraded=self.guard.upgraded,
                fence=fence,
                append=append,
            )
        return Captured(seen.degraded, seen.reason if seen.degraded else None)


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
