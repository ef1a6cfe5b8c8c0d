"""``shortterm fake-model``: an OpenAI-compatible chat-completions server for trying things
offline.

It is not a language model. It answers deterministically from the request, so a bot can be run
end to end with no network and no key, and a test can assert on what it said:

- **A plain answer** echoes the last thing the user said and quotes the lines it finds in
  shortterm's memory blocks (every ``│ `` line of a ``⟦…⟧`` envelope, wherever it was spliced),
  so recall is visible in the reply itself.
- **A tool call**: when ``update_short_term_memory`` is in ``tools`` and the user's last message
  asks to remember something (``remember``, ``note that``, ``keep in mind``, ``memorise``), or a
  message names the tool (shortterm's nudge does), or ``tool_choice`` requires it, the answer is
  a call of that tool. Its arguments are built from the offered schema: the first string
  property (``summary``, or the first category) gets the user's recent lines, cut to the length
  the schema states; nullable properties get ``null`` ("unchanged"). (shortterm itself reads
  "please remember …" or "remember: …" as a request for *long-term* memory and does not offer
  the tool on that turn; "note that …" reaches it. The reply says when it was asked but the
  tool was not offered.)
- **After a tool result** it answers in text and says what the tool answered.
- **A distill request** (the system message of ``shortterm distill``): the notes are the
  quoted lines of its "latest messages" block, oldest first, joined with ``; `` after
  ``Notes:`` and cut to the stated limit; in category mode a JSON object whose first field
  holds them and whose other fields are ``null``.

``POST /v1/chat/completions`` and ``GET /v1/models``. With ``stream: true`` the same answer
comes as server-sent events: one chunk with the whole delta, one with the finish reason (and
one with the usage when ``stream_options.include_usage`` asks), then ``data: [DONE]``. Any
model name and any API key are accepted. Malformed requests get a 4xx in OpenAI's error shape
(``{"error": {"message", "type", "param", "code"}}``), never a 500.
:class:`RequestLog` appends each request, with the answer, to a JSON-lines file: that is how
a user sees the prompt shortterm built.

Needs the ``[sidecar]`` extra (Starlette and uvicorn); ``import shortterm`` never loads this.

Over 500 lines on purpose: a stand-alone command outside the library's layers, read top to
bottom as a request becomes an answer (checks, the prompt read, the answer, the wire format,
then the server); nothing else imports its parts.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import json
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .model.errors import ConfigError, ExtraMissing
from .prompt.distill import DISTILLER_MARK, FIELDS_LINE
from .prompt.render import CONTINUE, HEADER_CLOSE, HEADER_OPEN, QUOTE
from .tool.texts import OK, TOOL_NAME

try:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route
except ModuleNotFoundError as exc:
    raise ExtraMissing("sidecar", exc.name or "starlette") from exc

__all__ = [
    "DEFAULT_PORT",
    "MODEL_ID",
    "BadRequest",
    "RequestLog",
    "bind",
    "complete",
    "create_app",
    "run",
    "stream_events",
]

DEFAULT_PORT = 8800
MODEL_ID = "shortterm-fake"
# The scripts are in a clone and in the sdist, not in the wheel: the hint says where else.
EXAMPLES_URL = "https://github.com/shortterm/shortterm/tree/main/examples"
MAX_BODY_BYTES = 8 * 1024 * 1024
ROLES = ("system", "developer", "user", "assistant", "tool", "function")

# What counts as "asked to remember": generous on purpose, this is a toy for trying the loop.
_ASKED = re.compile(
    r"\b(remember|memori[sz]e|note (?:that|this|down)|take note|keep in mind)\b", re.IGNORECASE
)
_STATED_LIMIT = re.compile(r"at most (\d+) characters")
_DEFAULT_LIMIT = 500
_RECENT_LINES = 6  # how many of the user's lines a written summary keeps
_QUOTED_SHOWN = 3  # how many memory lines a reply quotes
_QUOTE_CHARS = 100


class BadRequest(Exception):
    """A request the fake model refuses (400), with the field at fault."""

    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status


# -- reading the request ----------------------------------------------------------------------


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


def _messages(body: Mapping[str, Any]) -> list[tuple[str, str]]:
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
    messages = _messages(body)
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


# -- answering --------------------------------------------------------------------------------


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


def _words(texts: Sequence[str]) -> int:
    return sum(len(text.split()) for text in texts)


def _envelope(
    body: Mapping[str, Any], prompt: Prompt, message: dict[str, Any], finish: str
) -> dict[str, Any]:
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()
    sent = [str(m.get("content") or "") for m in body["messages"] if isinstance(m, Mapping)]
    answer = message.get("content") or json.dumps(message.get("tool_calls"))
    prompt_tokens, completion_tokens = _words(sent), _words([answer])
    return {
        "id": f"chatcmpl-{digest[:24]}",
        "object": "chat.completion",
        "created": 0,  # deterministic: the same request gets the same answer
        "model": prompt.model,
        "system_fingerprint": None,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


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
    distilled = distill_answer(_messages(body))
    if distilled is not None:
        return _envelope(body, prompt, {"role": "assistant", "content": distilled}, "stop")
    if _wants_tool(prompt):
        assert prompt.tool is not None
        arguments = json.dumps(tool_arguments(prompt.tool, prompt.said), ensure_ascii=False)
        call_id = "call_" + hashlib.sha256(arguments.encode()).hexdigest()[:16]
        function = {"name": TOOL_NAME, "arguments": arguments}
        call = {"id": call_id, "type": "function", "function": function}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return _envelope(body, prompt, message, "tool_calls")
    message = {"role": "assistant", "content": reply_text(prompt)}
    return _envelope(body, prompt, message, "stop")


def stream_events(answer: Mapping[str, Any], *, usage: bool = False) -> str:
    """``answer`` (from :func:`complete`) as the server-sent events of a streamed completion."""
    choice = answer["choices"][0]
    head = {k: answer[k] for k in ("id", "created", "model", "system_fingerprint")}
    head["object"] = "chat.completion.chunk"
    delta = dict(choice["message"])
    if delta.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(delta["tool_calls"])]
    chunks = [
        {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
    ]
    if usage:
        chunks.append({**head, "choices": [], "usage": answer["usage"]})
    events = [f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n" for chunk in chunks]
    return "".join(events) + "data: [DONE]\n\n"


def _streamed(body: object) -> tuple[bool, bool]:
    """Whether a (valid) request asked for a stream, and for the usage chunk in it."""
    if not isinstance(body, Mapping) or body.get("stream") is not True:
        return False, False
    options = body.get("stream_options") or {}
    return True, options.get("include_usage") is True


# -- serving ----------------------------------------------------------------------------------


class RequestLog:
    """Appends one JSON line per request: path, status, the request and the answer."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            with path.open("a", encoding="utf-8"):
                pass  # fail at start, not on the first request
        except OSError as exc:
            raise ConfigError(
                f"--log-requests {path}: cannot write there ({exc.strerror})"
            ) from exc

    def write(self, record: Mapping[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, default=str) + "\n"
        with self.path.open("a", encoding="utf-8") as out:
            out.write(line)


def _error(status: int, message: str, param: str | None = None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    error = {"message": message, "type": kind, "param": param, "code": None}
    return JSONResponse({"error": error}, status_code=status)


async def _read_body(request: Request, max_bytes: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise BadRequest(f"the body is over {max_bytes} bytes", None, 413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise BadRequest(f"the body is over {max_bytes} bytes", None, 413)
        chunks.append(chunk)
    return b"".join(chunks)


def _decode(raw: bytes) -> object:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"the body is not JSON ({exc})" if raw else "the body is empty") from exc


def _outcome(answer: Mapping[str, Any]) -> str:
    message = answer["choices"][0]["message"]
    if message.get("tool_calls"):
        return f"a call of {TOOL_NAME}"
    return f"a reply of {len(message['content'])} characters"


def create_app(
    log: RequestLog | None = None,
    *,
    echo: Callable[[str], None] | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> Starlette:
    """The fake model's app. ``echo`` gets one line per chat request (never its text)."""

    async def chat(request: Request) -> Response:
        body: object = None
        try:
            raw = await _read_body(request, max_body_bytes)
            body = _decode(raw)
            answer = complete(body)
        except BadRequest as exc:
            if log is not None:
                shown = body if body is not None else None
                log.write({"path": request.url.path, "status": exc.status, "request": shown})
            if echo is not None:
                echo(f"chat completion refused ({exc.status}): {exc.message}")
            return _error(exc.status, exc.message, exc.param)
        if log is not None:
            record = {"path": request.url.path, "status": 200, "request": body}
            log.write({**record, "response": answer})
        if echo is not None:
            echo(f"chat completion: {_outcome(answer)}")
        stream, usage = _streamed(body)
        if stream:
            return Response(stream_events(answer, usage=usage), media_type="text/event-stream")
        return JSONResponse(answer)

    async def models(request: Request) -> Response:
        model = {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "shortterm"}
        return JSONResponse({"object": "list", "data": [model]})

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return _error(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}")

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
        ],
        exception_handlers={HTTPException: http_error},
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening socket, or a ``ConfigError`` that says what to do when the port is taken."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConfigError(f"--host {host}: the name does not resolve ({exc.strerror})") from exc
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"cannot listen on {host}:{port} ({exc.strerror}); pick another --port "
            "(0 picks a free one)"
        ) from exc
    return sock


def base_url(sock: socket.socket, host: str) -> str:
    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/v1"


async def serve(app: Starlette, sock: socket.socket) -> None:
    server = uvicorn.Server(
        uvicorn.Config(
            app, lifespan="off", access_log=False, server_header=False, log_level="warning"
        )
    )
    await server.serve(sockets=[sock])


def run(
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    log_path: Path | None = None,
    echo: Callable[[str], None] = print,
) -> None:
    """``shortterm fake-model``: bind, announce the URL, serve until interrupted."""
    log = RequestLog(log_path) if log_path is not None else None
    sock = bind(host, port)
    url = base_url(sock, host)
    echo(f"shortterm fake-model listening on {url} (any model name, any API key)")
    if not _is_loopback(host):
        echo("warning: listening beyond loopback; anyone who reaches it can fill the request log")
    if log_path is not None:
        echo(f"each request is appended to {log_path}")
    echo(
        f"try: python examples/openai_tool_loop.py --base-url {url} --model {MODEL_ID} "
        '"note that we hike the ridge trail on Saturday at 8"'
    )
    echo(f"(examples/ is in a clone and in the sdist, not in the wheel: {EXAMPLES_URL})")
    try:
        asyncio.run(serve(create_app(log, echo=echo), sock))
    finally:
        sock.close()
