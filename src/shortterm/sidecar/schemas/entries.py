"""Entry bodies: what a scope remembers, the servers that have memory, admin edits."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from ... import model as lib
from ...model import MAX_ID_CHARS, ServerSummary
from .base import (
    ID_PATTERN,
    Id,
    PrivacyName,
    StrictModel,
    Text,
    with_examples,
)

__all__ = [
    "DeletedOut",
    "EntriesOut",
    "EntryOut",
    "EntryResult",
    "KeyOut",
    "MessageOut",
    "ServerOut",
    "ServersOut",
    "SetCategoriesIn",
    "SetSummaryIn",
]


def _slug_keys(schema: dict[str, Any]) -> None:
    # pydantic writes a constrained key type as patternProperties, which leaves keys that do
    # not match unconstrained; propertyNames says what is meant.
    schema.pop("patternProperties", None)
    schema["propertyNames"] = {"minLength": 1, "maxLength": MAX_ID_CHARS, "pattern": ID_PATTERN}
    schema["additionalProperties"] = {"type": "string"}


def _read(source: object, model: type[BaseModel], **given: Any) -> dict[str, Any]:
    """The fields of ``model`` read from the attributes of the same names on ``source``,
    but those ``given``: the output models mirror the library's values field for field."""
    return {
        name: given[name] if name in given else getattr(source, name) for name in model.model_fields
    }


class MessageOut(BaseModel):
    role: Literal["user", "assistant"]
    content: str
    author_id: str | None
    speaker: str | None
    at: float | None
    message_id: str | None
    privacy: PrivacyName

    @classmethod
    def of(cls, m: lib.Message) -> MessageOut:
        return cls(**_read(m, cls, privacy=m.privacy.value))


class KeyOut(BaseModel):
    kind: Literal["user", "server"]
    owner_id: str
    channel_id: str
    persona_id: str | None


ENTRY_EXAMPLE: dict[str, Any] = {
    "key": {"kind": "server", "owner_id": "333", "channel_id": "222", "persona_id": "7"},
    "messages": [
        {
            "role": "user",
            "content": "Hike on Saturday?",
            "author_id": "111",
            "speaker": "Ana",
            "at": 1800000000.0,
            "message_id": None,
            "privacy": "none",
        }
    ],
    "summary": "Hike planned: Saturday, ridge trail, 8am.",
    "categories": {},
    "turns_since_refresh": 1,
    "messages_at": 1800000000.0,
    "summary_at": 1800000060.0,
    "categories_at": None,
    "updated_at": 1800000060.0,
    "server_id": "333",
    "server_name": "Guild",
    "channel_name": "general",
    "parent_channel_id": None,
    "private": False,
    "persona_lineage_id": None,
}


class EntryOut(BaseModel):
    """What one scope remembers now. Times are epoch seconds."""

    model_config = with_examples(ENTRY_EXAMPLE)

    key: KeyOut
    messages: list[MessageOut]
    summary: str | None
    categories: dict[str, str]
    turns_since_refresh: int
    messages_at: float | None
    summary_at: float | None
    categories_at: float | None
    updated_at: float | None
    server_id: str | None
    server_name: str | None
    channel_name: str | None
    parent_channel_id: str | None
    private: bool
    persona_lineage_id: str | None

    @classmethod
    def of(cls, e: lib.Entry) -> EntryOut:
        return cls(
            **_read(
                e,
                cls,
                key=KeyOut(**_read(e.key, KeyOut)),
                messages=[MessageOut.of(m) for m in e.messages],
                categories=dict(e.categories),
            )
        )


class EntriesOut(BaseModel):
    """Live entries, and the memory's clock when they were read: ages shown to a person are
    ``now - at``, whatever the reader's own clock says."""

    model_config = with_examples({"entries": [ENTRY_EXAMPLE], "now": 1800000300.0})

    entries: list[EntryOut]
    now: float


class EntryResult(BaseModel):
    """The entry after an edit; null when nothing is live for the key any more."""

    model_config = with_examples({"entry": ENTRY_EXAMPLE})

    entry: EntryOut | None


SERVER_EXAMPLE: dict[str, Any] = {
    "server_id": "333",
    "server_name": "Guild",
    "entries": 4,
    "updated_at": 1800000060.0,
}


class ServerOut(BaseModel):
    """A server that has durable shared memory."""

    model_config = with_examples(SERVER_EXAMPLE)

    server_id: str
    server_name: str | None = Field(
        description="The name on its most recently updated row that has one; null if none has."
    )
    entries: int = Field(description="How many durable shared (server-scope) rows it has.")
    updated_at: float | None = Field(description="The newest write to those rows (epoch s).")

    @classmethod
    def of(cls, s: ServerSummary) -> ServerOut:
        return cls(**_read(s, cls))


class ServersOut(BaseModel):
    # A full page (of limit=1): the document drops nulls from examples, so a last page
    # would be shown without its next_after.
    model_config = with_examples({"servers": [SERVER_EXAMPLE], "next_after": "333"})

    servers: list[ServerOut] = Field(description="Ordered by server id.")
    next_after: str | None = Field(
        description="The last server id when the page is full: pass it as `after` for the "
        "next page. Null when there is no next page."
    )


class SetSummaryIn(StrictModel):
    model_config = with_examples({"summary": "Hike planned: Saturday, ridge trail, 8am."})

    summary: Text | None = Field(description="The new summary; null clears it.")


class SetCategoriesIn(StrictModel):
    model_config = with_examples({"categories": {"mood": "calm", "plans": "Hike on Saturday"}})

    categories: dict[Id, Text] = Field(
        description="Category slug to text; replaces every value. A blank value is dropped.",
        json_schema_extra=_slug_keys,
    )


class DeletedOut(BaseModel):
    model_config = with_examples({"deleted": 2})

    deleted: int = Field(description="How many scopes or rows were removed.")
