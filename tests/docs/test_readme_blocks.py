"""Every ```python block of the README runs as a file, as a reader would paste it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

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


def test_the_scaling_block_defaults_to_the_compose_services_on_this_machine() -> None:
    """Run as it is next to `docker compose up -d`, the block must find those services: on
    localhost (a compose service name resolves only inside the compose network), with the
    compose file's credentials and ports."""
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed")
    services = yaml.safe_load((README.parent / "docker-compose.yml").read_text("utf-8"))["services"]
    block = python_blocks()[2]
    defaults = dict(re.findall(r'os\.environ\.get\(\s*"(\w+)",\s*"([^"]+)"\s*\)', block))
    store, cache = urlsplit(defaults["SHORTTERM_STORE"]), urlsplit(defaults["SHORTTERM_CACHE"])
    pg = services["postgres"]["environment"]
    assert store.scheme == "postgresql" and store.hostname in ("localhost", "127.0.0.1")
    assert (store.username, store.password, store.path.lstrip("/")) == (
        pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"], pg["POSTGRES_DB"]
    )  # fmt: skip
    assert f"127.0.0.1:{store.port or 5432}:5432" in services["postgres"]["ports"]
    assert cache.scheme == "redis" and cache.hostname in ("localhost", "127.0.0.1")
    assert f"127.0.0.1:{cache.port or 6379}:6379" in services["redis"]["ports"]
