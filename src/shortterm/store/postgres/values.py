"""Python values to PostgreSQL parameters and back: NUL-free text, ``jsonb``, scope rows."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from psycopg.types.json import Jsonb

from ...model import ScopeKey, ScopeMeta, ScopeRow
from ...model.errors import StoreUnavailable
from ...model.fence import WriteFence, fence_targets
from ...model.text import clean_text
from ..sql_common import put_params, scope_key_params


def clean(value: str | None) -> str | None:
    return None if value is None else clean_text(value)


def _clean_json(value: object) -> object:
    """A JSON-able value with every string (keys too) made storable in ``jsonb``."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, Mapping):
        return {clean_text(str(k)): _clean_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | frozenset | set):
        return [_clean_json(v) for v in value]
    return value


def _compact(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def jsonb(obj: object) -> Jsonb:
    return Jsonb(_clean_json(obj), dumps=_compact)


def scope_row(r: Sequence[Any]) -> ScopeRow:
    return ScopeRow(
        key=ScopeKey(r[0], r[1], r[2], r[3]),
        meta=ScopeMeta(
            server_id=r[4],
            server_name=r[5],
            channel_name=r[6],
            parent_channel_id=r[7],
            private=bool(r[8]),
            persona_lineage_id=r[9],
        ),
        summary=r[10],
        summary_at=r[11],
        categories=r[12] or {},
        categories_at=r[13],
        turns_since_refresh=r[14],
        refresh_epoch=r[15],
        revision=r[16],
        updated_at=r[17],
    )


def scope_params(key: ScopeKey, meta: ScopeMeta | None, now: float) -> dict[str, Any]:
    return {
        **scope_key_params(key, meta, text=clean, flag=bool),
        "set_summary": False,
        "summary": None,
        "summary_at": None,
        "patch": None,
        "replace": False,
        "inc": 0,
        "reset": 0,
        "now": now,
    }


def put_row_params(row: ScopeRow) -> dict[str, Any]:
    return put_params(row, text=clean, flag=bool, categories=jsonb)


def lock_key(name: str) -> int:
    """A stable signed 64-bit advisory lock key for ``name``."""
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def targets_of(p: Mapping[str, Any], fence: WriteFence) -> tuple[str, ...]:
    key = ScopeKey._unchecked(p["kind"], p["owner"], p["channel"], p["persona"])
    return fence_targets(key, p["server_id"], p["parent"], fence)


def one_row(row: ScopeRow | None) -> ScopeRow:
    if row is None:  # pragma: no cover - every CTE returns its row
        raise StoreUnavailable("PostgreSQL returned fewer rows than scopes written")
    return row


def one(row: Sequence[Any] | None) -> Sequence[Any]:
    if row is None:  # pragma: no cover - RETURNING and aggregates always yield a row
        raise StoreUnavailable("PostgreSQL returned no row where one was expected")
    return row
