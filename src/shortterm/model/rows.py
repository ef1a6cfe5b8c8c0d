"""Durable rows: what the tiers exchange."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from .keys import (
    ScopeKey,
    slot_filler,
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

    def over(self, stored: ScopeMeta) -> ScopeMeta:
        """This write's metadata over the ``stored`` one: what it does not know (``None``)
        keeps the stored value, and ``private`` is sticky, as the durable upserts do
        (COALESCE): a turn without a channel name does not unname the channel."""
        if self is stored or self == stored:  # the usual capture: the same metadata again
            return self
        private = self.private or stored.private
        merged = ScopeMeta(
            self.server_id if self.server_id is not None else stored.server_id,
            self.server_name if self.server_name is not None else stored.server_name,
            self.channel_name if self.channel_name is not None else stored.channel_name,
            self.parent_channel_id
            if self.parent_channel_id is not None
            else stored.parent_channel_id,
            private,
            self.persona_lineage_id
            if self.persona_lineage_id is not None
            else stored.persona_lineage_id,
        )
        return self if merged == self else merged


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

    @classmethod
    def _unchecked(
        cls,
        key: ScopeKey,
        meta: ScopeMeta,
        summary: str | None,
        summary_at: float | None,
        categories: Mapping[str, str],
        categories_at: float | None,
        turns_since_refresh: int,
        refresh_epoch: int,
        revision: int,
        updated_at: float,
    ) -> ScopeRow:
        """A row from parts a store holds already (every field, in order): a capture's
        touch builds one per scope."""
        return _fill_row(
            key,
            meta,
            summary,
            summary_at,
            categories,
            categories_at,
            turns_since_refresh,
            refresh_epoch,
            revision,
            updated_at,
        )


_fill_row = slot_filler(ScopeRow, *(f.name for f in fields(ScopeRow)))


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


# A durable row as hydration streams it: plain column values in this order, no objects per
# row. The store yields these straight from its cursor and the hot tier builds its records
# from them, so the million rows of an open cost no ScopeRow, ScopeKey or ScopeMeta each
# (store and hot tier share a layer and may not import each other: the layout lives here).
HydrationRow = tuple[
    str,  # 0 kind
    str,  # 1 owner_id
    str,  # 2 channel_id
    str | None,  # 3 persona_id
    str | None,  # 4 server_id
    str | None,  # 5 server_name
    str | None,  # 6 channel_name
    str | None,  # 7 parent_channel_id
    int,  # 8 private (0/1, truthy)
    str | None,  # 9 persona_lineage_id
    str | None,  # 10 summary
    float | None,  # 11 summary_at
    Mapping[str, str] | None,  # 12 categories (None: none)
    float | None,  # 13 categories_at
    int,  # 14 turns_since_refresh
    int,  # 15 revision
]


def hydration_scope_row(r: HydrationRow) -> ScopeRow:
    """The ScopeRow a hydration tuple stands for (the slow path: tiers without a tuple path)."""
    return ScopeRow(
        ScopeKey._unchecked(r[0], r[1], r[2], r[3]),  # type: ignore[arg-type]
        ScopeMeta(r[4], r[5], r[6], r[7], bool(r[8]), r[9]),
        r[10],
        r[11],
        r[12] if r[12] is not None else {},
        r[13],
        r[14],
        0,
        r[15],
    )
