"""Serving the fake model: the Starlette app (``/v1/chat/completions``, ``/v1/models``), the
request log, and ``shortterm fake-model``'s bind-announce-serve."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..model.errors import ConfigError, ExtraMissing
from ..tool.texts import TOOL_NAME
from .answer import complete
from .request import BadRequest
from .wire import error_body, stream_events, streamed

try:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route
except ModuleNotFoundError as exc:
    raise ExtraMissing("sidecar", exc.name or "starlette") from exc

DEFAULT_PORT = 8800
MODEL_ID = "shortterm-fake"
# The scripts are in a clone and in the sdist, not in the wheel: the hint says where else.
EXAMPLES_URL = "https://github.com/shortterm/shortterm/tree/main/examples"
MAX_BODY_BYTES = 8 * 1024 * 1024


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
    return JSONResponse(error_body(status, message, param), status_code=status)


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
        stream, usage = streamed(body)
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
