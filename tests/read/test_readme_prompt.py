"""The README's "In the prompt" example runs as printed and shows the other channel."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def test_prompt_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    section = README.read_text("utf-8").split("## In the prompt", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None
    body = "\n".join("    " + line for line in block.group(1).splitlines())
    namespace: dict[str, object] = {}
    exec(f"async def _example():\n{body}\n", namespace)
    asyncio.run(namespace["_example"]())  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert out.startswith("⟦Tomo's memory of other recent conversations.")
    assert "⟦#plans in this server · latest messages as of just now⟧" in out
    assert "│ Ana: Pack list for Saturday?" in out and "│ Tomo: Water, rain jacket, snacks." in out
