"""The TypeScript client (``clients/typescript``): its generated types are current, and its
Node tests pass against a real sidecar process on loopback (with a token) and, for the
discord.js example, the scripted OpenAI-compatible model of the Python tool-loop test.

Needs Node 18 or newer; without it the Node test skips with the reason, and under
``SHORTTERM_TEST_REQUIRE_SERVICES=1`` (CI) it fails instead. Dependencies come from the
committed lockfile with ``npm ci``, once per lockfile: a stamp in ``node_modules`` names its
hash, so later runs reuse the install.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from tests.sidecar.live import sidecar_process
from tests.test_example_tool_loop import SUMMARY, ScriptedModel, text, tool_call

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "clients" / "typescript"
TOKEN = "ts-client-token-0123456789"
REPLY = "Saturday at 8, see you there!"


def load_generator() -> ModuleType:
    script = ROOT / "scripts" / "openapi_to_ts.py"
    spec = importlib.util.spec_from_file_location("openapi_to_ts", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_types_are_current() -> None:
    generator = load_generator()
    current = (PACKAGE / "src" / "openapi.ts").read_text(encoding="utf-8")
    assert generator.render(generator.document()) == current, (
        "clients/typescript/src/openapi.ts is stale: run scripts/openapi_to_ts.py"
    )


def _node() -> str:
    """The node executable (18 or newer), or skip / fail with the reason."""
    node, npm = shutil.which("node"), shutil.which("npm")
    reason = ""
    if node is None or npm is None:
        reason = "Node.js and npm are not installed"
    else:
        version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout
        found = re.match(r"v(\d+)\.", version)
        if found is None or int(found.group(1)) < 18:
            reason = f"Node.js 18 or newer is needed, found {version.strip() or 'nothing'}"
    if reason:
        if os.environ.get("SHORTTERM_TEST_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{reason} (the TypeScript client tests are mandatory in CI)")
        pytest.skip(f"{reason}: the TypeScript client tests need it")
    assert node is not None
    return node


def _run(args: list[str], timeout: float, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        args, cwd=PACKAGE, capture_output=True, text=True, timeout=timeout, env=env
    )
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _install() -> None:
    lock = hashlib.sha256((PACKAGE / "package-lock.json").read_bytes()).hexdigest()[:16]
    stamp = PACKAGE / "node_modules" / f".installed-{lock}"
    if stamp.exists():
        return
    npm = shutil.which("npm")
    assert npm is not None
    _run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], timeout=600)
    stamp.touch()


def _check_the_documented_snippet(node: str) -> None:
    """docs/sidecar.md's TypeScript turn compiles against the client and the openai package."""
    doc = (ROOT / "docs" / "sidecar.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"```ts\n(.*?)```", doc, re.S)
    (PACKAGE / "dist" / "docs-snippet.ts").write_text(block, encoding="utf-8")
    config = {
        "extends": "../tsconfig.json",
        "compilerOptions": {"noEmit": True, "rootDir": ".", "outDir": "unused"},
        "include": ["docs-snippet.ts"],
        "exclude": [],
    }
    (PACKAGE / "dist" / "tsconfig.docs.json").write_text(json.dumps(config), encoding="utf-8")
    _run([node, "node_modules/typescript/bin/tsc", "-p", "dist/tsconfig.docs.json"], timeout=180)


def test_the_typescript_client_against_a_real_sidecar(tmp_path: Path) -> None:
    node = _node()
    _install()
    shutil.rmtree(PACKAGE / "dist", ignore_errors=True)
    _run([node, "node_modules/typescript/bin/tsc", "-p", "tsconfig.json"], timeout=180)
    _check_the_documented_snippet(node)
    tests = sorted(str(p.relative_to(PACKAGE)) for p in (PACKAGE / "dist/test").glob("*.test.js"))
    assert tests, "no compiled tests"
    answers = [tool_call(json.dumps({"summary": SUMMARY})), text(REPLY)]
    store = f"sqlite:///{tmp_path / 'ts.db'}"
    with (
        ScriptedModel(answers) as model,
        sidecar_process(store, env={"SHORTTERM_TOKEN": TOKEN}) as url,
    ):
        env = {
            **os.environ,
            "SHORTTERM_TEST_URL": url,
            "SHORTTERM_TEST_TOKEN": TOKEN,
            "SHORTTERM_TEST_MODEL_URL": model.base_url,
        }
        report = _run([node, "--test", "--test-reporter=tap", *tests], timeout=120, env=env)
    passed = re.search(r"^# pass (\d+)$", report, re.MULTILINE)
    assert passed is not None and int(passed.group(1)) >= 10, report
    assert re.search(r"^# (fail|cancelled|skipped) [1-9]", report, re.MULTILINE) is None, report
    first, second = model.requests
    assert [t["function"]["name"] for t in first["tools"]] == ["update_short_term_memory"]
    assert first["messages"][-1]["content"] == "Ana: so, Saturday hike on the ridge trail at 8?"
    assert "tools" not in second  # one update per turn: the example stops offering it
    assert second["messages"][-1]["role"] == "tool"
