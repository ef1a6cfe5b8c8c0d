"""Tool arguments from a model: decode, validate, clean (pure).

A model sends a JSON string (OpenAI), a dict (Anthropic, Gemini, MCP) or something broken.
Everything that is not a usable update becomes a message the model can act on; a usable one
becomes a :class:`DistilledWrite`. Text is trimmed, stripped of control characters, loses the
braces of unknown placeholders, and is cut to ``max_chars`` code points on a grapheme
boundary.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ..model import DistilledWrite
from ..model.placeholders import sanitize_placeholders
from ..model.text import strip_controls, truncate
from . import texts

__all__ = ["Refused", "clean_note", "kind_of", "max_argument_chars", "parse_arguments"]

# Cleaning removes few characters (braces, controls), so text beyond this many times the limit
# is cut before it is cleaned: a 10 MB argument costs no more than a long note.
_PRECUT_FACTOR = 8
_BLANK_LINES = re.compile(r"\n{3,}")
# strict=False lets raw line breaks inside strings through, as some models send them (control
# characters are removed from the text afterwards anyway). One decoder, built once: passing
# the option to json.loads would build a new one on every call.
_DECODER = json.JSONDecoder(strict=False)


class Refused(Exception):
    """Arguments that cannot be used; the message is for the model."""


def max_argument_chars(fields: int, max_chars: int) -> int:
    """The longest JSON argument string accepted: room for every field at the limit even when
    each character is written as a ``\\u`` escape pair, with headroom for overlong notes."""
    return 32 * max_chars * fields + 4096


def clean_note(text: str, max_chars: int) -> str:
    """Stored form of a summary or a category value (may be empty)."""
    text = text[: _PRECUT_FACTOR * max_chars + 64]
    text = strip_controls(text, keep_newlines=True)
    if "\n\n\n" in text:
        text = _BLANK_LINES.sub("\n\n", text)
    text = sanitize_placeholders(text).strip()
    if len(text) > max_chars:
        text = truncate(text, max_chars).rstrip()
    return text


def _example(names: tuple[str, ...]) -> str:
    return json.dumps({names[0]: "..."})


def kind_of(value: object) -> str:
    """What a decoded JSON value is, as a message names it: ``"a string"``, ``"null"``, …
    (shared with the Discord import's validators, so both word a wrong type alike)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return f"a {type(value).__name__}"


def _decode(args: object, names: tuple[str, ...], max_chars: int) -> Mapping[Any, Any]:
    if isinstance(args, bytes | bytearray):
        try:
            args = bytes(args).decode("utf-8")
        except UnicodeDecodeError:
            raise Refused(
                texts.BAD_JSON.format(error="not UTF-8", example=_example(names))
            ) from None
    if args is None:
        return {}
    if isinstance(args, str):
        limit = max_argument_chars(len(names), max_chars)
        if len(args) > limit:
            raise Refused(texts.TOO_LARGE.format(size=len(args), limit=limit))
        if not args.strip():
            return {}  # some clients send "" for a call without arguments
        try:
            args = _DECODER.decode(args)
        except json.JSONDecodeError as exc:
            error = f"{exc.msg}: line {exc.lineno} column {exc.colno}"
            raise Refused(texts.BAD_JSON.format(error=error, example=_example(names))) from None
        except (ValueError, RecursionError):
            raise Refused(
                texts.BAD_JSON.format(error="nested too deeply", example=_example(names))
            ) from None
    if not isinstance(args, Mapping):
        raise Refused(texts.NOT_OBJECT.format(example=_example(names), kind=kind_of(args)))
    if not all(isinstance(k, str) for k in args):
        raise Refused(texts.BAD_KEY.format(example=_example(names)))
    return args


def _check_fields(args: Mapping[str, Any], names: tuple[str, ...]) -> None:
    unknown = [k for k in args if k not in names]
    if unknown:
        shown = ", ".join(repr(k[:60]) for k in unknown[:5])
        if len(unknown) > 5:
            shown += f" and {len(unknown) - 5} more"
        raise Refused(texts.UNKNOWN_FIELDS.format(unknown=shown, fields=", ".join(names)))


def _text(args: Mapping[str, Any], name: str) -> str | None:
    value = args.get(name)
    if value is not None and not isinstance(value, str):
        raise Refused(texts.NOT_A_STRING.format(field=name, kind=kind_of(value)))
    return value


def parse_arguments(
    args: object, names: tuple[str, ...], *, categories: bool, max_chars: int
) -> DistilledWrite:
    """The update ``args`` asks for, given the tool's field ``names`` (``("summary",)`` in
    summary mode); raises :class:`Refused` with a message for the model."""
    decoded = _decode(args, names, max_chars)
    _check_fields(decoded, names)
    if not categories:
        summary = _text(decoded, "summary")
        if summary is None:
            raise Refused(texts.SUMMARY_MISSING)
        if not summary.strip():
            raise Refused(texts.SUMMARY_BLANK)
        cleaned = clean_note(summary, max_chars)
        if not cleaned:
            raise Refused(texts.EMPTY_AFTER_CLEANING.format(field="summary"))
        return DistilledWrite(summary=cleaned, set_summary=True)
    changes: dict[str, str | None] = {}
    for name in names:
        value = _text(decoded, name)
        if value is None:
            continue  # absent or null: unchanged
        if not value.strip():
            changes[name] = None  # an empty string erases the topic
            continue
        cleaned = clean_note(value, max_chars)
        if not cleaned:
            raise Refused(texts.EMPTY_AFTER_CLEANING.format(field=name))
        changes[name] = cleaned
    if all(v is None for v in changes.values()):
        raise Refused(texts.CATEGORIES_EMPTY.format(fields=", ".join(names)))
    return DistilledWrite(categories=changes)
