"""The sidecar application: ``create_app(memory, settings)``.

The app puts together the ``/v1`` routes (:mod:`.routes`), the inspector, the service routes,
the error handlers, the middleware and the patched OpenAPI document (:mod:`.openapi`). It
does not own the memory: whoever opened it closes it (``shortterm serve`` does both).
"""

from __future__ import annotations

import functools
import hmac
from typing import TYPE_CHECKING

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.routing import Route

from .. import __version__
from ..memory.facade import Memory
from ..model.errors import InvalidInput
from .errors import install_error_handlers, openapi_errors
from .inspector import build_inspector
from .metrics import CONTENT_TYPE, Metrics, backend_labels
from .middleware import BearerAuth, BodyLimit, BrowserGuard, RequestMetrics, RequestShape
from .openapi import build_document
from .readiness import Readiness, Verdict
from .routes import build_router
from .schemas import HealthOut, ReadyOut
from .settings import SidecarSettings
from .turns import RedisTurnRegistry, TurnRegistry, Turns

if TYPE_CHECKING:
    from ..cache.redis import RedisCache

__all__ = ["create_app"]

DESCRIPTION = """\
Working memory for chat bots over HTTP: the `shortterm` library, one route per call.

A bot **starts a turn** (`POST /v1/turns`) and gets a `turn_id`, the memory to splice into its
prompt and the tool definitions; it may **call the tool** with that id (one successful update
per turn, across requests) and ends the turn with a **capture**. The other routes read, edit
and delete what is remembered, and configure servers and users.

With a token configured, every route but `/healthz` and `/readyz` needs
`Authorization: Bearer <token>`.
Errors share one JSON shape (`code`, `detail`, `field`, `errors`).
"""

TAGS = [
    {"name": "turns", "description": "Start a turn, call the tool, capture."},
    {"name": "entries", "description": "Read and edit what one scope remembers."},
    {"name": "settings", "description": "Per-server and per-user configuration."},
    {"name": "deletion", "description": "Forget channels, users, entries; the janitor."},
    {"name": "service", "description": "Health and metrics."},
]

METRICS_EXAMPLE = """\
# HELP shortterm_entries Live entries in the hot tier.
# TYPE shortterm_entries gauge
shortterm_entries 2.0
# TYPE shortterm_http_request_duration_seconds histogram
shortterm_http_request_duration_seconds_bucket{le="0.001",method="POST",route="/v1/turns"} 41.0
"""


def _registry(memory: Memory, settings: SidecarSettings) -> Turns:
    """Turns shared through the cache's Redis when there is one (any replica serves any
    turn), else kept in this process."""
    ttl_s, max_turns = settings.turn_ttl_s, settings.max_turns
    if memory.cache.shared:
        from ..cache.redis import RedisCache

        if isinstance(memory.cache, RedisCache):
            lease_s = _lease_s(memory, memory.cache)
            return RedisTurnRegistry(
                memory, memory.cache, ttl_s=ttl_s, max_turns=max_turns, lease_s=lease_s
            )
    return TurnRegistry(ttl_s=ttl_s, max_turns=max_turns, clock=memory.clock)


_UNBOUNDED_S = 30.0  # for a tier without a bound of its own: PostgreSQL's default


def _lease_s(memory: Memory, cache: RedisCache) -> float:
    """How long a claim on a shared turn (a capture, an update) stays its owner's before
    another replica may take it over: one durable operation and one Redis call, each at its
    bound (PostgreSQL's ``operation_timeout_s``, the Redis URL's socket timeout and retries).
    An owner slower than that is taken over all the same: its capture is done again, its
    update fenced off (it answers ``ok: false``), so no update lands twice."""
    store_s = getattr(memory.store, "operation_timeout_s", None)
    if not isinstance(store_s, int | float):
        store_s = _UNBOUNDED_S
    return float(store_s) + (cache.call_timeout_s or _UNBOUNDED_S)


def _ready_body(verdict: Verdict, *, detailed: bool) -> ReadyOut:
    def shown(reason: str | None) -> str:
        if reason is None:
            return "ok"
        return reason if detailed else "unavailable (send the token for the reason)"

    return ReadyOut(
        status="ready" if verdict.ready else "not_ready",
        store=shown(verdict.store),
        cache=shown(verdict.cache),
    )


def _has_token(request: Request, token: str | None) -> bool:
    """Whether the request may read the reasons: a driver's message names hosts and ports,
    and /readyz is served without a token."""
    if token is None:
        return True
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), token)


def create_app(memory: Memory, settings: SidecarSettings | None = None) -> FastAPI:
    """The sidecar for an open ``memory``. Refuses a non-loopback ``settings.host`` without
    a token (:class:`shortterm.ConfigError`)."""
    chosen = settings if settings is not None else SidecarSettings()
    if not isinstance(chosen, SidecarSettings):
        raise InvalidInput("settings", settings, "a shortterm.sidecar.SidecarSettings")
    chosen.check_exposure()
    turns = _registry(memory, chosen)
    readiness = Readiness(memory)
    metrics = Metrics(
        memory.stats,
        turns,
        ready=lambda: readiness.last,
        backends=backend_labels(memory.store, memory.cache),
    )
    app = FastAPI(
        title="shortterm sidecar",
        version=__version__,
        description=DESCRIPTION,
        openapi_tags=TAGS,
        docs_url=None,  # the viewers load scripts from the internet; /openapi.json is enough
        redoc_url=None,
        generate_unique_id_function=lambda route: route.name,
    )
    secured = chosen.token is not None
    app.openapi = functools.partial(build_document, app, secured, memory.config)  # type: ignore[method-assign]
    app.state.memory = memory
    app.state.turns = turns
    app.state.metrics = metrics
    app.state.settings = chosen
    api, inspector = build_router(memory, turns, chosen), build_inspector()
    app.include_router(api)
    app.include_router(inspector)

    # cache_degraded is left out while false: the healthy answer stays what it always was.
    @app.get("/healthz", tags=["service"], summary="Liveness", response_model_exclude_defaults=True)
    async def healthz() -> HealthOut:
        """Answers while the process serves; never needs a token. `degraded` is true while
        the durable tier is failing (reads then come from the hot tier alone);
        `cache_degraded` is present, and true, while the hot tier is failing (turns then
        fail with 503 `cache_unavailable`)."""
        stats = memory.stats()
        return HealthOut(
            status="ok",
            degraded=bool(stats.get("degraded", False)),
            cache_degraded=bool(stats.get("cache_degraded", False)),
        )

    @app.get(
        "/readyz",
        tags=["service"],
        summary="Readiness",
        response_model=ReadyOut,
        responses={503: {"model": ReadyOut, "description": "The store or the cache is down."}},
    )
    async def readyz(request: Request) -> JSONResponse:
        """200 once the store and the cache both answer, 503 while either does not; never
        needs a token. Each is probed with one cheap read bounded by 1 s, at most once a
        second, so no traffic is needed for it to change. With a token configured, the
        reasons are shown only to requests that send it."""
        verdict = await readiness.check()
        body = _ready_body(verdict, detailed=_has_token(request, chosen.token))
        return JSONResponse(body.model_dump(), 200 if verdict.ready else 503)

    @app.get(
        "/metrics",
        tags=["service"],
        summary="Prometheus metrics",
        response_class=Response,
        responses={
            200: {
                "description": "Prometheus text exposition format.",
                "content": {"text/plain": {"example": METRICS_EXAMPLE}},
            },
            **openapi_errors(*((401,) if chosen.token is not None else ())),
        },
    )
    async def prometheus() -> Response:
        """Request latency per route, and the memory's figures read at scrape time: entries,
        bytes, evictions, expirations, store errors, captures, upgrades, live turn ids, and
        each tier's readiness (probed at most once a second)."""
        await readiness.check()  # the tiers as of this scrape (a probe at most once a second)
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    install_error_handlers(app)
    # Added innermost first: metrics see every answer; the request's shape is checked before
    # anything reads its Host or path; the browser guard and auth run before any body is read.
    app.add_middleware(BodyLimit, max_bytes=chosen.max_body_bytes)
    app.add_middleware(BearerAuth, token=chosen.token)
    app.add_middleware(BrowserGuard, token=chosen.token)
    app.add_middleware(RequestShape)
    # Every route, flat, for naming the route of a request refused before routing.
    routes = [*api.routes, *inspector.routes, *(r for r in app.routes if isinstance(r, Route))]
    app.add_middleware(RequestMetrics, metrics=metrics, routes=routes)
    return app
