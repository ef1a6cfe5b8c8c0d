"""The read commands as a newcomer and a script meet them: they never create a store, they
name the store they read, a pipe gets whole lines, and --json gives one object per row."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import shortterm
from shortterm import Message, Reply, ScopeKey
from shortterm.cli import main

LONG = "Hike on Saturday at 8am from the north gate; " * 6  # 270 characters, one line


def run(args: list[str], cwd: Path, columns: int = 80) -> Result:
    runner = CliRunner(env={"COLUMNS": str(columns), "SHORTTERM_STORE": None})
    old = Path.cwd()
    os.chdir(cwd)
    try:
        return runner.invoke(main, args)
    finally:
        os.chdir(old)


async def _fill(url: str) -> None:
    async with shortterm.open(url) as memory:
        turn = memory.turn(
            user_id="u1", channel_id="c1", server_id="g1", persona_id="7", channel_name="plans"
        )
        said = Message("user", "hike?", author_id="u1", speaker="Ana")
        await turn.capture(history=[said], replies=[Reply("Saturday!", persona_id="7")])
        await memory.set_summary(ScopeKey.server("g1", "c1", "7"), LONG.strip())
        await memory.set_summary(ScopeKey.user("u1", "c1", "7"), "Ana hikes.")


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    asyncio.run(_fill(f"sqlite:///{tmp_path / 'shortterm.db'}"))
    return tmp_path


@pytest.mark.parametrize(
    "args",
    [["inspect", "--channel", "c1"], ["show", "server", "g1", "c1"], ["export"]],
    ids=lambda a: a[0],
)
def test_a_read_command_never_creates_a_store(args: list[str], tmp_path: Path) -> None:
    result = run(args, tmp_path)
    assert result.exit_code == 3, result.output
    where = str(tmp_path.resolve() / "shortterm.db")
    assert f"no store at {where}" in result.stderr and "does not exist" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_inspect_names_the_store_it_read(filled: Path) -> None:
    result = run(["inspect", "--channel", "nowhere"], filled)
    assert result.exit_code == 0
    assert result.stdout.strip() == f"no rows match in {filled.resolve() / 'shortterm.db'}"


def test_export_names_the_store_it_read(filled: Path) -> None:
    result = run(["export"], filled)
    assert result.exit_code == 0
    assert f"exported 2 row(s) from {filled.resolve() / 'shortterm.db'}" in result.stderr


def test_inspect_into_a_pipe_cuts_nothing(filled: Path) -> None:
    result = run(["inspect", "--channel", "c1"], filled, columns=80)
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    header, _, server, user = result.stdout.splitlines()
    assert header.split() == [
        "kind", "owner", "channel", "persona", "summary", "categories", "turns", "written",
    ]  # fmt: skip
    assert server.split()[:5] == ["server", "g1", "c1", "#plans", "7"]
    assert LONG.strip() in server and server.rstrip().endswith("just now")
    assert user.split()[:5] == ["user", "u1", "c1", "#plans", "7"]


def test_inspect_json_is_one_object_per_row(filled: Path) -> None:
    result = run(["inspect", "--channel", "c1", "--json"], filled)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["key"]["kind"], r["key"]["owner_id"]) for r in rows] == [
        ("server", "g1"),
        ("user", "u1"),
    ]
    assert rows[0]["summary"] == LONG.strip() and rows[0]["key"]["persona_id"] == "7"


def test_show_json(filled: Path) -> None:
    result = run(["show", "server", "g1", "c1", "--persona", "7", "--json"], filled)
    assert result.exit_code == 0, result.output
    (line,) = result.stdout.splitlines()
    entry = json.loads(line)
    assert entry["summary"] == LONG.strip() and entry["channel_name"] == "plans"
    assert entry["key"] == {
        "kind": "server",
        "owner_id": "g1",
        "channel_id": "c1",
        "persona_id": "7",
    }
    result = run(["show", "server", "g1", "nowhere", "--json"], filled)
    assert result.exit_code == 0 and result.stdout.strip() == "null"


def test_show_without_the_persona_lists_those_that_have_an_entry(filled: Path) -> None:
    result = run(["show", "server", "g1", "c1"], filled)
    assert result.exit_code == 0, result.output
    assert "nothing is remembered for this scope right now" in result.stdout
    assert "personas with an entry here: 7 (--persona 7)" in result.stdout
    result = run(["show", "server", "g1", "c1", "--persona", "8"], filled)
    assert "personas with an entry here: 7 (--persona 7)" in result.stdout
    result = run(["show", "user", "u1", "c1"], filled)
    assert "personas with an entry here: 7 (--persona 7)" in result.stdout
