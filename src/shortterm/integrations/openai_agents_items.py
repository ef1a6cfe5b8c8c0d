"""The Agents SDK's items (Responses input items, plain dicts) as the session keeps them.

An item is one of the SDK's ``TResponseInputItem`` dicts: a message (``{"role", "content"}``,
with or without ``"type": "message"``; content a string or a list of parts), a function call,
its output, reasoning, and whatever other item types the SDK has. A user's or the assistant's
message with text is dialogue (a :class:`~shortterm.Message` of that text); every other item
rides on one (see :mod:`.history_items`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..model import Message
from ..model.errors import InvalidInput
from ..model.keys import Role
from ..model.text import clean_text
from .history_items import Held, Kind, dumps, loads_list

__all__ = ["SURFACE", "held_item", "items_of", "prefixed", "text_of"]

SURFACE = "openai-agents"  # names the writer of a message's raw

_TEXT_PARTS = ("input_text", "output_text", "text")


def held_item(item: object, at: float, message_id: str, cap: int) -> Held:
    """``item`` as held until its turn is captured: its JSON (``TypeError`` when JSON cannot
    hold it, as the SDK's own sessions), what it is in the dialogue, and whether a message of
    ``cap`` characters at most keeps it whole as its text."""
    if not isinstance(item, Mapping):
        raise InvalidInput("items", item, "a list of the SDK's input items (dicts)")
    raw = dumps(item)
    role, text, kind = _what(item)
    plain = (
        role is not None
        and len(item) == 2
        and item.get("content") is text  # a string, not parts
        and len(text) <= cap
        and clean_text(text) == text
    )
    return Held(raw, role, text, kind, at, message_id, None, plain)


def _what(item: Mapping[str, Any]) -> tuple[Role | None, str, Kind]:
    if item.get("type", "message") != "message":
        return None, "", "other"
    role = item.get("role")
    if role == "user":
        text = text_of(item.get("content"))
        return ("user" if text.strip() else None), text, "user"
    if role == "assistant":
        text = text_of(item.get("content"))
        if text.strip():
            return "assistant", text, "answer"
    return None, "", "other"  # an operator's message, or one with no text


def text_of(content: object) -> str:
    """The text of a message's content: a string, or its text and refusal parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, str | bytes) or not isinstance(content, Sequence):
        return ""
    parts = []
    for part in content:
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            parts.append(part["refusal"])
    return "\n".join(parts)


def items_of(message: Message) -> list[dict[str, Any]]:
    """The items a stored message stands for: its ``raw``, or a ``{"role", "content"}``
    message of its text (a message another surface captured, or a plain one)."""
    if message.raw is not None:
        items = loads_list(SURFACE, message.raw)
        if items is not None and all(isinstance(i, dict) for i in items):
            return items
    return [{"role": message.role, "content": message.content}]


def prefixed(items: list[dict[str, Any]], speaker: str) -> list[dict[str, Any]]:
    """``items`` with ``speaker: `` before the text of their user message: another person's
    message in a multi-party channel."""
    for item in items:
        if item.get("role") != "user":
            continue
        content = item.get("content")
        if isinstance(content, str):
            item["content"] = f"{speaker}: {content}"
            return items
        if isinstance(content, list):
            for part in content:
                text = part.get("text") if isinstance(part, dict) else None
                if isinstance(text, str) and part.get("type") in _TEXT_PARTS:
                    part["text"] = f"{speaker}: {text}"
                    return items
    return items
