"""The README's first example runs as printed."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    block = re.search(r"```python\n(.*?)```", README.read_text("utf-8"), re.S)
    assert block is not None
    code = block.group(1)
    body = "\n".join("    " + line for line in code.splitlines())
    monkeypatch.chdir(tmp_path)  # the default store is ./shortterm.db
    namespace: dict[str, object] = {}
    exec(f"async def _example():\n{body}\n", namespace)
    asyncio.run(namespace["_example"]())  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert "Ridge trail" in out and "Hike planned" in out
    assert os.path.exists(tmp_path / "shortterm.db")
