"""Phrase packs turned into two regular expressions per selection of packs (pure).

Spaced scripts match whole words; Chinese and Japanese match substrings. Each expression is
built from a trie of its phrases, so at any position of the text only the branch for the next
character is tried: the cost per character does not grow with the number of phrases.

A scan takes the leftmost match; at one position an exception beats a phrase, and longer
beats shorter. An exception match consumes its text, so a phrase inside it or starting inside
it is never seen.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..model.errors import ConfigError
from .packs import Pack

__all__ = ["Matcher", "compile_packs", "is_cjk", "normalize", "validate_packs"]

_METACHARS = frozenset("\\^$.|?+()[]{}*")
_QUOTES = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201a": "'",
        "\u201b": "'",
        "\u2032": "'",
        "\u00b4": "'",
        "`": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u201f": '"',
        "\u2033": '"',
    }
)
_SPACES = re.compile(r"\s+")
# CJK punctuation, kana, Han (with its extensions and compatibility forms).
_CJK = re.compile(
    "[\u3000-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003ffff]"
)
# A clause starts at the start of the text or after one of these (and at most one space).
_CLAUSE_DELIMITERS = re.escape(".!?;:,…\n>*•-–—()[]\"'¡¿~")
_CLAUSE_START = rf"(?:\A|(?<=[{_CLAUSE_DELIMITERS}])|(?<=[{_CLAUSE_DELIMITERS}] ))"


def _collapse(m: re.Match[str]) -> str:
    return "\n" if "\n" in m.group() else " "


def normalize(text: str) -> str:
    """NFKC, straight quotes, case folding, and whitespace runs folded to one space (one line
    break when the run held one)."""
    if text.isascii():
        # ASCII is its own NFKC form and folds by lower(); of the quotes only ` is ASCII.
        text = text.replace("`", "'").lower()
    else:
        text = unicodedata.normalize("NFKC", text).translate(_QUOTES).casefold()
    return _SPACES.sub(_collapse, text).strip()


def is_cjk(text: str) -> bool:
    """True when ``text`` holds Han, kana or CJK punctuation: matched as a substring."""
    return _CJK.search(text) is not None


@dataclass
class _Node:
    children: dict[str, _Node] = field(default_factory=dict)
    end: bool = False


def _trie(phrases: Iterable[str]) -> str:
    """A pattern matching any of ``phrases``, trying longer ones first."""
    root = _Node()
    for phrase in phrases:
        node = root
        for ch in phrase:
            node = node.children.setdefault(ch, _Node())
        node.end = True

    def emit(node: _Node) -> str:
        alternatives = [re.escape(ch) + emit(child) for ch, child in sorted(node.children.items())]
        if node.end:
            alternatives.append("")  # last: a phrase loses to a longer one it begins
        if len(alternatives) == 1:
            return alternatives[0]
        return "(?:" + "|".join(alternatives) + ")"

    return emit(root)


def _alternation(entries: Iterable[tuple[str, str]]) -> str:
    """Phrases grouped by what must follow them, one trie per group. When the condition after
    a phrase fails, the engine backtracks into the trie and tries the shorter phrases."""
    groups: dict[str, set[str]] = {}
    for phrase, end in entries:
        groups.setdefault(end, set()).add(phrase)
    if not groups:
        return "(?!)"
    return "|".join(f"(?:{_trie(sorted(p))}){end}" for end, p in sorted(groups.items()))


def _check(pack: Pack, what: str, phrase: object) -> str:
    where = f"intent pack {pack.locale!r}, {what} {phrase!r}"
    if not isinstance(phrase, str) or not phrase.strip():
        raise ConfigError(f"{where}: empty phrase")
    bad = sorted(set(phrase) & _METACHARS)
    if bad:
        raise ConfigError(f"{where}: regular-expression syntax {''.join(bad)!r} is not allowed")
    if phrase != normalize(phrase):
        raise ConfigError(f"{where}: write it normalized, as {normalize(phrase)!r}")
    if what != "blocker" and is_cjk(phrase) and len(phrase) < 2:
        raise ConfigError(f"{where}: Chinese and Japanese phrases need at least 2 characters")
    return phrase


def validate_packs(packs: Iterable[Pack]) -> None:
    """Raise ``ConfigError`` naming the first unusable phrase of ``packs``: empty, with
    regular-expression syntax, not written normalized, a one-character Chinese or Japanese
    phrase, a clause-start phrase in an unspaced script, or one that is both a phrase and an
    exception."""
    triggers: set[str] = set()
    exceptions: set[str] = set()
    for pack in packs:
        for blocker in pack.blockers:
            _check(pack, "blocker", blocker)
        for phrase in pack.phrases:
            triggers.add(_check(pack, "phrase", phrase))
        for phrase in pack.leading:
            triggers.add(_check(pack, "phrase", phrase))
            if is_cjk(phrase):
                raise ConfigError(
                    f"intent pack {pack.locale!r}, phrase {phrase!r}: clause-start phrases "
                    "are for spaced scripts"
                )
        for phrase in pack.exceptions:
            exceptions.add(_check(pack, "exception", phrase))
    both = sorted(triggers & exceptions)
    if both:
        raise ConfigError(f"intent packs: {both!r} are both phrases and exceptions")


def _sources(packs: Iterable[Pack]) -> tuple[str, str]:
    spaced: dict[str, list[tuple[str, str]]] = {"x": [], "lead": [], "any": []}
    cjk: dict[str, list[tuple[str, str]]] = {"x": [], "any": []}
    for pack in packs:
        spaced_end, cjk_end = r"(?!\w)", ""
        if pack.blockers:
            ordered = sorted(pack.blockers, key=len, reverse=True)
            words = "|".join(re.escape(b) for b in ordered)
            spaced_end = rf"(?!\w)(?! (?:{words})(?!\w))"
            cjk_end = f"(?!{words})"
        for kind, phrases in (("any", pack.phrases), ("lead", pack.leading)):
            for phrase in phrases:
                if is_cjk(phrase):
                    cjk["any"].append((phrase, cjk_end))
                else:
                    spaced[kind].append((phrase, spaced_end))
        for phrase in pack.exceptions:
            if is_cjk(phrase):
                cjk["x"].append((phrase, ""))
            else:
                spaced["x"].append((phrase, r"(?!\w)"))
    spaced_source = (
        rf"(?<!\w)(?:(?P<x>{_alternation(spaced['x'])})"
        rf"|{_CLAUSE_START}(?P<lead>{_alternation(spaced['lead'])})"
        rf"|(?P<any>{_alternation(spaced['any'])}))"
    )
    cjk_source = rf"(?P<x>{_alternation(cjk['x'])})|(?P<any>{_alternation(cjk['any'])})"
    return spaced_source, cjk_source


class Matcher:
    """Explicit-intent search over normalized text, for one selection of validated packs.

    The two expressions are built and compiled on the first search and then kept: doing it
    for every selection at import would cost tens of milliseconds on every start, for
    languages most bots never see.
    """

    def __init__(self, packs: Iterable[Pack]) -> None:
        self.packs = tuple(packs)
        self._patterns: tuple[re.Pattern[str], ...] | None = None

    def compile(self) -> tuple[re.Pattern[str], ...]:
        if self._patterns is None:
            self._patterns = tuple(re.compile(source) for source in _sources(self.packs))
        return self._patterns

    def search(self, normalized: str) -> bool:
        patterns = self._patterns or self.compile()
        if normalized.isascii():
            patterns = patterns[:1]  # every Chinese or Japanese phrase holds a CJK character
        for pattern in patterns:
            for m in pattern.finditer(normalized):
                if m.lastgroup != "x":
                    return True
        return False


def compile_packs(packs: Iterable[Pack]) -> Matcher:
    """Validate ``packs`` (``ConfigError`` naming a bad phrase) and make their matcher."""
    chosen = tuple(packs)
    validate_packs(chosen)
    return Matcher(chosen)
