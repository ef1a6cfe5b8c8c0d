"""Discord message text → what a model should read. Pure, shared by the discord.py helpers
and the export importer.

Discord stores references as tokens (``<@123>``, ``<#456>``, ``<:blob:789>``, ``<t:1700000000:R>``):
noise to a model, and a model that echoes one back pings someone. Tokens become the names a
person sees in the client; what cannot be resolved becomes a neutral word, never the raw id.
Attachments, stickers and embeds become short bracketed notes, so a message that is only a
picture still says that something was shared.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from ..model.text import strip_controls, truncate

__all__ = [
    "MAX_NAME_CHARS",
    "MAX_NOTE_CHARS",
    "attachment_note",
    "clean_name",
    "compose",
    "embed_note",
    "resolve_markup",
    "sticker_note",
]

MAX_NAME_CHARS = 100  # Discord's own limit for user, role and channel names
MAX_NOTE_CHARS = 300  # an embed's title and description together
_MAX_ATTACHMENT_NOTES = 5

_TOKEN = re.compile(
    r"<(?:"
    r"@!?(?P<user>\d+)"
    r"|@&(?P<role>\d+)"
    r"|#(?P<channel>\d+)"
    r"|a?:(?P<emoji>[A-Za-z0-9_~]{1,32}):\d+"
    r"|t:(?P<time>-?\d{1,13})(?::[tTdDfFsSR])?"
    r"|/(?P<command>[^\s<>:/][^<>:/]{0,96}):\d+"
    r")>"
)


def clean_name(name: str) -> str:
    """A display name as one short line."""
    return truncate(strip_controls(name, keep_newlines=False).strip(), MAX_NAME_CHARS)


def _time(value: str) -> str | None:
    try:
        moment = datetime.fromtimestamp(int(value), tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def resolve_markup(
    text: str,
    *,
    users: Mapping[str, str],
    channels: Mapping[str, str],
    roles: Mapping[str, str],
) -> str:
    """Replace Discord's reference tokens in ``text`` with readable names.

    ``users``, ``channels`` and ``roles`` map ids to display names. Unknown ids become
    ``@unknown-user``, ``#unknown-channel`` and ``@unknown-role`` (as Discord's client shows
    them); custom emoji become ``:name:``; timestamps become a UTC date and time; slash-command
    mentions become ``/name``.
    """
    if "<" not in text:
        return text

    def replace(match: re.Match[str]) -> str:
        group = match.lastgroup
        value = match.group(group) if group is not None else None
        if value is None:  # pragma: no cover - every alternative has a named group
            return match.group(0)
        if group == "user":
            return "@" + clean_name(users.get(value) or "unknown-user")
        if group == "role":
            return "@" + clean_name(roles.get(value) or "unknown-role")
        if group == "channel":
            return "#" + clean_name(channels.get(value) or "unknown-channel")
        if group == "emoji":
            return f":{value}:"
        if group == "time":
            return _time(value) or match.group(0)
        return "/" + value.strip()

    return _TOKEN.sub(replace, text)


def attachment_note(file_name: str) -> str:
    return f"[attachment: {clean_name(file_name) or 'file'}]"


def sticker_note(name: str) -> str:
    return f"[sticker: {clean_name(name) or 'sticker'}]"


def embed_note(title: str | None, description: str | None) -> str | None:
    """``[embed: title — description]``, shortened; ``None`` when the embed has no text."""
    parts = [strip_controls(p, keep_newlines=False).strip() for p in (title, description) if p]
    text = " — ".join(p for p in parts if p)
    if not text:
        return None
    if len(text) > MAX_NOTE_CHARS:
        text = truncate(text, MAX_NOTE_CHARS - 1) + "…"
    return f"[embed: {text}]"


def compose(text: str, notes: Iterable[str], attachments: Iterable[str] = ()) -> str:
    """The message text, then one line of notes: the attachments (the first few, then a
    count of the rest) and any other notes."""
    names = list(attachments)
    shown = [attachment_note(n) for n in names[:_MAX_ATTACHMENT_NOTES]]
    if len(names) > _MAX_ATTACHMENT_NOTES:
        shown.append(f"[+{len(names) - _MAX_ATTACHMENT_NOTES} more attachments]")
    line = " ".join([*shown, *notes])
    text = text.strip()
    if not line:
        return text
    return f"{text}\n{line}" if text else line
