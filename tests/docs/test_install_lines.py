"""Every install line a reader meets works today: shortterm is on no registry yet, so each
`pip install` / `npm install` of ours names the clone or a file `make dist` builds, with extras
that exist and the version pyproject.toml gives. tests/test_dist.py installs such a wheel.

The examples count as documents: what their docstrings say and what they print when an extra
is missing are read as often as the docs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Owned by another change in flight (the fake-model work rewrites its install lines the same
# way); scan it too once that change is in.
NOT_YET: set[str] = set()  # documents whose install lines are not checked yet


def documents() -> list[Path]:
    docs = sorted((ROOT / "docs").glob("*.md"))
    examples = sorted((ROOT / "examples").glob("*.py"))
    shown = [ROOT / "README.md", *docs, *examples]
    return [d for d in shown if d.relative_to(ROOT).as_posix() not in NOT_YET]


def project() -> dict[str, object]:
    loaded: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))[
        "project"
    ]
    return loaded


def install_lines() -> list[tuple[str, str]]:
    found = []
    for doc in documents():
        for line in doc.read_text("utf-8").splitlines():
            for match in re.finditer(r"(pip|npm) install [^`#|]*", line):
                found.append((doc.relative_to(ROOT).as_posix(), match.group(0).strip()))
    return found


def test_no_line_installs_from_a_registry_that_does_not_have_us() -> None:
    lines = install_lines()
    assert len(lines) >= 5
    for where, line in lines:
        words = line.replace("'", " ").replace('"', " ").split()
        target = next((w for w in words[2:] if not w.startswith("-")), "")
        assert not re.fullmatch(r"shortterm(\[.*\])?|shortterm-client(@.*)?", target), (
            f"{where}: {line!r} installs from a registry; shortterm is not published yet"
        )


def test_the_named_extras_and_files_exist() -> None:
    extras = set(project()["optional-dependencies"])  # type: ignore[call-overload]
    version = project()["version"]
    for where, line in install_lines():
        for named in re.findall(r"\[([\w,]+)\]", line):
            assert set(named.split(",")) <= extras, f"{where}: {line!r}"
        for wheel in re.findall(r"shortterm-([\d.]+)-py3-none-any\.whl", line):
            assert wheel == version, f"{where}: {line!r} names version {wheel}, not {version}"
        for tarball in re.findall(r"shortterm-client-([\d.]+)\.tgz", line):
            assert tarball == version, f"{where}: {line!r}"
