"""What a newcomer meets before any code: where the command is, and what setup is doing."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_says_where_the_command_is() -> None:
    section = (ROOT / "README.md").read_text("utf-8").split("## Command line and MCP", 1)[1]
    assert ".venv/bin/shortterm" in section and "source .venv/bin/activate" in section
    # and that is where the setup puts it
    assert Path(sys.executable).with_name("shortterm").exists()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_setup_says_what_it_installs_before_pip_runs() -> None:
    plan = subprocess.run(
        ["make", "-n", "-B", "run"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    first_pip = next(i for i, line in enumerate(plan) if " -m pip install" in line)
    said = [line for line in plan[:first_pip] if line.startswith("echo ")]
    assert len(said) == 1
    assert "pip installs shortterm" in said[0] and "minute" in said[0]


def readme_command_lines() -> list[str]:
    """The ``shortterm …`` lines of the README's bash blocks, comments cut."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text("utf-8"), re.S)
    lines = [line.split("  #", 1)[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line.startswith("shortterm ")]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_readme_commands_leave_nothing_untracked(tmp_path: Path) -> None:
    """Run in a clone, the README's commands create only files the clone ignores."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    shutil.copy(ROOT / ".gitignore", tmp_path / ".gitignore")
    subprocess.run(
        [sys.executable, "-c", "import asyncio, shortterm\n"
         "async def main():\n    async with shortterm.open():\n        pass\n"
         "asyncio.run(main())"],
        cwd=tmp_path, check=True,
    )  # fmt: skip
    wanted = [line for line in readme_command_lines() if " export " in line]
    assert wanted, "the README lost its export/import line"
    bin_dir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHORTTERM_")}
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    for line in wanted:
        subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, check=True, timeout=60)
    assert (tmp_path / "backup.jsonl").exists() and (tmp_path / "copy.db").exists()
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert status.splitlines() == ["?? .gitignore"], status
