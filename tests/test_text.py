"""Text hygiene: control stripping and grapheme-safe truncation.

The third-party ``regex`` module's ``\\X`` (extended grapheme clusters, UAX #29) is the
oracle: a cut must always fall on one of its boundaries, and on the alphabets where our rules
are exact it must be the longest such cut.
"""

from __future__ import annotations

import itertools

import pytest
import regex
from hypothesis import given
from hypothesis import strategies as st

from shortterm.model.text import clean_text, is_boundary, strip_controls, truncate


def boundaries(text: str) -> set[int]:
    clusters = regex.findall(r"\X", text)
    return {0, *itertools.accumulate(len(c) for c in clusters)}


def best_cut(text: str, n: int) -> int:
    return max(b for b in boundaries(text) if b <= n)


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("\u1100\u1161\u11a8" * 3, "Hangul syllables written as conjoining jamo"),
        ("ab\r\ncd", "CR LF"),
        ("\u0915\u094d\u0937\u0915", "Devanagari conjunct (virama links two consonants)"),
        ("aaa\u094d\u0e01", "a virama does not link a Thai letter"),
        ("a\u200cb", "zero-width non-joiner"),
        ("\uff76\uff9e\uff76\uff9e", "half-width katakana with voicing marks"),
        ("x\u0e01\u0e33y", "Thai SARA AM"),
        ("\u0600\u0661\u0662", "Arabic number sign (prepended mark)"),
        ("👨‍👩‍👧x", "family emoji (ZWJ sequence)"),
        ("🇯🇵🇫🇷🇩", "flags and a lone regional indicator"),
        ("e\u0301\u0301x", "stacked combining accents"),
        ("👍🏽👍🏽", "skin-tone modifiers"),
        ("🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f!", "tag sequence flag"),
        ("1\ufe0f\u20e3!", "keycap"),
        ("a\u200db", "ZWJ between letters does not join them"),
        ("\n\u0301", "a combining mark after a line break starts its own cluster"),
    ],
)
def test_truncate_never_splits_and_keeps_every_whole_cluster(text: str, name: str) -> None:
    for n in range(len(text) + 1):
        cut = truncate(text, n)
        assert text.startswith(cut), name
        assert len(cut) == best_cut(text, n), f"{name}: max {n} gave {cut!r}"


def test_truncate_short_text_is_returned_unchanged() -> None:
    text = "short"
    assert truncate(text, 5) is text
    assert truncate("", 0) == ""


def test_truncate_drops_a_cluster_longer_than_the_limit() -> None:
    zalgo = "a" + "\u0301" * 50
    assert truncate(zalgo + "b", 10) == ""
    assert truncate("ok " + zalgo, 10) == "ok "


# Characters whose cluster rules our tables model exactly (no over-approximation).
_EXACT = st.sampled_from(
    [
        *"aZ9 .\r\n",
        *("\u0301", "\u0308", "\u200c", "\u200d", "\ufe0f", "\u20e3"),
        *("\U0001f468", "\U0001f469", "\U0001f467", "\u2764", "\U0001f3fd"),
        *("\U0001f1ef", "\U0001f1f5", "\U0001f1eb"),
        *("\u1100", "\u1161", "\u11a8", "\uac00", "\uac01"),
        *("\u0915", "\u094d", "\u0937", "\u093f"),
        *("\u0e01", "\u0e33", "\uff76", "\uff9e", "\u0600"),
    ]
)


@given(st.lists(_EXACT, max_size=40).map("".join), st.integers(min_value=0, max_value=45))
def test_truncate_matches_the_uax29_oracle(text: str, n: int) -> None:
    cut = truncate(text, n)
    assert text.startswith(cut)
    assert len(cut) == best_cut(text, n)


# Only characters assigned in this Python's Unicode tables: the oracle may know newer ones.
_ASSIGNED = st.characters(exclude_categories=("Cn", "Cs"))


@given(st.text(_ASSIGNED, max_size=60), st.integers(min_value=0, max_value=70))
def test_truncate_on_any_text_cuts_on_a_cluster_boundary(text: str, n: int) -> None:
    cut = truncate(text, n)
    assert len(cut) <= n
    assert text.startswith(cut)
    # Where our rules approximate they only ever keep more together, never split.
    assert len(cut) in boundaries(text)


def test_is_boundary_at_the_ends() -> None:
    assert is_boundary("ab", 0)
    assert is_boundary("ab", 2)
    assert not is_boundary("a\u0301", 1)


def test_strip_controls_keeps_text_tabs_and_line_breaks() -> None:
    text = "a\x00b\x07c\td\r\ne\rf\u2028g\x85h\u202eevil\u202c\ufeffi\x9bj"
    assert strip_controls(text) == "abc\td\ne\nf\ng\nhevili" + "j"
    assert strip_controls("one\r\ntwo", keep_newlines=False) == "one two"


def test_strip_controls_makes_lone_surrogates_storable() -> None:
    assert strip_controls("a\ud800b") == "a\ufffdb"
    assert clean_text("a\x00b") == "a\ufffdb"


def _reference_strip(text: str, keep_newlines: bool) -> str:
    text = regex.sub("\r\n?|[\u2028\u2029\x85]", "\n", text)
    text = regex.sub(
        "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ufeff]", "", text
    )
    if not keep_newlines:
        text = text.replace("\n", " ")
    return regex.sub("[\ud800-\udfff]", "\ufffd", text)


_MIXED = st.text(
    st.sampled_from(
        [*"ab \n\t\r", "\x00", "\x07", "\x85", "\u2028", "\u202e", "\ufeff", "é", "\u200d", "\xa0"]
    )
    | st.characters(),
    max_size=30,
)


@given(_MIXED, st.booleans())
def test_strip_controls_fast_path_agrees_with_the_full_cleaning(text: str, keep: bool) -> None:
    assert strip_controls(text, keep_newlines=keep) == _reference_strip(text, keep)
