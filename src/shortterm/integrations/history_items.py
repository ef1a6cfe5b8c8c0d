"""A framework's history items kept inside shortterm's messages, in the order and shape added.

A framework's history holds more than a channel's dialogue: tool calls and their results,
reasoning, content parts, ids. shortterm keeps dialogue, so each item with a user's or the
bot's text becomes one :class:`~shortterm.Message` (whose ``content`` is that text, all that
recall in other channels renders), and the items without text ride on it: the message's
``raw`` is the framework's JSON of the whole group, in order. A rider goes with the text item
before it (one before any goes with the first), so reading the messages back in order gives
the items back in the order they were added (``raw`` names the surface that wrote it: another
adapter reading the same channel reads the text), and the messages stay what they always were:
bounded by the window of ``max_messages``, in the hot tier only, and gone with every forget
that drops the message (a clear, a purge, a horizon).

Pure code shared by the adapters (the Agents SDK session, the LangChain history).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

from ..model.keys import Role

__all__ = [
    "DEFAULT_ITEM_CHARS_PER_MESSAGE_CHARS",
    "Held",
    "Kind",
    "dumps",
    "group_raw",
    "groups",
    "loads_list",
    "new_id",
    "trimmed",
    "turn_end",
]

# The JSON of one message's items may be this many times the memory's max_message_chars.
DEFAULT_ITEM_CHARS_PER_MESSAGE_CHARS = 4

Kind = Literal["user", "answer", "other"]
"""Where an item stands in a run: a user's message, the bot's text answer (no tool call with
it), or anything else (a tool call or result, reasoning, an operator message: the run goes
on)."""


class Held(NamedTuple):
    """One item added to a history and not captured yet."""

    raw: str  # the item's JSON
    role: Role | None  # "user" / "assistant" when the item carries their text, else None
    text: str
    kind: Kind
    at: float  # when it was added (the memory's clock)
    message_id: str  # the message's identity, so a retried capture adds it once
    speaker: str | None = None  # who wrote it, when the item names them
    # A text item that is just its role and text, as a message keeps them: the message says
    # it all, and needs no raw.
    plain: bool = False


# One encoder of each kind for every call: json.dumps with options builds a new one each time.
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_ENCODE_ASCII = json.JSONEncoder(separators=(",", ":")).encode


def dumps(obj: object) -> str:
    """Compact JSON; ``TypeError`` for what JSON cannot hold (as the SDK's own sessions)."""
    text = _ENCODE(obj)
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: only an ASCII escape can store it
        text = _ENCODE_ASCII(obj)
    return text


def new_id() -> str:
    """A message identity no other process makes (as a uuid4's hex, without the object)."""
    return os.urandom(16).hex()


def turn_end(held: Sequence[Held]) -> int:
    """The index of the answer that ends the last finished turn of ``held``, or -1: an answer
    is finished when nothing follows it or a user's message does; a tool call after it means
    the run goes on (its text is kept with the final answer)."""
    end = answer = -1
    for i, h in enumerate(held):
        if h.kind == "answer":
            answer = i
        elif h.kind == "user":
            if answer >= 0:
                end = answer
            answer = -1
        else:
            answer = -1
    return answer if answer >= 0 else end


def groups(held: Sequence[Held]) -> list[list[Held]]:
    """``held`` cut into groups of one text item each, with the riders after it (those before
    the first text item join the first group). ``held`` must hold a text item."""
    out: list[list[Held]] = []
    leading: list[Held] = []
    for h in held:
        if h.role is not None:
            out.append([*leading, h])
            leading = []
        elif out:
            out[-1].append(h)
        else:
            leading.append(h)
    if leading:
        raise ValueError("groups() needs a text item")
    return out


def group_raw(surface: str, group: Sequence[Held], max_chars: int) -> str | None:
    """The ``raw`` of the message made of ``group``, written by ``surface`` (only it reads
    the items back; another surface reads the text): ``None`` when the message's text says it
    all (one plain item); over ``max_chars``, the text item alone (its riders dropped
    together, so no tool call is kept without its result), or ``None`` when even that is too
    long."""
    if len(group) == 1 and group[0].plain:
        return None
    raw = _wrapped(surface, [h.raw for h in group])
    if len(raw) <= max_chars:
        return raw
    (own,) = (h for h in group if h.role is not None)
    if own.plain:
        return None
    raw = _wrapped(surface, [own.raw])
    return raw if len(raw) <= max_chars else None


def _wrapped(surface: str, items: list[str]) -> str:
    return '{"surface":' + dumps(surface) + ',"items":[' + ",".join(items) + "]}"


def trimmed(held: list[Held], max_texts: int, max_chars: int) -> list[Held]:
    """``held`` without its oldest groups while it holds more than ``max_texts`` text items
    or more than ``max_chars`` of JSON: what a capture would keep, at most."""
    texts = sum(h.role is not None for h in held)
    chars = sum(len(h.raw) for h in held)
    start = 0
    while start < len(held) - 1 and (texts > max_texts or chars > max_chars):
        # Drop the first group: leading riders, the first text item, the riders after it.
        seen_text = False
        while start < len(held) - 1:
            h = held[start]
            if h.role is not None:
                if seen_text:
                    break
                seen_text = True
                texts -= 1
            chars -= len(h.raw)
            start += 1
    return held[start:] if start else held


def loads_list(surface: str, raw: str) -> list[Any] | None:
    """The items of a message's ``raw`` that ``surface`` wrote; ``None`` when another surface
    wrote it, or it is not such a list (then the message's text stands for it)."""
    try:
        held = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(held, dict) or held.get("surface") != surface:
        return None
    items = held.get("items")
    return items if isinstance(items, list) and items else None
