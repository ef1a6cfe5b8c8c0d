"""Administration queries of the durable tier: listing rows and servers, streaming a backup.

Their arguments are checked here; each is one indexed query (or one stream), so the cost
follows what is returned, never the size of the store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import EllipsisType
from typing import TYPE_CHECKING, Protocol, TypedDict

from ..model import ScopeKind, ScopeRow, ServerSummary, check_optional_id
from ..model.errors import InvalidInput

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["MAX_SERVERS_PAGE", "RowFilters", "export_rows", "find_rows", "servers"]

MAX_SERVERS_PAGE = 1000


class Rows(Protocol):
    """What these queries read: a Store, or the engine's durable tier in front of one."""

    async def load_owner(self, kind: ScopeKind, owner_id: str) -> list[ScopeRow]: ...
    async def load_channel(self, channel_id: str) -> list[ScopeRow]: ...
    async def list_servers(self, *, after: str | None, limit: int) -> list[ServerSummary]: ...
    def iter_rows(self, *, batch_rows: int) -> AsyncIterator[list[ScopeRow]]: ...


class RowFilters(TypedDict, total=False):
    """The filters of :func:`find_rows`, each optional."""

    kind: ScopeKind | None
    server_id: str | None
    channel_id: str | None
    user_id: str | None
    persona_id: str | EllipsisType | None


async def find_rows(store: Rows, **filters: Unpack[RowFilters]) -> list[ScopeRow]:
    """Durable rows matching every filter given, sorted by key (an admin view: values
    are shown as stored, expired or not; messages live in the hot tier only).

    One indexed query, so the cost follows the k rows it returns: ``user_id`` reads that
    user's scopes, ``channel_id`` every scope of the channel, ``server_id`` alone the
    server's shared scopes. ``persona_id``: ``...`` any (the default), ``None`` no
    persona, or an id. User scopes of a server are listed with ``user_id`` or
    ``channel_id`` (they are indexed by user and by channel, not by server).
    """
    unknown = sorted(filters.keys() - RowFilters.__optional_keys__)
    if unknown:
        raise TypeError(f"find_rows() got an unexpected keyword argument {unknown[0]!r}")
    kind = filters.get("kind")
    server_id = filters.get("server_id")
    channel_id = filters.get("channel_id")
    user_id = filters.get("user_id")
    persona_id = filters.get("persona_id", ...)
    if kind is not None and kind not in ("user", "server"):
        raise InvalidInput("kind", kind, "'user', 'server' or None")
    check_optional_id("server_id", server_id)
    check_optional_id("channel_id", channel_id)
    check_optional_id("user_id", user_id)
    if persona_id is not ...:
        check_optional_id("persona_id", persona_id)
    if user_id is not None:
        if kind == "server":
            raise InvalidInput("kind", kind, "'user' or None with user_id (users own user scopes)")
        rows = await store.load_owner("user", user_id)
    elif channel_id is not None:
        rows = await store.load_channel(channel_id)
    elif server_id is not None:
        if kind == "user":
            raise InvalidInput(
                "kind", kind, "'server' or None with server_id alone; add user_id or channel_id"
            )
        rows = await store.load_owner("server", server_id)
    else:
        raise InvalidInput(
            "filters",
            None,
            "at least one of server_id, channel_id or user_id (export_rows streams everything)",
        )
    found = [
        r
        for r in rows
        if (kind is None or r.key.kind == kind)
        and (server_id is None or r.meta.server_id == server_id)
        and (channel_id is None or r.key.channel_id == channel_id)
        and (persona_id is ... or r.key.persona_id == persona_id)
    ]
    found.sort(key=lambda r: (r.key.kind, r.key.owner_id, r.key.channel_id, r.key.persona_id or ""))
    return found


async def servers(
    store: Rows, *, after: str | None = None, limit: int = 100
) -> list[ServerSummary]:
    """The servers that have durable shared (server-scope) rows, by id ascending: the
    first ``limit`` (1-1000) whose id sorts after ``after``. Pass the last id of a full
    page as ``after`` to get the next page. Each comes with its row count, the newest
    ``updated_at`` of those rows and its name (from the most recently updated row that
    knows one; ``None`` if none does). One indexed range per page: the cost follows the
    page, never the size of the store. Ids sort by code point (PostgreSQL: in the
    database's collation). Servers whose only rows are users' personal scopes are not
    listed (user scopes are indexed by user and channel, not by server).
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_SERVERS_PAGE:
        raise InvalidInput("limit", limit, f"an integer from 1 to {MAX_SERVERS_PAGE}")
    check_optional_id("after", after)
    return await store.list_servers(after=after, limit=limit)


def export_rows(store: Rows, *, batch_rows: int = 1000) -> AsyncIterator[list[ScopeRow]]:
    """Stream every durable row in batches of at most ``batch_rows`` (a backup of the
    durable tier; crude messages are never durable, so they are not part of it)."""
    if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
        raise InvalidInput("batch_rows", batch_rows, "a positive integer")
    return store.iter_rows(batch_rows=batch_rows)
