"""The README's first screen tells a newcomer who it is for and how to start, and no more.

Who: multi-party chat bots, Discord first, in the opening lines (it used to surface ~220 lines
down). How: the two commands, run and test. The details a newcomer does not need before trying
it (Python and Node versions, the test services' URLs, registry status, the Debian packages
`make test` installs) live lower, under "Installing and testing", where they are still said.
"""

from __future__ import annotations

from pathlib import Path

README = (Path(__file__).resolve().parents[2] / "README.md").read_text("utf-8")
FIRST_SCREEN = README.split("\n## ", 1)[0]  # as tests/sidecar/test_quickstart.py reads it
DETAILS = ("≥ 3.11", "Node", "127.0.0.1:5432", "127.0.0.1:6379", "PyPI", "apt-get", "haproxy")


def section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_opening_lines_say_who_it_is_for() -> None:
    opening = " ".join(README.splitlines()[:6])
    for said in ("chat bots", "multi-party", "Discord first", "Slack", "Matrix"):
        assert said in opening, f"the README's first lines do not say {said!r}"


def test_the_first_screen_gives_the_run_and_test_commands() -> None:
    block = FIRST_SCREEN.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    assert commands == ["make run", "make test"]


def test_the_details_are_lower_and_still_said() -> None:
    for detail in DETAILS:
        assert detail not in FIRST_SCREEN, f"{detail!r} is on the README's first screen"
        assert detail in section("Installing and testing"), f"{detail!r} is no longer said"
