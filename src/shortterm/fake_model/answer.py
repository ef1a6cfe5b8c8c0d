"""The answer the fake model gives a read prompt: a call of the memory tool when it is offered
and wanted, a distilled summary for ``shortterm distill``, otherwise a reply that echoes the
user and quotes what memory showed. Pure and deterministic."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..prompt.distill import DISTILLER_MARK, FIELDS_LINE
from ..prompt.render import CONTINUE, HEADER_CLOSE, HEADER_OPEN, QUOTE
from ..tool.texts import OK, TOOL_NAME
from .request import BadRequest, Prompt, read_messages, read_prompt
from .wire import completion

# What counts as "asked to remember": generous on purpose, this is a toy for trying the loop.
_ASKED = re.compile(
    r"\b(remember|memori[sz]e|note (?:that|this|down)|take note|keep in mind)\b", re.IGNORECASE
)
_STATED_LIMIT = re.compile(r"at most (\d+) characters")
_DEFAULT_LIMIT = 500
_RECENT_LINES = 6  # how many of the user's lines a written summary keeps
_QUOTED_SHOWN = 3  # how many memory lines a reply quotes
_QUOTE_CHARS = 100


def _cut(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[: max_chars - 1].rstrip() + "…"


def _shorten(text: str, max_chars: int) -> str:
    """One line of at most ``max_chars`` characters."""
    return _cut(" ".join(text.split()), max_chars)


def _asked(prompt: Prompt) -> bool:
    return bool(prompt.said) and _ASKED.search(prompt.said[-1]) is not None


def _wants_tool(prompt: Prompt) -> bool:
    if prompt.tool is None or prompt.tool_result is not None:
        return False
    choice = prompt.tool_choice
    if choice == "none":
        return False
    if isinstance(choice, Mapping):
        function = choice.get("function")
        return isinstance(function, Mapping) and function.get("name") == TOOL_NAME
    if choice == "required":
        return True
    return _asked(prompt) or prompt.nudged


def _limit(function: Mapping[str, Any], prop: Mapping[str, Any]) -> int:
    """The longest text the schema allows: ``maxLength``, else the "at most N characters" its
    descriptions state (shortterm's do), else a modest default."""
    if isinstance(prop.get("maxLength"), int):
        return max(1, int(prop["maxLength"]))
    parameters = function.get("parameters") or {}
    for text in (prop.get("description"), parameters.get("description")):
        found = _STATED_LIMIT.search(text) if isinstance(text, str) else None
        if found:
            return max(1, int(found.group(1)))
    return _DEFAULT_LIMIT


def _types(prop: Mapping[str, Any]) -> list[str]:
    kind = prop.get("type")
    if isinstance(kind, str):
        return [kind.lower()]  # Gemini's schemas spell types in upper case
    return [k.lower() for k in kind if isinstance(k, str)] if isinstance(kind, list) else []


def tool_arguments(function: Mapping[str, Any], said: Sequence[str]) -> dict[str, Any]:
    """Arguments for the memory tool that fit its schema: the user's recent lines go into the
    first string property, nullable ones get ``null`` (in shortterm's category mode: keep),
    other required strings the same lines."""
    notes = "\n".join(_shorten(line, 200) for line in said[-_RECENT_LINES:]) or "Nothing yet."
    parameters = function.get("parameters") or {}
    properties = parameters.get("properties") or {}
    required = parameters.get("required") or []
    arguments: dict[str, Any] = {}
    filled = False
    for name, prop in properties.items():
        types = _types(prop)
        first = not filled and (not types or "string" in types)
        if first or (name in required and types == ["string"]):
            arguments[name] = _cut(notes, _limit(function, prop))
            filled = True
        elif "null" in types:
            arguments[name] = None
    return arguments


def reply_text(prompt: Prompt) -> str:
    """The plain answer: what the user said, and what memory showed."""
    parts = []
    if prompt.tool_result is not None:
        if prompt.tool_result == OK:
            parts.append("Notes updated.")
        else:
            parts.append(f"The memory tool said: {_shorten(prompt.tool_result, 200)}")
    if prompt.said:
        parts.append(f'You said: "{_shorten(prompt.said[-1], 200)}".')
    else:
        parts.append("Hello! Nobody has said anything yet.")
    if prompt.remembered:
        shown = [f'"{_shorten(line, _QUOTE_CHARS)}"' for line in prompt.remembered[:_QUOTED_SHOWN]]
        more = len(prompt.remembered) - len(shown)
        parts.append("From memory: " + "; ".join(shown) + (f" (+{more} more)." if more else "."))
    else:
        parts.append("My memory is empty here.")
    if prompt.tool is None and prompt.tool_result is None and _asked(prompt):
        parts.append("(The memory tool was not offered on this turn, so I cannot note it.)")
    return " ".join(parts)


def _distilled_lines(text: str) -> list[str]:
    """The quoted lines under the "latest messages" header of a distill request."""
    lines, inside = [], False
    for line in text.splitlines():
        if line.startswith(HEADER_OPEN) and line.endswith(HEADER_CLOSE):
            inside = "latest messages" in line
        elif inside and line.startswith(QUOTE) and not line.startswith(CONTINUE):
            lines.append(line[len(QUOTE) :].strip())
    return lines


def distill_answer(messages: Sequence[tuple[str, str]]) -> str | None:
    """The answer to a distill request (see the module's docstring); ``None`` for any other
    request."""
    system = next((text for role, text in messages if role == "system"), "")
    if not system.startswith(DISTILLER_MARK):
        return None
    said = _distilled_lines("\n".join(text for role, text in messages if role == "user"))
    found = _STATED_LIMIT.search(system)
    limit = int(found.group(1)) if found else _DEFAULT_LIMIT
    notes = _cut("Notes: " + "; ".join(said[-_RECENT_LINES:]), limit)
    if FIELDS_LINE not in system:
        return notes
    fields = re.findall(r"^- ([^:\s]+):", system.split(FIELDS_LINE, 1)[1], re.MULTILINE)
    return json.dumps({name: (notes if i == 0 else None) for i, name in enumerate(fields)})


def complete(body: object) -> dict[str, Any]:
    """The chat completion the fake model answers ``body`` with (a decoded request);
    ``BadRequest`` for a malformed one. Pure and deterministic."""
    if not isinstance(body, Mapping):
        raise BadRequest("the request body must be a JSON object")
    prompt = read_prompt(body)
    distilled = distill_answer(read_messages(body))
    if distilled is not None:
        return completion(body, prompt.model, {"role": "assistant", "content": distilled}, "stop")
    if _wants_tool(prompt):
        assert prompt.tool is not None
        arguments = json.dumps(tool_arguments(prompt.tool, prompt.said), ensure_ascii=False)
        call_id = "call_" + hashlib.sha256(arguments.encode()).hexdigest()[:16]
        function = {"name": TOOL_NAME, "arguments": arguments}
        call = {"id": call_id, "type": "function", "function": function}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return completion(body, prompt.model, message, "tool_calls")
    message = {"role": "assistant", "content": reply_text(prompt)}
    return completion(body, prompt.model, message, "stop")
