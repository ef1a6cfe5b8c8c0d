"""Every ```python block of the README runs as a file, as a reader would paste it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text("utf-8"), re.S)


def run_as_file(code: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    script = cwd / "example.py"
    script.write_text(code, "utf-8")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SHORTTERM_")}
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=cwd,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, f"{code}\n--- stderr:\n{proc.stderr}"
    return proc.stdout


def test_the_readme_has_three_python_blocks() -> None:
    assert len(python_blocks()) == 3


def test_each_block_is_a_complete_script() -> None:
    for code in python_blocks():
        assert "asyncio.run(main())" in code, code


def test_the_first_block_recalls_turn_one_and_the_summary(tmp_path: Path) -> None:
    out = run_as_file(python_blocks()[0], tmp_path)
    assert "Ridge trail" in out and "Hike planned" in out
    assert (tmp_path / "shortterm.db").exists()  # the default store is ./shortterm.db


def test_the_prompt_block_shows_the_other_channel(tmp_path: Path) -> None:
    out = run_as_file(python_blocks()[1], tmp_path)
    assert out.startswith("⟦Tomo's memory of other recent conversations.")
    assert "⟦#plans in this server · latest messages as of just now⟧" in out
    assert "│ Ana: Pack list for Saturday?" in out and "│ Tomo: Water, rain jacket, snacks." in out


def test_the_scaling_block_runs_on_postgres_and_redis(
    tmp_path: Path, scale_urls: tuple[str, str]
) -> None:
    store, cache = scale_urls
    out = run_as_file(
        python_blocks()[2], tmp_path, {"SHORTTERM_STORE": store, "SHORTTERM_CACHE": cache}
    )
    assert "Ridge trail" in out
