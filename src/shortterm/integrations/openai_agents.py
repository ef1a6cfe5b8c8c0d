"""shortterm as the memory of an OpenAI Agents SDK agent: a ``Session`` and a function tool.

``pip install 'shortterm[openai-agents]'``. One :class:`ShortTermSession` is one user talking
in one channel (of a server, or a DM) to one persona; pass it to ``Runner.run(...,
session=...)`` (or ``run_sync``, ``run_streamed``) and the SDK reads the prompt's history from
it and hands it each finished item. It keeps the SDK's session contract: the items come back
in the order they were added and in the shape they were added (text parts, function calls
and their outputs, reasoning, whatever the item types), within the window of the newest
``max_messages`` messages that shortterm keeps of a channel.

- :meth:`~ShortTermSession.get_items`: what memory recalls for this turn, as the read path
  renders it (:meth:`Turn.context`: the other channels' block, then this channel's summary or
  notes; quoted, escaped data in ``user`` messages), then this channel's items, oldest first,
  and the cadence nudge (only when the agent carries :meth:`~ShortTermSession.tool`) spliced
  at the server's nudge depth. ``limit`` (or ``session_settings.limit``) counts the channel's
  items; the recalled memory leads them, and ``limit=0`` gives nothing.
- :meth:`~ShortTermSession.add_items`: items are held in the session until the answer that
  ends their turn; then the turn is captured (``Turn.capture(..., append=True)``): each item
  with a user's or the assistant's text is a message of that text (recall in other channels
  renders the text only), carrying in its ``raw`` the SDK's items of it and of the items
  without text that follow it (tool calls and outputs, reasoning). See
  :mod:`.history_items`.
- :meth:`~ShortTermSession.pop_item`: the newest item held for the turn, else the caller's
  newest item in this channel's memory: of a message they wrote, or of the bot's reply to
  one they wrote. Another person's messages, and the bot's replies to them, stay.
- :meth:`~ShortTermSession.clear_session`: forgets the channel, as the Discord cog's
  ``/refresh`` does (``memory.clear_channel``: every user, persona and scope of it).

A session serves one run at a time; in a multi-party chat create one per incoming message,
since the triggering user is part of it. Its work runs on the memory's event loop: called
from another loop (``Runner.run_sync`` in a worker thread), it hands the work over while that
loop runs (see :mod:`.home_loop`).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..memory import rules
from ..memory.turn_args import TurnArgs
from ..model import Entry, Message, Reply, ScopeKey
from ..model.errors import ExtraMissing, InvalidInput
from ..prompt.context import Context
from ..prompt.inject import inject
from ..tool.spec import render
from ..tool.texts import TOOL_NAME
from . import history_items as hi
from .home_loop import HomeLoop
from .openai_agents_items import SURFACE, held_item, items_of, prefixed
from .scope_locks import scope_lock

try:
    from agents import FunctionTool, RunContextWrapper, TResponseInputItem
    from agents.memory.session_settings import SessionSettings, coerce_session_settings
    from agents.tool_context import ToolContext
except ModuleNotFoundError as exc:  # pragma: no cover - the dev extra installs it
    if exc.name and exc.name.split(".")[0] == "agents":
        raise ExtraMissing("openai-agents", "openai-agents") from exc
    raise

if TYPE_CHECKING:
    from ..memory.facade import Memory
    from ..memory.turn import Turn

__all__ = ["ShortTermSession"]

T = TypeVar("T")
_SET_PER_RUN = ("user_message", "has_tools")  # the run's own, not the session's


class ShortTermSession:
    """The Agents SDK ``Session`` protocol over a :class:`shortterm.Memory`.

    Keyword arguments are those of ``memory.turn(...)`` (see ``TurnArgs``), but for the two
    each run sets (``user_message``, ``has_tools``). ``session_id`` defaults to a string naming
    the scope. ``session_settings``: the SDK's ``SessionSettings`` or a dict of its fields
    (checked now, as the SDK's own sessions do). ``max_item_chars``: the most JSON one
    message's items may take (default 4 x the memory's ``max_message_chars``); a message whose
    items take more keeps its text item alone. ``loop``: the event loop the memory serves on,
    when it is not the one running here.
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        memory: Memory,
        *,
        session_id: str | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        max_item_chars: int | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
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
        # TypeError for anything else, or a dict with an unknown field, as SQLiteSession.
        self.session_settings = (
            SessionSettings() if session_settings is None
            else coerce_session_settings(session_settings)
        )  # fmt: skip
        config = memory.config
        if max_item_chars is None:
            max_item_chars = hi.DEFAULT_ITEM_CHARS_PER_MESSAGE_CHARS * config.max_message_chars
        elif isinstance(max_item_chars, bool) or not isinstance(max_item_chars, int):
            raise InvalidInput("max_item_chars", max_item_chars, "a positive integer or None")
        if max_item_chars < 1:
            raise InvalidInput("max_item_chars", max_item_chars, "a positive integer or None")
        self.max_item_chars = max_item_chars
        self._cap = config.max_message_chars
        self._home = HomeLoop("ShortTermSession", loop)
        self._lock = asyncio.Lock()  # one operation at a time, on the memory's loop
        # The items of the run in progress, not captured yet. Items without a turn to end
        # are added from any thread (the SDK may call from a loop of its own); the rest of
        # the session's work runs on the memory's loop, under _lock.
        self._held: list[hi.Held] = []
        self._held_guard = threading.Lock()
        self._turn: Turn | None = None

    # -- the turn of the run in progress ------------------------------------------------

    def _new_turn(self, user_message: str) -> Turn:
        args = self._args.replaced(user_message=user_message, has_tools=self._tool_offered)
        return self.memory.turn_from(args)

    def _current_turn(self) -> Turn:
        turn = self._turn
        if turn is None:
            with self._held_guard:
                said = " ".join(h.text for h in self._held if h.kind == "user" and h.text)
            turn = self._turn = self._new_turn(said)
        return turn

    @property
    def live_key(self) -> ScopeKey:
        """The scope holding this channel's messages, summary and cadence counter."""
        return self._current_turn().live_key

    # -- the Session protocol ------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """Recalled memory first, then the latest ``limit`` items of this channel (by default
        ``session_settings.limit``; all when ``None``), oldest first; the cadence nudge at the
        server's nudge depth. ``limit=0``: nothing."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise InvalidInput("limit", limit, "None or an integer")
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        if limit == 0:
            return []
        return await self._on_home(lambda: self._get(limit))

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Hold the items; the answer that ends a turn captures it (see the module docs)."""
        if isinstance(items, str | bytes) or not isinstance(items, list | tuple):
            raise InvalidInput("items", items, "a list of the SDK's input items (dicts)")
        clock = self.memory.clock
        new = [held_item(item, clock(), hi.new_id(), self._cap) for item in items]
        if not new:
            return
        with self._held_guard:
            self._held.extend(new)
            self._trim_held()
            due = hi.turn_end(self._held) >= 0
        if any(h.kind == "user" for h in new):
            self._turn = None  # a new message: the intent gate reads it again
        if due:
            await self._on_home(self._capture_due)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the caller's newest item: one held for the run in progress, else
        the newest in this channel's memory of a message this user wrote or of the bot's reply
        to one. ``None`` when there is none."""
        return await self._on_home(self._pop)

    async def clear_session(self) -> None:
        """Forget this channel (every user, persona and scope of it), like ``/refresh``."""

        async def clear() -> None:
            async with self._lock:
                with self._held_guard:
                    self._held.clear()
                self._turn = None
                await self.memory.clear_channel(self._args.channel_id)

        await self._on_home(clear)

    def close(self) -> None:
        """Nothing to close: the memory is the caller's (for code written for the SDK's
        sessions, which have a ``close``)."""

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
            async def call() -> str:
                result = await self._current_turn().call_tool(TOOL_NAME, arguments)
                return result.message

            return await self._on_home(call)

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

    # -- on the memory's loop ---------------------------------------------------------------

    async def _on_home(self, work: Callable[[], Awaitable[T]]) -> T:
        return await self._home.run(work)

    async def _get(self, limit: int | None) -> list[TResponseInputItem]:
        async with self._lock:
            turn = self._current_turn()
            ctx = await turn.context()
            dialogue = [*await self._stored_items(turn), *self._held_items()]
            if limit is not None and limit > 0:  # a negative limit is none, as in SQLiteSession
                dialogue = dialogue[-limit:]
            nudge = ctx.nudge if self._tool_offered else None
            if nudge is None:
                # Memory leads. This is what inject() gives at depth -1: the dialogue is ours
                # (no operator message to pass, nothing its checks or copies would change).
                memory: list[TResponseInputItem] = [
                    {"role": item.role, "content": item.text} for item in ctx.items
                ]
                return memory + dialogue  # type: ignore[operator]
            placed = Context(list(ctx.items), nudge, -1, ctx.nudge_depth)
            return inject(dialogue, placed, format="openai-responses")  # type: ignore[return-value]

    async def _stored_items(self, turn: Turn) -> list[dict[str, Any]]:
        seen = turn.live_seen  # read by the context just built: no second read of the tier
        entry = seen[0] if seen is not None else await self.memory.get(turn.live_key)
        if entry is None:
            return []
        out: list[dict[str, Any]] = []
        me = self._args.user_id
        for m in entry.messages:
            items = items_of(m)
            if m.role == "user" and m.speaker and m.author_id is not None and m.author_id != me:
                items = prefixed(items, m.speaker)  # someone else in a multi-party channel
            out.extend(items)
        return out

    def _held_items(self) -> list[dict[str, Any]]:
        with self._held_guard:
            return [json.loads(h.raw) for h in self._held]

    def _trim_held(self) -> None:
        """Held items beyond what a capture keeps go, oldest first (under _held_guard)."""
        texts = self.memory.config.max_messages
        self._held = hi.trimmed(self._held, texts, texts * self.max_item_chars)

    async def _capture_due(self) -> None:
        async with self._lock:
            with self._held_guard:
                end = hi.turn_end(self._held)
                taken = self._held[: end + 1]
            if not taken:
                return  # captured meanwhile
            turn = self._current_turn()
            history, reply = self._turn_messages(taken)
            async with scope_lock(self.memory, turn.live_key):  # a pop of this process waits
                await turn.capture(history=history, replies=[reply], append=True)
            gone = {h.message_id for h in taken}
            with self._held_guard:
                self._held = [h for h in self._held if h.message_id not in gone]
            self._turn = None  # the next run is a new turn, with its own guards

    def _turn_messages(self, taken: list[hi.Held]) -> tuple[list[Message], Reply]:
        """The captured turn: every text item's message (with its riders) in order, the last
        (the answer) as the reply."""
        args, cap = self._args, self.max_item_chars
        history: list[Message] = []
        *said, answer = hi.groups(taken)
        for group in said:
            (own,) = (h for h in group if h.role is not None)
            raw = hi.group_raw(SURFACE, group, cap)
            if own.role == "user":
                history.append(
                    Message(
                        "user", own.text, author_id=args.user_id, speaker=args.user_name,
                        at=own.at, message_id=own.message_id, raw=raw,
                    )
                )  # fmt: skip
            else:
                history.append(
                    Message(
                        "assistant", own.text, speaker=args.bot_name, at=own.at,
                        message_id=own.message_id, raw=raw,
                    )
                )  # fmt: skip
        (own,) = (h for h in answer if h.role is not None)
        raw = hi.group_raw(SURFACE, answer, cap)
        return history, Reply(own.text, persona_id=args.persona_id, raw=raw)

    async def _pop(self) -> TResponseInputItem | None:
        async with self._lock:
            with self._held_guard:
                held = self._held.pop() if self._held else None
            if held is not None:
                if held.kind == "user":
                    self._turn = None
                return json.loads(held.raw)  # type: ignore[no-any-return]
            return await self._pop_stored()

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
            personal_key = turn.user_key(turn.persona_id)
            personal = await self.memory.get(personal_key) if personal_key != live else None
            message = entry.messages[at]
            items = items_of(message)
            popped = items.pop()
            rest = self._rest(message, items)
            snap = turn.snapshot()
            if rest is None:
                plan = rules.pop_plan(snap, entry, at, personal)
            else:
                plan = _replaced_plan(snap, entry, at, personal, rest)
            await self.memory.write(plan, fence=fence)
        if rest is None and items:
            # The message's text went, and items before it stay: they are the newest now.
            now = self.memory.clock()
            with self._held_guard:
                self._held = [
                    held_item(i, now, hi.new_id(), self._cap) for i in items
                ] + self._held  # fmt: skip
        return popped  # type: ignore[return-value]

    def _rest(self, message: Message, items: list[dict[str, Any]]) -> Message | None:
        """``message`` holding ``items`` (what is left after a pop), or ``None`` when its
        text item is gone with the pop."""
        now = self.memory.clock()
        held = [held_item(i, now, "_", self._cap) for i in items]
        if not any(h.role is not None for h in held):
            return None
        raw = hi.group_raw(SURFACE, held, max(self.max_item_chars, len(message.raw or "")))
        return Message(
            message.role, message.content, author_id=message.author_id,
            speaker=message.speaker, at=message.at, message_id=message.message_id,
            privacy=message.privacy, raw=raw,
        )  # fmt: skip


def _replaced_plan(
    snap: rules.Snapshot,
    live: Entry,
    at: int,
    personal: Entry | None,
    new: Message,
) -> rules.CapturePlan:
    """As :func:`rules.pop_plan`, but the message at ``at`` (and its newest copy in the
    user's own scope) is replaced by ``new`` instead of removed."""
    stored = live.messages
    old = stored[at]
    scopes = [(live.key, (*stored[:at], new, *stored[at + 1 :]))]
    if personal is not None:
        kept = personal.messages
        there = next((i for i in reversed(range(len(kept))) if kept[i] == old), None)
        if there is not None:
            scopes.append((personal.key, (*kept[:there], new, *kept[there + 1 :])))
    meta = rules.scope_meta(rules.meta_parts(snap, snap.args.persona_lineage_id))
    return rules.CapturePlan(scopes, meta, None)


def _describe(key: ScopeKey) -> str:
    return json.dumps(
        ["shortterm", key.kind, key.owner_id, key.channel_id, key.persona_id],
        separators=(",", ":"),
    )
