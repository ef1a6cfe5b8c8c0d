"""Every command that takes --store / --cache reads SHORTTERM_STORE / SHORTTERM_CACHE when the
option is not given. A URL no backend knows makes the variable's use visible: the command
refuses it by name (exit 2) instead of opening the default."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import shortterm
from shortterm import Message, Reply, ScopeKey
from shortterm.cli import main

SHORTTERM = Path(sys.executable).with_name("shortterm")

# Each command that opens memory, with the arguments it needs to get that far.
COMMANDS: dict[str, list[str]] = {
    "inspect": ["inspect", "--channel", "c1"],
    "show": ["show", "server", "g1", "c1"],
    "clear channel": ["clear", "channel", "c1", "--yes"],
    "clear user": ["clear", "user", "u1", "--yes"],
    "clear server-channel": ["clear", "server-channel", "g1", "c1", "--yes"],
    "janitor": ["janitor"],
    "export": ["export"],
    "import": ["import", "-"],
}
STORE_ONLY = {"migrate": ["migrate"]}


def run(args: list[str], env: dict[str, str], cwd: Path) -> Result:
    runner = CliRunner(env={"COLUMNS": "200", **env})
    old = Path.cwd()
    os.chdir(cwd)  # a default store would land here, where the test can see it
    try:
        return runner.invoke(main, args, input="")
    finally:
        os.chdir(old)


@pytest.mark.parametrize("args", [*COMMANDS.values(), *STORE_ONLY.values()], ids=" ".join)
def test_the_store_variable_is_read(args: list[str], tmp_path: Path) -> None:
    result = run(args, {"SHORTTERM_STORE": "nope://x"}, tmp_path)
    assert result.exit_code == 2, result.output
    assert "store='nope://x'" in result.output
    assert not (tmp_path / "shortterm.db").exists()


@pytest.mark.parametrize("args", list(COMMANDS.values()), ids=" ".join)
def test_the_cache_variable_is_read(args: list[str], tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'env.db'}"
    asyncio.run(_fill(store))
    result = run(args, {"SHORTTERM_STORE": store, "SHORTTERM_CACHE": "nope://x"}, tmp_path)
    assert result.exit_code == 2, result.output
    assert "cache='nope://x'" in result.output


async def _fill(url: str) -> None:
    async with shortterm.open(url) as memory:
        turn = memory.turn(user_id="u1", channel_id="c1", server_id="g1", channel_name="plans")
        said = Message("user", "hike?", author_id="u1", speaker="Ana")
        await turn.capture(history=[said], replies=[Reply("Saturday!")])
        await memory.set_summary(ScopeKey.server("g1", "c1"), "Hike on Saturday.")


def test_inspect_reads_the_store_the_variable_names(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'env.db'}"
    asyncio.run(_fill(store))
    result = run(["inspect", "--channel", "c1"], {"SHORTTERM_STORE": store}, tmp_path)
    assert result.exit_code == 0, result.output
    assert "Hike on Saturday." in result.stdout


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHORTTERM_")}
    return {**env, **extra}


@pytest.mark.parametrize("variable", ["SHORTTERM_STORE", "SHORTTERM_CACHE"])
def test_serve_reads_the_variables(variable: str, tmp_path: Path) -> None:
    env = _clean_env(**{variable: "nope://x"})
    proc = subprocess.run(
        [str(SHORTTERM), "serve", "--port", "0"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"{variable.removeprefix('SHORTTERM_').lower()}='nope://x'" in proc.stderr


@pytest.mark.parametrize("variable", ["SHORTTERM_STORE", "SHORTTERM_CACHE"])
def test_mcp_reads_the_variables(variable: str, tmp_path: Path) -> None:
    env = _clean_env(**{variable: "nope://x"})
    proc = subprocess.run(
        [sys.executable, "-m", "shortterm.cli", "mcp"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"{variable.removeprefix('SHORTTERM_').lower()}='nope://x'" in proc.stderr


def test_demo_keeps_its_own_database(tmp_path: Path) -> None:
    """The demo starts by deleting its database, so it never takes SHORTTERM_STORE's."""
    store = tmp_path / "bot.db"
    asyncio.run(_fill(f"sqlite:///{store}"))
    before = store.read_bytes()
    env = {"SHORTTERM_STORE": f"sqlite:///{store}", "SHORTTERM_CACHE": "nope://x"}
    result = run(["demo"], env, tmp_path)
    assert result.exit_code == 0, result.output
    assert store.read_bytes() == before
    assert (tmp_path / "shortterm-demo.db").exists()
