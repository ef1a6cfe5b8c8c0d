"""How a hot-tier record is spelled in Redis: compact JSON the Lua scripts read and write.

Separate from :mod:`.redis` so the encoding can be read (and changed) in one place; these
run once per capture or read, so they stay plain functions with nothing to look up. Reads
decode with the models' unchecked constructors: only this tier writes records, from values
that were checked then; :class:`Views` decodes a record once per content.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ...model import Entry, Message, Privacy, ScopeKey, ScopeMeta, ScopeRow
from ...model.fence import user_target

__all__ = [
    "Views",
    "authors",
    "authors_json",
    "counter_of",
    "decode_messages",
    "dumps",
    "durable_json",
    "key_of",
    "lua_float",
    "member",
    "message_json",
    "messages_json",
    "meta_json",
]


# One encoder for every call: json.dumps with options builds a new one each time, which costs
# more than encoding a message (a capture encodes each of its messages on its own).
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def dumps(obj: object) -> str:
    return _ENCODE(obj)


def lua_float(value: float) -> str:
    """A float as a Lua script reads it back exactly (repr round-trips)."""
    return repr(float(value))


def member(key: ScopeKey) -> str:
    return dumps([key.kind, key.owner_id, key.channel_id, key.persona_id])


def key_of(member: str) -> ScopeKey:
    kind, owner, channel, persona = json.loads(member)
    return ScopeKey._unchecked(kind, owner, channel, persona)


def meta_json(meta: ScopeMeta) -> str:
    m = meta
    return dumps(
        [
            m.server_id,
            m.server_name,
            m.channel_name,
            m.parent_channel_id,
            m.private,
            m.persona_lineage_id,
        ]
    )


def message_json(m: Message) -> str:
    """One message as it appears inside :func:`messages_json`: a flat array; a message with a
    ``raw`` has it as an eighth item (a string, so the array stays flat for capture.lua)."""
    parts = [m.role, m.content, m.author_id, m.speaker, m.at, m.message_id, m.privacy.value]
    if m.raw is not None:
        parts.append(m.raw)
    return dumps(parts)


def messages_json(at: float, messages: Sequence[Message]) -> str:
    # Spelled as dumps([at, [message, ...]]) would spell it; capture.lua joins the same parts
    # when it drops a purged author's messages, so both give identical bytes.
    return "[" + dumps(at) + ",[" + ",".join(message_json(m) for m in messages) + "]]"


def authors(messages: Sequence[Message]) -> list[str]:
    return sorted({m.author_id for m in messages if m.author_id is not None})


def authors_json(messages: Sequence[Message]) -> str:
    """A record's ``au``: its authors' digests (``user_target``), in the order of their ids;
    the author indexes are named by them, so a purge known only by digest finds them."""
    return dumps([user_target(a) for a in authors(messages)])


def counter_of(d_raw: str | None, exp: str | None, now: float) -> int | None:
    """The cadence counter a record holds (its ``d`` and ``exp``); ``None`` when there is no
    live record."""
    if exp is None or now >= float(exp):
        return None
    return int(json.loads(d_raw)[4]) if d_raw else 0


def decode_messages(raw: list[Any]) -> tuple[Message, ...]:
    # Unchecked: only this tier writes records, from messages that were checked then.
    unchecked, privacy_of = Message._unchecked, _PRIVACY.__getitem__
    out = []
    for m in raw:
        role, content, author, speaker, at, message_id, privacy = m[:7]
        item = m[7] if len(m) > 7 else None  # a surface's raw items (Message.raw)
        out.append(
            unchecked(role, content, author, speaker, at, message_id, privacy_of(privacy), item)
        )
    return tuple(out)


_PRIVACY = {p.value: p for p in Privacy}


def durable_json(row: ScopeRow, summary_ttl_s: float) -> tuple[str, str]:
    """The mirrored durable values of a row, and when the last of them expires."""
    d = dumps(
        [
            row.summary,
            row.summary_at,
            dict(row.categories),
            row.categories_at,
            row.turns_since_refresh,
        ]
    )
    expiries = []
    if row.summary is not None and row.summary_at is not None:
        expiries.append(row.summary_at + summary_ttl_s)
    if row.categories and row.categories_at is not None:
        expiries.append(row.categories_at + summary_ttl_s)
    return d, lua_float(max(expiries)) if expiries else ""


Fields = tuple[str, str | None, str | None]  # a record's meta, d and m, as read
_INF = float("inf")


def _view(
    key: ScopeKey, fields: Fields, now: float, ttls: tuple[float, float]
) -> tuple[Entry | None, float]:
    """The live view of a record (its ``meta``, ``d`` and ``m`` fields) at ``now``, given
    the crude and summary TTLs (``None`` when nothing in it is live), and until when it stays
    the view: the first expiry of a part in it (a part that expired never comes back)."""
    meta_raw, d_raw, m_raw = fields
    crude_ttl_s, summary_ttl_s = ttls
    until = _INF
    messages: tuple[Message, ...] = ()
    messages_at = None
    if m_raw:
        at, raw = json.loads(m_raw)
        if raw and now < at + crude_ttl_s:
            messages, messages_at, until = decode_messages(raw), at, at + crude_ttl_s
    summary = summary_at = categories_at = None
    categories: dict[str, str] = {}
    turns = 0
    if d_raw:
        s, s_at, cats, c_at, turns = json.loads(d_raw)
        if s is not None and s_at is not None and now < s_at + summary_ttl_s:
            summary, summary_at, until = s, s_at, min(until, s_at + summary_ttl_s)
        if cats and c_at is not None and now < c_at + summary_ttl_s:
            categories, categories_at = cats, c_at
            until = min(until, c_at + summary_ttl_s)
    if not messages and summary is None and not categories:
        return None, _INF
    server_id, server_name, channel_name, parent, private, lineage = json.loads(meta_raw)
    meta = ScopeMeta(server_id, server_name, channel_name, parent, private, lineage)
    entry = Entry._unchecked(
        key, messages, summary, categories, turns, messages_at, summary_at, categories_at, meta
    )
    return entry, until


class Views:
    """Views of records, decoded once per content: a record read again unchanged gives the
    same :class:`Entry` (no decoding, and the render cache, keyed by the entry, still holds its
    rendering) until a part of it expires. Bounded: the least recently decoded go first."""

    def __init__(self, ttls: tuple[float, float], size: int = 4096) -> None:
        self._ttls = ttls
        self._size = size
        self._by_name: dict[str, tuple[Fields, Entry | None, float, float]] = {}

    def view(self, name: str, fields: Fields, now: float) -> Entry | None:
        """The view of record ``name`` (its member string) holding ``fields``, at ``now``."""
        fields = (fields[0], fields[1], fields[2])  # a reply's list, or a tuple
        seen = self._by_name.get(name)
        if seen is not None and seen[0] == fields and seen[2] <= now < seen[3]:
            return seen[1]
        entry, until = _view(key_of(name), fields, now, self._ttls)
        self._by_name.pop(name, None)
        self._by_name[name] = (fields, entry, now, until)
        if len(self._by_name) > self._size:
            del self._by_name[next(iter(self._by_name))]
        return entry
