"""Explicit long-term-memory intent ("remember this for good") in the triggering message (pure).

When it matches, the short-term tool and the cadence nudge are hidden for the turn, so the
model routes the request to its long-term memory instead.

Text is normalized (NFKC, straight quotes, case folding, whitespace collapsed), then searched
with the phrase packs of :mod:`shortterm.intent.packs`: whole words in spaced scripts,
substrings in Chinese and Japanese. ``locale=None`` applies every pack; a locale applies its
own pack plus English; a locale without a pack applies every pack. Every pack is validated
at import; each selection's two expressions are compiled once, on its first use.
"""

from __future__ import annotations

from .matcher import Matcher, normalize, validate_packs
from .packs import PACKS

__all__ = ["has_long_term_intent", "normalize", "packs_for"]

_ALL = tuple(PACKS)
_SELECTIONS: dict[str, tuple[str, ...]] = {
    "all": _ALL,
    "en": ("en",),
    "ja": ("ja", "en"),
    "zh-Hans": ("zh-Hans", "en"),
    "zh-Hant": ("zh-Hant", "en"),
    "zh": ("zh-Hans", "zh-Hant", "en"),
    "pt": ("pt-BR", "en"),
    "es": ("es", "en"),
    "vi": ("vi", "en"),
}
validate_packs(PACKS.values())
_MATCHERS: dict[str, Matcher] = {
    name: Matcher(PACKS[loc] for loc in locales) for name, locales in _SELECTIONS.items()
}


def _selection(locale: str | None) -> str:
    if locale is None:
        return "all"
    tag = locale.strip().replace("_", "-").casefold()
    parts = tag.split("-")
    primary = parts[0]
    if primary == "zh":
        rest = set(parts[1:])
        if rest & {"hant", "tw", "hk", "mo"}:
            return "zh-Hant"
        if rest & {"hans", "cn", "sg", "my"}:
            return "zh-Hans"
        return "zh"
    if primary in ("en", "ja", "pt", "es", "vi"):
        return primary
    return "all"  # no pack for this language: the user may write in any of ours


def packs_for(locale: str | None) -> tuple[str, ...]:
    """The pack locales applied for ``locale`` (``"pt-BR"`` → ``("pt-BR", "en")``)."""
    return _SELECTIONS[_selection(locale)]


def has_long_term_intent(text: str, locale: str | None = None) -> bool:
    """True when ``text`` explicitly asks for something to be kept permanently."""
    if not text or text.isspace():
        return False
    return _MATCHERS[_selection(locale)].search(normalize(text))
