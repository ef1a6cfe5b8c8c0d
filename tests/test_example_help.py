"""An example's ``--help`` opens with what the example does, in whole sentences: the first
paragraph of its docstring, not its first line (which stops mid-sentence when the paragraph
wraps)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
WITH_HELP = sorted(p.name for p in EXAMPLES.glob("*.py") if "argparse" in p.read_text("utf-8"))


def test_the_examples_with_options_are_found() -> None:
    assert {"discord_offline.py", "openai_tool_loop.py", "langchain_history.py"} <= set(WITH_HELP)


@pytest.mark.parametrize("example", WITH_HELP)
def test_help_describes_the_example_in_whole_sentences(example: str) -> None:
    path = EXAMPLES / example
    docstring = ast.get_docstring(ast.parse(path.read_text("utf-8")), clean=True) or ""
    first = " ".join(docstring.split("\n\n")[0].split())
    assert first.endswith("."), f"{example}: the docstring's first paragraph is not a sentence"
    done = subprocess.run(
        [sys.executable, str(path), "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    description = " ".join(done.stdout.split("\n\n")[1].split())  # after the usage lines
    assert description == first, f"{example} --help says {description!r}"
