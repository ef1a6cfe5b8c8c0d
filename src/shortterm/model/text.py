"""Pure text hygiene for everything that enters shortterm.

Four jobs: make any Python string storable by every backend (no NUL, no lone surrogates), drop
control characters from text a model or an admin wrote, drop the invisible characters that
could hide a marker from the prompt renderer's rules, and shorten text without cutting a
character or a grapheme cluster in half.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = [
    "INVISIBLE_RANGES",
    "clean_text",
    "drop_invisible",
    "is_boundary",
    "replace_surrogates",
    "strip_controls",
    "truncate",
]

# NUL is refused by PostgreSQL text and lone surrogates cannot be encoded as UTF-8 at all, so
# both become U+FFFD: the text stays storable everywhere and visibly marks what was replaced.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_REPLACEMENT = "\ufffd"

# C0 and C1 controls except tab and newline, DEL, bidi embeddings/overrides/isolates (they can
# make stored text display differently from what it says) and the byte-order mark.
_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ufeff]")
_NEWLINES = re.compile("\r\n?|[\u2028\u2029\x85]")

_CR, _LF, _ZWNJ, _ZWJ = 0x0D, 0x0A, 0x200C, 0x200D
_RI_FIRST, _RI_LAST = 0x1F1E6, 0x1F1FF
# Prepended concatenation marks (Arabic number signs and their kin) join the next character.
_PREPEND = frozenset(
    (*range(0x0600, 0x0606), 0x06DD, 0x070F, 0x0890, 0x0891, 0x08E2, 0x0D4E, 0x110BD, 0x110CD)
) | frozenset((0x111C2, 0x111C3, 0x1193F, 0x11941, 0x11A3A, *range(0x11A84, 0x11A8A), 0x11D46))
_PREPEND |= {0x11F02}
# Viramas that link two consonants into one conjunct (Devanagari, Bengali, Gujarati, Oriya,
# Telugu, Malayalam): a cut right after one would leave half a syllable.
_LINKERS = frozenset((0x094D, 0x09CD, 0x0ACD, 0x0B4D, 0x0C4D, 0x0D4D))


# Code points a reader does not see: Unicode's Default_Ignorable_Code_Point property
# (DerivedCoreProperties.txt, Unicode 15.1; unicodedata does not expose it), every format
# character (category Cf, Unicode 15.1, the prepended concatenation marks included). Inside
# a role marker any of them ("[\u200csystem:") would slip it past a pattern that
# a model reading the text would still recognise. A test checks these ranges against the
# running Python's unicodedata (Cf) and the regex package (Default_Ignorable_Code_Point).
INVISIBLE_RANGES: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x0600, 0x0605), (0x061C, 0x061C),
    (0x06DD, 0x06DD), (0x070F, 0x070F), (0x0890, 0x0891), (0x08E2, 0x08E2),
    (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x200B, 0x200F),
    (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
    (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFFB),
    (0x110BD, 0x110BD), (0x110CD, 0x110CD), (0x13430, 0x1343F), (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
)  # fmt: skip
_INVISIBLE_CLASS = "".join(f"{chr(a)}-{chr(b)}" for a, b in INVISIBLE_RANGES)
_INVISIBLE_RUN = re.compile(f"[{_INVISIBLE_CLASS}]+")
# The ones that carry meaning between two characters of a script or an emoji (Persian and
# Indic joiners, emoji ZWJ sequences and variation selectors, tag sequences, the grapheme
# joiner, Mongolian variation selectors, prepended number signs). They stay where both sides
# are such characters; next to anything a marker is made of they go too.
_JOINING = re.compile(
    "[\u034f\u0600-\u0605\u06dd\u070f\u0890\u0891\u08e2\u180b-\u180d\u180f"
    "\u200c\u200d\ufe00-\ufe0f\U000110bd\U000110cd\U000e0020-\U000e007f"
    "\U000e0100-\U000e01ef]"
)
_MARKER_PUNCTUATION = frozenset("[]<>|:/")


def _joins_safely(c: str) -> bool:
    """True when ``c`` can be no part of a role marker: not a letter that folds to ASCII (the
    markers are ASCII words, and ``ſ`` or ``K`` match them case-insensitively), not marker
    punctuation, not white space."""
    return not (
        c.isspace()
        or c in _MARKER_PUNCTUATION
        or any(f.isascii() and f.isalpha() for f in c.casefold())
    )


def _drop_run(match: re.Match[str]) -> str:
    text, start, end = match.string, match.start(), match.end()
    before = text[start - 1] if start > 0 else " "
    after = text[end] if end < len(text) else ""
    if _joins_safely(before) and (after == "" or after.isspace() or _joins_safely(after)):
        return "".join(_JOINING.findall(match.group(0)))
    return ""


def drop_invisible(text: str) -> str:
    """``text`` without the code points in :data:`INVISIBLE_RANGES`, except joiners and
    selectors between two characters that cannot belong to a marker (so Persian, Indic
    scripts and emoji sequences keep their meaning)."""
    return _INVISIBLE_RUN.sub(_drop_run, text)


def clean_text(text: str) -> str:
    """Return ``text`` with NUL and lone surrogates replaced by U+FFFD."""
    if text.isascii() and "\x00" not in text:
        return text
    return _UNSTORABLE.sub(_REPLACEMENT, text)


def replace_surrogates(text: str) -> str:
    """Return ``text`` with lone surrogates replaced by U+FFFD, and nothing else changed: what
    a JSON ``"\\ud800"`` escape decodes to in Python, made encodable as UTF-8."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")  # several times faster than searching for a surrogate
    except UnicodeEncodeError:
        return _SURROGATE.sub(_REPLACEMENT, text)
    return text


def strip_controls(text: str, *, keep_newlines: bool = True) -> str:
    """Remove control characters; line breaks become ``\\n`` (or a space without
    ``keep_newlines``) and tabs stay. Lone surrogates become U+FFFD."""
    if text.isprintable() or text.replace("\n", "").replace("\t", "").isprintable():
        # Nothing to remove (a C-speed check; every character we strip is unprintable).
        return text if keep_newlines else text.replace("\n", " ")
    text = _NEWLINES.sub("\n", text)
    text = _CONTROLS.sub("", text)
    if not keep_newlines:
        text = text.replace("\n", " ")
    return clean_text(text)


def _is_control(cp: int) -> bool:
    if cp in (_ZWNJ, _ZWJ) or 0xE0020 <= cp <= 0xE007F or cp in _PREPEND:
        return False
    return unicodedata.category(chr(cp)) in ("Cc", "Zl", "Zp", "Cf")


def _is_extend(cp: int) -> bool:
    """Extend, ZWJ or SpacingMark: never begins a cluster of its own."""
    if cp in (_ZWNJ, _ZWJ) or 0x1F3FB <= cp <= 0x1F3FF or 0xE0020 <= cp <= 0xE007F:
        return True  # joiners, skin tones, emoji tag sequences
    if cp in (0xFF9E, 0xFF9F, 0x0E33, 0x0EB3):
        return True  # half-width kana voicing marks, Thai and Lao SARA AM
    return unicodedata.category(chr(cp)) in ("Mn", "Me", "Mc")


def _is_pictographic(cp: int) -> bool:
    # A superset of Extended_Pictographic: a false "yes" only keeps a ZWJ sequence together
    # that could have been cut, never the reverse.
    if cp >= 0x1F000:
        return not (_RI_FIRST <= cp <= _RI_LAST or 0x1F3FB <= cp <= 0x1F3FF) and cp < 0x20000
    if 0x2190 <= cp <= 0x2BFF or cp in (0x00A9, 0x00AE, 0x203C, 0x2049, 0x2122, 0x2139):
        return True
    return cp in (0x3030, 0x303D, 0x3297, 0x3299)


def _is_conjunct_consonant(cp: int) -> bool:
    # A letter of one of the scripts whose virama links consonants (a superset of the
    # consonants: a false "yes" only keeps a syllable together).
    return 0x0900 <= cp <= 0x0D7F and unicodedata.category(chr(cp)) == "Lo"


def _hangul(cp: int) -> str:
    if 0x1100 <= cp <= 0x115F or 0xA960 <= cp <= 0xA97C:
        return "L"
    if 0x1160 <= cp <= 0x11A7 or 0xD7B0 <= cp <= 0xD7C6:
        return "V"
    if 0x11A8 <= cp <= 0x11FF or 0xD7CB <= cp <= 0xD7FB:
        return "T"
    if 0xAC00 <= cp <= 0xD7A3:
        return "LV" if (cp - 0xAC00) % 28 == 0 else "LVT"
    return ""


def is_boundary(text: str, i: int) -> bool:
    """True when a grapheme cluster may end between ``text[i-1]`` and ``text[i]``.

    Follows the extended grapheme cluster rules of UAX #29. Where it approximates (emoji ZWJ
    sequences, conjunct consonants) it errs towards "no boundary", so a cut made at a
    boundary it reports never splits a cluster.
    """
    if i <= 0 or i >= len(text):
        return True
    p, n = ord(text[i - 1]), ord(text[i])
    if p == _CR and n == _LF:
        return False
    if p < 0x300 and n < 0x300:  # Latin and ASCII punctuation never join
        return True
    if p in (_CR, _LF) or n in (_CR, _LF) or _is_control(p) or _is_control(n):
        return True
    hp, hn = _hangul(p), _hangul(n)
    if hp and hn:
        if hp == "L" and hn in ("L", "V", "LV", "LVT"):
            return False
        if hp in ("LV", "V") and hn in ("V", "T"):
            return False
        if hp in ("LVT", "T") and hn == "T":
            return False
    if _is_extend(n) or p in _PREPEND:
        return False
    if p == _ZWJ and _is_pictographic(n):
        j = i - 2
        while j >= 0 and _is_extend(ord(text[j])):
            j -= 1
        if j >= 0 and _is_pictographic(ord(text[j])):
            return False
    if _is_conjunct_consonant(n):
        j, linked = i - 1, False
        while j >= 0 and not linked and _is_extend(ord(text[j])):
            linked = ord(text[j]) in _LINKERS
            j -= 1
        # UAX #29 wants a consonant before the linker too; some implementations do not, so
        # a linker alone is enough to keep the next consonant attached.
        if linked:
            return False
    if _RI_FIRST <= p <= _RI_LAST and _RI_FIRST <= n <= _RI_LAST:
        run = 0  # regional indicators pair up into flags from the start of their run
        j = i - 1
        while j >= 0 and _RI_FIRST <= ord(text[j]) <= _RI_LAST:
            run += 1
            j -= 1
        return run % 2 == 0
    return True


def truncate(text: str, max_chars: int) -> str:
    """Cut ``text`` to at most ``max_chars`` code points at a grapheme-cluster boundary.

    The result may be a little shorter than ``max_chars``: a cluster that does not fit whole
    (a family emoji, a flag, a letter with combining marks, a Hangul syllable in jamo) is
    dropped rather than split.
    """
    if len(text) <= max_chars:
        return text
    cut = max(max_chars, 0)
    while cut > 0 and not is_boundary(text, cut):
        cut -= 1
    return text[:cut]
