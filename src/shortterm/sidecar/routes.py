"""The ``/v1`` routes: each one library call (a turn start is ``memory.turn`` plus what the
turn renders), its body a pydantic model from :mod:`.schemas`, its errors mapped in
:mod:`.errors`. The routes servers and users share come from the table in
:mod:`.owner_routes`.
"""

from __future__ import annotations

import functools
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from ..memory.engine.health import watching
from ..memory.facade import Memory
from ..model.errors import InvalidInput
from ..prompt.context import Context
from ..prompt.inject import inject
from .errors import (
    CAPTURED_DOC,
    DEGRADED,
    READ_DOC,
    STARTED_DOC,
    degraded_headers,
    openapi_errors,
)
from .owner_routes import add_owner_routes
from .params import (
    AfterServer,
    ChannelId,
    ForgetAt,
    PageLimit,
    PersonaQuery,
    RetentionDays,
    ServerId,
    TurnId,
    UserId,
)
from .schemas import (
    CaptureIn,
    ContextOut,
    DeletedOut,
    ServerOut,
    ServersOut,
    ToolCallIn,
    ToolResultOut,
    TurnOut,
    TurnStart,
)
from .settings import SidecarSettings
from .turns import Turns, call_digest

__all__ = ["build_router"]


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


def build_router(memory: Memory, turns: Turns, settings: SidecarSettings) -> APIRouter:
    router = APIRouter(prefix="/v1", dependencies=[Depends(_known_query)])
    auth = (401,) if settings.token is not None else ()
    common = openapi_errors(*auth, 422, 503)
    with_missing = openapi_errors(*auth, 404, 422, 503)
    with_body = openapi_errors(*auth, 413, 422, 503)
    turn_call = openapi_errors(*auth, 404, 409, 413, 422, 503)  # 409: another request holds it

    # -- turns -------------------------------------------------------------------------------

    turn_route = functools.partial(router.post, tags=["turns"])

    @turn_route(
        "/turns",
        status_code=201,
        responses={**with_body, 201: STARTED_DOC},
        summary="Start a turn",
        response_model=TurnOut,
    )
    async def start_turn(body: TurnStart) -> Response:
        """Start a turn and render what memory adds to its prompt.

        Returns the `turn_id` for the tool-call and capture routes, the context (items, nudge
        and depths; see the prompt-format document), the tool definitions in `tools_format`
        (empty when the turn may not use the tool) and whether the cadence asks for an update.
        With `messages`, also that prompt with the memory spliced in. With
        `Shortterm-Degraded: store` the durable tier failed: the context was read from the hot
        tier alone.
        """
        turn = memory.turn(**body.turn_kwargs())
        adding = turns.add(turn)  # a shared registry sends it with the context's first read
        try:
            with watching() as seen:
                ctx = await turn.context(max_tokens=body.max_tokens)
            spliced = None if body.messages is None else _splice(body.messages, ctx, body)
            tools = turn.tools(body.tools_shape)
        except BaseException:
            adding.drop()
            raise
        turn_id = await adding.result()
        # The context asks for an update exactly when the maintenance is due (the tool is
        # offered and the counter reached the cadence): its nudge says so, with no new read.
        due = ctx.nudge is not None
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
        return Response(
            body_json,
            status_code=201,
            media_type="application/json",
            headers=degraded_headers(seen, memory.health.degraded),
        )

    @turn_route(
        "/turns/{turn_id}/tool-calls",
        responses=turn_call,
        summary="Call the tool for a turn",
    )
    async def call_tool(turn_id: TurnId, body: ToolCallIn) -> ToolResultOut:
        """Run a tool call the model made during this turn.

        A refusal is not an HTTP error: `ok` is false and `message` says why, for the model.
        One update succeeds per turn, however many requests ask. The same call sent again
        while the first is being saved (its replica may have died) is a 409 until that
        request's claim runs out (`Retry-After`); then the retry saves it, once.
        """
        async with turns.tool_call(turn_id, call=call_digest(body.name, body.arguments)) as turn:
            result = await turn.call_tool(body.name, body.arguments)
        return ToolResultOut(ok=result.ok, message=result.message)

    @turn_route(
        "/turns/{turn_id}/capture",
        status_code=204,
        responses={**turn_call, 204: CAPTURED_DOC},
        summary="Capture a turn",
    )
    async def capture(turn_id: TurnId, body: CaptureIn) -> Response:
        """Keep the recent dialogue of this turn and end it (its id is released).

        Replaces the stored messages of the turn's scopes with the newest `max_messages` of
        `history` + `replies`; skipped (still 204) for stopped turns, turns without replies and
        full-privacy users. While another request captures the turn, a 409 until its claim
        runs out (`Retry-After`); then the capture is done again (its replica may have died).
        With `Shortterm-Degraded: store` the durable tier failed: the dialogue was kept in the
        hot tier only (until its TTL or a restart), the turn counter's step was lost.
        """
        history, replies = body.library_args()
        claimed = await turns.begin_capture(turn_id)
        ending = turns.end_with_capture(turn_id)  # sent with the capture's own pipeline
        try:
            captured = await claimed.turn.capture(
                history=history, replies=replies, stopped=body.stopped
            )
            await ending.result()  # alone when nothing was written (a skipped capture)
        except BaseException:
            # The claim is given back so the capture can be retried, at once, or once Redis
            # is back when it failed too (unless the end already went out with a pipeline
            # whose capture then failed: the next turn's capture carries the same dialogue).
            ending.drop()
            await turns.give_back_capture(turn_id, claimed.token)
            raise
        # Said to the caller that made it, not only in /healthz and the metrics.
        return Response(status_code=204, headers=DEGRADED if captured.degraded else None)

    # -- entries and settings ----------------------------------------------------------------

    @router.get("/servers", tags=["entries"], responses=common, summary="List servers with memory")
    async def list_servers(after: AfterServer = None, limit: PageLimit = 100) -> ServersOut:
        """The servers that have durable shared (server-scope) memory, ordered by id, a page
        at a time: each with its name, its number of rows and its newest write. When the page
        is full, `next_after` is its last id; pass it as `after` for the next page. One
        indexed range per page, so the cost follows the page, not the store."""
        page = await memory.servers(after=after, limit=limit)
        next_after = page[-1].server_id if len(page) == limit else None
        return ServersOut(servers=[ServerOut.of(s) for s in page], next_after=next_after)

    add_owner_routes(
        router,
        memory,
        {
            "common": common,
            "with_missing": with_missing,
            "with_body": with_body,
            # Entry reads: from the hot tier alone while the durable tier fails, saying so.
            "read": {**common, 200: READ_DOC},
            "read_missing": {**with_missing, 200: READ_DOC},
        },
    )

    # -- deletion ----------------------------------------------------------------------------

    @router.delete(
        "/channels/{channel_id}", tags=["deletion"], responses=common, summary="Forget a channel"
    )
    async def clear_channel(channel_id: ChannelId, at: ForgetAt = None) -> DeletedOut:
        """Forget a channel: every user, persona and scope of it, in both tiers; and every
        message of it written up to `at`, which later captures leave out."""
        return DeletedOut(deleted=await memory.clear_channel(channel_id, at=at))

    @router.delete("/users/{user_id}", tags=["deletion"], responses=common, summary="Forget a user")
    async def clear_user(user_id: UserId, at: ForgetAt = None) -> DeletedOut:
        """Forget a user: their personal scopes, and every message they wrote (and the bot's
        answers to them) from every other entry; their messages written up to `at` are left
        out of later captures. Counts the scopes deleted plus the entries scrubbed."""
        return DeletedOut(deleted=await memory.clear_user(user_id, at=at))

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
        retention_days: RetentionDays = None,
    ) -> DeletedOut:
        """Delete durable rows untouched for `retention_days`; counts the rows deleted."""
        return DeletedOut(deleted=await memory.janitor(retention_days))

    @router.post("/sweep", tags=["deletion"], responses=common, summary="Sweep expired entries")
    async def sweep() -> DeletedOut:
        """Drop expired hot-tier entries now (a background sweeper also does it)."""
        return DeletedOut(deleted=await memory.sweep())

    return router
