"""The web stack stays out of ``import shortterm`` and the CLI's start, and its absence is
reported with the extra that installs it."""

from __future__ import annotations

import subprocess
import sys

from shortterm import ExtraMissing

WEB = "{'fastapi', 'starlette', 'uvicorn', 'prometheus_client', 'pydantic'}"


def run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_import_shortterm_and_the_cli_load_no_web_stack() -> None:
    code = f"import sys, shortterm, shortterm.cli; print(sorted({WEB} & set(sys.modules)))"
    assert run(code) == "[]"


def test_a_missing_extra_names_its_install_command() -> None:
    code = (
        "import sys; sys.modules['fastapi'] = None\n"
        "try:\n    import shortterm.sidecar\n"
        "except ImportError as exc:\n    print(type(exc).__name__, exc)"
    )
    assert run(code) == ("ExtraMissing " + str(ExtraMissing("sidecar", "fastapi")))
