"""Relative times: each boundary, singular/plural, and the future."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shortterm.prompt.reltime import relative_time

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("age_s", "expected"),
    [
        (0, "just now"),
        (59.9, "just now"),
        (60, "1 minute ago"),
        (119, "1 minute ago"),
        (120, "2 minutes ago"),
        (5 * 60 + 30, "5 minutes ago"),
        (3599, "59 minutes ago"),
        (3600, "1 hour ago"),
        (2 * 3600, "2 hours ago"),
        (86399, "23 hours ago"),
        (86400, "1 day ago"),
        (3 * 86400, "3 days ago"),
        (7 * 86400 - 1, "6 days ago"),
        (7 * 86400, "over a week ago"),
        (400 * 86400, "over a week ago"),
    ],
)
def test_boundaries_round_down(age_s: float, expected: str) -> None:
    assert relative_time(NOW - age_s, NOW) == expected


@given(st.floats(min_value=1e-6, max_value=1e9))
def test_the_future_is_just_now(ahead_s: float) -> None:
    assert relative_time(NOW + ahead_s, NOW) == "just now"


@given(st.floats(min_value=0, max_value=1e9), st.floats(min_value=0, max_value=1e9))
def test_older_never_reads_newer(a: float, b: float) -> None:
    order = ["just now", "minute", "hour", "day", "over a week"]

    def rank(text: str) -> tuple[int, int]:
        for i, word in enumerate(order):
            if word in text:
                number = text.split()[0]
                return i, int(number) if number.isdigit() else 0
        raise AssertionError(text)

    young, old = sorted((a, b))
    assert rank(relative_time(NOW - young, NOW)) <= rank(relative_time(NOW - old, NOW))
