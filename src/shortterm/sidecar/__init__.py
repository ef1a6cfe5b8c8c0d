"""The HTTP sidecar: the library over JSON, for bots in any language.

::

    settings.py      SidecarSettings (host, port, token, limits), read from SHORTTERM_* once
    schemas/         the pydantic models of every request and response body
    app.py           create_app(memory, settings): routes, middleware, handlers put together
    routes.py        the /v1 routes, one library call each
    owner_routes.py  the routes servers and users share: one table, registered per kind
    params.py        the path and query parameters the routes share
    openapi.py       the OpenAPI document: FastAPI's, patched with examples, bounds, auth
    turns.py         the bounded registry of live turns (unguessable ids, TTL, LRU)
    middleware.py    request metrics, bearer auth, the body limit (pure ASGI)
    errors.py        every error mapped to a status code, in one place
    metrics.py       Prometheus metrics behind a small facade
    run.py           serve(): open the memory, run uvicorn, close the memory

Needs ``pip install -e '.[sidecar]'`` in a shortterm checkout; ``import shortterm`` never loads
any of it.
"""

from __future__ import annotations

from ..model.errors import ExtraMissing

try:
    import fastapi  # noqa: F401
    import prometheus_client  # noqa: F401
    import uvicorn  # noqa: F401
except ModuleNotFoundError as exc:  # pragma: no cover - the dev install has the extra
    raise ExtraMissing("sidecar", exc.name or "fastapi") from exc

from .app import create_app
from .openapi import openapi_document
from .quickstart import quickstart_lines
from .run import serve
from .settings import SidecarSettings, is_loopback

__all__ = [
    "SidecarSettings",
    "create_app",
    "is_loopback",
    "openapi_document",
    "quickstart_lines",
    "serve",
]
