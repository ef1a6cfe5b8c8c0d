"""LangChain: shortterm as a chat message history, and its tool as a LangChain tool.

::

    from shortterm.integrations.langchain import ShortTermChatHistory

    history = ShortTermChatHistory(memory, user_id="111", channel_id="222", server_id="333")
    chain = RunnableWithMessageHistory(prompt | model, lambda session_id: history, ...)

Needs ``pip install 'shortterm[langchain]'`` (langchain-core ≥ 0.3).

**What the history holds** (:meth:`ShortTermChatHistory.aget_messages`): first, when memory has
anything to add, one ``SystemMessage`` with what the read path renders for this turn (the
other channels' block, this channel's summary or notes, and the nudge when one is due), then
this channel's recent messages as ``HumanMessage`` / ``AIMessage`` (another person's message in a
server carries their name as a ``name: `` prefix), then the human messages added but not yet
answered.

**What adding does** (:meth:`ShortTermChatHistory.aadd_messages`): a batch that ends with an AI
answer is a finished turn and is captured: the human messages (and earlier AI messages) as the
turn's history, the trailing AI messages as its replies. Human messages with no answer yet wait
in the object until one comes, because shortterm keeps turns, not lone questions. Tool messages,
AI messages that only call tools, and system messages are not kept: what a tool returned
belongs to the run, not to the channel's conversation, and the system prompt is the operator's.
Each captured turn starts a new :class:`~shortterm.Turn`, so the one-update-per-turn guard of
the tool holds per answer.

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
import uuid
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..memory.turn_args import TurnArgs
from ..model import Message, Reply
from ..model.errors import ExtraMissing, InvalidInput, ShortTermError
from ..tool import TOOL_NAME, render
from .scope_locks import scope_lock

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        HumanMessage,
        SystemMessage,
    )
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
    """

    def __init__(
        self,
        memory: Memory,
        *,
        max_tokens: int | None = None,
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
        self._pending: list[HumanMessage] = []  # asked, not answered yet

    # -- async: the native methods ---------------------------------------------------------

    async def aget_messages(self) -> list[BaseMessage]:
        """The recalled memory as one ``SystemMessage`` (when there is any), this channel's
        recent messages, then the human messages still waiting for an answer."""
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
            out.extend(self._as_langchain(m) for m in entry.messages)
        out.extend(self._pending)
        return out

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Capture a finished turn (see the module docs); human messages without an answer
        wait for it."""
        said: list[HumanMessage | AIMessage] = [
            m
            for m in _checked_messages(messages)
            if isinstance(m, HumanMessage | AIMessage) and _text(m).strip()
        ]
        # Everything up to the last AI answer is a finished turn; what follows it waits.
        last = max((i for i, m in enumerate(said) if isinstance(m, AIMessage)), default=-1)
        if last < 0:
            self._pending.extend(m for m in said if isinstance(m, HumanMessage))
            return
        first = last
        while first > 0 and isinstance(said[first - 1], AIMessage):
            first -= 1
        await self._capture([*self._pending, *said[:first]], said[first : last + 1])
        self._pending = [m for m in said[last + 1 :] if isinstance(m, HumanMessage)]

    async def _capture(
        self, said: Sequence[HumanMessage | AIMessage], answers: Sequence[BaseMessage]
    ) -> None:
        turn = self.turn
        new: list[Message] = []
        for m in said:
            if isinstance(m, AIMessage):  # an earlier answer of the same batch
                new.append(Message("assistant", _text(m), speaker=turn.bot_name))
            else:
                new.append(self._as_shortterm(m))
        # An Agents SDK session's pop of this channel in this process waits for it (it writes
        # back the list it read).
        async with scope_lock(self.memory, turn.live_key):
            await turn.capture(new, [Reply(_text(m)) for m in answers], append=True)
        self._pending = []
        self.turn = self.memory.turn_from(self._args)  # the next answer is a new turn

    async def aclear(self) -> None:
        """Forget this channel, like ``/refresh``: every user, persona and scope of it."""
        await self.memory.clear_channel(self.turn.channel_id)
        self._pending.clear()
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

    # -- conversions -----------------------------------------------------------------------------

    def _as_langchain(self, m: Message) -> BaseMessage:
        if m.role == "assistant":
            return AIMessage(content=m.content)
        own = m.author_id is None or m.author_id == self.turn.user_id
        if own or m.speaker is None:
            return HumanMessage(content=m.content)
        return HumanMessage(content=f"{m.speaker}: {m.content}")

    def _as_shortterm(self, m: HumanMessage) -> Message:
        turn = self.turn
        speaker = m.name if isinstance(m.name, str) and m.name.strip() else turn.user_name
        # An identity (LangChain's own when it has one), so a retried capture adds it once.
        given = m.id if isinstance(m.id, str) and m.id else None
        return Message(
            "user", _text(m), author_id=turn.user_id, speaker=speaker,
            message_id=given or uuid.uuid4().hex,
        )  # fmt: skip


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


def _text(message: BaseMessage) -> str:
    """The text of a message; content blocks other than text (images, tool calls) are not
    conversation shortterm can keep."""
    content = message.content
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            text = block.get("text")
            if isinstance(text, str):
                parts.append(text)
    return "\n".join(parts)
