"""What a newcomer meets before any code: where the command is, and what setup is doing."""

from __future__ import annotations

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
    assert "pip installs shortterm" in said[0] and "minutes" in said[0]
