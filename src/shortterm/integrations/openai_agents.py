"""shortterm as the memory of an OpenAI Agents SDK agent: a ``Session`` and a function tool.

``pip install 'shortterm[openai-agents]'``. One :class:`ShortTermSession` is one user talking
in one channel (of a server, or a DM) to one persona; pass it to ``Runner.run(...,
session=...)`` and the SDK reads the prompt's history from it and hands it each finished item:

- :meth:`~ShortTermSession.get_items`: what memory recalls for this turn, as the read path
  renders it (:meth:`Turn.context`: the other channels' block, then this channel's summary or
  notes; quoted, escaped data in ``user`` messages), then this channel's recent messages as
  ``user`` / ``assistant`` messages, and the cadence nudge (only when the agent carries
  :meth:`~ShortTermSession.tool`) spliced at the server's nudge depth. ``limit`` counts the
  channel's messages; the recalled memory always leads.
- :meth:`~ShortTermSession.add_items`: user messages are held until the turn's answer arrives;
  a batch that ends with an assistant message captures the turn (``Turn.capture(...,
  append=True)``: the user's messages, each with a message id, and the assistant's text are
  added after the channel's stored messages inside the hot tier's atomic write). Tool calls, tool
  outputs, reasoning and operator (system / developer) items are not kept: they are the
  run's machinery, not the channel's dialogue, and the memory tool keeps what is worth
  keeping of them.
- :meth:`~ShortTermSession.pop_item`: the newest message held for the turn, else the caller's
  newest message in this channel's memory: one they wrote, or a reply of the bot to one they
  wrote (a reply belongs to the user message before it). Another person's messages, and the
  bot's replies to them, stay. Removed from the caller's own scope too.
- :meth:`~ShortTermSession.clear_session`: forgets the channel, as the Discord cog's
  ``/refresh`` does (``memory.clear_channel``: every user, persona and scope of it).

A session serves one run at a time (its methods take a lock); in a multi-party chat create
one per incoming message, since the triggering user is part of it.

Two users' turns in one channel saved at the same moment are both kept, in one process or
in several sharing a hot tier: a capture appends inside the tier's atomic write rather than
writing back a list it read. A pop rewrites the list it read, so in one process the captures
and pops of a channel take turns (see docs/openai-agents.md, "Several people in one channel").
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..memory import rules
from ..memory.turn_args import TurnArgs
from ..model import Message, Reply, ScopeKey
from ..model.errors import ExtraMissing, InvalidInput
from ..prompt.context import Context
from ..prompt.inject import inject
from ..tool.spec import render
from ..tool.texts import TOOL_NAME
from .scope_locks import scope_lock

try:
    from agents import FunctionTool, RunContextWrapper, TResponseInputItem
    from agents.tool_context import ToolContext
except ModuleNotFoundError as exc:  # pragma: no cover - the dev extra installs it
    if exc.name and exc.name.split(".")[0] == "agents":
        raise ExtraMissing("openai-agents", "openai-agents") from exc
    raise

if TYPE_CHECKING:
    from agents.memory import SessionSettings

    from ..memory.facade import Memory
    from ..memory.turn import Turn

__all__ = ["ShortTermSession"]

_SET_PER_RUN = ("user_message", "has_tools")  # the run's own, not the session's


class ShortTermSession:
    """The Agents SDK ``Session`` protocol over a :class:`shortterm.Memory`.

    Keyword arguments are those of ``memory.turn(...)`` (see ``TurnArgs``), but for the two
    each run sets (``user_message``, ``has_tools``). ``session_id`` defaults to a string naming
    the scope. ``session_settings`` is the SDK's (e.g. ``SessionSettings(limit=6)``).
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        memory: Memory,
        *,
        session_id: str | None = None,
        session_settings: SessionSettings | None = None,
        **turn: Any,
    ) -> None:
        self.memory = memory
        for name in _SET_PER_RUN:
            if name in turn:
                raise TypeError(f"ShortTermSession() sets {name} on each run; leave it out")
        self._args = TurnArgs(**turn)  # checks every argument now, not at the first run
        self._tool_offered = False
        probe = self._new_turn("")
        if session_id is not None and (not isinstance(session_id, str) or not session_id):
            raise InvalidInput("session_id", session_id, "a non-empty string or None")
        self.session_id = session_id or _describe(probe.live_key)
        self.session_settings = session_settings
        self._lock = asyncio.Lock()
        self._turn: Turn | None = None
        # The run in progress: what the user said, and what the assistant said before its
        # final answer (text next to a tool call).
        self._said: list[Message] = []
        self._replies: list[str] = []

    # -- the turn of the run in progress ------------------------------------------------

    def _new_turn(self, user_message: str) -> Turn:
        args = self._args.replaced(user_message=user_message, has_tools=self._tool_offered)
        return self.memory.turn_from(args)

    def _current_turn(self) -> Turn:
        if self._turn is None:
            self._turn = self._new_turn(" ".join(m.content for m in self._said))
        return self._turn

    @property
    def live_key(self) -> ScopeKey:
        """The scope holding this channel's messages, summary and cadence counter."""
        return self._current_turn().live_key

    # -- the Session protocol ------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """Recalled memory first, then the latest ``limit`` messages of this channel (all
        when ``None``), oldest first; the cadence nudge at the server's nudge depth."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise InvalidInput("limit", limit, "None or a non-negative integer")
        async with self._lock:
            turn = self._current_turn()
            ctx = await turn.context()
            dialogue = [*await self._stored(turn), *self._said]
            if limit is not None:
                dialogue = dialogue[-limit:] if limit > 0 else []
            items = [self._as_item(m) for m in dialogue]
            nudge = ctx.nudge if self._tool_offered else None
            if nudge is None:
                # Memory leads. This is what inject() gives at depth -1: the dialogue is our
                # own fresh user / assistant dicts (no operator message to pass, nothing its
                # checks or copies would change), so the top is index 0.
                memory: list[TResponseInputItem] = [
                    {"role": item.role, "content": item.text} for item in ctx.items
                ]
                return memory + items
            # Memory leads (-1: anchored at the top, after the agent's instructions).
            placed = Context(list(ctx.items), nudge, -1, ctx.nudge_depth)
            return inject(items, placed, format="openai-responses")  # type: ignore[return-value]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Hold the user's messages; a batch ending with the assistant's answer captures the
        turn (tool items, reasoning and operator messages are not kept)."""
        async with self._lock:
            answered = False
            for item in items:
                role, text = _dialogue_text(item)
                if role is None:
                    if _is_tool_item(item):
                        answered = False  # the run goes on after a tool call
                    continue
                if role == "user":
                    self._said.append(
                        Message(
                            "user",
                            text,
                            author_id=self._args.user_id,
                            speaker=self._args.user_name,
                            at=self.memory.clock(),
                            # An identity, so a retried capture does not add it twice.
                            message_id=uuid.uuid4().hex,
                        )
                    )
                    self._turn = None  # a new message: the intent gate reads it again
                    answered = False
                else:
                    self._replies.append(text)
                    answered = True
            if answered:
                await self._capture()

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the caller's newest message: one held for the run in progress,
        else the newest in this channel's memory that this user wrote or that the bot wrote
        in reply to them. ``None`` when there is none."""
        async with self._lock:
            if self._replies:
                return self._as_item(self._reply(self._replies.pop()))
            if self._said:
                self._turn = None
                return self._as_item(self._said.pop())
            return await self._pop_stored()

    async def clear_session(self) -> None:
        """Forget this channel (every user, persona and scope of it), like ``/refresh``."""
        async with self._lock:
            self._said.clear()
            self._replies.clear()
            self._turn = None
            await self.memory.clear_channel(self._args.channel_id)

    # -- the memory tool ------------------------------------------------------------------

    def tool(self) -> FunctionTool:
        """``update_short_term_memory`` as an SDK function tool, for ``Agent(tools=[...])``.

        Its schema follows this server's settings as the memory knows them now (category mode
        when the server configured categories). A call goes through :meth:`Turn.call_tool` of
        the run in progress, so the guards hold: one upgrade per turn, nothing on a user's
        "remember this forever" message (the tool is hidden then), nothing for a user who
        keeps nothing personal. Creating it also lets :meth:`get_items` add the nudge.
        """
        self._tool_offered = True
        self._turn = None
        turn = self._current_turn()
        spec = render(turn.tool_spec(), "openai-responses")

        async def invoke(_ctx: ToolContext[Any], arguments: str) -> str:
            result = await self._current_turn().call_tool(TOOL_NAME, arguments)
            return result.message

        def enabled(_ctx: RunContextWrapper[Any], _agent: object) -> bool:
            return self._current_turn().tool_available()

        return FunctionTool(
            name=TOOL_NAME,
            description=spec["description"],
            params_json_schema=spec["parameters"],
            on_invoke_tool=invoke,
            strict_json_schema=True,
            is_enabled=enabled,
        )

    # -- helpers ----------------------------------------------------------------------------

    def _reply(self, text: str) -> Message:
        return Message("assistant", text, speaker=self._args.bot_name)

    def _as_item(self, message: Message) -> TResponseInputItem:
        content = message.content
        others = message.author_id is not None and message.author_id != self._args.user_id
        if message.role == "user" and others and message.speaker:
            content = f"{message.speaker}: {content}"  # someone else in a multi-party channel
        return {"role": message.role, "content": content}

    async def _stored(self, turn: Turn) -> list[Message]:
        seen = turn.live_seen  # read by the context just built: no second read of the tier
        entry = seen[0] if seen is not None else await self.memory.get(turn.live_key)
        return list(entry.messages) if entry is not None else []

    async def _capture(self) -> None:
        turn = self._current_turn()
        replies = [Reply(text, persona_id=self._args.persona_id) for text in self._replies]
        async with scope_lock(self.memory, turn.live_key):  # a pop of this process waits
            await turn.capture(history=self._said, replies=replies, append=True)
        self._said.clear()
        self._replies.clear()
        self._turn = None  # the next run is a new turn, with its own guards

    async def _pop_stored(self) -> TResponseInputItem | None:
        turn = self._current_turn()
        live = turn.live_key
        async with scope_lock(self.memory, live):
            fence = await self.memory.begin_write(turn.user_id)  # before the read, as in capture
            entry = await self.memory.get(live)
            if entry is None:
                return None
            at = rules.popped_index(entry, self._args.user_id)
            if at is None:
                return None
            personal = turn.user_key(turn.persona_id)
            mine = await self.memory.get(personal) if personal != live else None
            await self.memory.write(rules.pop_plan(turn.snapshot(), entry, at, mine), fence=fence)
        return self._as_item(entry.messages[at])


def _describe(key: ScopeKey) -> str:
    return json.dumps(
        ["shortterm", key.kind, key.owner_id, key.channel_id, key.persona_id],
        separators=(",", ":"),
    )


def _is_tool_item(item: Mapping[str, Any]) -> bool:
    kind = item.get("type")
    return isinstance(kind, str) and kind != "message" and kind != "reasoning"


def _dialogue_text(item: Mapping[str, Any]) -> tuple[str | None, str]:
    """``("user" | "assistant", text)`` for a message item with text, ``(None, "")`` for
    anything else (tool items, reasoning, operator messages, images only)."""
    if not isinstance(item, Mapping):
        raise InvalidInput("items", item, "a list of Responses input items (dicts)")
    kind = item.get("type", "message")
    role = item.get("role")
    if kind != "message" or role not in ("user", "assistant"):
        return None, ""
    text = _text_of(item.get("content"))
    return (role, text) if text.strip() else (None, "")


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, Sequence):
        return ""
    parts = []
    for part in content:
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            parts.append(part["refusal"])
    return "\n".join(parts)
