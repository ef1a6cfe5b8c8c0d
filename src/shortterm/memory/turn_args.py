"""What a turn is about, named once: who talks where, through which model, at which privacy.

``memory.turn(**kwargs)`` builds a :class:`TurnArgs` from its keywords, a registry that keeps
turns across requests stores :meth:`TurnArgs.as_json` and rebuilds the same value with
:meth:`TurnArgs.from_json`, and the integrations hold one to start each of their turns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from ..model import Privacy, check_id, check_optional_text
from ..model.errors import InvalidInput

__all__ = ["TurnArgs"]

# The triggering text is only scanned for intent; nothing longer is useful for that.
_MAX_USER_MESSAGE_CHARS = 20_000
_MAX_NAME_CHARS = 200
_NAMES = ("user_name", "bot_name", "server_name", "channel_name")  # display names


def _name(field: str, value: object) -> str | None:
    """A display name, cleaned and capped (never refused for its content); the bot's name
    (checked non-blank) stays as given when nothing is left of it."""
    cleaned = check_optional_text(field, value, _MAX_NAME_CHARS)
    return (cleaned or cast(str, value)) if field == "bot_name" else cleaned


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnArgs:
    """The arguments of a turn, checked. Only ``user_id`` and ``channel_id`` are required;
    ``server_id=None`` means a DM."""

    user_id: str
    channel_id: str
    server_id: str | None = None
    persona_id: str | None = None
    persona_lineage_id: str | None = None
    user_message: str = ""
    user_name: str | None = None
    bot_name: str = "Assistant"
    server_name: str | None = None
    channel_name: str | None = None
    parent_channel_id: str | None = None
    provider: str | None = None
    has_tools: bool = True
    privacy: Privacy = Privacy.NONE
    locale: str | None = None

    def __post_init__(self) -> None:
        put = object.__setattr__  # normalised values replace what was passed
        check_id("user_id", self.user_id)
        check_id("channel_id", self.channel_id)
        # Optional arguments are mostly left out: the None test is inline, so leaving one
        # out costs nothing.
        if self.server_id is not None:
            check_id("server_id", self.server_id)
        if self.persona_id is not None:
            check_id("persona_id", self.persona_id)
        if self.persona_lineage_id is not None:
            check_id("persona_lineage_id", self.persona_lineage_id)
        if self.parent_channel_id is not None:
            check_id("parent_channel_id", self.parent_channel_id)
        message = self.user_message
        if not isinstance(message, str):
            raise InvalidInput("user_message", message, "a string")
        if len(message) > _MAX_USER_MESSAGE_CHARS:
            put(self, "user_message", message[:_MAX_USER_MESSAGE_CHARS])
        bot_name = self.bot_name
        if bot_name != "Assistant" and (not isinstance(bot_name, str) or not bot_name.strip()):
            raise InvalidInput("bot_name", bot_name, "a non-blank string")
        for name in _NAMES:
            value = getattr(self, name)
            if value is not None and value != "Assistant":
                put(self, name, _name(name, value))
        provider = self.provider
        if provider is not None:
            if not isinstance(provider, str):
                raise InvalidInput("provider", provider, "a provider name or None")
            put(self, "provider", provider.lower() or None)
        if self.has_tools is not True and self.has_tools is not False:
            raise InvalidInput("has_tools", self.has_tools, "True or False")
        if type(self.privacy) is not Privacy:
            raise InvalidInput("privacy", self.privacy, "a shortterm.Privacy value")
        locale = self.locale
        if locale is not None and (not isinstance(locale, str) or not locale.strip()):
            raise InvalidInput("locale", locale, "a locale tag such as 'en' or 'pt-BR', or None")

    def as_json(self) -> dict[str, Any]:
        """Plain JSON values (the privacy level by its value)."""
        out = dataclasses.asdict(self)
        out["privacy"] = self.privacy.value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TurnArgs:
        """The value :meth:`as_json` gave, checked again."""
        kwargs = dict(data)
        kwargs["privacy"] = Privacy(kwargs["privacy"])
        return cls(**kwargs)
