"""Reading a chat-completions request: every field the fake model answers from is checked
(a malformed one is a :class:`BadRequest` naming it, never a 500), then read into a
:class:`Prompt`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..prompt.render import CONTINUE, HEADER_OPEN, QUOTE
from ..tool.texts import TOOL_NAME

ROLES = ("system", "developer", "user", "assistant", "tool", "function")


class BadRequest(Exception):
    """A request the fake model refuses (400), with the field at fault."""

    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status


@dataclass(frozen=True, slots=True)
class Prompt:
    """What the fake model reads from a request."""

    model: str
    said: tuple[str, ...]  # the user's dialogue lines, oldest first (memory items left out)
    remembered: tuple[str, ...]  # quoted lines of the memory blocks
    nudged: bool  # a message names the memory tool (shortterm's nudge does)
    tool_result: str | None  # the text of trailing tool messages, when the last one is a result
    tool: Mapping[str, Any] | None  # the offered memory tool's ``function`` object
    tool_choice: object


def _object(value: object, param: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise BadRequest(f"{param} must be a JSON object", param)
    return value


def _text(message: Mapping[str, Any], param: str) -> str:
    """The text of a message's ``content``: a string, null, or a list of content parts."""
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise BadRequest(f"{param}.content must be a string, null or a list of parts", param)
    texts = []
    for i, part in enumerate(content):
        part = _object(part, f"{param}.content[{i}]")
        if part.get("type") == "text":
            if not isinstance(part.get("text"), str):
                raise BadRequest(f"{param}.content[{i}].text must be a string", param)
            texts.append(part["text"])
    return "\n".join(texts)


def read_messages(body: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(role, text)`` of each message, checked."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list of messages", "messages")
    read = []
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        message = _object(message, param)
        role = message.get("role")
        if role not in ROLES:
            raise BadRequest(f"{param}.role must be one of {', '.join(ROLES)}", f"{param}.role")
        calls = message.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise BadRequest(f"{param}.tool_calls must be a list", f"{param}.tool_calls")
        read.append((role, _text(message, param)))
    return read


def _check_schema(parameters: object, param: str) -> None:
    """As much of a JSON schema as the arguments are built from."""
    parameters = _object(parameters, param)
    properties = _object(parameters.get("properties", {}), f"{param}.properties")
    for name, prop in properties.items():
        _object(prop, f"{param}.properties.{name}")
    required = parameters.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise BadRequest(f"{param}.required must be a list of names", f"{param}.required")


def _memory_tool(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    tools = body.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise BadRequest("tools must be a list", "tools")
    found = None
    for i, tool in enumerate(tools):
        tool = _object(tool, f"tools[{i}]")
        if tool.get("type") != "function":
            continue  # other kinds of tools exist; this model never calls them
        function = _object(tool.get("function"), f"tools[{i}].function")
        if not isinstance(function.get("name"), str):
            raise BadRequest(f"tools[{i}].function.name must be a string", f"tools[{i}]")
        if "parameters" in function:
            _check_schema(function["parameters"], f"tools[{i}].function.parameters")
        if function["name"] == TOOL_NAME:
            found = function
    return found


def _is_memory_block(text: str) -> bool:
    return text.lstrip().startswith(HEADER_OPEN)


def _quoted(texts: Sequence[str]) -> tuple[str, ...]:
    """The recalled lines of every memory envelope (continuation lines left out)."""
    lines = []
    for text in texts:
        if HEADER_OPEN not in text:
            continue
        for line in text.splitlines():
            if line.startswith(QUOTE) and not line.startswith(CONTINUE):
                lines.append(line[len(QUOTE) :].strip())
    return tuple(lines)


def _nudges(role: str, text: str) -> bool:
    # The operator's or shortterm's words naming the tool; not a quoted memory, not a reply.
    return (
        role in ("system", "developer", "user") and TOOL_NAME in text and not _is_memory_block(text)
    )


def read_prompt(body: Mapping[str, Any]) -> Prompt:
    """The parts of a chat-completions request the fake model answers from; ``BadRequest``
    for a malformed one."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("model must be a non-empty string (any name will do)", "model")
    if body.get("stream") not in (None, False, True):
        raise BadRequest("stream must be true or false", "stream")
    options = body.get("stream_options")
    if options is not None:
        _object(options, "stream_options")
    if body.get("n") not in (None, 1):
        raise BadRequest("shortterm fake-model answers with one choice: n must be 1", "n")
    messages = read_messages(body)
    tool = _memory_tool(body)
    said = tuple(
        text
        for role, text in messages
        if role == "user" and text.strip() and not _is_memory_block(text) and TOOL_NAME not in text
    )
    tool_result = None
    if messages[-1][0] in ("tool", "function"):
        trailing = []
        for role, text in reversed(messages):
            if role not in ("tool", "function"):
                break
            trailing.append(text)
        tool_result = " ".join(reversed(trailing))
    return Prompt(
        model=model,
        said=said,
        remembered=_quoted([text for _, text in messages]),
        nudged=any(_nudges(role, text) for role, text in messages),
        tool_result=tool_result,
        tool=tool,
        tool_choice=body.get("tool_choice", "auto"),
    )
