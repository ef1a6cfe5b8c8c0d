"""Category labels to tool parameter names (pure).

A slug is what the model sees as a property name and what the store keeps as a category key,
so it must be valid for every provider (Gemini: letters, digits and ``_``, starting with a
letter or ``_``, at most 64 characters) and stable for a given list of labels.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from ..model import Category

__all__ = ["MAX_SLUG_CHARS", "slug_map", "slugify"]

MAX_SLUG_CHARS = 48
_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def slugify(label: str) -> str:
    """``"Mood & vibe"`` → ``"mood_vibe"``; accents are dropped (``"Ánimo"`` → ``"animo"``),
    a leading digit gets ``c_`` (``"2nd act"`` → ``"c_2nd_act"``), nothing usable → ``"field"``."""
    decomposed = unicodedata.normalize("NFKD", label)
    ascii_only = "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()
    slug = _NON_ALNUM.sub("_", ascii_only).strip("_")
    if slug[:1].isdigit():
        slug = "c_" + slug
    slug = slug[:MAX_SLUG_CHARS].rstrip("_")
    return slug or "field"


def _numbered(base: str, n: int) -> str:
    suffix = f"_{n}"
    return base[: MAX_SLUG_CHARS - len(suffix)].rstrip("_") + suffix


def slug_map(categories: Iterable[Category]) -> dict[str, str]:
    """Slug → label for ``categories``, in their order. Repeated slugs are numbered ``_2``,
    ``_3``, … in order of appearance, never colliding with another label's slug."""
    out: dict[str, str] = {}
    for category in categories:
        base = slugify(category.label)
        slug, n = base, 2
        while slug in out:
            slug = _numbered(base, n)
            n += 1
        out[slug] = category.label
    return out
