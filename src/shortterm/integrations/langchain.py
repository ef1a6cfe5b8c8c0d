"""LangChain: shortterm as a chat message history, and its tool as a LangChain tool.

::

    from shortterm.integrations.langchain import ShortTermChatHistory

    history = ShortTermChatHistory(memory, user_id="111", channel_id="222", server_id="333")
    chain = RunnableWithMessageHistory(prompt | model, lambda session_id: history, ...)

Needs ``pip install 'shortterm[langchain]'`` (langchain-core ≥ 0.3).

**What the history holds** (:meth:`ShortTermChatHistory.aget_messages`): first, when memory has
anything to add, one ``SystemMessage`` with what the read path renders for this turn (the
other channels' block, this channel's summary or notes, and the nudge when one is due), then
this channel's messages as they were added (another person's message in a server carries their
name as a ``name: `` prefix), then those added since the last answer.

**What adding does** (:meth:`ShortTermChatHistory.aadd_messages`): messages are held until
the AI answer that ends their turn (one with text and no tool call, followed by nothing or by
a human message); then the turn is captured. Each ``HumanMessage`` or ``AIMessage`` with text
is a message of that text (all that recall in other channels renders), carrying in its
``raw`` LangChain's own serialization of it and of the messages without text that follow it
(an ``AIMessage`` that only calls tools, a ``ToolMessage``, a ``SystemMessage``), so they come
back in the order and shape they were added, within the window of the newest
``max_messages`` messages (see :mod:`.history_items`). Each captured turn starts a new
:class:`~shortterm.Turn`, so the one-update-per-turn guard of the tool holds per answer.

**Several people in one channel.** A capture adds the turn after the channel's stored
messages inside the hot tier's atomic write (``Turn.capture(..., append=True)``), each human
message with a message id: two users' turns saved at the same moment, by one process or by
several sharing a hot tier, are both kept.

**Clearing** (:meth:`ShortTermChatHistory.aclear`) forgets this channel like the Discord cog's
``/refresh``: every user, persona and scope of it, in both tiers. What other channels remember
still comes back as the ``SystemMessage``.

**Sync methods.** shortterm is async and a :class:`~shortterm.Memory` belongs to the event loop
it was opened on. ``messages``, ``add_messages`` and ``clear`` run the async method on that
loop: from another thread while it runs (``run_coroutine_threadsafe``), or directly when it is
idle (an ``asyncio.Runner``'s loop). Pass it as ``loop=``; by default it is the loop running
where the history was created. Called inside a running loop, they raise
:class:`SyncInsideLoop`: use the ``a…`` methods (``ainvoke``) there.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..memory.turn_args import TurnArgs
from ..model import Message, Reply
from ..model.errors import ExtraMissing, InvalidInput, ShortTermError
from ..tool import TOOL_NAME, render
from . import history_items as hi
from .langchain_items import SURFACE, held_message, messages_of, prefixed
from .scope_locks import scope_lock

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import BaseMessage, SystemMessage, messages_from_dict
    from langchain_core.tools import BaseTool, StructuredTool
except ModuleNotFoundError as exc:
    if exc.name and exc.name.split(".")[0] == "langchain_core":
        raise ExtraMissing("langchain", "langchain-core") from exc
    raise

if TYPE_CHECKING:
    from ..memory.facade import Memory
    from ..memory.turn import Turn

__all__ = ["ShortTermChatHistory", "SyncInsideLoop", "memory_tool"]

T = TypeVar("T")

SYNC_TIMEOUT_S = 30.0  # a sync call waits this long for the memory's loop
_NAME = "ShortTermChatHistory"


class SyncInsideLoop(ShortTermError, RuntimeError):
    """A sync method of the history was called on a thread whose event loop is running."""

    def __init__(self, what: str, instead: str) -> None:
        super().__init__(
            f"{what} was called inside a running event loop, where it would block the loop "
            f"that serves the memory; use `await {instead}` instead (with "
            "RunnableWithMessageHistory: `await chain.ainvoke(...)`)"
        )


class ShortTermChatHistory(BaseChatMessageHistory):
    """One user's conversation in one channel, as LangChain chat history.

    The keyword arguments other than those below are those of ``memory.turn(...)`` (see
    ``TurnArgs``: ``user_id`` and ``channel_id`` required, ``server_id=None`` a DM), used for
    every turn; pass ``has_tools=False`` when the model is not given :meth:`tools`, so no
    nudge names it.
    ``max_tokens`` bounds what the read path adds (see :meth:`shortterm.Turn.context`).
    ``max_item_chars``: the most JSON one message's LangChain messages may take (default 4 x
    the memory's ``max_message_chars``); a message whose group takes more keeps itself alone,
    or its text only.
    """

    def __init__(
        self,
        memory: Memory,
        *,
        max_tokens: int | None = None,
        max_item_chars: int | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        sync_timeout_s: float = SYNC_TIMEOUT_S,
        **turn: Any,
    ) -> None:
        super().__init__()
        self.memory = memory
        self._args = TurnArgs(**turn)  # validates every argument now
        self.turn: Turn = memory.turn_from(self._args)
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            raise InvalidInput("max_tokens", max_tokens, "a positive integer or None")
        self.max_tokens = max_tokens
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
        self.loop = loop
        if (
            isinstance(sync_timeout_s, bool)
            or not isinstance(sync_timeout_s, int | float)
            or not sync_timeout_s > 0
        ):
            raise InvalidInput("sync_timeout_s", sync_timeout_s, "a positive number of seconds")
        self.sync_timeout_s = sync_timeout_s
        config = memory.config
        if max_item_chars is None:
            max_item_chars = hi.DEFAULT_ITEM_CHARS_PER_MESSAGE_CHARS * config.max_message_chars
        elif (
            isinstance(max_item_chars, bool)
            or not isinstance(max_item_chars, int)
            or max_item_chars < 1
        ):
            raise InvalidInput("max_item_chars", max_item_chars, "a positive integer or None")
        self.max_item_chars = max_item_chars
        self._cap = config.max_message_chars
        self._held: list[hi.Held] = []  # added since the last answer

    # -- async: the native methods ---------------------------------------------------------

    async def aget_messages(self) -> list[BaseMessage]:
        """The recalled memory as one ``SystemMessage`` (when there is any), this channel's
        messages, then those added since the last answer."""
        turn = self.turn
        context = await turn.context(max_tokens=self.max_tokens)
        out: list[BaseMessage] = []
        parts = [item.text for item in context.items]
        if context.nudge is not None:
            parts.append(context.nudge.text)
        if parts:
            out.append(SystemMessage(content="\n\n".join(parts)))
        seen = turn.live_seen  # read by the context just built: no second read of the tier
        entry = seen[0] if seen is not None else await self.memory.get(turn.live_key)
        if entry is not None:
            me = turn.user_id
            for m in entry.messages:
                said = messages_of(m)
                if m.role == "user" and m.speaker and m.author_id not in (None, me):
                    said = prefixed(said, m.speaker)  # someone else in a multi-party channel
                out.extend(said)
        if self._held:
            out.extend(messages_from_dict([json.loads(h.raw) for h in self._held]))
        return out

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Hold the messages; the answer that ends a turn captures it (see the module
        docs)."""
        clock = self.memory.clock
        new = [
            held_message(m, clock(), hi.new_id(), self._cap) for m in _checked_messages(messages)
        ]
        held = [*self._held, *new]
        limit = self.memory.config.max_messages
        held = hi.trimmed(held, limit, limit * self.max_item_chars)
        end = hi.turn_end(held)
        self._held = held
        if end >= 0:
            await self._capture(held[: end + 1])
            self._held = held[end + 1 :]

    async def _capture(self, taken: list[hi.Held]) -> None:
        turn, cap = self.turn, self.max_item_chars
        history: list[Message] = []
        *said, answer = hi.groups(taken)
        for group in said:
            (own,) = (h for h in group if h.role is not None)
            raw = hi.group_raw(SURFACE, group, cap)
            if own.role == "user":
                history.append(
                    Message(
                        "user", own.text, author_id=turn.user_id,
                        speaker=own.speaker or turn.user_name, at=own.at,
                        message_id=own.message_id, raw=raw,
                    )
                )  # fmt: skip
            else:  # an earlier answer of the same turn
                history.append(
                    Message(
                        "assistant", own.text, speaker=turn.bot_name, at=own.at,
                        message_id=own.message_id, raw=raw,
                    )
                )  # fmt: skip
        (own,) = (h for h in answer if h.role is not None)
        reply = Reply(own.text, raw=hi.group_raw(SURFACE, answer, cap))
        # An Agents SDK session's pop of this channel in this process waits for it (it writes
        # back the list it read).
        async with scope_lock(self.memory, turn.live_key):
            await turn.capture(history, [reply], append=True)
        self.turn = self.memory.turn_from(self._args)  # the next answer is a new turn

    async def aclear(self) -> None:
        """Forget this channel, like ``/refresh``: every user, persona and scope of it."""
        await self.memory.clear_channel(self.turn.channel_id)
        self._held.clear()
        self.turn = self.memory.turn_from(self._args)

    # -- sync: the same, on the memory's loop ------------------------------------------------

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        return self._sync(f"{_NAME}.messages", "history.aget_messages()", self.aget_messages())

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        coro = self.aadd_messages(messages)
        self._sync(f"{_NAME}.add_messages", "history.aadd_messages(...)", coro)

    def clear(self) -> None:
        self._sync(f"{_NAME}.clear", "history.aclear()", self.aclear())

    def _sync(self, what: str, instead: str, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the memory's loop from sync code; ``what`` and ``instead`` name the
        call and its async form for the errors."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            coro.close()
            raise SyncInsideLoop(what, instead)
        loop = self.loop
        if loop is None or loop.is_closed():
            coro.close()
            raise RuntimeError(
                f"{what} needs the event loop the memory was opened on: "
                "pass loop=... (a loop running in another thread, or an idle asyncio.Runner's "
                "loop), or use the async methods"
            )
        if loop.is_running():
            future = asyncio.run_coroutine_threadsafe(coro, loop)
            try:
                return future.result(timeout=self.sync_timeout_s)
            except TimeoutError:
                future.cancel()  # the caller gave up waiting: stop rather than run on unseen
                raise
        return loop.run_until_complete(coro)

    # -- the tool ------------------------------------------------------------------------------

    def tools(self) -> list[BaseTool]:
        """``[update_short_term_memory]`` as a LangChain tool for the turn in progress, or
        ``[]`` when this turn may not use it (as :meth:`shortterm.Turn.tools`)."""
        return [memory_tool(self)] if self.turn.tool_available() else []


def memory_tool(history: ShortTermChatHistory) -> StructuredTool:
    """``update_short_term_memory`` as a LangChain tool: the schema the turn's server settings
    give (summary or categories), every call through :meth:`shortterm.Turn.call_tool` of the
    history's turn in progress, so the guards, checks and the durable write are shortterm's.
    Its result is the message for the model; a refused call says why."""
    spec = render(history.turn.tool_spec(), "mcp")

    async def update(**arguments: Any) -> str:
        result = await history.turn.call_tool(TOOL_NAME, arguments)
        return result.message

    def update_sync(**arguments: Any) -> str:
        call = history.turn.call_tool(TOOL_NAME, arguments)
        return history._sync(f"the {TOOL_NAME} tool's invoke", "tool.ainvoke(...)", call).message

    return StructuredTool(
        name=TOOL_NAME,
        description=spec["description"],
        args_schema=spec["inputSchema"],
        coroutine=update,
        func=update_sync,
    )


def _checked_messages(messages: object) -> list[BaseMessage]:
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise InvalidInput("messages", messages, "a list of LangChain messages")
    for i, m in enumerate(messages):
        if not isinstance(m, BaseMessage):
            raise InvalidInput(f"messages[{i}]", m, "a LangChain BaseMessage")
    return list(messages)
