"""docs/discord.md's "/refresh and /memory offline", run as a reader runs it: the scene on a
file with `shortterm fake-model` in a process of its own, then the documented script, whose
output must be the documented one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.fake_model_process import fake_model_process

ROOT = Path(__file__).resolve().parents[2]
SECTION = "### `/refresh` and `/memory` offline"


def block(section: str, language: str, index: int = 0) -> str:
    return section.split(f"```{language}\n")[index + 1].split("```", 1)[0]


def test_the_documented_commands_run_the_cog_offline(tmp_path: Path) -> None:
    section = (ROOT / "docs" / "discord.md").read_text("utf-8").split(SECTION, 1)[1]
    section = section.split("\n## ", 1)[0]
    scene, script = block(section, "bash").splitlines()
    assert scene.startswith("python examples/discord_offline.py ")
    assert script.split("#")[0].split() == ["python", "refresh_offline.py"]
    (tmp_path / "refresh_offline.py").write_text(block(section, "python"), "utf-8")

    env = {k: v for k, v in os.environ.items() if not k.startswith("SHORTTERM_")}
    with fake_model_process(tmp_path / "prompts.jsonl") as model:
        args = scene.split()[2:]  # the documented options, the model's port swapped in
        args[args.index("--base-url") + 1] = model.url
        played = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "discord_offline.py"), *args],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert played.returncode == 0, played.stderr
    ran = subprocess.run(
        [sys.executable, "refresh_offline.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == block(section, "text")
