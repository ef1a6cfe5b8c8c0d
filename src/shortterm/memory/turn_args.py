"""What a turn is about, named once: who talks where, through which model, at which privacy.

``memory.turn(**kwargs)`` builds a :class:`TurnArgs` from its keywords, a registry that keeps
turns across requests stores :meth:`TurnArgs.as_json` and rebuilds the same value with
:meth:`TurnArgs.from_json`, and the integrations hold one to start each of their turns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, cast

from ..model import Privacy, check_id, check_optional_text
from ..model.errors import InvalidInput

__all__ = ["TurnArgs"]

# The triggering text is only scanned for intent; nothing longer is useful for that.
_MAX_USER_MESSAGE_CHARS = 20_000
_MAX_NAME_CHARS = 200


def _name(changes: dict[str, Any], field: str, value: object) -> None:
    """A display name, cleaned and capped (never refused for its content); the bot's name
    (checked non-blank) stays as given when nothing is left of it."""
    cleaned = check_optional_text(field, value, _MAX_NAME_CHARS)
    if field == "bot_name":
        cleaned = cleaned or cast(str, value)
    if cleaned is not value:
        changes[field] = cleaned


class _Fields(NamedTuple):
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


class TurnArgs(_Fields):
    """The arguments of a turn, checked: an immutable value, built from keywords only. Only
    ``user_id`` and ``channel_id`` are required; ``server_id=None`` means a DM.

    A named tuple rather than a frozen dataclass: one is built per turn, and a tuple is
    built in one step where a frozen dataclass sets each field through ``object``."""

    __slots__ = ()

    def __new__(cls, **kwargs: Any) -> TurnArgs:
        """Check every field; a field whose normal form differs from what was passed is
        replaced (rarely: the usual name and message are kept as they are)."""
        self: TurnArgs = _Fields.__new__(cls, **kwargs)
        # One unpacking: every field is read below, and a field access is a call each.
        (
            user_id,
            channel_id,
            server_id,
            persona_id,
            lineage,
            message,
            user_name,
            bot_name,
            server_name,
            channel_name,
            parent_channel_id,
            provider,
            has_tools,
            privacy,
            locale,
        ) = self
        check_id("user_id", user_id)
        check_id("channel_id", channel_id)
        # Optional arguments are mostly left out: the None test is inline, so leaving one
        # out costs nothing.
        if server_id is not None:
            check_id("server_id", server_id)
        if persona_id is not None:
            check_id("persona_id", persona_id)
        if lineage is not None:
            check_id("persona_lineage_id", lineage)
        if parent_channel_id is not None:
            check_id("parent_channel_id", parent_channel_id)
        changes: dict[str, Any] = {}  # mostly left empty
        if not isinstance(message, str):
            raise InvalidInput("user_message", message, "a string")
        if len(message) > _MAX_USER_MESSAGE_CHARS:
            changes["user_message"] = message[:_MAX_USER_MESSAGE_CHARS]
        if bot_name != "Assistant":
            if not isinstance(bot_name, str) or not bot_name.strip():
                raise InvalidInput("bot_name", bot_name, "a non-blank string")
            _name(changes, "bot_name", bot_name)
        if user_name is not None:
            _name(changes, "user_name", user_name)
        if server_name is not None:
            _name(changes, "server_name", server_name)
        if channel_name is not None:
            _name(changes, "channel_name", channel_name)
        if provider is not None:
            if not isinstance(provider, str):
                raise InvalidInput("provider", provider, "a provider name or None")
            if provider != (lowered := provider.lower() or None):
                changes["provider"] = lowered
        if has_tools is not True and has_tools is not False:
            raise InvalidInput("has_tools", has_tools, "True or False")
        if type(privacy) is not Privacy:
            raise InvalidInput("privacy", privacy, "a shortterm.Privacy value")
        if locale is not None and (not isinstance(locale, str) or not locale.strip()):
            raise InvalidInput("locale", locale, "a locale tag such as 'en' or 'pt-BR', or None")
        return self._replace(**changes) if changes else self

    def replaced(self, **changes: Any) -> TurnArgs:
        """These arguments with ``changes``, checked."""
        return TurnArgs(**{**self._asdict(), **changes})

    def as_json(self) -> dict[str, Any]:
        """Plain JSON values (the privacy level by its value)."""
        out = self._asdict()
        out["privacy"] = self.privacy.value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TurnArgs:
        """The value :meth:`as_json` gave, checked again."""
        kwargs = dict(data)
        kwargs["privacy"] = Privacy(kwargs["privacy"])
        return cls(**kwargs)
