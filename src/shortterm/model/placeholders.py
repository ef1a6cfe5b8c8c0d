"""Template placeholders in text a model or an admin wrote (pure).

Bots often run prompt text through a macro engine that expands ``{name}`` or ``{{name}}``. Text
we store or put into a tool schema must not smuggle new macros into it, so placeholders lose
their braces, except the few identity placeholders a bot author may mean on purpose
(``{user}``, ``{bot}``, ``{char}``, ``{user_formatted}``, ``{user_term}``, in single or double
braces, any case). The word itself always stays: ``{mood}`` becomes ``mood``.

Placeholders live in *chains*: maximal runs of word characters and braces. In a chain that
holds a braced word, every brace goes except those of identity placeholders (so ``{b{a}c}``
becomes ``bac``, never a new ``{bac}``); other text (``{"k": 1}``, ``set() {}``, ``x}``,
``{a b}``) is left alone.
Because only braces are removed and chains are separated by characters that stay, nothing
new can form, so a second pass changes nothing.

Linear in the length of the text: a chain is matched only from its first character, and the
patterns use possessive repetition, so no input (10,000 placeholders, a 10,000-deep nest of
braces, 100,000 braces in a row) can make them backtrack.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

__all__ = ["IDENTITY_PLACEHOLDERS", "expand_identity", "sanitize_placeholders"]

IDENTITY_PLACEHOLDERS = frozenset({"user", "bot", "char", "user_formatted", "user_term"})

# A chain holding at least one braced word. The lookahead tries each "{" of the chain once
# and reads the word after it once, so even a failed look is linear in the chain.
_CHAIN = re.compile(r"(?<![\w{}])(?=[\w{}]*?\{\w++\})[\w{}]++")
# Inside a chain: a word in one or two braces (no third on either side), or a run of
# braces of one direction. Runs are split by direction so that "{{a}}{user}" still sees
# "{user}" standing on its own.
_PART = re.compile(r"(?<!\{)\{(\{?)(\w++)\}(\}?)(?!\})|\{++|\}++")


def _identity(m: re.Match[str]) -> str | None:
    """The placeholder's name when ``m`` is an identity placeholder, else ``None``."""
    word = m.group(2)
    if word is None or len(m.group(1)) != len(m.group(3)):
        return None
    return word if word.casefold() in IDENTITY_PLACEHOLDERS else None


def _rewrite(text: str, part: Callable[[re.Match[str]], str]) -> str:
    if "{" not in text or "}" not in text:
        return text
    return _CHAIN.sub(lambda chain: _PART.sub(part, chain.group()), text)


def _keep_identity(m: re.Match[str]) -> str:
    if _identity(m) is not None:
        return m.group()
    return m.group(2) or ""  # a placeholder keeps its word; a stray brace run goes


def sanitize_placeholders(text: str) -> str:
    """Drop the braces of every placeholder but the identity ones. Only braces are ever
    removed, and applying it again changes nothing."""
    return _rewrite(text, _keep_identity)


def expand_identity(text: str, values: Mapping[str, str]) -> str:
    """Sanitize ``text`` and replace each identity placeholder with ``values[name]`` (by lower
    case name); one without a value keeps just its word."""

    def fill(m: re.Match[str]) -> str:
        name = _identity(m)
        if name is None:
            return m.group(2) or ""
        return values.get(name.casefold(), name)

    return _rewrite(text, fill)
