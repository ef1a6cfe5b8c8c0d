"""Messages, replies and entries: what a scope holds."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

from .errors import InvalidInput
from .keys import (
    Privacy,
    Role,
    ScopeKey,
    check_optional_id,
    check_optional_text,
    check_time,
    slot_filler,
)
from .text import clean_text

if TYPE_CHECKING:
    from .rows import ScopeMeta

_INF = float("inf")


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message as the bot saw it. ``at`` is epoch seconds (stamped at capture).

    ``raw``: the surface's own form of the message and of the items that came with it (JSON
    text, e.g. an Agents SDK item and its function calls), opaque to shortterm: kept with the
    message in the hot tier and gone with it, so the surface can give back what it was given.
    Recall renders ``content`` only."""

    role: Role
    content: str
    author_id: str | None = field(default=None, kw_only=True)
    speaker: str | None = field(default=None, kw_only=True)
    at: float | None = field(default=None, kw_only=True)
    message_id: str | None = field(default=None, kw_only=True)
    privacy: Privacy = field(default=Privacy.NONE, kw_only=True)
    raw: str | None = field(default=None, kw_only=True, repr=False)

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
            check_time("at", self.at)
            object.__setattr__(self, "at", float(self.at))
        if not isinstance(self.privacy, Privacy):
            raise InvalidInput("privacy", self.privacy, "a shortterm.Privacy value")
        if self.raw is not None and not isinstance(self.raw, str):
            raise InvalidInput("raw", self.raw, "None or a string (the surface's JSON)")
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
        raw: str | None = None,
    ) -> Message:
        """A message from parts that were validated already (a reply, a stamped copy)."""
        return _fill_message(role, content, author_id, speaker, at, message_id, privacy, raw)


_fill_message = slot_filler(
    Message, "role", "content", "author_id", "speaker", "at", "message_id", "privacy", "raw"
)


@dataclass(frozen=True, slots=True)
class Reply:
    """What a persona answered this turn. ``raw``: as :attr:`Message.raw`, for the message
    the capture makes of it."""

    text: str
    persona_id: str | None = field(default=None, kw_only=True)
    persona_name: str | None = field(default=None, kw_only=True)
    persona_lineage_id: str | None = field(default=None, kw_only=True)
    raw: str | None = field(default=None, kw_only=True, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise InvalidInput("text", self.text, "a string")
        if self.raw is not None and not isinstance(self.raw, str):
            raise InvalidInput("raw", self.raw, "None or a string (the surface's JSON)")
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
    # ``updated_at`` as a plain float (-inf for none), kept for sorting many entries by it.
    _newest: float = field(default=-_INF, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        newest = -_INF if self.messages_at is None else self.messages_at
        at = self.summary_at
        if at is not None and at > newest:
            newest = at
        at = self.categories_at
        if at is not None and at > newest:
            newest = at
        object.__setattr__(self, "_newest", newest)

    @classmethod
    def _unchecked(
        cls,
        key: ScopeKey,
        messages: tuple[Message, ...],
        summary: str | None,
        categories: Mapping[str, str],
        turns_since_refresh: int,
        messages_at: float | None,
        summary_at: float | None,
        categories_at: float | None,
        meta: ScopeMeta,
    ) -> Entry:
        """A view of a hot tier's record, whose parts it holds checked already (the
        in-process tier builds one each time a record changed)."""
        newest = -_INF if messages_at is None else messages_at
        if summary_at is not None and summary_at > newest:
            newest = summary_at
        if categories_at is not None and categories_at > newest:
            newest = categories_at
        return _fill_entry(
            key,
            messages,
            summary,
            categories,
            turns_since_refresh,
            messages_at,
            summary_at,
            categories_at,
            meta.server_id,
            meta.server_name,
            meta.channel_name,
            meta.parent_channel_id,
            meta.private,
            meta.persona_lineage_id,
            newest,
        )

    @property
    def updated_at(self) -> float | None:
        """The newest of the entry's own value timestamps."""
        return None if self._newest == -_INF else self._newest

    @property
    def is_empty(self) -> bool:
        return not self.messages and self.summary is None and not self.categories


_fill_entry = slot_filler(Entry, *(f.name for f in fields(Entry)))
