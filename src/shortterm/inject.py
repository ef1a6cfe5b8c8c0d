"""Splice a :class:`~shortterm.Context` into an OpenAI-style message list. Pure.

Depth counts the *dialogue* messages of the list passed in (every role but ``system``), from
the end; the items being inserted never count, so a block placed at depth 2 sits before the
second-to-last dialogue message whatever else is inserted (the reference counted its own tail
directives as turns, which shifted every depth by one).

A tool exchange is atomic: an insertion point between an assistant message that requests
tool calls and its tool results (or between two results) moves up to just before that
assistant message, because providers reject a call separated from its result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .context import Context, ContextItem
from .errors import InvalidInput

__all__ = ["inject"]

_RESULT_ROLES = ("tool", "function")


def _blocks(message: Mapping[str, Any], kind: str) -> bool:
    content = message.get("content")
    if not isinstance(content, list):
        return False
    return any(isinstance(b, Mapping) and b.get("type") == kind for b in content)


def _calls_tools(message: Mapping[str, Any]) -> bool:
    """An assistant message whose tool results must follow it directly."""
    if message.get("role") != "assistant":
        return False
    return bool(message.get("tool_calls") or message.get("function_call")) or _blocks(
        message, "tool_use"
    )


def _is_result(message: Mapping[str, Any]) -> bool:
    role = message.get("role")
    if role in _RESULT_ROLES:
        return True
    # Anthropic-style results travel as user messages made of tool_result blocks.
    return role == "user" and _blocks(message, "tool_result")


def _position(dialogue: Sequence[Mapping[str, Any]], depth: int) -> int:
    """Index to insert before (``len(dialogue)`` = append) for ``depth``."""
    n = len(dialogue)
    if depth < 0:
        pos = 0
        while pos < n and dialogue[pos].get("role") == "system":
            pos += 1
        return pos
    pos = n
    if depth > 0:
        seen = 0
        for i in range(n - 1, -1, -1):
            if dialogue[i].get("role") != "system":
                seen += 1
                pos = i  # fewer than ``depth`` turns: before the earliest one found
                if seen == depth:
                    break
    while pos > 0 and ((pos < n and _is_result(dialogue[pos])) or _calls_tools(dialogue[pos - 1])):
        pos -= 1
    return pos


def inject(dialogue: Sequence[Mapping[str, Any]], ctx: Context) -> list[dict[str, Any]]:
    """Return a new message list: ``dialogue`` with the memory items at ``ctx.memory_depth``
    and the nudge at ``ctx.nudge_depth``. At the same position the memory items come first,
    then the nudge. The input list and its messages are not modified (each message in the
    result is a shallow copy)."""
    if not isinstance(ctx, Context):
        raise InvalidInput("ctx", ctx, "a shortterm.Context")
    if isinstance(dialogue, str | bytes) or not isinstance(dialogue, Sequence):
        raise InvalidInput("dialogue", dialogue, "a list of {'role': ..., 'content': ...} dicts")
    for i, message in enumerate(dialogue):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise InvalidInput(f"dialogue[{i}]", message, "a dict with a 'role' string")
    inserts: dict[int, list[ContextItem]] = {}
    if ctx.items:
        inserts.setdefault(_position(dialogue, ctx.memory_depth), []).extend(ctx.items)
    if ctx.nudge is not None:
        inserts.setdefault(_position(dialogue, ctx.nudge_depth), []).append(ctx.nudge)
    out: list[dict[str, Any]] = []
    for i in range(len(dialogue) + 1):
        for item in inserts.get(i, ()):
            out.append(item.as_message())
        if i < len(dialogue):
            out.append(dict(dialogue[i]))
    return out
