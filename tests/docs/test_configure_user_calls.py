"""The docs show `configure_user` as it is called: a user id and a `UserSettings`.

`configure_user(user, FULL)` reads well and raises (`InvalidInput: settings='full' ...`): the
privacy level goes inside `UserSettings(privacy=Privacy.FULL)`. A reader copies what the docs
show, so no document may pass a privacy level (or a bare choice) in its place.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What may stand as the settings argument: a UserSettings built there, or a name holding one.
SETTINGS = re.compile(r"UserSettings\(.*\)|[a-z_][a-z0-9_.]*", re.DOTALL)


def documents() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]


def arguments(text: str, start: int) -> list[str]:
    """The top-level arguments of the call whose "(" is at ``start``."""
    depth, args, current = 0, [], ""
    for char in text[start + 1 :]:
        if char == "," and depth == 0:
            args.append(current.strip())
            current = ""
            continue
        if char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                break
            depth -= 1
        current += char
    return [*args, current.strip()]


def calls() -> list[tuple[str, str, list[str]]]:
    found = []
    for doc in documents():
        text = doc.read_text("utf-8")
        for match in re.finditer(r"configure_user\(", text):
            args = arguments(text, match.end() - 1)
            line = text.count("\n", 0, match.start()) + 1
            found.append((f"{doc.relative_to(ROOT).as_posix()}:{line}", match.group(0), args))
    return found


def test_configure_user_is_shown_with_a_user_id_and_user_settings() -> None:
    shown = calls()
    assert shown, "the docs show configure_user somewhere"
    for where, _, args in shown:
        call = f"configure_user({', '.join(args)})"
        positional = [a for a in args if not re.match(r"\w+\s*=", a)]  # at=... is a keyword
        for value in positional:
            assert not re.fullmatch(r"(Privacy\.)?(none|partial|full)", value, re.IGNORECASE), (
                f"{where}: pass UserSettings(privacy=Privacy.{value.rpartition('.')[2].upper()})"
            )
        if "..." in positional:
            continue  # arguments elided: nothing more to check
        assert len(positional) == 2, f"{where}: {call} takes (user_id, settings)"
        settings = positional[1]
        assert SETTINGS.fullmatch(settings), f"{where}: {settings!r} is not a UserSettings"
