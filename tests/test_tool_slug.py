from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shortterm import Category
from shortterm.tool.slug import MAX_SLUG_CHARS, slug_map, slugify

# Valid as a property name for every provider (Gemini is the strictest).
_VALID = re.compile(r"[a-z][a-z0-9_]*")


@pytest.mark.parametrize(
    ("label", "slug"),
    [
        ("Mood", "mood"),
        ("Mood & vibe", "mood_vibe"),
        ("  --Open   questions!!  ", "open_questions"),
        ("2nd act", "c_2nd_act"),
        ("Ánimo / Ações", "animo_acoes"),
        ("Straße", "strasse"),
        ("İstanbul trip", "istanbul_trip"),
        ("気分", "field"),
        ("!!!", "field"),
        ("snake_case__label", "snake_case_label"),
        ("x" * 60, "x" * MAX_SLUG_CHARS),
        ("a" * 47 + " b", "a" * 47),  # the cut never leaves a trailing underscore
    ],
)
def test_slugify(label: str, slug: str) -> None:
    assert slugify(label) == slug


def test_slug_map_numbers_collisions_in_label_order() -> None:
    labels = ["Mood", "mood!", "Plans", "MOOD", "Mood 2", "気分", "天気"]
    assert slug_map(Category(label, "d") for label in labels) == {
        "mood": "Mood",
        "mood_2": "mood!",
        "plans": "Plans",
        "mood_3": "MOOD",
        "mood_2_2": "Mood 2",  # its natural slug was taken by the second label
        "field": "気分",
        "field_2": "天気",
    }


def test_numbered_slugs_stay_within_the_cap() -> None:
    label = "y" * 80
    slugs = list(slug_map([Category(label, "d"), Category(label + "!", "d")]))
    assert slugs == ["y" * 48, "y" * 46 + "_2"]


_LABELS = st.text(min_size=1, max_size=100).filter(lambda s: s.strip())


@given(st.lists(_LABELS, max_size=8))
def test_slug_map_properties(labels: list[str]) -> None:
    categories = [Category(label, "description") for label in labels]
    mapping = slug_map(categories)
    assert list(mapping.values()) == [c.label for c in categories]  # one per label, in order
    for slug in mapping:
        assert _VALID.fullmatch(slug), slug
        assert len(slug) <= MAX_SLUG_CHARS
    assert slug_map(categories) == mapping  # stable


@given(_LABELS)
def test_slugify_is_valid_and_idempotent(label: str) -> None:
    slug = slugify(label)
    assert _VALID.fullmatch(slug)
    assert slugify(slug) == slug
