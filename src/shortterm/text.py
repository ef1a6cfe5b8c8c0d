"""Pure text hygiene for everything that enters shortterm.

Two jobs: make any Python string storable by every backend (no NUL, no lone surrogates), and
shorten text without cutting a character or a grapheme cluster in half.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["clean_text", "truncate"]

# NUL is refused by PostgreSQL text and lone surrogates cannot be encoded as UTF-8 at all, so
# both become U+FFFD: the text stays storable everywhere and visibly marks what was replaced.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_REPLACEMENT = "\ufffd"

_ZWJ = 0x200D
_RI_FIRST, _RI_LAST = 0x1F1E6, 0x1F1FF


def clean_text(text: str) -> str:
    """Return ``text`` with NUL and lone surrogates replaced by U+FFFD."""
    if text.isascii() and "\x00" not in text:
        return text
    return _UNSTORABLE.sub(_REPLACEMENT, text)


def _extends_previous(ch: str) -> bool:
    """True when ``ch`` belongs to the grapheme cluster of the code point before it."""
    cp = ord(ch)
    if cp == _ZWJ or 0xFE00 <= cp <= 0xFE0F or 0x1F3FB <= cp <= 0x1F3FF or 0xE0020 <= cp <= 0xE007F:
        return True  # joiner, variation selectors, skin tones, emoji tag sequences
    return unicodedata.category(ch) in ("Mn", "Me", "Mc")


def truncate(text: str, max_chars: int) -> str:
    """Cut ``text`` to at most ``max_chars`` code points at a grapheme-cluster boundary.

    The result may be a little shorter than ``max_chars``: a cluster that does not fit whole
    (a family emoji, a flag, a letter with combining marks) is dropped rather than split.
    """
    if len(text) <= max_chars:
        return text
    cut = max_chars
    # Walk back while the first dropped code point still belongs to the kept cluster.
    while cut > 0 and (_extends_previous(text[cut]) or ord(text[cut - 1]) == _ZWJ):
        cut -= 1
    # Regional indicators pair up into flags; never keep half a pair.
    run = 0
    while cut - run > 0 and _RI_FIRST <= ord(text[cut - run - 1]) <= _RI_LAST:
        run += 1
    if run % 2 == 1 and cut < len(text) and _RI_FIRST <= ord(text[cut]) <= _RI_LAST:
        cut -= 1
    return text[:cut]
