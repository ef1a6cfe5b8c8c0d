"""Splice a :class:`~shortterm.Context` into a provider's message list. Pure.

One placement algorithm serves every shape; a shape only says how its messages look:

=====================  ======================================  =================================
``format``             a call that its result must follow       a result
=====================  ======================================  =================================
``openai``             assistant with ``tool_calls``,            ``role: tool`` / ``function``;
(chat completions)     ``function_call`` or ``tool_use`` blocks  user of ``tool_result`` blocks
``openai-responses``   ``*_call`` items, ``reasoning`` items     ``*_call_output`` items
``anthropic``          assistant with ``tool_use`` blocks        user of ``tool_result`` blocks
``gemini``             model content with ``functionCall``       content with ``functionResponse``
=====================  ======================================  =================================

Depth counts the *dialogue* messages of the list passed in (everything but the operator's
``system`` / ``developer`` messages), from the end; the items being inserted never count, so a
block placed at depth 2 sits before the second-to-last dialogue message whatever else is
inserted (the reference counted its own tail directives as turns, which shifted every depth by
one).

A tool exchange is atomic: an insertion point between a call and its results (or between two
results) moves up to just before the call, because providers reject a call separated from its
result. Anthropic and Gemini carry the system prompt outside the list, so depth -1 is the very
start there, and memory items always go in as ``user`` messages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..model.errors import InvalidInput
from .context import Context, ContextItem

__all__ = ["MESSAGE_FORMATS", "MessageFormat", "inject"]

MessageFormat = Literal["openai", "openai-responses", "anthropic", "gemini"]
MESSAGE_FORMATS: tuple[MessageFormat, ...] = ("openai", "openai-responses", "anthropic", "gemini")

Msg = Mapping[str, Any]


def _has_block(message: Msg, kind: str) -> bool:
    content = message.get("content")
    if not isinstance(content, list):
        return False
    return any(isinstance(b, Mapping) and b.get("type") == kind for b in content)


def _has_part(message: Msg, *names: str) -> bool:
    parts = message.get("parts")
    if not isinstance(parts, list):
        return False
    return any(isinstance(p, Mapping) and any(n in p for n in names) for p in parts)


def _refuse(i: int, name: str, value: object, allowed: str) -> InvalidInput:
    return InvalidInput(f"dialogue[{i}].{name}", value, allowed)


def _check_role(i: int, message: Msg, roles: tuple[str, ...]) -> None:
    role = message.get("role")
    if role not in roles:
        raise _refuse(i, "role", role, " or ".join(map(repr, roles)))


def _check_blocks(i: int, message: Msg, *, text_allowed: bool = True) -> None:
    """``content``: a string (where allowed), null, or a list of typed blocks."""
    content = message.get("content")
    if content is None or (text_allowed and isinstance(content, str)):
        return
    if not isinstance(content, list):
        raise _refuse(i, "content", content, "a string or a list of content blocks")
    for j, block in enumerate(content):
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            raise _refuse(i, f"content[{j}]", block, "a content block with a 'type' string")


# -- the shapes ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Shape:
    check: Callable[[int, Msg], None]
    operator: Callable[[Msg], bool]  # system-like: not counted, leads the list
    calls: Callable[[Msg], bool]  # its results must follow it directly
    result: Callable[[Msg], bool]
    item: Callable[[ContextItem], dict[str, Any]]


_CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "function")


def _chat_check(i: int, m: Msg) -> None:
    # The hot path of a spliced turn start: exact-type checks first, isinstance only after.
    if m.get("role") not in _CHAT_ROLES:
        _check_role(i, m, _CHAT_ROLES)
    content = m.get("content")
    if type(content) is not str and content is not None and not isinstance(content, str | list):
        raise _refuse(i, "content", content, "a string, a list of content parts or null")
    calls = m.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        raise _refuse(i, "tool_calls", calls, "a list of tool calls")


def _chat_calls(m: Msg) -> bool:
    if m.get("role") != "assistant":
        return False
    return bool(m.get("tool_calls") or m.get("function_call")) or _has_block(m, "tool_use")


def _chat_result(m: Msg) -> bool:
    role = m.get("role")
    return role in ("tool", "function") or (role == "user" and _has_block(m, "tool_result"))


_RESPONSES_ROLES = ("user", "assistant", "system", "developer")


def _responses_type(m: Msg) -> str:
    kind = m.get("type", "message")
    return kind if isinstance(kind, str) else ""


def _responses_check(i: int, m: Msg) -> None:
    kind = m.get("type", "message")
    if not isinstance(kind, str) or not kind:
        raise _refuse(i, "type", kind, "an item type such as 'message' or 'function_call'")
    if kind == "message" or "role" in m:
        _check_role(i, m, _RESPONSES_ROLES)
        content = m.get("content")
        if not isinstance(content, str | list):
            raise _refuse(i, "content", content, "a string or a list of content parts")
    elif kind in ("function_call", "function_call_output") and not isinstance(
        m.get("call_id"), str
    ):
        raise _refuse(i, "call_id", m.get("call_id"), "the call's id, a string")


def _responses_operator(m: Msg) -> bool:
    return _responses_type(m) == "message" and m.get("role") in ("system", "developer")


def _responses_calls(m: Msg) -> bool:
    kind = _responses_type(m)
    # A reasoning item belongs to the item it produced: nothing goes between them.
    return kind == "reasoning" or kind.endswith("_call")


def _responses_result(m: Msg) -> bool:
    return _responses_type(m).endswith("_call_output")


def _anthropic_check(i: int, m: Msg) -> None:
    _check_role(i, m, ("user", "assistant"))
    if m.get("content") is None:
        raise _refuse(i, "content", None, "a string or a list of content blocks")
    _check_blocks(i, m)


def _anthropic_calls(m: Msg) -> bool:
    return m.get("role") == "assistant" and _has_block(m, "tool_use")


def _anthropic_result(m: Msg) -> bool:
    return m.get("role") == "user" and _has_block(m, "tool_result")


def _gemini_check(i: int, m: Msg) -> None:
    _check_role(i, m, ("user", "model", "function"))
    parts = m.get("parts")
    if not isinstance(parts, list):
        raise _refuse(i, "parts", parts, "a list of parts")
    for j, part in enumerate(parts):
        if not isinstance(part, Mapping):
            raise _refuse(i, f"parts[{j}]", part, "a part object such as {'text': ...}")


def _gemini_calls(m: Msg) -> bool:
    return m.get("role") == "model" and _has_part(m, "functionCall", "function_call")


def _gemini_result(m: Msg) -> bool:
    return _has_part(m, "functionResponse", "function_response")


def _never(m: Msg) -> bool:
    return False


def _message(item: ContextItem) -> dict[str, Any]:
    return {"role": item.role, "content": item.text}


_SHAPES: dict[str, _Shape] = {
    "openai": _Shape(
        _chat_check,
        lambda m: m.get("role") in ("system", "developer"),
        _chat_calls,
        _chat_result,
        _message,
    ),
    "openai-responses": _Shape(
        _responses_check, _responses_operator, _responses_calls, _responses_result, _message
    ),
    "anthropic": _Shape(
        _anthropic_check,
        _never,
        _anthropic_calls,
        _anthropic_result,
        lambda item: {"role": "user", "content": item.text},
    ),
    "gemini": _Shape(
        _gemini_check,
        _never,
        _gemini_calls,
        _gemini_result,
        lambda item: {"role": "user", "parts": [{"text": item.text}]},
    ),
}


# -- placement ----------------------------------------------------------------------------------


def _position(dialogue: Sequence[Msg], depth: int, shape: _Shape) -> int:
    """Index to insert before (``len(dialogue)`` = append) for ``depth``."""
    n = len(dialogue)
    if depth < 0:
        pos = 0
        while pos < n and shape.operator(dialogue[pos]):
            pos += 1
    else:
        pos = n
        if depth > 0:
            seen = 0
            for i in range(n - 1, -1, -1):
                if not shape.operator(dialogue[i]):
                    seen += 1
                    pos = i  # fewer than ``depth`` turns: before the earliest one found
                    if seen == depth:
                        break
    while pos > 0 and ((pos < n and shape.result(dialogue[pos])) or shape.calls(dialogue[pos - 1])):
        pos -= 1
    return pos


def inject(
    dialogue: Sequence[Mapping[str, Any]], ctx: Context, *, format: str = "openai"
) -> list[dict[str, Any]]:
    """Return a new message list: ``dialogue`` with the memory items at ``ctx.memory_depth``
    and the nudge at ``ctx.nudge_depth``. At the same position the memory items come first,
    then the nudge. The input list and its messages are not modified (each message in the
    result is a shallow copy).

    ``format`` is the shape of ``dialogue``: ``"openai"`` (chat completions messages, the
    default), ``"openai-responses"`` (Responses API input items), ``"anthropic"`` (Messages
    API ``messages``, the system prompt kept apart) or ``"gemini"`` (``contents``). A message
    that is not of that shape raises :class:`InvalidInput` naming its index and field.
    """
    shape = _SHAPES.get(format) if isinstance(format, str) else None
    if shape is None:
        raise InvalidInput("format", format, f"one of {', '.join(map(repr, MESSAGE_FORMATS))}")
    if not isinstance(ctx, Context):
        raise InvalidInput("ctx", ctx, "a shortterm.Context")
    if isinstance(dialogue, str | bytes) or not isinstance(dialogue, Sequence):
        raise InvalidInput("dialogue", dialogue, "a list of message dicts")
    check = shape.check
    for i, message in enumerate(dialogue):
        if type(message) is not dict and not isinstance(message, Mapping):
            raise InvalidInput(f"dialogue[{i}]", message, "a message dict")
        check(i, message)
    inserts: dict[int, list[ContextItem]] = {}
    if ctx.items:
        inserts.setdefault(_position(dialogue, ctx.memory_depth, shape), []).extend(ctx.items)
    if ctx.nudge is not None:
        inserts.setdefault(_position(dialogue, ctx.nudge_depth, shape), []).append(ctx.nudge)
    messages = dialogue if type(dialogue) is list else list(dialogue)
    out: list[dict[str, Any]] = []
    done = 0
    for pos in sorted(inserts):
        out += map(dict, messages[done:pos])
        out += map(shape.item, inserts[pos])
        done = pos
    out += map(dict, messages[done:])
    return out
