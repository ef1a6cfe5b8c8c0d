"""Every command has help with an example and a section in docs/cli.md naming its options."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from shortterm.cli import main

DOCS = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text("utf-8")
COMMON = {"--help", "--store", "--cache"}  # documented once, under "Common options"


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in sorted(group.commands.items()):
        path = (*prefix, name)
        yield path
        if isinstance(command, click.Group):
            yield from _commands(command, path)


def _command(path: tuple[str, ...]) -> click.Command:
    command: click.Command = main
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return command


def _section(path: tuple[str, ...]) -> str:
    heading = re.search(rf"^(#+) shortterm {re.escape(' '.join(path))}\n", DOCS, re.M)
    assert heading is not None, f"docs/cli.md has no heading 'shortterm {' '.join(path)}'"
    level = len(heading.group(1))
    rest = DOCS[heading.end() :]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.M)
    return rest[: end.start()] if end else rest


COMMANDS = list(_commands(main))


def test_the_commands_are_the_ones_we_expect() -> None:
    names = {" ".join(p) for p in COMMANDS}
    expected = {"demo", "bench", "inspect", "show", "clear", "janitor", "migrate", "export"}
    assert expected | {"import", "mcp", "clear channel", "clear user"} <= names


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_every_command_has_help_with_an_example(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example: shortterm " in result.output


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_every_command_and_option_is_documented(path: tuple[str, ...]) -> None:
    section = _section(path)
    options = {
        name
        for param in _command(path).params
        if isinstance(param, click.Option)
        for name in param.opts
        if name.startswith("--")
    }
    missing = sorted(o for o in options - COMMON if o not in section)
    assert not missing, f"shortterm {' '.join(path)}: options not in docs/cli.md: {missing}"


def test_the_readme_points_at_the_cli_docs() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text("utf-8")
    assert "docs/cli.md" in readme
