"""Untrusted text made safe to quote in a prompt (pure).

Recalled text (messages, summaries, category values, and names) is untrusted. Before it is
placed, it is split on every line break Python knows (so a newline inside content can never
start an unprefixed line), our delimiter characters and their lookalikes are replaced, and the
markers models read as roles or instructions (``[System:``, ``<|im_start|>``, ``system:`` at
the start of a line, ...) are defused. ``render`` puts the results behind its quote prefixes.
"""

from __future__ import annotations

import re

from ..model.text import INVISIBLE_RANGES, drop_invisible, truncate

__all__ = ["MAX_LEAD", "quote_lead", "quote_lines", "quote_name"]

_LOOKALIKES: dict[int, str | None] = {
    **{ord(k): v for k, v in {"⟦": "[", "⟧": "]", "〚": "[", "〛": "]", "│": "|"}.items()},
    **{ord(k): v for k, v in {"［": "[", "＜": "<"}.items()},  # full-width forms of markers
    0x2800: " ",  # the braille blank looks like a space and is not one to a pattern
}
# Control characters left after splitting lines (tab stays).
_CONTROLS = re.compile("[\x00-\x08\x0e-\x1b\x1f\x7f-\x84\x86-\x9f]")
_ROLE_WORDS = "system|assistant|user|developer|tool|human|model|ai|bot|function|instructions?"
_MARKERS = re.compile(
    r"<<\s*/?\s*sys\s*>>"  # Llama-2 system tags
    rf"|<(?=\s*/?\s*(?:{_ROLE_WORDS}|im_start|im_end|s)\b)"  # <system>, </s>, ...
    rf"|\[(?=\s*/?\s*(?:{_ROLE_WORDS}|inst|sys)\b)",  # [System: ...], [INST], ...
    re.IGNORECASE,
)
_ROLE_AT_START = re.compile(rf"^(\s*)({_ROLE_WORDS})(\s*:)", re.IGNORECASE)
_WHITESPACE = re.compile(r"\s+")
MAX_LEAD = 64  # characters of a speaker or a field label


def _defuse(match: re.Match[str]) -> str:
    token = match.group(0)
    if token.startswith("<<"):
        return "‹‹SYS››"
    return "‹" if token == "<" else "("


def _defuse_markers(text: str) -> str:
    """Every replacement keeps the length, so a text cut to size stays within it."""
    # Chat-template special tokens (<|im_start|>, <|endoftext|>, ...): the halves overlap in
    # "<|>", so they are replaced one after the other rather than by one pattern.
    text = text.replace("<|", "‹|").replace("|>", "|›")
    return _MARKERS.sub(_defuse, text)


def _clean_line(line: str) -> str:
    line = _defuse_markers(_CONTROLS.sub("", line).rstrip())
    return _ROLE_AT_START.sub(r'\1"\2"\3', line)


# Anything that may need work below: controls and line breaks, invisible characters, our
# delimiters and their lookalikes, and the first characters of every marker. Most chat text
# has none of them and skips straight to the end.
_SUSPECT = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u2800"  # controls, line breaks, the braille blank
    + "".join(f"{chr(a)}-{chr(b)}" for a, b in INVISIBLE_RANGES)  # invisible characters
    + r"⟦⟧〚〛│［＜<\[|]"  # delimiters, lookalikes, marker starts
)


def quote_lines(text: str) -> tuple[str, ...]:
    """``text`` as defused lines, ready to follow a quote prefix; blank lines are dropped."""
    if _plain(text) and (":" not in text or _ROLE_AT_START.match(text) is None):
        line = text.rstrip()
        return (line,) if line else ()
    if text.isascii() and text.isprintable():
        # One printable ASCII line with a "<", "[" or "|" (a mention, a link, a table) or a
        # leading role word: the full treatment would only defuse markers and that word, so
        # those alone are applied (no folding, invisible characters or line breaks to handle),
        # each only when present.
        line = text.rstrip()
        if "<|" in line or "|>" in line or _MARKERS.search(line) is not None:
            line = _defuse_markers(line)
        if ":" in line:
            line = _ROLE_AT_START.sub(r'\1"\2"\3', line)
        return (line,) if line.strip() else ()
    return _quote_lines_slow(text)


def _plain(text: str) -> bool:
    """True when ``text`` holds nothing the full treatment would change (bar a role word)."""
    if text.isascii():
        # Printable ASCII has no controls, breaks, invisibles or lookalikes, so only three
        # characters can start a marker; these str predicates run far faster than a scan.
        return text.isprintable() and "<" not in text and "[" not in text and "|" not in text
    return _SUSPECT.search(text) is None


def _quote_lines_slow(text: str) -> tuple[str, ...]:
    # Invisible characters could split a marker so that the patterns below miss it: they go
    # first, after the lookalikes are folded (a joiner next to "［" must see the "[").
    text = drop_invisible(text.translate(_LOOKALIKES))
    out = []
    for line in text.splitlines():
        cleaned = _clean_line(line)
        if cleaned.strip():
            out.append(cleaned)
    return tuple(out)


_ROLE_NAME = re.compile(rf"(?:{_ROLE_WORDS})", re.IGNORECASE)
_ROLE_NAMES = frozenset(_ROLE_WORDS.replace("instructions?", "instruction|instructions").split("|"))
_PLAIN_NAME = re.compile(r"[^\s:]+(?: [^\s:]+)*")  # words, single spaces, no colon


def quote_name(text: str, max_chars: int) -> str:
    """Untrusted text for inside one of our own lines (names in headers and speakers)."""
    if text and len(text) <= max_chars and _plain_ascii_name(text):
        return text
    if len(text) <= max_chars and ":" not in text and _plain(text) and _PLAIN_NAME.fullmatch(text):
        return text  # one line, single spaces, nothing to defuse: the usual channel name
    # Joining lines ("[" + "system") and cutting to size ("[systemic" → "[sys") can both
    # assemble a marker, so the markers are defused again after both.
    text = truncate(_WHITESPACE.sub(" ", " ".join(quote_lines(text))).strip(), max_chars)
    return _defuse_markers(text)


def _plain_ascii_name(name: str) -> bool:
    """``_plain(name) and _PLAIN_NAME.fullmatch(name)`` for printable ASCII, by str tests:
    words of printable ASCII, single spaces between them, no colon, nothing to defuse."""
    return (
        name.isascii()
        and name.isprintable()
        and name[:1] != " "
        and name[-1:] != " "
        and "  " not in name
        and ":" not in name
        and "<" not in name
        and "[" not in name
        and "|" not in name
    )


def quote_lead(name: str) -> str:
    """A speaker or field label: one line, no colon (it would fake a second speaker)."""
    if name and len(name) <= MAX_LEAD and _plain_ascii_name(name):
        # The usual speaker. ASCII folds case by lower(), as the pattern's IGNORECASE does.
        return f'"{name}"' if name.lower() in _ROLE_NAMES else name
    if len(name) <= MAX_LEAD and _plain(name) and _PLAIN_NAME.fullmatch(name):
        shown = name  # the common case: already clean
    else:
        shown = quote_name(name.replace(":", " "), MAX_LEAD) or "someone"
    if _ROLE_NAME.fullmatch(shown):
        shown = f'"{shown}"'
    return shown
