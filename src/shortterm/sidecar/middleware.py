"""Pure ASGI middleware, outermost first: request metrics, the request's own shape (one Host,
UTF-8 path and query), the browser guard, bearer auth, the body limit.

They run before routing and before any body is read, so an unauthenticated or oversized
request costs neither a route lookup nor a buffered body.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import unquote_to_bytes

from fastapi import HTTPException
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import problem_response
from .inspector import UI_PATHS
from .settings import is_loopback

if TYPE_CHECKING:
    from .metrics import Metrics

__all__ = [
    "BearerAuth",
    "BodyLimit",
    "BodyTooLarge",
    "BrowserGuard",
    "RequestMetrics",
    "RequestShape",
]

# Served without a token: liveness, readiness, and the inspector's static files (they hold no
# memory; the page reads everything through /v1 with the token, see inspector.py).
OPEN_PATHS = frozenset({"/healthz", "/readyz", *UI_PATHS})


def route_template(routes: Sequence[BaseRoute], scope: Scope) -> str:
    """The template of the route ``scope`` names, for a request answered before routing (a
    401, a 413): the operator sees which route was refused, not ``unmatched``."""
    partial = None
    for route in routes:
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return str(getattr(route, "path", "unmatched"))
        if match is Match.PARTIAL and partial is None:  # the path, with another method
            partial = str(getattr(route, "path", "unmatched"))
    return partial or "unmatched"


class RequestMetrics:
    """Times every HTTP request and counts it by route template, method and status."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics, routes: Sequence[BaseRoute] = ()) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            # The router writes the matched route into the scope it was given (this one).
            route = scope.get("route")
            template = getattr(route, "path", None) or route_template(self.routes, scope)
            self.metrics.observe(template, scope["method"], status, time.perf_counter() - started)


def _header(scope: Scope, wanted: bytes) -> bytes | None:
    for name, value in scope["headers"]:
        if name == wanted:
            return bytes(value)
    return None


def _loopback_host(host: bytes) -> bool:
    """``127.0.0.1:8765``, ``localhost``, ``[::1]:8765`` and the like; not ``127.0.0.1.evil``."""
    text = host.decode("latin-1")
    name = text if text.endswith("]") else text.rpartition(":")[0] or text
    return is_loopback(name)


def _not_utf8(raw: bytes) -> bool:
    try:
        unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


class RequestShape:
    """Refuses requests whose parts could mean two things.

    Two ``Host`` headers (400, as RFC 9112 §3.2 requires): the checks below and a proxy in
    front could each read a different one. A path or query that is not UTF-8 once
    percent-decoded (422): decoding would replace each bad byte with U+FFFD, so ``%FF%FE`` and
    ``%C0%AF`` would both name the id ``"\ufffd\ufffd"`` and reach (and clear) each other's
    memory.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    @staticmethod
    def _refusal(scope: Scope) -> tuple[int, str, str, str | None] | None:
        hosts = sum(1 for name, _ in scope["headers"] if name == b"host")
        if hosts > 1:
            detail = f"the request has {hosts} Host headers; HTTP allows exactly one"
            return 400, "bad_request", detail, None
        raw_path = scope.get("raw_path")
        if raw_path is not None and _not_utf8(raw_path):
            return 422, "invalid_input", "the path is not UTF-8 once percent-decoded", "path"
        if _not_utf8(scope.get("query_string", b"")):
            return 422, "invalid_input", "the query is not UTF-8 once percent-decoded", "query"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (refusal := self._refusal(scope)) is not None:
            status, code, detail, field = refusal
            response = problem_response(status, code, detail, field=field)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class BrowserGuard:
    """Refuses what another web site can make a browser send to the sidecar.

    Bots and scripts send neither ``Origin`` nor ``Sec-Fetch-Site``; browsers do. A request that
    a page of another origin started (``Sec-Fetch-Site: cross-site`` or ``same-site``, or an
    ``Origin`` that is not this host) is refused, so a site the operator visits cannot post a
    form to ``/v1/janitor`` or read memory with a script. Without a token the sidecar listens on
    loopback only, and then only a loopback ``Host`` is served: a DNS-rebinding page, whose
    requests carry its own host name, gets nothing either.
    """

    def __init__(self, app: ASGIApp, *, token: str | None) -> None:
        self.app = app
        self.check_host = token is None

    def _refusal(self, scope: Scope) -> str | None:
        host = _header(scope, b"host") or b""
        if self.check_host and not _loopback_host(host):
            return "without a token only a loopback Host (127.0.0.1, localhost, [::1]) is served"
        site = _header(scope, b"sec-fetch-site")
        if site is not None and site not in (b"same-origin", b"none"):
            return "requests started by a page of another site are refused"
        origin = _header(scope, b"origin")
        if origin is not None and origin.split(b"://", 1)[-1] != host:
            return "requests from another origin are refused"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The open paths hold no memory: a link from another site to the inspector still works.
        if scope["type"] == "http" and scope["path"] not in OPEN_PATHS:
            reason = self._refusal(scope)
            if reason is not None:
                response = problem_response(403, "forbidden", reason)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class BearerAuth:
    """With a token, every route but the open paths (``/healthz``, ``/readyz``, the inspector's
    files) needs ``Authorization: Bearer <token>``."""

    def __init__(self, app: ASGIApp, *, token: str | None) -> None:
        self.app = app
        self.token = None if token is None else token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.token is None or scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        given = b""
        scheme, _, credentials = (_header(scope, b"authorization") or b"").partition(b" ")
        if scheme.lower() == b"bearer":
            given = credentials.strip()
        # compare_digest: the time taken does not tell how much of a guess was right.
        if not hmac.compare_digest(given, self.token):
            response = problem_response(
                401,
                "unauthorized",
                "a valid 'Authorization: Bearer <token>' header is required",
                headers={"WWW-Authenticate": "Bearer"},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` once a body grows past the limit. An HTTPException, so the
    framework's body parsing passes it on to the error handlers instead of making it a 400."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is larger than {limit} bytes")


class BodyLimit:
    """Refuses bodies over ``max_bytes`` with 413: at once from ``Content-Length``, and for a
    body without one (chunked) as soon as the bytes received pass the limit."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes
        declared = _header(scope, b"content-length") or b""
        if declared.isdigit() and int(declared) > limit:  # the server refuses a bad one
            await self._refuse(scope, receive, send)
            return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if started:
                raise
            await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        detail = f"the request body is larger than {self.max_bytes} bytes"
        # The unread body stays unread: the connection is closed after this answer.
        response = problem_response(
            413, "payload_too_large", detail, headers={"Connection": "close"}
        )
        await response(scope, receive, send)
