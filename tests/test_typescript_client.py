"""The TypeScript client (``clients/typescript``): its generated types are current, and its
Node tests pass against a real sidecar process on loopback (with a token) and, for the
discord.js example, the scripted OpenAI-compatible model of the Python tool-loop test. In a
copy of the package, ``npm pack`` builds before packing and ``npm test`` runs on its own
(it starts a sidecar itself from ``shortterm`` on PATH, with no token). A new project made as
the package's README says (``npm init -y``, its edits, the packed tarball) compiles and runs
the README's snippet, and ``turn.tools`` is typed without type arguments.

Needs Node 20 or newer; without it the Node test skips with the reason, and under
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
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
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
    """The node executable (20 or newer), or skip / fail with the reason."""
    node, npm = shutil.which("node"), shutil.which("npm")
    reason = ""
    if node is None or npm is None:
        reason = "Node.js and npm are not installed"
    else:
        version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout
        found = re.match(r"v(\d+)\.", version)
        if found is None or int(found.group(1)) < 20:
            reason = f"Node.js 20 or newer is needed, found {version.strip() or 'nothing'}"
    if reason:
        if os.environ.get("SHORTTERM_TEST_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{reason} (the TypeScript client tests are mandatory in CI)")
        pytest.skip(f"{reason}: the TypeScript client tests need it")
    assert node is not None
    return node


def _run(
    args: list[str], timeout: float, env: dict[str, str] | None = None, cwd: Path = PACKAGE
) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
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
    assert passed is not None and int(passed.group(1)) >= 40, report
    assert re.search(r"^# (fail|cancelled|skipped) [1-9]", report, re.MULTILINE) is None, report
    first, second = model.requests
    assert [t["function"]["name"] for t in first["tools"]] == ["update_short_term_memory"]
    assert first["messages"][-1]["content"] == "Ana: so, Saturday hike on the ridge trail at 8?"
    assert "tools" not in second  # one update per turn: the example stops offering it
    assert second["messages"][-1]["role"] == "tool"


def test_the_package_license_is_the_repository_license() -> None:
    """npm packs clients/typescript/LICENSE: it must say what the repository's says."""
    assert (PACKAGE / "LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes()


def _package_copy(tmp_path: Path) -> Path:
    """The package's committed files in a fresh directory, with the installed node_modules."""
    copy = tmp_path / "typescript"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("node_modules", "dist"))
    (copy / "node_modules").symlink_to(PACKAGE / "node_modules", target_is_directory=True)
    return copy


@dataclass(frozen=True)
class Packed:
    copy: Path  # the package copy it was packed from
    tarball: Path
    files: set[str]  # what npm says it packed


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Packed:
    """`npm pack` in a copy of the package, once for the tests below."""
    _node()
    _install()
    npm = shutil.which("npm")
    assert npm is not None
    tmp_path = tmp_path_factory.mktemp("pack")
    copy = _package_copy(tmp_path)
    done = subprocess.run(
        [npm, "pack", "--json", "--pack-destination", str(tmp_path)],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    # Lifecycle output comes first on stdout; the JSON report is the last thing printed.
    (report,) = json.loads(done.stdout[done.stdout.index("[\n") :])
    files = {f["path"] for f in report["files"]}
    return Packed(copy, tmp_path / report["filename"], files)


def test_npm_pack_builds_and_npm_test_runs_on_its_own(packed: Packed) -> None:
    npm = shutil.which("npm")
    assert npm is not None
    copy, files = packed.copy, packed.files
    expected = {"LICENSE", "README.md", "package.json", "dist/src/index.js", "dist/src/index.d.ts"}
    assert expected | {"dist/src/tools.d.ts"} <= files, sorted(files)
    assert not any(f.startswith(("dist/test", "dist/examples", "src/")) for f in files), files

    # `npm test` as a user runs it: shortterm on PATH, no SHORTTERM_* settings, no token.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHORTTERM_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(
        [npm, "test"],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, f"{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
    passed = re.search(r"^# pass (\d+)$", done.stdout, re.MULTILINE)
    assert passed is not None and int(passed.group(1)) >= 40, done.stdout[-6000:]
    unfinished = re.search(r"^# (fail|cancelled|skipped) [1-9]", done.stdout, re.MULTILINE)
    assert unfinished is None, done.stdout[-6000:]


# A user's second file: `tools` without type arguments has the shape of the format asked for,
# so these compile under `strict` (with `unknown` elements, `.function` would not).
TYPED_TOOLS = """\
import type { ShortTermClient } from "shortterm-client";

export async function shapes(memory: ShortTermClient): Promise<string[]> {
  const ids = { user_id: "1", channel_id: "2" };
  const chat = await memory.startTurn(ids);
  const claude = await memory.startTurn({ ...ids, tools_format: "anthropic" });
  const gemini = await memory.startTurn({ ...ids, messages: [], messages_format: "gemini" });
  return [chat.tools[0]!.function.name, claude.tools[0]!.input_schema.type,
    gemini.tools[0]!.parameters.type];
}
"""


def _readme_quick_start() -> tuple[list[list[str]], str, str]:
    """The TypeScript README's new-project steps: its `npm pkg set` commands (after
    `npm init -y`), its tsconfig.json and its bot.ts."""
    readme = (PACKAGE / "README.md").read_text(encoding="utf-8")
    (steps,) = [b for b in re.findall(r"```bash\n(.*?)```", readme, re.S) if "npm init -y" in b]
    lines = steps.splitlines()
    assert "npm init -y" in lines, steps
    edits = [shlex.split(line, comments=True) for line in lines if line.startswith("npm pkg set")]
    (tsconfig,) = re.findall(r"```json\n(.*?)```", readme, re.S)
    (snippet,) = re.findall(r"```ts\n(.*?)```", readme, re.S)
    return edits, tsconfig, snippet


def test_a_new_project_as_the_readme_says_runs_its_snippet(packed: Packed, tmp_path: Path) -> None:
    """`npm init -y` (npm 11 writes commonjs), the README's edits, the packed client installed;
    the README's bot.ts compiles with its tsconfig and runs against a real sidecar, and
    `turn.tools` is typed without type arguments."""
    node, npm = _node(), shutil.which("npm")
    assert npm is not None
    edits, tsconfig, snippet = _readme_quick_start()
    assert "http://127.0.0.1:8765" in snippet  # pointed at the test's sidecar below
    bot = tmp_path / "my-bot"
    bot.mkdir()
    _run([npm, "init", "-y"], timeout=60, cwd=bot)
    for edit in edits:  # `npm pkg set ...`
        _run([npm, *edit[1:]], timeout=60, cwd=bot)
    _run([npm, "install", "--no-audit", "--no-fund", str(packed.tarball)], timeout=120, cwd=bot)
    # The README's `npm install --save-dev typescript`: the lockfile's, already installed.
    (bot / "node_modules" / "typescript").symlink_to(PACKAGE / "node_modules" / "typescript")
    (bot / "tsconfig.json").write_text(tsconfig, encoding="utf-8")
    (bot / "typed-tools.ts").write_text(TYPED_TOOLS, encoding="utf-8")
    with sidecar_process(f"sqlite:///{tmp_path / 'bot.db'}") as url:
        (bot / "bot.ts").write_text(snippet.replace("http://127.0.0.1:8765", url), "utf-8")
        _run([node, "node_modules/typescript/bin/tsc"], timeout=180, cwd=bot)  # `npx tsc`
        printed = _run([node, "dist/bot.js"], timeout=60, cwd=bot)
    assert printed.strip() == "[ 'update_short_term_memory' ]", printed
