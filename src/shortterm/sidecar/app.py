"""The sidecar application: ``create_app(memory, settings)``.

Each route is one library call (a turn start is ``memory.turn`` plus what the turn renders),
its body a pydantic model from :mod:`.schemas`, its errors mapped in :mod:`.errors`. The app
does not own the memory: whoever opened it closes it (``shortterm serve`` does both).
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Path, Query, Request
from fastapi.responses import Response

from .. import __version__
from ..memory.facade import MAX_SERVERS_PAGE, Memory
from ..model import MAX_ID_CHARS, Entry, ScopeKey
from ..model.errors import InvalidInput
from ..prompt.context import Context
from ..prompt.inject import inject
from .errors import NotFound, install_error_handlers, openapi_errors
from .inspector import build_inspector
from .metrics import CONTENT_TYPE, Metrics
from .middleware import (
    BearerAuth,
    BodyLimit,
    BrowserGuard,
    RequestMetrics,
    RequestShape,
)
from .openapi import build_document
from .schemas import (
    ID_PATTERN,
    CaptureIn,
    ContextOut,
    DeletedOut,
    EntriesOut,
    EntryOut,
    EntryResult,
    HealthOut,
    ServerOut,
    ServerSettingsModel,
    ServersOut,
    SetCategoriesIn,
    SetSummaryIn,
    ToolCallIn,
    ToolResultOut,
    TurnOut,
    TurnStart,
    UserSettingsModel,
)
from .settings import SidecarSettings
from .turns import RedisTurnRegistry, TurnRegistry, Turns

__all__ = ["create_app"]

DESCRIPTION = """\
Working memory for chat bots over HTTP: the `shortterm` library, one route per call.

A bot **starts a turn** (`POST /v1/turns`) and gets a `turn_id`, the memory to splice into its
prompt and the tool definitions; it may **call the tool** with that id (one successful update
per turn, across requests) and ends the turn with a **capture**. The other routes read, edit
and delete what is remembered, and configure servers and users.

With a token configured, every route but `/healthz` needs `Authorization: Bearer <token>`.
Errors share one JSON shape (`code`, `detail`, `field`, `errors`).
"""

TAGS = [
    {"name": "turns", "description": "Start a turn, call the tool, capture."},
    {"name": "entries", "description": "Read and edit what one scope remembers."},
    {"name": "settings", "description": "Per-server and per-user configuration."},
    {"name": "deletion", "description": "Forget channels, users, entries; the janitor."},
    {"name": "service", "description": "Health and metrics."},
]

_ID = {"min_length": 1, "max_length": MAX_ID_CHARS, "pattern": ID_PATTERN}
ServerId = Annotated[str, Path(description="A server (guild) id.", examples=["333"], **_ID)]
UserId = Annotated[str, Path(description="A user id.", examples=["111"], **_ID)]
ChannelId = Annotated[str, Path(description="A channel id.", examples=["222"], **_ID)]
TurnId = Annotated[
    str, Path(description="The id a turn start returned.", min_length=1, max_length=256)
]
PersonaQuery = Annotated[
    str | None,
    Query(description="The persona; omit it for the entry without one.", examples=["7"], **_ID),
]
PersonaFilter = Annotated[
    str | None, Query(description="Only this persona's entries.", examples=["7"], **_ID)
]
ChannelFilter = Annotated[
    str | None, Query(description="Only this channel's entries.", examples=["222"], **_ID)
]
AfterServer = Annotated[
    str | None,
    Query(
        description="Only servers whose id sorts after this one: the `next_after` of the "
        "previous page. Omit it for the first page.",
        examples=["333"],
        **_ID,
    ),
]
PageLimit = Annotated[
    int, Query(ge=1, le=MAX_SERVERS_PAGE, description="The most servers to answer.")
]

METRICS_EXAMPLE = """\
# HELP shortterm_entries Live entries in the hot tier.
# TYPE shortterm_entries gauge
shortterm_entries 2.0
# TYPE shortterm_http_request_duration_seconds histogram
shortterm_http_request_duration_seconds_bucket{le="0.001",method="POST",route="/v1/turns"} 41.0
"""


def _entries_sorted(entries: list[Entry]) -> list[EntryOut]:
    entries.sort(key=lambda e: (e.key.channel_id, e.key.persona_id or ""))
    return [EntryOut.of(e) for e in entries]


async def _known_query(request: Request) -> None:
    """Refuse query parameters a route does not take, and repeated ones: a misspelt
    ``persona`` must not turn a delete of one persona's entry into another's."""
    if not request.scope["query_string"]:
        return
    route = request.scope["route"]
    allowed = {p.alias for p in route.dependant.query_params}
    seen: set[str] = set()
    for name, value in request.query_params.multi_items():
        if name not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            raise InvalidInput(name, value, f"not a parameter of this route (it takes: {known})")
        if name in seen:
            raise InvalidInput(name, value, "a parameter given at most once")
        seen.add(name)


def _splice(messages: list[dict[str, Any]], ctx: Context, body: TurnStart) -> list[dict[str, Any]]:
    try:
        return inject(messages, ctx, format=body.messages_format)
    except InvalidInput as exc:
        field = "messages" + exc.field.removeprefix("dialogue")
        raise InvalidInput(field, exc.value, exc.allowed) from None


def _build_router(memory: Memory, turns: Turns, settings: SidecarSettings) -> APIRouter:
    router = APIRouter(prefix="/v1", dependencies=[Depends(_known_query)])
    auth = (401,) if settings.token is not None else ()
    common = openapi_errors(*auth, 422, 503)
    with_missing = openapi_errors(*auth, 404, 422, 503)
    with_body = openapi_errors(*auth, 413, 422, 503)
    with_body_missing = openapi_errors(*auth, 404, 413, 422, 503)

    # -- turns -------------------------------------------------------------------------------

    @router.post(
        "/turns",
        status_code=201,
        tags=["turns"],
        responses=with_body,
        summary="Start a turn",
        response_model=TurnOut,
    )
    async def start_turn(body: TurnStart) -> Response:
        """Start a turn and render what memory adds to its prompt.

        Returns the `turn_id` for the tool-call and capture routes, the context (items, nudge
        and depths; see the prompt-format document), the tool definitions in `tools_format`
        (empty when the turn may not use the tool) and whether the cadence asks for an update.
        With `messages`, also that prompt with the memory spliced in.
        """
        turn = memory.turn(**body.turn_kwargs())
        ctx = await turn.context(max_tokens=body.max_tokens)
        spliced = None if body.messages is None else _splice(body.messages, ctx, body)
        tools = turn.tools(body.tools_shape)
        due = await turn.maintenance_due()
        turn_id = await turns.add(turn)
        extra = {} if spliced is None else {"messages": spliced}
        out = TurnOut(
            turn_id=turn_id,
            expires_in_s=settings.turn_ttl_s,
            context=ContextOut.of(ctx),
            tools=tools,
            maintenance_due=due,
            **extra,
        )
        # Serialized once, here: the framework's own path would dump the model, validate the
        # dump and dump it again, three passes over a spliced prompt. Unset means "no
        # messages were asked for", so the field is left out rather than null.
        body_json = out.model_dump_json(exclude_unset=True)
        return Response(body_json, status_code=201, media_type="application/json")

    @router.post(
        "/turns/{turn_id}/tool-calls",
        tags=["turns"],
        responses=with_body_missing,
        summary="Call the tool for a turn",
    )
    async def call_tool(turn_id: TurnId, body: ToolCallIn) -> ToolResultOut:
        """Run a tool call the model made during this turn.

        A refusal is not an HTTP error: `ok` is false and `message` says why, for the model.
        One update succeeds per turn, however many requests ask.
        """
        result = await (await turns.get(turn_id)).call_tool(body.name, body.arguments)
        return ToolResultOut(ok=result.ok, message=result.message)

    @router.post(
        "/turns/{turn_id}/capture",
        status_code=204,
        tags=["turns"],
        responses=with_body_missing,
        summary="Capture a turn",
    )
    async def capture(turn_id: TurnId, body: CaptureIn) -> Response:
        """Keep the recent dialogue of this turn and end it (its id is released).

        Replaces the stored messages of the turn's scopes with the newest `max_messages` of
        `history` + `replies`; skipped (still 204) for stopped turns, turns without replies and
        full-privacy users.
        """
        history, replies = body.library_args()
        turn = await turns.begin_capture(turn_id)
        captured = False
        try:
            await turn.capture(history=history, replies=replies, stopped=body.stopped)
            captured = True
        finally:
            await turns.end_capture(turn_id, captured=captured)
        return Response(status_code=204)

    # -- entries -----------------------------------------------------------------------------

    async def listed(
        kind: Literal["server", "user"],
        owner_id: str,
        channel_id: str | None,
        persona_id: str | None,
    ) -> EntriesOut:
        found = await memory.owner_entries(kind, owner_id)
        picked = [
            e
            for e in found
            if (channel_id is None or e.key.channel_id == channel_id)
            and (persona_id is None or e.key.persona_id == persona_id)
        ]
        return EntriesOut(entries=_entries_sorted(picked), now=memory.clock())

    async def one(key: ScopeKey) -> EntryOut:
        entry = await memory.get(key)
        if entry is None:
            raise NotFound(
                f"nothing is remembered for {key.kind} {key.owner_id!r} in channel "
                f"{key.channel_id!r} (persona {key.persona_id!r})"
            )
        return EntryOut.of(entry)

    def result(entry: Entry | None) -> EntryResult:
        return EntryResult(entry=None if entry is None else EntryOut.of(entry))

    list_text = (
        "Every live entry of {what}, optionally one channel's or one persona's, ordered by "
        "channel and persona. Read through the owner index: the cost grows with this owner's "
        "entries only."
    )
    get_text = (
        "What {what} remembers in one channel for one persona (`persona_id` omitted: the "
        "entry without a persona); 404 when nothing is live."
    )
    summary_text = (
        "An admin edit of {what}: replaces the summary (`null` clears it), durable when it "
        "returns. Answers the entry as it is afterwards, or `null` when nothing is live."
    )
    categories_text = (
        "An admin edit of {what}: replaces every category value (blank values are dropped), "
        "durable when it returns. Answers the entry as it is afterwards."
    )
    shared, personal = "a server's shared memory", "a user's personal memory"

    @router.get("/servers", tags=["entries"], responses=common, summary="List servers with memory")
    async def list_servers(after: AfterServer = None, limit: PageLimit = 100) -> ServersOut:
        """The servers that have durable shared (server-scope) memory, ordered by id, a page
        at a time: each with its name, its number of rows and its newest write. When the page
        is full, `next_after` is its last id; pass it as `after` for the next page. One
        indexed range per page, so the cost follows the page, not the store."""
        page = await memory.servers(after=after, limit=limit)
        next_after = page[-1].server_id if len(page) == limit else None
        return ServersOut(servers=[ServerOut.of(s) for s in page], next_after=next_after)

    @router.get(
        "/servers/{server_id}/entries",
        tags=["entries"],
        responses=common,
        summary="List a server's entries",
        description=list_text.format(what=shared),
    )
    async def list_server_entries(
        server_id: ServerId, channel_id: ChannelFilter = None, persona_id: PersonaFilter = None
    ) -> EntriesOut:
        return await listed("server", server_id, channel_id, persona_id)

    @router.get(
        "/users/{user_id}/entries",
        tags=["entries"],
        responses=common,
        summary="List a user's entries",
        description=list_text.format(what=personal),
    )
    async def list_user_entries(
        user_id: UserId, channel_id: ChannelFilter = None, persona_id: PersonaFilter = None
    ) -> EntriesOut:
        return await listed("user", user_id, channel_id, persona_id)

    @router.get(
        "/servers/{server_id}/channels/{channel_id}/entry",
        tags=["entries"],
        responses=with_missing,
        summary="Get a channel's shared entry",
        description=get_text.format(what=shared),
    )
    async def get_server_entry(
        server_id: ServerId, channel_id: ChannelId, persona_id: PersonaQuery = None
    ) -> EntryOut:
        return await one(ScopeKey.server(server_id, channel_id, persona_id))

    @router.get(
        "/users/{user_id}/channels/{channel_id}/entry",
        tags=["entries"],
        responses=with_missing,
        summary="Get a user's entry in a channel",
        description=get_text.format(what=personal),
    )
    async def get_user_entry(
        user_id: UserId, channel_id: ChannelId, persona_id: PersonaQuery = None
    ) -> EntryOut:
        return await one(ScopeKey.user(user_id, channel_id, persona_id))

    @router.put(
        "/servers/{server_id}/channels/{channel_id}/entry/summary",
        tags=["entries"],
        responses=with_body,
        summary="Replace the summary of a shared entry",
        description=summary_text.format(what=shared),
    )
    async def set_server_summary(
        server_id: ServerId,
        channel_id: ChannelId,
        body: SetSummaryIn,
        persona_id: PersonaQuery = None,
    ) -> EntryResult:
        key = ScopeKey.server(server_id, channel_id, persona_id)
        return result(await memory.set_summary(key, body.summary))

    @router.put(
        "/users/{user_id}/channels/{channel_id}/entry/summary",
        tags=["entries"],
        responses=with_body,
        summary="Replace the summary of a user's entry",
        description=summary_text.format(what=personal),
    )
    async def set_user_summary(
        user_id: UserId, channel_id: ChannelId, body: SetSummaryIn, persona_id: PersonaQuery = None
    ) -> EntryResult:
        key = ScopeKey.user(user_id, channel_id, persona_id)
        return result(await memory.set_summary(key, body.summary))

    @router.put(
        "/servers/{server_id}/channels/{channel_id}/entry/categories",
        tags=["entries"],
        responses=with_body,
        summary="Replace the category values of a shared entry",
        description=categories_text.format(what=shared),
    )
    async def set_server_categories(
        server_id: ServerId,
        channel_id: ChannelId,
        body: SetCategoriesIn,
        persona_id: PersonaQuery = None,
    ) -> EntryResult:
        key = ScopeKey.server(server_id, channel_id, persona_id)
        return result(await memory.set_categories(key, body.categories))

    @router.put(
        "/users/{user_id}/channels/{channel_id}/entry/categories",
        tags=["entries"],
        responses=with_body,
        summary="Replace the category values of a user's entry",
        description=categories_text.format(what=personal),
    )
    async def set_user_categories(
        user_id: UserId,
        channel_id: ChannelId,
        body: SetCategoriesIn,
        persona_id: PersonaQuery = None,
    ) -> EntryResult:
        key = ScopeKey.user(user_id, channel_id, persona_id)
        return result(await memory.set_categories(key, body.categories))

    # -- settings ----------------------------------------------------------------------------

    @router.get(
        "/servers/{server_id}/settings",
        tags=["settings"],
        responses=common,
        summary="Get a server's settings",
    )
    async def get_server_settings(server_id: ServerId) -> ServerSettingsModel:
        """The server's settings; the defaults when it was never configured."""
        return ServerSettingsModel.of(await memory.server_settings(server_id))

    @router.put(
        "/servers/{server_id}/settings",
        tags=["settings"],
        responses=with_body,
        summary="Replace a server's settings",
    )
    async def put_server_settings(
        server_id: ServerId, body: ServerSettingsModel
    ) -> ServerSettingsModel:
        """Replace the server's settings (missing fields take their defaults). Durable when it
        returns; other processes see the change within `settings_refresh_s`."""
        settings_ = body.to_library()
        await memory.configure_server(server_id, settings_)
        return ServerSettingsModel.of(settings_)

    @router.get(
        "/users/{user_id}/settings",
        tags=["settings"],
        responses=common,
        summary="Get a user's settings",
    )
    async def get_user_settings(user_id: UserId) -> UserSettingsModel:
        """The user's privacy level and cross-server opt-in; the defaults when never set."""
        return UserSettingsModel.of(await memory.user_settings(user_id))

    @router.put(
        "/users/{user_id}/settings",
        tags=["settings"],
        responses=with_body,
        summary="Replace a user's settings",
    )
    async def put_user_settings(user_id: UserId, body: UserSettingsModel) -> UserSettingsModel:
        """Replace the user's settings. Choosing `privacy: "full"` also forgets everything
        already kept about the user, as `DELETE /v1/users/{user_id}` does."""
        settings_ = body.to_library()
        await memory.configure_user(user_id, settings_)
        return UserSettingsModel.of(settings_)

    # -- deletion ----------------------------------------------------------------------------

    @router.delete(
        "/channels/{channel_id}", tags=["deletion"], responses=common, summary="Forget a channel"
    )
    async def clear_channel(channel_id: ChannelId) -> DeletedOut:
        """Forget a channel: every user, persona and scope of it, in both tiers."""
        return DeletedOut(deleted=await memory.clear_channel(channel_id))

    @router.delete("/users/{user_id}", tags=["deletion"], responses=common, summary="Forget a user")
    async def clear_user(user_id: UserId) -> DeletedOut:
        """Forget a user: their personal scopes, and every message they wrote from every other
        entry. Counts the scopes deleted plus the entries scrubbed."""
        return DeletedOut(deleted=await memory.clear_user(user_id))

    @router.delete(
        "/servers/{server_id}/channels/{channel_id}",
        tags=["deletion"],
        responses=common,
        summary="Forget a channel's shared memory",
    )
    async def clear_server_channel(
        server_id: ServerId, channel_id: ChannelId, persona_id: PersonaQuery = None
    ) -> DeletedOut:
        """Forget one server-scope entry: the channel's shared memory for one persona
        (`persona_id` omitted: the entry without a persona)."""
        deleted = await memory.clear_server_channel(server_id, channel_id, persona_id)
        return DeletedOut(deleted=deleted)

    @router.post("/janitor", tags=["deletion"], responses=common, summary="Run the janitor")
    async def janitor(
        retention_days: Annotated[
            int | None,
            Query(ge=0, le=36500, description="Default: the memory's janitor_retention_days."),
        ] = None,
    ) -> DeletedOut:
        """Delete durable rows untouched for `retention_days`; counts the rows deleted."""
        return DeletedOut(deleted=await memory.janitor(retention_days))

    @router.post("/sweep", tags=["deletion"], responses=common, summary="Sweep expired entries")
    async def sweep() -> DeletedOut:
        """Drop expired hot-tier entries now (a background sweeper also does it)."""
        return DeletedOut(deleted=await memory.sweep())

    return router


def _registry(memory: Memory, settings: SidecarSettings) -> Turns:
    """Turns shared through the cache's Redis when there is one (any replica serves any
    turn), else kept in this process."""
    ttl_s, max_turns = settings.turn_ttl_s, settings.max_turns
    if memory.cache.shared:
        from ..cache.redis import RedisCache

        if isinstance(memory.cache, RedisCache):
            return RedisTurnRegistry(memory, memory.cache, ttl_s=ttl_s, max_turns=max_turns)
    return TurnRegistry(ttl_s=ttl_s, max_turns=max_turns, clock=memory.clock)


def create_app(memory: Memory, settings: SidecarSettings | None = None) -> FastAPI:
    """The sidecar for an open ``memory``. Refuses a non-loopback ``settings.host`` without
    a token (:class:`shortterm.ConfigError`)."""
    chosen = settings if settings is not None else SidecarSettings()
    if not isinstance(chosen, SidecarSettings):
        raise InvalidInput("settings", settings, "a shortterm.sidecar.SidecarSettings")
    chosen.check_exposure()
    turns = _registry(memory, chosen)
    metrics = Metrics(memory.stats, turns)
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
    app.include_router(_build_router(memory, turns, chosen))
    app.include_router(build_inspector())

    @app.get("/healthz", tags=["service"], summary="Liveness")
    async def healthz() -> HealthOut:
        """Answers while the process serves; never needs a token. `degraded` is true while
        the durable tier is failing (reads then come from the hot tier alone)."""
        return HealthOut(status="ok", degraded=bool(memory.stats().get("degraded", False)))

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
        bytes, evictions, expirations, store errors, captures, upgrades, live turn ids."""
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    install_error_handlers(app)
    # Added innermost first: metrics see every answer; the request's shape is checked before
    # anything reads its Host or path; the browser guard and auth run before any body is read.
    app.add_middleware(BodyLimit, max_bytes=chosen.max_body_bytes)
    app.add_middleware(BearerAuth, token=chosen.token)
    app.add_middleware(BrowserGuard, token=chosen.token)
    app.add_middleware(RequestShape)
    app.add_middleware(RequestMetrics, metrics=metrics)
    return app
