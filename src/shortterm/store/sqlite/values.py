"""Scope rows from SQLite columns and parameters from rows: JSON text, 0/1 flags.

:func:`scope_row` builds positionally and calls nothing it does not need; hydration (a million
rows at open) builds no row objects at all: :func:`hydration_rows`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from operator import itemgetter
from types import MappingProxyType
from typing import Any

from ...model import ScopeKey, ScopeMeta, ScopeRow
from ...model.fence import scope_targets
from ...model.rows import HydrationRow
from ..sql_common import put_params, scope_key_params
from .sql import MAX_TARGETS

_NO_CATEGORIES: Mapping[str, str] = MappingProxyType({})


def scope_row(
    r: Sequence[Any], key: ScopeKey | None = None, meta: ScopeMeta | None = None
) -> ScopeRow:
    """A row from its columns. Keys read back from our own table were validated when they
    were written; the unchecked constructor because hydration builds a million of these and
    every capture and tool call written through builds one per scope."""
    return ScopeRow._unchecked(
        key if key is not None else ScopeKey._unchecked(r[0], r[1], r[2], r[3]),
        meta if meta is not None else ScopeMeta(r[4], r[5], r[6], r[7], bool(r[8]), r[9]),
        r[10],
        r[11],
        json.loads(r[12]) if r[12] != "{}" else _NO_CATEGORIES,
        r[13],
        r[14],
        r[15],
        r[16],
        r[17],
    )


# Hydration reads its columns in the order of model.rows.HydrationRow, so the cursor's own
# tuples are the rows; "{}" comes back as NULL, so only a row with categories needs Python.
HYDRATION_SELECT = (
    "SELECT kind, owner_id, channel_id, persona_id, server_id, server_name, channel_name, "
    "parent_channel_id, private, persona_lineage_id, summary, summary_at, "
    "NULLIF(categories, '{}'), categories_at, turns_since_refresh, revision FROM scopes "
    "WHERE (summary IS NOT NULL AND summary_at > ?) OR categories_at > ?"
)


def hydration_rows(rows: list[Any]) -> list[HydrationRow]:
    """A fetched batch as hydration tuples: rows without categories pass through untouched
    (most batches have none: one C-level pass finds that out)."""
    if not any(map(_categories, rows)):
        return rows
    return [r if r[12] is None else _with_categories(r) for r in rows]


_categories = itemgetter(12)


def _with_categories(r: Sequence[Any]) -> HydrationRow:
    return (*r[:12], json.loads(r[12]), *r[13:])


def hydration_scope_rows(
    rows: Sequence[HydrationRow], metas: dict[tuple[Any, ...], ScopeMeta]
) -> list[ScopeRow]:
    """Hydration tuples as ScopeRows, for a hot tier without a tuple path. One ScopeMeta is
    shared per distinct value: the scopes of one channel (its users and personas) carry the
    same, so a million rows need far fewer objects."""
    out = []
    for r in rows:
        parts = r[4:10]
        meta = metas.get(parts)
        if meta is None:
            if len(metas) > 65536:
                metas.clear()
            meta = metas[parts] = ScopeMeta(r[4], r[5], r[6], r[7], bool(r[8]), r[9])
        out.append(
            ScopeRow(
                ScopeKey._unchecked(r[0], r[1], r[2], r[3]),  # type: ignore[arg-type]
                meta,
                r[10],
                r[11],
                r[12] if r[12] is not None else _NO_CATEGORIES,
                r[13],
                r[14],
                0,
                r[15],
            )
        )
    return out


def scope_params(key: ScopeKey, meta: ScopeMeta | None, now: float) -> dict[str, Any]:
    return {
        **scope_key_params(key, meta, text=as_is, flag=int),
        "summary": None,
        "summary_at": None,
        "set_summary": 0,
        "categories": None,
        "categories_at": None,
        "inc": 0,
        "reset": 0,
        "now": now,
    }


_UNKNOWN_META = ScopeMeta()


def put_row_params(row: ScopeRow) -> dict[str, Any]:
    return put_params(row, text=as_is, flag=int, categories=categories_json)


def as_is(value: str | None) -> str | None:
    return value


def categories_json(categories: dict[str, str]) -> str:
    return json.dumps(categories, ensure_ascii=False, sort_keys=True)


TARGET_NAMES = tuple(f"t{i}" for i in range(MAX_TARGETS))


def padded_targets(
    key: ScopeKey, meta: ScopeMeta | None, triggerer: str | None
) -> list[str | None]:
    """The write's fence targets, NULL-padded to the statement's fixed width."""
    m = meta or _UNKNOWN_META
    server_id = m.server_id if meta else (key.owner_id if key.kind == "server" else None)
    targets: list[str | None] = list(scope_targets(key, server_id, m.parent_channel_id, triggerer))
    return targets + [None] * (MAX_TARGETS - len(targets))
