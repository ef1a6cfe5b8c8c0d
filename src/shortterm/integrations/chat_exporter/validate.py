"""Validators for decoded JSON values that carry the JSON path at fault (pure).

Each takes a value and its path (``messages[12].author.id``) and returns the value in the
form the import wants, or raises :class:`Malformed`; the caller adds the line and column.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ...tool.arguments import kind_of

__all__ = [
    "Malformed",
    "as_array",
    "as_bool",
    "as_object",
    "as_snowflake",
    "as_text",
    "as_timestamp",
    "required",
]

_SNOWFLAKE = re.compile(r"\d{1,20}")


class Malformed(Exception):
    """A field of one decoded value is wrong; the caller adds the position."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(path, problem)
        self.path = path
        self.problem = problem


def required(obj: Mapping[str, Any], name: str, path: str) -> Any:
    if name not in obj:
        raise Malformed(f"{path}.{name}", "missing")
    return obj[name]


def as_object(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise Malformed(path, f"expected an object, found {kind_of(value)}")
    return value


def as_array(value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise Malformed(path, f"expected an array, found {kind_of(value)}")
    return value


def as_text(value: Any, path: str, *, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise Malformed(path, f"expected a string, found {kind_of(value)}")
    return value


def as_snowflake(value: Any, path: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        value = str(value)
    if not isinstance(value, str) or not _SNOWFLAKE.fullmatch(value):
        raise Malformed(path, f"expected a Discord id (a string of digits), found {kind_of(value)}")
    return value


def as_timestamp(value: Any, path: str) -> float:
    if not isinstance(value, str):
        raise Malformed(path, f"expected an ISO 8601 date and time, found {kind_of(value)}")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise Malformed(path, f"expected an ISO 8601 date and time, found {value[:40]!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # the exporter always writes an offset
    at = moment.timestamp()
    if not 0 <= at < 1e11:
        raise Malformed(path, f"the date {value[:40]!r} is out of range")
    return at


def as_bool(value: Any, path: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise Malformed(path, f"expected true or false, found {kind_of(value)}")
    return value
