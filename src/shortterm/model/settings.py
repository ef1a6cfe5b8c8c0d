"""Server and user settings and their bounds.

The bounds are tables, read here and by the sidecar's request schemas (which build their
pydantic constraints from them), so the library and the HTTP layer cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from .errors import InvalidInput
from .keys import (
    RENDER_MODES,
    Privacy,
    check_id,
)
from .text import clean_text

__all__ = ["SETTING_BOUNDS", "TEXT_LIMITS", "Category", "ServerSettings", "UserSettings"]

# The integer settings of ServerSettings, each to its inclusive (lowest, highest).
SETTING_BOUNDS: Mapping[str, tuple[int, int]] = MappingProxyType(
    {
        "refresh_cadence": (1, 100),
        "crude_message_count": (1, 1000),
        "nudge_depth": (0, 20),
        "content_depth": (-1, 20),  # -1: anchored near the top of the prompt
    }
)

# The most characters of each free-text setting (a category's fields are "category.<name>").
TEXT_LIMITS: Mapping[str, int] = MappingProxyType(
    {
        "category.label": 100,
        "category.description": 500,
        "tool_description": 4000,
        "nudge_text": 4000,
    }
)
_LABEL_MAX, _DESCRIPTION_MAX = TEXT_LIMITS["category.label"], TEXT_LIMITS["category.description"]


@dataclass(frozen=True, slots=True)
class Category:
    """One structured field of category mode: a label shown to the model and a description."""

    label: str
    description: str

    def __post_init__(self) -> None:
        for name in ("label", "description"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise InvalidInput(f"category.{name}", value, "a non-blank string")
            if len(value) > TEXT_LIMITS[f"category.{name}"]:
                raise InvalidInput(
                    f"category.{name}",
                    value,
                    f"labels ≤ {_LABEL_MAX} and descriptions ≤ {_DESCRIPTION_MAX} characters",
                )
            object.__setattr__(self, name, clean_text(value.strip()))


def _check_int(name: str, value: object) -> None:
    low, high = SETTING_BOUNDS[name]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(name, value, f"an integer from {low} to {high}")


def _ids(name: str, values: Iterable[str]) -> frozenset[str]:
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise InvalidInput(name, values, "a collection of ids (a set or list of strings)")
    return frozenset(check_id(name, v) for v in values)


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """Per-server behaviour. Never configured means these defaults."""

    refresh_cadence: int = 5
    render_mode: Literal["crude_summary", "supersede"] = "crude_summary"
    crude_message_count: int = 6
    nudge_depth: int = 2
    content_depth: int = -1  # -1: anchored near the top of the prompt
    tool_description: str | None = None
    nudge_text: str | None = None
    categories: tuple[Category, ...] = ()
    stm_enabled: bool = True
    private_channel_ids: frozenset[str] = frozenset()
    privacy_bypass: bool = False

    def __post_init__(self) -> None:
        _check_int("refresh_cadence", self.refresh_cadence)
        if self.render_mode not in RENDER_MODES:
            raise InvalidInput("render_mode", self.render_mode, "'crude_summary' or 'supersede'")
        _check_int("crude_message_count", self.crude_message_count)
        _check_int("nudge_depth", self.nudge_depth)
        _check_int("content_depth", self.content_depth)
        for name in ("tool_description", "nudge_text"):
            value, most = getattr(self, name), TEXT_LIMITS[name]
            if value is not None and (not isinstance(value, str) or len(value) > most):
                raise InvalidInput(name, value, f"None or a string of at most {most} characters")
            if isinstance(value, str):
                # A blank override means "use the default", as in a settings form.
                object.__setattr__(self, name, clean_text(value) if value.strip() else None)
        if isinstance(self.categories, str) or not isinstance(self.categories, Iterable):
            raise InvalidInput("categories", self.categories, "a sequence of shortterm.Category")
        cats = tuple(self.categories)
        if not all(isinstance(c, Category) for c in cats):
            raise InvalidInput("categories", self.categories, "a sequence of shortterm.Category")
        object.__setattr__(self, "categories", cats)
        for name in ("stm_enabled", "privacy_bypass"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidInput(name, getattr(self, name), "True or False")
        object.__setattr__(
            self, "private_channel_ids", _ids("private_channel_ids", self.private_channel_ids)
        )

    def is_private(self, channel_id: str, parent_channel_id: str | None = None) -> bool:
        ids = self.private_channel_ids
        return channel_id in ids or (parent_channel_id is not None and parent_channel_id in ids)


@dataclass(frozen=True, slots=True)
class UserSettings:
    """Per-user choices: privacy level and cross-server recall (off unless the user opts in)."""

    privacy: Privacy = Privacy.NONE
    cross_server_opt_in: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.privacy, Privacy):
            try:
                object.__setattr__(self, "privacy", Privacy(self.privacy))
            except ValueError:
                raise InvalidInput("privacy", self.privacy, "'none', 'partial' or 'full'") from None
        if not isinstance(self.cross_server_opt_in, bool):
            raise InvalidInput("cross_server_opt_in", self.cross_server_opt_in, "True or False")
