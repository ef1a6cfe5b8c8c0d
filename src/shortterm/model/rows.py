"""Durable rows: what the tiers exchange."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .keys import (
    ScopeKey,
)


@dataclass(frozen=True, slots=True)
class ScopeMeta:
    """What a turn knows about a scope besides its key; written on every upsert."""

    server_id: str | None = None  # None: a DM
    server_name: str | None = None
    channel_name: str | None = None
    parent_channel_id: str | None = None
    private: bool = False
    persona_lineage_id: str | None = None


@dataclass(frozen=True, slots=True)
class ScopeRow:
    """One durable row. ``revision`` grows by one on every write, so a hot tier can refuse to
    let an older row overwrite a newer one when writes finish out of order."""

    key: ScopeKey
    meta: ScopeMeta
    summary: str | None = None
    summary_at: float | None = None
    categories: Mapping[str, str] = field(default_factory=dict)
    categories_at: float | None = None
    turns_since_refresh: int = 0
    refresh_epoch: int = 0
    revision: int = 1
    updated_at: float = 0.0


@dataclass(frozen=True, slots=True)
class ServerSummary:
    """A server that has durable shared (server-scope) rows, as :meth:`Store.list_servers`
    lists it.

    ``server_name`` is the name on the most recently updated of its rows that carries one
    (ties: the row created last); ``None`` when none does. ``entries`` counts its
    server-scope rows and ``updated_at`` is the newest of their ``updated_at``.
    """

    server_id: str
    server_name: str | None
    entries: int
    updated_at: float | None


@dataclass(frozen=True, slots=True)
class DistilledWrite:
    """A change to the distilled values of a scope.

    ``summary`` is written only when ``set_summary`` is true (``None`` then clears it).
    ``categories`` is merged into the stored map: a ``None`` value removes that slug. With
    ``replace_categories`` the stored map is replaced by the non-``None`` values instead.
    """

    summary: str | None = None
    set_summary: bool = False
    categories: Mapping[str, str | None] | None = None
    replace_categories: bool = False


def merge_categories(current: Mapping[str, str], change: DistilledWrite) -> dict[str, str] | None:
    """The category map after ``change``, or ``None`` when the change leaves it alone."""
    if change.categories is None:
        return None
    merged = {} if change.replace_categories else dict(current)
    for slug, value in change.categories.items():
        if value is None:
            merged.pop(slug, None)
        else:
            merged[slug] = value
    return merged
