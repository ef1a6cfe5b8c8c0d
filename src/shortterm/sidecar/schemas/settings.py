"""Settings bodies, bounded by the library's own tables (``shortterm.model.settings``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from ... import model as lib
from ...model.settings import SETTING_BOUNDS, TEXT_LIMITS
from .base import (
    WHOLE,
    Id,
    NonBlank,
    PrivacyName,
    StrictBool,
    StrictModel,
    Text,
    with_examples,
)

__all__ = [
    "CategoryModel",
    "ServerSettingsModel",
    "UserSettingsModel",
]


def _setting_bounds(name: str) -> Any:
    """The constraint of an integer setting, from the library's own table."""
    low, high = SETTING_BOUNDS[name]
    return Field(strict=True, ge=low, le=high)


def _at_most(name: str) -> StringConstraints:
    """The length limit of a free-text setting, from the library's own table."""
    return StringConstraints(max_length=TEXT_LIMITS[name])


# (WHOLE comes after the bounds, so the document shows them as minimum and maximum.)
Cadence = Annotated[int, _setting_bounds("refresh_cadence"), WHOLE]
RawCount = Annotated[int, _setting_bounds("crude_message_count"), WHOLE]
Depth = Annotated[int, _setting_bounds("nudge_depth"), WHOLE]
ContentDepth = Annotated[int, _setting_bounds("content_depth"), WHOLE]


class CategoryModel(StrictModel):
    label: Annotated[NonBlank, _at_most("category.label")]
    description: Annotated[NonBlank, _at_most("category.description")]


SERVER_SETTINGS_EXAMPLE: dict[str, Any] = {
    "refresh_cadence": 5,
    "render_mode": "crude_summary",
    "crude_message_count": 6,
    "nudge_depth": 2,
    "content_depth": -1,
    "tool_description": None,
    "nudge_text": None,
    "categories": [{"label": "Mood", "description": "How the room feels"}],
    "stm_enabled": True,
    "private_channel_ids": ["444"],
    "privacy_bypass": False,
}


class ServerSettingsModel(StrictModel):
    """Per-server behaviour; a PUT replaces all of it (missing fields take their defaults)."""

    model_config = with_examples(SERVER_SETTINGS_EXAMPLE)

    refresh_cadence: Cadence = 5
    render_mode: Literal["crude_summary", "supersede"] = "crude_summary"
    crude_message_count: RawCount = Field(6, description="At most the memory's max_messages.")
    nudge_depth: Depth = 2
    content_depth: ContentDepth = -1
    tool_description: Annotated[Text, _at_most("tool_description")] | None = None
    nudge_text: Annotated[Text, _at_most("nudge_text")] | None = None
    categories: list[CategoryModel] = Field(
        [], description="At most the memory's max_categories, with distinct field names."
    )
    stm_enabled: StrictBool = True
    private_channel_ids: list[Id] = []  # noqa: RUF012 (pydantic copies field defaults)
    privacy_bypass: StrictBool = False

    def to_library(self) -> lib.ServerSettings:
        return lib.ServerSettings(
            **{name: getattr(self, name) for name in _SAME_ON_THE_WIRE},
            categories=tuple(lib.Category(c.label, c.description) for c in self.categories),
            private_channel_ids=frozenset(self.private_channel_ids),
        )

    @classmethod
    def of(cls, s: lib.ServerSettings) -> ServerSettingsModel:
        return cls(
            **{name: getattr(s, name) for name in _SAME_ON_THE_WIRE},
            categories=[
                CategoryModel(label=c.label, description=c.description) for c in s.categories
            ],
            private_channel_ids=sorted(s.private_channel_ids),
        )


# The server settings whose value is the same in the library and in JSON; the others
# (categories, private_channel_ids) are converted by hand above.
_SAME_ON_THE_WIRE = tuple(
    name
    for name in ServerSettingsModel.model_fields
    if name not in ("categories", "private_channel_ids")
)


class UserSettingsModel(StrictModel):
    """Per-user choices. ``privacy="full"`` also forgets what was already kept."""

    model_config = with_examples({"privacy": "none", "cross_server_opt_in": False})

    privacy: PrivacyName = "none"
    cross_server_opt_in: StrictBool = False

    def to_library(self) -> lib.UserSettings:
        return lib.UserSettings(
            privacy=lib.Privacy(self.privacy), cross_server_opt_in=self.cross_server_opt_in
        )

    @classmethod
    def of(cls, s: lib.UserSettings) -> UserSettingsModel:
        return cls(privacy=s.privacy.value, cross_server_opt_in=s.cross_server_opt_in)
