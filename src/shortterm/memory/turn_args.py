"""What a turn is about, named once: who talks where, through which model, at which privacy.

``memory.turn(**kwargs)`` builds a :class:`TurnArgs` from its keywords, a registry that keeps
turns across requests stores :meth:`TurnArgs.as_json` and rebuilds the same value with
:meth:`TurnArgs.from_json`, and the integrations hold one to start each of their turns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..model import Privacy, check_id, check_optional_text
from ..model.errors import InvalidInput

__all__ = ["TurnArgs"]

# The triggering text is only scanned for intent; nothing longer is useful for that.
_MAX_USER_MESSAGE_CHARS = 20_000
_MAX_NAME_CHARS = 200


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
        if self.user_name is not None:
            put(
                self, "user_name", check_optional_text("user_name", self.user_name, _MAX_NAME_CHARS)
            )
        bot_name = self.bot_name
        if bot_name != "Assistant":
            if not isinstance(bot_name, str) or not bot_name.strip():
                raise InvalidInput("bot_name", bot_name, "a non-blank string")
            put(
                self,
                "bot_name",
                check_optional_text("bot_name", bot_name, _MAX_NAME_CHARS) or bot_name,
            )
        if self.server_name is not None:
            put(
                self,
                "server_name",
                check_optional_text("server_name", self.server_name, _MAX_NAME_CHARS),
            )
        if self.channel_name is not None:
            put(
                self,
                "channel_name",
                check_optional_text("channel_name", self.channel_name, _MAX_NAME_CHARS),
            )
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
