"""`make test` runs the PostgreSQL and Redis tests when both answer locally: the probe it
evaluates (scripts/local_services.py), and the Makefile calling it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import service_url

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "local_services.py"


def probe(postgres: str, redis: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SHORTTERM_TEST_")}
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--postgres", postgres, "--redis", redis],
        capture_output=True,
        text=True,
        env={**clean, **env},
        timeout=30,
        check=True,
    )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed once the block ends


def test_when_both_answer_the_tests_are_switched_on() -> None:
    pg = service_url("SHORTTERM_TEST_POSTGRES_URL", "PostgreSQL")
    redis = service_url("SHORTTERM_TEST_REDIS_URL", "Redis")
    done = probe(pg, redis)
    exported = subprocess.run(
        ["sh", "-c", f'{done.stdout}\nprintf "%s\\n%s" "$SHORTTERM_TEST_POSTGRES_URL" '
         '"$SHORTTERM_TEST_REDIS_URL"'],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert exported.splitlines() == [pg, redis]
    assert "tests run" in done.stderr


def test_when_one_is_down_nothing_is_switched_on() -> None:
    redis = service_url("SHORTTERM_TEST_REDIS_URL", "Redis")
    down = f"postgresql://postgres:s3cret@127.0.0.1:{closed_port()}/test"
    done = probe(down, redis)
    assert done.stdout == ""
    assert "tests skip (PostgreSQL at" in done.stderr and "s3cret" not in done.stderr


def test_variables_already_set_win() -> None:
    done = probe("postgresql://x@127.0.0.1:1/x", "redis://127.0.0.1:1/0",
                 SHORTTERM_TEST_POSTGRES_URL="postgresql://ci@db/ci")  # fmt: skip
    assert done.stdout == "" and "as SHORTTERM_TEST_* say" in done.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_test_evaluates_the_probe_and_make_run_installs_no_dev_tools() -> None:
    def plan(target: str) -> str:
        return subprocess.run(
            ["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout

    test = plan("test")
    assert "scripts/local_services.py --postgres" in test
    assert test.index("local_services.py") < test.index("-m pytest")
    run = plan("run")
    installs = [line for line in run.splitlines() if " -m pip install" in line and " -e " in line]
    assert installs == ["$(BIN)/python -m pip install --quiet -e '.[sidecar]'".replace(
        "$(BIN)", ".venv/bin")]  # fmt: skip
