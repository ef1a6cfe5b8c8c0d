from __future__ import annotations

import re
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shortterm.model.placeholders import expand_identity, sanitize_placeholders

_SHAPE = re.compile(r"\{+\w+\}+")
_IDENTITY = re.compile(r"\{\{?(user|bot|char|user_formatted|user_term)\}\}?", re.IGNORECASE)


def unknown_placeholder_left(text: str) -> bool:
    """Any braced word that is not an identity placeholder in one or two braces. The greedy
    pattern takes whole brace runs, so a third brace on either side is part of the shape."""
    for m in _SHAPE.finditer(text):
        shape = m.group()
        opening = len(shape) - len(shape.lstrip("{"))
        closing = len(shape) - len(shape.rstrip("}"))
        if not (opening == closing <= 2 and _IDENTITY.fullmatch(shape)):
            return True
    return False


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("feeling {mood}", "feeling mood"),
        ("feeling {{mood}}", "feeling mood"),
        ("{user} and {bot}", "{user} and {bot}"),
        ("{{USER}} met {{Char}}", "{{USER}} met {{Char}}"),
        ("{user_formatted}/{User_Term}", "{user_formatted}/{User_Term}"),
        ("{{{user}}}", "user"),  # not a placeholder form: braces go, the word stays
        ("{user}}", "user"),
        ("{b{a}c}", "bac"),
        ("{}a{}", "{}a{}"),  # no braced word anywhere in it
        ("x{user}y", "x{user}y"),
        ("{a b}", "{a b}"),  # no word between the braces: not a placeholder
        ("set() {} and {{}} and { }", "set() {} and {{}} and { }"),
        ('json: {"k": 1}', 'json: {"k": 1}'),
        ("if (x) {return y}", "if (x) {return y}"),
        ("a}{b", "a}{b"),
        ("{{a}}{user}{b}", "a{user}b"),
        ("x}}{bot}{{", "x{bot}"),
        ("{気分}", "気分"),
        ("no braces at all", "no braces at all"),
    ],
)
def test_sanitize_examples(text: str, expected: str) -> None:
    assert sanitize_placeholders(text) == expected


_PIECES = st.sampled_from(
    ["{", "}", "{{", "}}", "}{", "user", "bot", "mood", "USER", "a", " ", "_", "é", "-"]
)


@given(st.lists(_PIECES, max_size=30).map("".join) | st.text(max_size=40))
def test_sanitize_properties(text: str) -> None:
    out = sanitize_placeholders(text)
    # Only braces are ever removed.
    assert out.replace("{", "").replace("}", "") == text.replace("{", "").replace("}", "")
    assert not unknown_placeholder_left(out)
    assert sanitize_placeholders(out) == out


@given(st.sampled_from(["user", "bot", "char", "user_formatted", "user_term", "User", "BOT"]))
def test_identity_placeholders_survive_in_both_brace_styles(name: str) -> None:
    for form in (f"{{{name}}}", f"{{{{{name}}}}}"):
        assert sanitize_placeholders(f"hi {form}!") == f"hi {form}!"


def test_ten_thousand_placeholders_in_linear_time() -> None:
    many = "".join(f"{{{{field{i}}}}} {{user}} " for i in range(10_000))
    nested = "{" * 10_000 + "deep" + "}" * 10_000
    braces_only = "{" * 50_000 + "}" * 50_000
    started = time.perf_counter()
    out = sanitize_placeholders(many)
    assert sanitize_placeholders(nested) == "deep"
    assert sanitize_placeholders(braces_only) == braces_only
    elapsed = time.perf_counter() - started
    assert out.count("{user}") == 10_000
    assert "{field" not in out
    assert "field9999" in out
    # Quadratic backtracking would take minutes here; linear work takes milliseconds.
    assert elapsed < 2.0


def test_expand_identity_fills_known_names_and_debraces_the_rest() -> None:
    values = {"bot": "Tomo", "user": "the user"}
    text = "{bot} helps {{user}} with {topic}; {char} stays a word"
    assert expand_identity(text, values) == "Tomo helps the user with topic; char stays a word"
    assert expand_identity("plain", values) == "plain"
