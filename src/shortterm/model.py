"""Pure value types: scope keys, messages, entries, settings.

Nothing here does I/O. Every constructor validates its input and raises ``InvalidInput`` naming
the field; ids are opaque non-empty strings (Matrix ids contain ``:``, so keys are never parsed
from strings) and ``persona_id=None`` means "no persona" while ``"0"`` is a real persona.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from .errors import InvalidInput
from .text import clean_text

__all__ = [
    "MAX_ID_CHARS",
    "Category",
    "Entry",
    "Message",
    "Privacy",
    "Reply",
    "ScopeKey",
    "ServerSettings",
    "UserSettings",
    "check_id",
    "check_optional_id",
]

MAX_ID_CHARS = 256
_set = object.__setattr__  # frozen dataclasses are filled this way by their own __init__
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
    if not isinstance(value, str):
        raise InvalidInput(name, value, "a string or None")
    return clean_text(value[:max_chars])


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
        """A key from ids that were validated already (a turn's), at half the cost."""
        key = object.__new__(cls)
        _set(key, "kind", kind)
        _set(key, "owner_id", owner_id)
        _set(key, "channel_id", channel_id)
        _set(key, "persona_id", persona_id)
        _set(key, "astuple", (kind, owner_id, channel_id, persona_id))
        return key


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message as the bot saw it. ``at`` is epoch seconds (stamped at capture)."""

    role: Role
    content: str
    author_id: str | None = field(default=None, kw_only=True)
    speaker: str | None = field(default=None, kw_only=True)
    at: float | None = field(default=None, kw_only=True)
    message_id: str | None = field(default=None, kw_only=True)
    privacy: Privacy = field(default=Privacy.NONE, kw_only=True)

    def __post_init__(self) -> None:
        if self.role not in ("user", "assistant"):
            raise InvalidInput("role", self.role, "'user' or 'assistant'")
        if not isinstance(self.content, str):
            raise InvalidInput("content", self.content, "a string")
        # Author ids and names repeat across thousands of cached messages: one shared copy each.
        if check_optional_id("author_id", self.author_id) is not None:
            object.__setattr__(self, "author_id", sys.intern(self.author_id))  # type: ignore[arg-type]
        check_optional_id("message_id", self.message_id)
        if self.speaker is not None:
            speaker = check_optional_text("speaker", self.speaker, 200)
            object.__setattr__(self, "speaker", sys.intern(speaker))  # type: ignore[arg-type]
        if self.at is not None:
            _check_time("at", self.at)
            object.__setattr__(self, "at", float(self.at))
        if not isinstance(self.privacy, Privacy):
            raise InvalidInput("privacy", self.privacy, "a shortterm.Privacy value")
        cleaned = clean_text(self.content)
        if cleaned is not self.content:
            object.__setattr__(self, "content", cleaned)

    @classmethod
    def _unchecked(
        cls,
        role: Role,
        content: str,
        author_id: str | None,
        speaker: str | None,
        at: float | None,
        message_id: str | None = None,
        privacy: Privacy = Privacy.NONE,
    ) -> Message:
        """A message from parts that were validated already (a reply, a stamped copy)."""
        msg = object.__new__(cls)
        _set(msg, "role", role)
        _set(msg, "content", content)
        _set(msg, "author_id", author_id)
        _set(msg, "speaker", speaker)
        _set(msg, "at", at)
        _set(msg, "message_id", message_id)
        _set(msg, "privacy", privacy)
        return msg


@dataclass(frozen=True, slots=True)
class Reply:
    """What a persona answered this turn."""

    text: str
    persona_id: str | None = field(default=None, kw_only=True)
    persona_name: str | None = field(default=None, kw_only=True)
    persona_lineage_id: str | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise InvalidInput("text", self.text, "a string")
        check_optional_id("persona_id", self.persona_id)
        check_optional_id("persona_lineage_id", self.persona_lineage_id)
        if self.persona_name is not None:
            object.__setattr__(
                self, "persona_name", check_optional_text("persona_name", self.persona_name, 200)
            )
        object.__setattr__(self, "text", clean_text(self.text))


@dataclass(frozen=True, slots=True)
class Entry:
    """What one scope key remembers right now (expired values already removed).

    ``messages`` live in the hot tier only; everything else mirrors the durable row.
    """

    key: ScopeKey
    messages: tuple[Message, ...] = ()
    summary: str | None = None
    categories: Mapping[str, str] = field(default_factory=dict)
    turns_since_refresh: int = 0
    messages_at: float | None = None  # last capture
    summary_at: float | None = None  # when the summary was written
    categories_at: float | None = None  # when a category value was last written
    server_id: str | None = None  # the server the scope lives in; None for a DM
    server_name: str | None = None
    channel_name: str | None = None
    parent_channel_id: str | None = None  # thread parent
    private: bool = False  # the origin channel was private when captured
    persona_lineage_id: str | None = None

    @property
    def updated_at(self) -> float | None:
        """The newest of the entry's own value timestamps."""
        stamps = (self.messages_at, self.summary_at, self.categories_at)
        times = [t for t in stamps if t is not None]
        return max(times) if times else None

    @property
    def is_empty(self) -> bool:
        return not self.messages and self.summary is None and not self.categories


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
            if len(value) > (100 if name == "label" else 500):
                raise InvalidInput(
                    f"category.{name}", value, "labels ≤ 100 and descriptions ≤ 500 characters"
                )
            object.__setattr__(self, name, clean_text(value.strip()))


def _check_int(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(name, value, f"an integer from {low} to {high}")


def _check_time(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e11:
        raise InvalidInput(name, value, "epoch seconds (a non-negative number)")


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
        _check_int("refresh_cadence", self.refresh_cadence, 1, 100)
        if self.render_mode not in RENDER_MODES:
            raise InvalidInput("render_mode", self.render_mode, "'crude_summary' or 'supersede'")
        _check_int("crude_message_count", self.crude_message_count, 1, 1000)
        _check_int("nudge_depth", self.nudge_depth, 0, 20)
        _check_int("content_depth", self.content_depth, -1, 20)
        for name in ("tool_description", "nudge_text"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or len(value) > 4000):
                raise InvalidInput(name, value, "None or a string of at most 4000 characters")
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


# -- durable rows: what the tiers exchange ------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScopeMeta:
    """What a turn knows about a scope besides its key; written on every upsert."""

    server_id: str | None = None  # None: a DM
    server_name: str | None = None
    channel_name: str | None = None
    parent_channel_id: str | None = None
    private: bool = False
    persona_lineage_id: str | None = None


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
