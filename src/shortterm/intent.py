"""Explicit long-term-memory intent ("remember this forever") in the triggering message.

Pure. When it matches, the short-term tool and the cadence nudge are hidden for the turn, so the
model routes the request to its long-term memory instead.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["has_long_term_intent"]

_ENGLISH = (
    "remember this",
    "remember that",
    "please remember",
    "don't forget",
    "do not forget",
    "for future reference",
    "for future conversations",
    "commit to memory",
)
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})
_PATTERN = re.compile(r"(?<!\w)(?:" + "|".join(re.escape(p) for p in _ENGLISH) + r")(?!\w)")


def _normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).translate(_QUOTES).casefold()
    return " ".join(text.split())


def has_long_term_intent(text: str, locale: str | None = None) -> bool:
    """True when ``text`` explicitly asks for something to be kept permanently."""
    if not text or not text.strip():
        return False
    return _PATTERN.search(_normalize(text)) is not None
