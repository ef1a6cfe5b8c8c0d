"""The discord.js example as a user installs it: the packed client (``npm pack``) and the
registry's current ``openai``, ``discord.js``, ``@types/node`` and ``typescript`` (the versions
pinned as the client's devDependencies) in a new project. There the example bot and the
TypeScript snippet of docs/sidecar.md type-check with ``tsc --noEmit``, and the offline runner
(``examples/discord-js-offline.ts``: the bot logged in to a stand-in Discord on loopback) plays
its scene against a real ``shortterm serve`` and a real ``shortterm fake-model``, each a process
of its own: the second turn recalls what the first noted.

Needs Node 20 or newer and the npm registry; without either the tests skip with the reason, and
under ``SHORTTERM_TEST_REQUIRE_SERVICES=1`` (CI) they fail instead. The project is installed
once per run from the registry (npm's own cache makes it ~10 s; a cached ``node_modules`` would
save about that, not minutes, and would stop checking the registry's packages).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fake_model_process import fake_model_process
from tests.sidecar.live import sidecar_process
from tests.test_typescript_client import _install, _node, _package_copy, _run

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "clients" / "typescript"
EXAMPLES = PACKAGE / "examples"
DOCS = ROOT / "docs" / "sidecar.md"
# What the example and the snippet import (and what compiles them); `ws` for the runner only.
RUNTIME = ("openai", "discord.js", "ws")
DEV = ("typescript", "@types/node", "@types/ws")
# The tsconfig the example's header asks for.
TSCONFIG = {
    "compilerOptions": {
        "module": "nodenext",
        "target": "es2022",
        "strict": True,
        "skipLibCheck": True,
        "outDir": "dist",
    },
    "include": ["*.ts"],
}


def pins() -> dict[str, str]:
    """The tested versions: the client's devDependencies, each an exact version."""
    declared = json.loads((PACKAGE / "package.json").read_text("utf-8"))["devDependencies"]
    missing = [name for name in (*RUNTIME, *DEV) if name not in declared]
    assert not missing, f"clients/typescript/package.json's devDependencies lack {missing}"
    found = {name: declared[name] for name in (*RUNTIME, *DEV)}
    loose = {n: v for n, v in found.items() if not re.fullmatch(r"\d+\.\d+\.\d+", v)}
    assert not loose, f"pin exact versions in clients/typescript/package.json: {loose}"
    return found


def _unavailable(reason: str) -> None:
    if os.environ.get("SHORTTERM_TEST_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason} (the TypeScript example check is mandatory in CI)")
    pytest.skip(f"{reason}: the TypeScript example check needs it")


def _npm() -> str:
    _node()
    npm = shutil.which("npm")
    assert npm is not None
    return npm


def _registry(npm: str) -> None:
    """Skip (fail in CI) when the npm registry does not answer."""
    try:
        done = subprocess.run(
            [npm, "ping", "--fetch-retries=0", "--fetch-timeout=20000"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        _unavailable("the npm registry did not answer `npm ping` within 60 s")
        return
    if done.returncode != 0:
        # npm's own cause: the fetch error ("... connect ECONNREFUSED ..."), else its code.
        lines = [line.removeprefix("npm error ") for line in done.stderr.splitlines()]
        said = next((line for line in lines if "Error:" in line), "") or next(
            (line for line in lines if line.startswith("code ")), "no output"
        )
        _unavailable(f"the npm registry is unreachable (`npm ping`: {said})")


@dataclass(frozen=True)
class Project:
    path: Path
    node: str
    npm: str


def documented_snippet() -> str:
    (block,) = re.findall(r"```ts\n(.*?)```", DOCS.read_text("utf-8"), re.S)
    return block


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """A new bot project: the packed client, the pinned packages, the example's files and the
    docs' snippet."""
    npm, node = _npm(), _node()
    _registry(npm)
    _install()  # the client's own build tools, to pack it
    tmp = tmp_path_factory.mktemp("ts-example")
    copy = _package_copy(tmp)
    _run([npm, "pack", "--pack-destination", str(tmp)], timeout=300, cwd=copy)
    (tarball,) = tmp.glob("shortterm-client-*.tgz")
    bot = tmp / "bot"
    bot.mkdir()
    versions = pins()
    manifest = {
        "name": "my-discord-bot",
        "private": True,
        "type": "module",
        "dependencies": {
            "shortterm-client": f"file:{tarball}",
            **{name: versions[name] for name in RUNTIME},
        },
        "devDependencies": {name: versions[name] for name in DEV},
    }
    (bot / "package.json").write_text(json.dumps(manifest, indent=2), "utf-8")
    _run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error"], timeout=600, cwd=bot)
    for source in EXAMPLES.glob("*.ts"):
        shutil.copy(source, bot / source.name)
    (bot / "docs-snippet.ts").write_text(documented_snippet(), "utf-8")
    (bot / "tsconfig.json").write_text(json.dumps(TSCONFIG, indent=2), "utf-8")
    return Project(bot, node, npm)


def _tsc(project: Project, *args: str) -> subprocess.CompletedProcess[str]:
    tsc = project.path / "node_modules" / "typescript" / "bin" / "tsc"
    return subprocess.run(
        [project.node, str(tsc), "-p", "tsconfig.json", *args],
        cwd=project.path,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_example_and_the_snippet_compile_against_the_current_packages(
    project: Project,
) -> None:
    installed = {
        name: json.loads((project.path / "node_modules" / name / "package.json").read_text())[
            "version"
        ]
        for name in (*RUNTIME, *DEV)
    }
    assert installed == pins()
    done = _tsc(project, "--noEmit")
    assert done.returncode == 0, f"tsc --noEmit:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="module")
def built(project: Project) -> Path:
    """The project compiled (`npx tsc`): the offline runner's JavaScript."""
    done = _tsc(project)
    assert done.returncode == 0, f"tsc:\n{done.stdout}\n{done.stderr}"
    runner = project.path / "dist" / "discord-js-offline.js"
    assert runner.exists()
    return runner


def _offline(
    project: Project, runner: Path, env: dict[str, str], *lines: str
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SHORTTERM_", "OPENAI_"))}
    return subprocess.run(
        [project.node, str(runner), *lines],
        cwd=project.path,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def documented_scene() -> list[str]:
    """The transcript docs/sidecar.md shows for the offline runner."""
    section = DOCS.read_text("utf-8").split("discord-js-offline.js\n```", 1)[1]
    return section.split("```text\n", 1)[1].split("```", 1)[0].splitlines()


def test_the_offline_runner_plays_the_documented_scene(
    project: Project, built: Path, tmp_path: Path
) -> None:
    """Two turns: the note taken in #plans is in the prompt of the turn in #general, and in its
    reply; the output is what the docs show."""
    with (
        fake_model_process(tmp_path / "prompts.jsonl") as model,
        sidecar_process(f"sqlite:///{tmp_path / 'bot.db'}") as url,
    ):
        done = _offline(project, built, {"SHORTTERM_URL": url, "OPENAI_BASE_URL": model.url})
        sent = model.chats()
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    lines = done.stdout.splitlines()
    note = "@Tomo note that we hike the ridge trail on Saturday at 8, Ben brings the map"
    assert lines[:4] == [
        "logged in as tomo-bot; /refresh and /memory registered",
        "#plans ben: who's bringing what on Saturday?",
        f"#plans Ana B.: {note}",
        f'#plans Tomo: Notes updated. You said: "Ana B.: {note}". My memory is empty here.',
    ]
    assert lines[6].startswith('#general Tomo: You said: "Ana B.: @Tomo are we still on')
    assert f'"Ana B.: {note}"' in lines[6]  # recalled from #plans: not in #general's history
    assert lines == documented_scene()
    # The tool is offered in #plans (where the model used it) and in #general's first turn.
    assert ["tools" in request for request in sent] == [True, False, True]
    system, recalled = sent[-1]["messages"][:2]  # the memory block right after the system prompt
    assert system["role"] == "system" and "You are Tomo" in system["content"]
    assert recalled["role"] == "user"
    assert "⟦#plans in this server · summary written" in recalled["content"]
    assert f"│ Ana B.: {note}" in recalled["content"].splitlines()
    assert sent[-1]["messages"][-2:] == [
        {"role": "user", "content": "ben: anyone around this weekend?"},
        {"role": "user", "content": "Ana B.: @Tomo are we still on for the hike?"},
    ]


def test_the_offline_runner_drives_the_commands_and_a_dm(
    project: Project, built: Path, tmp_path: Path
) -> None:
    """/refresh needs Manage Messages (Ana has it, Ben not), /memory shows the channel's entry
    and then nothing; a DM is answered without a mention."""
    lines = [
        "plans:ana:@note that the hike starts at 8",
        "plans:ana:/memory",
        "plans:ben:/refresh",
        "plans:ana:/refresh",
        "plans:ana:/memory",
        "dm:ben:hello there",
    ]
    with (
        fake_model_process(tmp_path / "prompts.jsonl") as model,
        sidecar_process(f"sqlite:///{tmp_path / 'bot.db'}") as url,
    ):
        done = _offline(
            project, built, {"SHORTTERM_URL": url, "OPENAI_BASE_URL": model.url}, *lines
        )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    out = done.stdout
    shown, empty = out.split("#plans Ana B. used /memory\n")[1:]
    assert shown.startswith("#plans Tomo (only Ana B. sees it): **What I remember of #plans**")
    assert "**Summary** · written just now" in shown
    assert "#plans Tomo (only ben sees it): You need the Manage Messages permission here" in out
    assert "#plans Tomo (only Ana B. sees it): Done: I forgot this channel's recent" in out
    assert empty.startswith(
        "#plans Tomo (only Ana B. sees it): **What I remember of #plans**\nNothing yet.\n"
    )
    assert '#dm-ben tomo-bot: You said: "ben: hello there".' in out


def test_the_offline_runner_says_what_to_start(project: Project, built: Path) -> None:
    """No sidecar, or no model: one line naming what to start, exit status 2."""
    dead = "http://127.0.0.1:9"  # discard: nothing listens
    done = _offline(project, built, {"SHORTTERM_URL": dead})
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        f"no sidecar answers at {dead}: start `shortterm serve` (or set SHORTTERM_URL)"
    )
    with sidecar_process("memory://") as url:
        done = _offline(project, built, {"SHORTTERM_URL": url, "OPENAI_BASE_URL": f"{dead}/v1"})
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        f"no model answers at {dead}/v1: start `shortterm fake-model` (or set OPENAI_BASE_URL)"
    )
    done = _offline(project, built, {}, "lobby:ana:hi")
    assert done.returncode == 2
    assert "expected CHANNEL:AUTHOR:TEXT" in done.stderr


def test_the_tested_versions_are_the_documented_ones() -> None:
    """The example's header and docs/sidecar.md name the versions CI installs."""
    header = (EXAMPLES / "discord-js-bot.ts").read_text("utf-8").split("*/", 1)[0]
    docs = DOCS.read_text("utf-8").split("## From TypeScript", 1)[1]
    for name, version in pins().items():
        assert f"{name}@{version}" in header, f"{name}@{version} not in the example's header"
        if name in ("openai", "discord.js", "typescript", "@types/node"):
            assert f"{name}@{version}" in docs, f"{name}@{version} not in docs/sidecar.md"
