"""Each example run without its extra says, in one line, what to install, and exits 4.

The example runs as a user runs it (``python examples/<name>.py``), with the extra's module
hidden by a ``sitecustomize`` on ``PYTHONPATH``: a finder ahead of the others fails its import
as an absent package's fails, whatever this environment has installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

CHECKOUT = "in a shortterm checkout"  # not on a registry yet: the install names the clone
LANGCHAIN = "pip install -e '.[langchain]' langchain-openai"
DISCORD = "pip install -e '.[discord,openai]'"
# (example, a module its extra brings, the install line it must print)
CASES = [
    ("openai_tool_loop.py", "openai", "pip install -e '.[openai]'"),
    ("discord_bot.py", "discord", DISCORD),
    ("discord_bot.py", "openai", DISCORD),
    ("discord_offline.py", "discord", DISCORD),
    ("openai_agents_session.py", "agents", "pip install -e '.[openai-agents]'"),
    ("langchain_history.py", "langchain_core", LANGCHAIN),
    ("langchain_history.py", "langchain_openai", LANGCHAIN),
]


HIDE = """\
import sys


class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == {module!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)


sys.meta_path.insert(0, Hide())
"""


def run_without(example: str, module: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(HIDE.format(module=module), encoding="utf-8")
    paths = [str(hide), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run(
        [sys.executable, str(EXAMPLES / example), "--help"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(("example", "module", "install"), CASES)
def test_an_example_without_its_extra_names_it_in_one_line(
    example: str, module: str, install: str, tmp_path: Path
) -> None:
    done = run_without(example, module, tmp_path)
    assert done.returncode == 4, done.stderr  # the shortterm command's code for a missing extra
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()  # one line, no traceback
    assert line.startswith(f"No module named {module!r} ("), line
    assert line.endswith(f"): {install} {CHECKOUT}"), line


def test_every_example_is_checked_here() -> None:
    """A new example that needs an extra gets a case above (all of today's do)."""
    assert {example for example, _, _ in CASES} == {p.name for p in EXAMPLES.glob("*.py")}
