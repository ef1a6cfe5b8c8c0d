"""LangChain messages as the chat history keeps them.

A ``HumanMessage`` or an ``AIMessage`` with text is dialogue (a :class:`~shortterm.Message` of
that text); every other message (a ``ToolMessage``, an ``AIMessage`` that only calls tools, a
``SystemMessage``, ...) rides on one, and a message's ``raw`` holds LangChain's own
serialization (``message_to_dict``) of its group (see :mod:`.history_items`).
"""

from __future__ import annotations

from ..model import Message
from ..model.errors import InvalidInput
from ..model.text import clean_text
from .history_items import Held, Kind, dumps, loads_list

try:
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        HumanMessage,
        message_to_dict,
        messages_from_dict,
    )
except ModuleNotFoundError as exc:  # pragma: no cover - langchain.py reports the extra
    if exc.name and exc.name.split(".")[0] == "langchain_core":
        from ..model.errors import ExtraMissing

        raise ExtraMissing("langchain", "langchain-core") from exc
    raise

__all__ = ["SURFACE", "held_message", "messages_of", "prefixed", "text_of"]

SURFACE = "langchain"  # names the writer of a message's raw


def held_message(m: BaseMessage, at: float, message_id: str, cap: int) -> Held:
    """``m`` as held until its turn is captured; its identity is LangChain's own when it has
    one (a retried capture adds it once), else ``message_id``; whether it is a bare
    ``HumanMessage`` / ``AIMessage`` of its text (no id, name or metadata) that a message of
    ``cap`` characters keeps whole."""
    if not isinstance(m, BaseMessage):
        raise InvalidInput("messages", m, "a LangChain BaseMessage")
    raw = dumps(message_to_dict(m))
    ident = m.id if isinstance(m.id, str) and 0 < len(m.id) <= 256 else message_id
    text = text_of(m)
    has_text = bool(text.strip())
    fits = has_text and len(text) <= cap and clean_text(text) == text
    if isinstance(m, HumanMessage):
        name = m.name if isinstance(m.name, str) and m.name.strip() else None
        plain = fits and m == HumanMessage(content=text)
        return Held(raw, "user" if has_text else None, text, "user", at, ident, name, plain)
    if isinstance(m, AIMessage) and has_text:
        # Text with a tool call is said on the way: the run goes on to the final answer.
        kind: Kind = "other" if m.tool_calls else "answer"
        plain = fits and m == AIMessage(content=text)
        return Held(raw, "assistant", text, kind, at, ident, None, plain)
    return Held(raw, None, "", "other", at, ident)


def text_of(message: BaseMessage) -> str:
    """The text of a message; content blocks other than text (images, tool calls) are not
    dialogue shortterm keeps as text."""
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


def messages_of(message: Message) -> list[BaseMessage]:
    """The LangChain messages a stored message stands for: its ``raw``, or a bare
    ``HumanMessage`` / ``AIMessage`` of its text (another surface's capture, or a plain one)."""
    if message.raw is not None:
        items = loads_list(SURFACE, message.raw)
        if items is not None:
            try:
                return list(messages_from_dict(items))
            except (KeyError, TypeError, ValueError):
                pass  # not LangChain's (another adapter wrote it): the text stands for it
    if message.role == "assistant":
        return [AIMessage(content=message.content)]
    return [HumanMessage(content=message.content)]


def prefixed(messages: list[BaseMessage], speaker: str) -> list[BaseMessage]:
    """``messages`` with ``speaker: `` before the text of their human message: another
    person's message in a multi-party channel."""
    for i, m in enumerate(messages):
        if not isinstance(m, HumanMessage):
            continue
        content = m.content
        if isinstance(content, str):
            messages[i] = m.model_copy(update={"content": f"{speaker}: {content}"})
            return messages
        for j, block in enumerate(content):
            if isinstance(block, str):
                blocks = [*content[:j], f"{speaker}: {block}", *content[j + 1 :]]
            elif isinstance(block, dict) and isinstance(block.get("text"), str):
                named = {**block, "text": f"{speaker}: {block['text']}"}
                blocks = [*content[:j], named, *content[j + 1 :]]
            else:
                continue
            messages[i] = m.model_copy(update={"content": blocks})
            return messages
    return messages
