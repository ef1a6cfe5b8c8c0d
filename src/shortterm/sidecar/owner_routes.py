"""The routes servers and users both have, written once and registered per owner kind.

A server's shared memory and a user's personal memory are listed, read, edited and configured
the same way, under ``/v1/servers/{server_id}`` and ``/v1/users/{user_id}``. Each such route is
one row of :data:`OWNER_ROUTES`: its path, method, operation id, texts, declared errors and an
endpoint factory. :func:`add_owner_routes` builds the endpoints once, at app creation, so the
framework sees ordinary endpoints and a request costs what a hand-written twin did.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Literal

from fastapi import APIRouter, Response

from ..memory.engine.health import watching
from ..memory.facade import Memory
from ..model import Entry, ScopeKey
from .errors import NotFound, degraded_headers
from .params import (
    ChannelFilter,
    ChannelId,
    ForgetAt,
    PersonaFilter,
    PersonaQuery,
    ServerId,
    UserId,
)
from .schemas import (
    EntriesOut,
    EntryOut,
    EntryResult,
    ServerSettingsModel,
    SetCategoriesIn,
    SetSummaryIn,
    UserSettingsModel,
)

__all__ = ["OWNERS", "OWNER_ROUTES", "Owner", "OwnerRoute", "add_owner_routes"]

Kind = Literal["server", "user"]
Endpoint = Callable[..., Awaitable[Any]]
# Which declared errors a route has: see the dictionaries build_router passes in.
Errors = Literal["common", "with_missing", "with_body", "read", "read_missing"]


@dataclass(frozen=True, slots=True)
class Owner:
    """What differs between the server and the user twin of a route."""

    kind: Kind
    id_param: Any  # the path parameter type; its alias is {kind}_id, the code says owner_id
    key: Callable[[str, str, str | None], ScopeKey]
    settings_model: Any  # ServerSettingsModel or UserSettingsModel (.of and .to_library)
    # Looked up on the memory at app creation, as the hand-written routes did (a subclass of
    # Memory may override them): memory -> its bound method.
    read_settings: Callable[[Memory], Callable[[str], Awaitable[Any]]]
    write_settings: Callable[[Memory], Callable[[str, Any], Awaitable[None]]]

    @property
    def prefix(self) -> str:
        return f"/{self.kind}s/{{{self.kind}_id}}"


OWNERS = (
    Owner(
        "server",
        ServerId,
        ScopeKey.server,
        ServerSettingsModel,
        attrgetter("server_settings"),
        attrgetter("configure_server"),
    ),
    Owner(
        "user",
        UserId,
        ScopeKey.user,
        UserSettingsModel,
        attrgetter("user_settings"),
        attrgetter("configure_user"),
    ),
)


@dataclass(frozen=True, slots=True)
class OwnerRoute:
    """One route of both owner kinds. ``name`` is the operation id with ``{kind}`` to fill."""

    method: Literal["GET", "PUT"]
    path: str  # after the owner's prefix
    name: str
    tag: str
    errors: Errors
    summary: Mapping[Kind, str]
    description: Mapping[Kind, str]
    endpoint: Callable[[Memory, Owner], Endpoint]


def _typed(endpoint: Endpoint, owner: Owner, **annotations: Any) -> Endpoint:
    """Give the endpoint the owner's own parameter (and any owner-specific body or answer
    type): the framework reads its signature once, when the route is added."""
    endpoint.__annotations__.update(owner_id=owner.id_param, **annotations)
    return endpoint


def _out(entry: Entry | None) -> EntryResult:
    return EntryResult(entry=None if entry is None else EntryOut.of(entry))


# -- endpoint factories -----------------------------------------------------------------------


def _list_entries(memory: Memory, owner: Owner) -> Endpoint:
    kind = owner.kind

    async def endpoint(
        owner_id: str,
        response: Response,
        channel_id: ChannelFilter = None,
        persona_id: PersonaFilter = None,
    ) -> EntriesOut:
        with watching() as seen:
            found = await memory.owner_entries(kind, owner_id)
        response.headers.update(degraded_headers(seen, memory.health.degraded) or {})
        picked = [
            e
            for e in found
            if (channel_id is None or e.key.channel_id == channel_id)
            and (persona_id is None or e.key.persona_id == persona_id)
        ]
        picked.sort(key=lambda e: (e.key.channel_id, e.key.persona_id or ""))
        return EntriesOut(entries=[EntryOut.of(e) for e in picked], now=memory.clock())

    return _typed(endpoint, owner)


def _get_entry(memory: Memory, owner: Owner) -> Endpoint:
    key_of = owner.key

    async def endpoint(
        owner_id: str, channel_id: ChannelId, response: Response, persona_id: PersonaQuery = None
    ) -> EntryOut:
        key = key_of(owner_id, channel_id, persona_id)
        with watching() as seen:
            entry = await memory.get(key)
        response.headers.update(degraded_headers(seen, memory.health.degraded) or {})
        if entry is None:
            raise NotFound(
                f"nothing is remembered for {key.kind} {key.owner_id!r} in channel "
                f"{key.channel_id!r} (persona {key.persona_id!r})"
            )
        return EntryOut.of(entry)

    return _typed(endpoint, owner)


def _set_summary(memory: Memory, owner: Owner) -> Endpoint:
    key_of = owner.key

    async def endpoint(
        owner_id: str, channel_id: ChannelId, body: SetSummaryIn, persona_id: PersonaQuery = None
    ) -> EntryResult:
        key = key_of(owner_id, channel_id, persona_id)
        return _out(await memory.set_summary(key, body.summary))

    return _typed(endpoint, owner)


def _set_categories(memory: Memory, owner: Owner) -> Endpoint:
    key_of = owner.key

    async def endpoint(
        owner_id: str,
        channel_id: ChannelId,
        body: SetCategoriesIn,
        persona_id: PersonaQuery = None,
    ) -> EntryResult:
        key = key_of(owner_id, channel_id, persona_id)
        return _out(await memory.set_categories(key, body.categories))

    return _typed(endpoint, owner)


def _get_settings(memory: Memory, owner: Owner) -> Endpoint:
    model, read = owner.settings_model, owner.read_settings(memory)

    async def endpoint(owner_id: str) -> Any:
        return model.of(await read(owner_id))

    return _typed(endpoint, owner, **{"return": model})


def _put_settings(memory: Memory, owner: Owner) -> Endpoint:
    model, write = owner.settings_model, owner.write_settings(memory)

    async def endpoint(owner_id: str, body: Any) -> Any:
        chosen = body.to_library()
        await write(owner_id, chosen)
        return model.of(chosen)

    async def user_endpoint(owner_id: str, body: Any, at: ForgetAt = None) -> Any:
        chosen = body.to_library()
        await memory.configure_user(owner_id, chosen, at=at)  # `at`: a FULL choice's horizon
        return model.of(chosen)

    chosen_endpoint = user_endpoint if owner.kind == "user" else endpoint
    return _typed(chosen_endpoint, owner, body=model, **{"return": model})


# -- the table --------------------------------------------------------------------------------

_MEMORY_OF: Mapping[Kind, str] = {
    "server": "a server's shared memory",
    "user": "a user's personal memory",
}


def _about(template: str) -> Mapping[Kind, str]:
    """A description for both kinds, from one text naming whose memory it is."""
    return {kind: template.format(what=what) for kind, what in _MEMORY_OF.items()}


OWNER_ROUTES: tuple[OwnerRoute, ...] = (
    OwnerRoute(
        "GET",
        "/entries",
        "list_{kind}_entries",
        "entries",
        "read",
        {"server": "List a server's entries", "user": "List a user's entries"},
        _about(
            "Every live entry of {what}, optionally one channel's or one persona's, ordered by "
            "channel and persona. Read through the owner index: the cost grows with this "
            "owner's entries only."
        ),
        _list_entries,
    ),
    OwnerRoute(
        "GET",
        "/channels/{channel_id}/entry",
        "get_{kind}_entry",
        "entries",
        "read_missing",
        {"server": "Get a channel's shared entry", "user": "Get a user's entry in a channel"},
        _about(
            "What {what} remembers in one channel for one persona (`persona_id` omitted: the "
            "entry without a persona); 404 when nothing is live."
        ),
        _get_entry,
    ),
    OwnerRoute(
        "PUT",
        "/channels/{channel_id}/entry/summary",
        "set_{kind}_summary",
        "entries",
        "with_body",
        {
            "server": "Replace the summary of a shared entry",
            "user": "Replace the summary of a user's entry",
        },
        _about(
            "An admin edit of {what}: replaces the summary (`null` clears it), durable when it "
            "returns. Answers the entry as it is afterwards, or `null` when nothing is live."
        ),
        _set_summary,
    ),
    OwnerRoute(
        "PUT",
        "/channels/{channel_id}/entry/categories",
        "set_{kind}_categories",
        "entries",
        "with_body",
        {
            "server": "Replace the category values of a shared entry",
            "user": "Replace the category values of a user's entry",
        },
        _about(
            "An admin edit of {what}: replaces every category value (blank values are "
            "dropped), durable when it returns. Answers the entry as it is afterwards."
        ),
        _set_categories,
    ),
    OwnerRoute(
        "GET",
        "/settings",
        "get_{kind}_settings",
        "settings",
        "common",
        {"server": "Get a server's settings", "user": "Get a user's settings"},
        {
            "server": "The server's settings; the defaults when it was never configured.",
            "user": "The user's privacy level and cross-server opt-in; the defaults when "
            "never set.",
        },
        _get_settings,
    ),
    OwnerRoute(
        "PUT",
        "/settings",
        "put_{kind}_settings",
        "settings",
        "with_body",
        {"server": "Replace a server's settings", "user": "Replace a user's settings"},
        {
            # The line breaks are the document's own (these texts were docstrings).
            "server": "Replace the server's settings (missing fields take their defaults). "
            "Durable when it\nreturns; other processes see the change within "
            "`settings_refresh_s`.",
            "user": 'Replace the user\'s settings. Choosing `privacy: "full"` also forgets '
            "everything\nalready kept about the user, as `DELETE /v1/users/{user_id}` does.",
        },
        _put_settings,
    ),
)


def add_owner_routes(
    router: APIRouter, memory: Memory, errors: Mapping[Errors, dict[int | str, Any]]
) -> None:
    """Add every row of the table for each owner kind, in the table's order."""
    for route in OWNER_ROUTES:
        for owner in OWNERS:
            router.add_api_route(
                owner.prefix + route.path,
                route.endpoint(memory, owner),
                methods=[route.method],
                name=route.name.format(kind=owner.kind),
                tags=[route.tag],
                responses=errors[route.errors],
                summary=route.summary[owner.kind],
                description=route.description[owner.kind],
            )
