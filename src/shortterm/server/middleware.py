"""Pure ASGI middleware, outermost first: request metrics, bearer auth, the body limit.

They run before routing and before any body is read, so an unauthenticated or oversized
request costs neither a route lookup nor a buffered body.
"""

from __future__ import annotations

import hmac
import time
from typing import TYPE_CHECKING

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import problem_response

if TYPE_CHECKING:
    from .metrics import Metrics

__all__ = ["BearerAuth", "BodyLimit", "BodyTooLarge", "RequestMetrics"]

OPEN_PATHS = frozenset({"/healthz"})


class RequestMetrics:
    """Times every HTTP request and counts it by route template, method and status."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

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
            template = getattr(route, "path", None) or "unmatched"
            self.metrics.observe(template, scope["method"], status, time.perf_counter() - started)


class BearerAuth:
    """With a token, every route but ``/healthz`` needs ``Authorization: Bearer <token>``."""

    def __init__(self, app: ASGIApp, *, token: str | None) -> None:
        self.app = app
        self.token = None if token is None else token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.token is None or scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        given = b""
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, credentials = value.partition(b" ")
                if scheme.lower() == b"bearer":
                    given = credentials.strip()
                break
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
        for name, value in scope["headers"]:
            if name == b"content-length":
                if value.isdigit() and int(value) > limit:  # the server refuses a bad one
                    await self._refuse(scope, receive, send)
                    return
                break
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
