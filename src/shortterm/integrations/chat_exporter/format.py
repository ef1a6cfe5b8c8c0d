"""The DiscordChatExporter JSON format: its messages and channel, as the import needs them.

Only what the import keeps is read: a message's id, time, author, text and notes (mentions
resolved, attachments, stickers and embeds described), and the channel's place (server,
thread parent, DM or group DM).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...model.text import clean_text, truncate
from ...tool.arguments import kind_of
from .._markup import clean_name, compose, embed_note, resolve_markup, sticker_note
from .validate import (
    Malformed,
    as_array,
    as_bool,
    as_object,
    as_snowflake,
    as_text,
    as_timestamp,
    required,
)

__all__ = ["Author", "Channel", "Parsed", "is_bot", "parse_channel", "parse_message"]

# Message kinds as the exporter names them (its enum's names, or the number for kinds it does
# not name): ordinary messages, replies, and slash-command / context-menu answers.
_DIALOGUE_KINDS = frozenset(
    {"Default", "Reply", "ChatInputCommand", "ContextMenuCommand", "0", "19", "20", "23"}
)
_DM_KINDS = frozenset({"DirectTextChat", "1"})
_GROUP_DM_KINDS = frozenset({"DirectGroupTextChat", "3"})
_THREAD_KINDS = frozenset(
    {"GuildNewsThread", "GuildPublicThread", "GuildPrivateThread", "10", "11", "12"}
)


@dataclass(frozen=True, slots=True)
class Author:
    id: str
    speaker: str | None
    bot: bool


def parse_author(value: Any, path: str) -> Author:
    obj = as_object(value, path)
    author_id = as_snowflake(required(obj, "id", path), f"{path}.id")
    name = as_text(required(obj, "name", path), f"{path}.name", optional=False)
    nickname = as_text(obj.get("nickname"), f"{path}.nickname")
    is_bot = as_bool(obj.get("isBot"), f"{path}.isBot")
    speaker = clean_name(nickname or name or "") or None
    return Author(author_id, speaker, is_bot)


@dataclass(frozen=True, slots=True)
class Parsed:
    """One dialogue message of the export, converted and capped."""

    at: float
    order: int  # the message id as a number: ties in time are broken by id
    message_id: str
    author: Author
    content: str


def _attachments(value: Any, path: str) -> list[str]:
    names = []
    for i, item in enumerate(as_array(value, path)):
        obj = as_object(item, f"{path}[{i}]")
        name = as_text(obj.get("fileName"), f"{path}[{i}].fileName")
        names.append(name or "file")
    return names


def _body(obj: Mapping[str, Any], path: str, users: Mapping[str, str]) -> str:
    """The text of a message (or of a forwarded one), with its notes."""
    content = as_text(obj.get("content"), f"{path}.content") or ""
    content = resolve_markup(clean_text(content), users=users, channels={}, roles={})
    attachments = _attachments(obj.get("attachments"), f"{path}.attachments")
    notes = []
    for i, item in enumerate(as_array(obj.get("stickers"), f"{path}.stickers")):
        sticker = as_object(item, f"{path}.stickers[{i}]")
        notes.append(sticker_note(as_text(sticker.get("name"), f"{path}.stickers[{i}].name") or ""))
    embeds = as_array(obj.get("embeds"), f"{path}.embeds")
    for i, item in enumerate(embeds):
        embed = as_object(item, f"{path}.embeds[{i}]")
        title = as_text(embed.get("title"), f"{path}.embeds[{i}].title")
        description = as_text(embed.get("description"), f"{path}.embeds[{i}].description")
        if not content.strip():  # beside text, an embed is mostly a link's preview
            note = embed_note(title, description)
            if note is not None:
                notes.append(note)
    return compose(content, notes, attachments)


def _mentions(value: Any, path: str) -> dict[str, str]:
    users = {}
    for i, item in enumerate(as_array(value, path)):
        mentioned = parse_author(item, f"{path}[{i}]")
        if mentioned.speaker is not None:
            users[mentioned.id] = mentioned.speaker
    return users


def parse_message(value: Any, index: int, max_chars: int) -> Parsed | str:
    """A dialogue message, or why it is skipped (``"system"`` or ``"empty"``)."""
    path = f"messages[{index}]"
    obj = as_object(value, path)
    message_id = as_snowflake(required(obj, "id", path), f"{path}.id")
    kind = obj.get("type", "Default")
    if not isinstance(kind, str | int) or isinstance(kind, bool):
        raise Malformed(f"{path}.type", f"expected a message type name, found {kind_of(kind)}")
    at = as_timestamp(required(obj, "timestamp", path), f"{path}.timestamp")
    author = parse_author(required(obj, "author", path), f"{path}.author")
    users = _mentions(obj.get("mentions"), f"{path}.mentions")
    text = _body(obj, path, users)
    forwarded = obj.get("forwardedMessage")
    if forwarded is not None:
        inner = f"{path}.forwardedMessage"
        fwd = _body(as_object(forwarded, inner), inner, users)
        if fwd:
            text = f"{text}\n[forwarded message] {fwd}" if text else f"[forwarded message] {fwd}"
    if str(kind) not in _DIALOGUE_KINDS:
        return "system"
    if not text.strip():
        return "empty"
    return Parsed(at, int(message_id), message_id, author, truncate(text, max_chars))


@dataclass(frozen=True, slots=True)
class Channel:
    server_id: str | None
    server_name: str | None
    channel_id: str
    channel_name: str | None
    parent_channel_id: str | None
    group_dm: bool


def parse_channel(header: Mapping[str, Any]) -> Channel:
    channel = as_object(header["channel"], "channel")
    channel_id = as_snowflake(required(channel, "id", "channel"), "channel.id")
    kind = channel.get("type")
    if kind is not None and not isinstance(kind, str | int):
        raise Malformed("channel.type", f"expected a channel type name, found {kind_of(kind)}")
    kind = None if kind is None else str(kind)
    name = as_text(channel.get("name"), "channel.name")
    server_id: str | None = None
    server_name = None
    if header.get("guild") is not None:
        guild = as_object(header["guild"], "guild")
        server_id = as_snowflake(required(guild, "id", "guild"), "guild.id")
        server_name = as_text(guild.get("name"), "guild.name")
    # The exporter files DMs under a made-up guild with id 0 ("Direct Messages").
    if (server_id is not None and int(server_id) == 0) or kind in _DM_KINDS | _GROUP_DM_KINDS:
        server_id = server_name = None
    parent = None
    if server_id is not None and kind in _THREAD_KINDS and channel.get("categoryId") is not None:
        # For a thread, the exporter's "category" is the thread's parent channel.
        parent = as_snowflake(channel["categoryId"], "channel.categoryId")
    return Channel(
        server_id=server_id,
        server_name=None if server_name is None else clean_name(server_name) or None,
        channel_id=channel_id,
        channel_name=None if name is None else clean_name(name) or None,
        parent_channel_id=parent,
        group_dm=kind in _GROUP_DM_KINDS,
    )


def is_bot(author: Author, bots: frozenset[str] | None) -> bool:
    return author.id in bots if bots is not None else author.bot
