"""Ids, scope keys and privacy levels: what names a piece of memory."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, cast

from .errors import InvalidInput
from .text import clean_text

MAX_ID_CHARS = 256
T = TypeVar("T")
RENDER_MODES = ("crude_summary", "supersede")

ScopeKind = Literal["user", "server"]
Role = Literal["user", "assistant"]


class Privacy(enum.StrEnum):
    """How much of a user shortterm may keep.

    ``NONE``: full participation. ``PARTIAL``: the user's messages may appear in the channel's
    shared memory, but no personal (user-scope) memory is kept or recalled for them.
    ``FULL``: never captured, neither as the one who triggered a turn nor as a participant.
    """

    NONE = "none"
    PARTIAL = "partial"
    FULL = "full"


def check_id(name: str, value: object) -> str:
    """Validate an opaque id: a non-empty ``str`` of at most 256 characters, no NUL."""
    if (
        type(value) is str
        and 0 < len(value) <= MAX_ID_CHARS
        and value.isascii()
        and "\x00" not in value
    ):
        return value  # the usual id, decided by C-speed tests
    if not isinstance(value, str):
        raise InvalidInput(name, value, "ids are non-empty strings; pass str(id)")
    if not value or len(value) > MAX_ID_CHARS or "\x00" in value:
        raise InvalidInput(name, value, f"ids are 1-{MAX_ID_CHARS} characters without NUL")
    if not value.isascii() and value != clean_text(value):
        raise InvalidInput(name, value, "ids must be valid Unicode (no lone surrogates)")
    return value


def check_optional_id(name: str, value: object) -> str | None:
    return None if value is None else check_id(name, value)


def check_optional_text(name: str, value: object, max_chars: int = 1000) -> str | None:
    """Display metadata (names): cleaned and capped, never refused for its content."""
    if value is None:
        return None
    if type(value) is str and len(value) <= max_chars and value.isascii() and "\x00" not in value:
        return value  # the usual name: nothing to clean or cut
    if not isinstance(value, str):
        raise InvalidInput(name, value, "a string or None")
    return clean_text(value[:max_chars])


def check_time(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e11:
        raise InvalidInput(name, value, "epoch seconds (a non-negative number)")


@dataclass(frozen=True, slots=True)
class ScopeKey:
    """Where a memory lives: ``(kind, owner, channel, persona)``.

    ``kind="user"`` (owner = a user id) follows one user; ``kind="server"`` (owner = a server
    id) is a channel's shared memory. Build keys with :meth:`user` and :meth:`server`.
    """

    kind: ScopeKind
    owner_id: str
    channel_id: str
    persona_id: str | None = None
    # A plain tuple twin: hot tiers key their dicts by it, since hashing a tuple runs in C
    # while a dataclass hash is a Python call on every lookup.
    astuple: tuple[str, str, str, str | None] = field(
        init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        if self.kind not in ("user", "server"):
            raise InvalidInput("kind", self.kind, "'user' or 'server'")
        check_id("owner_id", self.owner_id)
        check_id("channel_id", self.channel_id)
        check_optional_id("persona_id", self.persona_id)
        object.__setattr__(
            self, "astuple", (self.kind, self.owner_id, self.channel_id, self.persona_id)
        )

    @classmethod
    def user(cls, user_id: str, channel_id: str, persona_id: str | None = None) -> ScopeKey:
        return cls("user", user_id, channel_id, persona_id)

    @classmethod
    def server(cls, server_id: str, channel_id: str, persona_id: str | None = None) -> ScopeKey:
        return cls("server", server_id, channel_id, persona_id)

    @classmethod
    def from_tuple(cls, t: tuple[str, str, str, str | None]) -> ScopeKey:
        return cls(t[0], t[1], t[2], t[3])  # type: ignore[arg-type]

    @classmethod
    def _unchecked(
        cls, kind: ScopeKind, owner_id: str, channel_id: str, persona_id: str | None
    ) -> ScopeKey:
        """A key from ids that were validated already (a turn's), at a third of the cost."""
        return _fill_key(
            kind, owner_id, channel_id, persona_id, (kind, owner_id, channel_id, persona_id)
        )


def slot_filler(cls: type[T], *names: str) -> Callable[..., T]:
    """A constructor of a frozen slotted dataclass from trusted values, given positionally
    for ``names``: it fills each slot through its descriptor's setter, skipping the frozen
    check and the attribute lookup that ``object.__setattr__`` pays for every field (the
    unchecked constructors of the hot paths). Generated once per class, as ``dataclasses``
    generates ``__init__``."""
    setters = {f"_set_{name}": cls.__dict__[name].__set__ for name in names}
    body = "".join(f"    _set_{name}(obj, {name})\n" for name in names)
    source = f"def fill({', '.join(names)}):\n    obj = _new(_cls)\n{body}    return obj\n"
    scope: dict[str, Any] = {"_new": object.__new__, "_cls": cls, **setters}
    exec(source, scope)  # our own source, built from the class's field names
    return cast("Callable[..., T]", scope["fill"])


_fill_key = slot_filler(ScopeKey, "kind", "owner_id", "channel_id", "persona_id", "astuple")
