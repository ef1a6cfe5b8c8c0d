"""Every error the sidecar answers, mapped to a status code in this one place.

::

    two Host headers                          400  bad_request         (middleware)
    RequestValidationError, InvalidInput      422  invalid_input (names the field)
    a path or query not UTF-8 once decoded    422  invalid_input       (middleware)
    undecodable JSON body                     422  invalid_json
    NotFound (a turn id, an entry), no route  404  not_found
    Busy (a turn another request holds)       409  turn_busy           (Retry-After: its lease)
    method not allowed                        405  method_not_allowed
    body over max_body_bytes                  413  payload_too_large   (middleware)
    missing or wrong bearer token             401  unauthorized        (middleware)
    StoreUnavailable                          503  store_unavailable   (Retry-After: 1)
    CacheUnavailable (the hot tier, Redis)    503  cache_unavailable   (Retry-After: 1)
    anything else                             500  internal_error      (no details leak)

Each answer is a :class:`~shortterm.sidecar.schemas.Problem` JSON body, encoded as ASCII so
that no input echoed in a message can make the response itself fail to encode, and with lone
surrogates replaced (an echoed ``\\ud800`` escape is valid JSON, but strict parsers refuse it).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import compile_path

from ..memory.engine.health import Seen
from ..model.errors import CacheUnavailable, InvalidInput, ShortTermError, StoreUnavailable
from .schemas import Problem
from .schemas.base import valid_json

__all__ = [
    "CAPTURED_DOC",
    "DEGRADED",
    "DEGRADED_HEADER",
    "READ_DOC",
    "STARTED_DOC",
    "Busy",
    "NotFound",
    "degraded_headers",
    "install_error_handlers",
    "openapi_errors",
    "problem_response",
]

log = logging.getLogger("shortterm.sidecar")

# On a success the hot tier served alone while the durable tier failed: the answer is a
# success (the dialogue was kept, the context or entry read, from the hot tier), but the
# caller that made it learns that the durable tier had no part in it.
DEGRADED_HEADER = "Shortterm-Degraded"
DEGRADED = {DEGRADED_HEADER: "store"}
_DEGRADED_SCHEMA = {"type": "string", "enum": ["store"]}


def degraded_doc(description: str, served: str) -> dict[str, Any]:
    """The OpenAPI entry of a success that may carry ``Shortterm-Degraded: store``;
    ``served``: what the hot tier did alone."""
    return {
        "description": description,
        "headers": {
            DEGRADED_HEADER: {
                "description": f"Present when the durable tier failed: `store`. {served} "
                "/healthz says `degraded: true` while it lasts.",
                "schema": _DEGRADED_SCHEMA,
            }
        },
    }


CAPTURED_DOC = degraded_doc(
    "Captured (or skipped: a stopped turn, no reply, a full-privacy user).",
    "The dialogue was kept in the hot tier only (until its TTL or a restart) and the turn "
    "counter's step was lost;",
)
STARTED_DOC = degraded_doc(
    "The turn, its context and tools.",
    "The context was read from the hot tier alone (a scope it lacks shows nothing);",
)
READ_DOC = degraded_doc(
    "What is remembered.",
    "It was read from the hot tier alone;",
)


def degraded_headers(seen: Seen, known_down: bool) -> dict[str, str] | None:
    """``Shortterm-Degraded: store`` for an answer the hot tier served alone: the call met a
    durable failure (``seen``, see ``health.watching``), or the process knows the durable
    tier is failing (``known_down``: what /healthz says)."""
    return DEGRADED if seen.reason is not None or known_down else None


class NotFound(LookupError):
    """A thing the request names does not exist (now)."""


class Busy(Exception):
    """Another request holds what this one needs, for at most ``retry_after_s`` more: the
    same request sent again after that is served (a holder that died is taken over)."""

    def __init__(self, message: str, *, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def problem_response(
    status: int,
    code: str,
    detail: str,
    *,
    field: str | None = None,
    errors: Sequence[Mapping[str, str]] = (),
    headers: Mapping[str, str] | None = None,
) -> Response:
    body = valid_json({"code": code, "detail": detail, "field": field, "errors": list(errors)})
    return Response(
        json.dumps(body).encode(), status, headers=headers, media_type="application/json"
    )


def field_name(loc: Sequence[int | str]) -> str:
    """``("body", "history", 0, "role")`` → ``"history[0].role"``."""
    parts = list(loc)
    if parts and parts[0] in ("body", "query", "path", "header", "cookie") and len(parts) > 1:
        parts = parts[1:]
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "body"


async def _validation(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = []
    for error in exc.errors():
        if error.get("type") == "json_invalid":
            reason = error.get("ctx", {}).get("error", "not JSON")
            return problem_response(
                422, "invalid_json", f"the body is not valid JSON: {reason}", field="body"
            )
        message = str(error["msg"])
        if error.get("type") == "string_unicode":
            # A lone surrogate where only fixed words are allowed (text and ids say it their way).
            message = "Input should be valid Unicode (it holds a lone surrogate)"
        errors.append({"field": field_name(error.get("loc", ())), "message": message})
    first = errors[0] if errors else {"field": "body", "message": "invalid"}
    detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors[:5])
    return problem_response(422, "invalid_input", detail, field=first["field"], errors=errors)


async def _invalid(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, InvalidInput)
    errors = [{"field": exc.field, "message": str(exc)}]
    return problem_response(422, "invalid_input", str(exc), field=exc.field, errors=errors)


async def _not_found(request: Request, exc: Exception) -> Response:
    return problem_response(404, "not_found", str(exc))


async def _busy(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Busy)
    # Whole seconds (the header's form), rounded up: a retry any sooner is answered 409 again.
    wait_s = max(1, math.ceil(exc.retry_after_s))
    return problem_response(409, "turn_busy", str(exc), headers={"Retry-After": str(wait_s)})


async def _unavailable(request: Request, exc: Exception) -> Response:
    # A write whose commit went out unanswered may have landed: not "nothing was changed".
    unsure = isinstance(exc, StoreUnavailable) and exc.maybe_applied
    said = "it may have been saved" if unsure else "nothing was changed"
    return problem_response(
        503,
        "store_unavailable",
        f"the memory backend is unavailable, {said}: {exc}",
        headers={"Retry-After": "1"},
    )


async def _cache_unavailable(request: Request, exc: Exception) -> Response:
    # Not "nothing was changed": a capture's durable counter step may be committed already.
    return problem_response(
        503,
        "cache_unavailable",
        f"the hot tier (the Redis cache) is unavailable: {exc}",
        headers={"Retry-After": "1"},
    )


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}


async def _http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400:
        # FastAPI's answer to a body it could not decode (bytes that are not UTF-8, say):
        # the same class of error as malformed JSON, so the same status.
        return problem_response(
            422, "invalid_json", "the body is not valid JSON (or not UTF-8)", field="body"
        )
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    detail = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
    headers = exc.headers
    if exc.status_code == 404 and detail == "Not Found":
        detail = f"no route {request.url.path!r} (see /openapi.json)"
    elif exc.status_code == 405:
        # The router names only the first route of the path; the answer lists them all.
        allowed = _methods_for(request)
        detail = f"{request.method} is not allowed here; use {', '.join(allowed)}"
        headers = {"Allow": ", ".join(allowed)}
    return problem_response(exc.status_code, code, detail, headers=headers)


def _methods_for(request: Request) -> list[str]:
    """The methods the OpenAPI document lists for the requested path."""
    app = request.app
    table = getattr(app.state, "allowed_methods", None)
    if table is None:
        table = [
            (compile_path(template)[0], sorted(m.upper() for m in operations))
            for template, operations in app.openapi()["paths"].items()
        ]
        app.state.allowed_methods = table
    path = request.scope["path"]
    return next((methods for regex, methods in table if regex.match(path)), [])


async def _library(request: Request, exc: Exception) -> Response:
    log.error("shortterm error in %s %s: %s", request.method, request.url.path, exc)
    return problem_response(500, "internal_error", "the sidecar failed; see its log")


async def _crash(request: Request, exc: Exception) -> Response:
    return problem_response(500, "internal_error", "the sidecar failed; see its log")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(InvalidInput, _invalid)
    app.add_exception_handler(NotFound, _not_found)
    app.add_exception_handler(Busy, _busy)
    app.add_exception_handler(StoreUnavailable, _unavailable)
    app.add_exception_handler(CacheUnavailable, _cache_unavailable)  # the most specific wins
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(ShortTermError, _library)
    app.add_exception_handler(Exception, _crash)


# -- the same errors, declared in the OpenAPI document ----------------------------------------

_DOCS: dict[int, tuple[str, str, str]] = {
    401: ("unauthorized", "A bearer token is configured and this request lacks it.",
          "a valid 'Authorization: Bearer <token>' header is required"),
    404: ("not_found", "The turn id or the entry does not exist (or no longer).",
          "turn 'Xq3v…' is unknown or expired: start a new turn"),
    409: ("turn_busy",
          "Another request holds this turn: its capture, or this same update, is under way "
          "(on another replica, or was when that replica died). Send the same request again "
          "after Retry-After: a holder that has not finished by then is taken over.",
          "turn 'Xq3v…' is being captured by another request, on another sidecar replica; "
          "retry in 0.4 s (Retry-After): …"),
    413: ("payload_too_large", "The request body is larger than max_body_bytes.",
          "the request body is larger than 1048576 bytes"),
    422: ("invalid_input", "A field is invalid (named in `field`) or the body is not JSON.",
          "user_id: String should have at least 1 character"),
    503: ("store_unavailable",
          "The durable tier failed (`store_unavailable`; nothing was changed, unless `detail` "
          "says it may have been saved), or the hot tier did (`cache_unavailable`). Retry "
          "after Retry-After.",
          "the memory backend is unavailable, nothing was changed: …"),
}  # fmt: skip


def openapi_errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries for these error statuses, each with the Problem model."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        code, description, detail = _DOCS[status]
        example: dict[str, Any] = {"code": code, "detail": detail, "field": None, "errors": []}
        if status == 422:
            example = {
                "code": code,
                "detail": detail,
                "field": "user_id",
                "errors": [
                    {"field": "user_id", "message": "String should have at least 1 character"}
                ],
            }
        out[status] = {
            "model": Problem,
            "description": description,
            "content": {"application/json": {"example": example}},
        }
    return out
