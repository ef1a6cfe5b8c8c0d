"""What `make dist` ships installs on its own: the sdist and the wheel, built from the clone as
`make dist` builds them (`python -m build`: the wheel from the sdist) into a temporary
directory; the wheel installs with the sidecar extra into a fresh virtualenv, and
`shortterm --help` runs there; its metadata is complete (license, project URLs, classifiers,
readme). The sdist ships the examples, and `shortterm fake-model`'s hint names one of them.

Building needs hatchling and installing needs the extras' packages, from PyPI or the
machine's configured index: without network the test skips and says so.
"""

from __future__ import annotations

import email
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import tomllib
import venv
import zipfile
from email.message import Message
from pathlib import Path

import pytest

from tests.fake_model_process import fake_model_process

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow  # a build and a pip install into a fresh virtualenv: 15-30 s


def clean_env() -> dict[str, str]:
    """This environment without what points Python at the clone's sources."""
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    return {k: v for k, v in os.environ.items() if k not in drop}


def reachable(host: str) -> bool:
    try:
        socket.create_connection((host, 443), timeout=3).close()
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """dist/ as `make dist` writes it (the Python half): the sdist, and the wheel built from it."""
    if not reachable("pypi.org"):
        pytest.skip("no network to PyPI: building needs hatchling, installing the extras")
    if importlib.util.find_spec("build") is None:
        pytest.skip("the build package is not installed (the dev extra has it)")
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        capture_output=True, text=True, env=clean_env(), timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    return out


@pytest.fixture(scope="module")
def wheel(built: Path) -> Path:
    (found,) = built.glob("shortterm-*.whl")
    return found


@pytest.fixture(scope="module")
def sdist_names(built: Path) -> set[str]:
    """The sdist's paths, without its top directory (shortterm-<version>/)."""
    (found,) = built.glob("shortterm-*.tar.gz")
    with tarfile.open(found) as archive:
        return {name.partition("/")[2] for name in archive.getnames()}


def test_the_sdist_ships_the_examples(sdist_names: set[str]) -> None:
    examples = {f"examples/{p.name}" for p in (ROOT / "examples").glob("*.py")}
    assert examples and examples <= sdist_names, sorted(examples - sdist_names)
    assert not any("__pycache__" in name for name in sdist_names)


def test_the_fake_model_hint_names_a_shipped_example(sdist_names: set[str], tmp_path: Path) -> None:
    """`shortterm fake-model` prints the example to try; the wheel has no examples/, so the
    hint also says where it is: the sdist ships it, and the URL is the project's repository's."""
    where = re.compile(r"^\(examples/ is in a clone and in the sdist, not in the wheel: (\S+)\)$")
    with fake_model_process(tmp_path / "log.jsonl") as model:
        deadline = time.monotonic() + 30  # the hint follows the URL line; wait for it
        while not any(where.match(line) for line in model.stderr):
            assert time.monotonic() < deadline, "".join(model.stderr)
            time.sleep(0.05)
        printed = "".join(model.stderr)
    (path,) = re.findall(r"^try: python (\S+) ", printed, re.M)
    assert path in sdist_names, path
    (url,) = [m.group(1) for m in map(where.match, printed.splitlines()) if m]
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["urls"]
    folder = path.rpartition("/")[0]
    assert url == f"{urls['Repository'].removesuffix('.git')}/tree/main/{folder}", url


def metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(archive.read(name))


def test_the_wheel_metadata_is_complete(wheel: Path) -> None:
    meta = metadata(wheel)
    assert meta["Name"] == "shortterm" and meta["License-Expression"] == "MIT"
    assert meta["Requires-Python"] == ">=3.11"
    assert meta["Description-Content-Type"] == "text/markdown"
    assert meta.get_payload().startswith("# shortterm")  # the README is the long description
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL", []))
    assert {"Homepage", "Repository", "Issues", "Documentation", "Changelog"} <= set(urls)
    repository = urls["Repository"].removesuffix(".git")
    assert all(u.startswith(repository) for u in urls.values()), urls
    package = json.loads((ROOT / "clients" / "typescript" / "package.json").read_text("utf-8"))
    if "repository" in package:  # one name for both packages
        ts = package["repository"]
        assert repository in (ts if isinstance(ts, str) else ts["url"])
    classifiers = meta.get_all("Classifier", [])
    assert "Typing :: Typed" in classifiers
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert {"sidecar", "postgres", "redis", "discord", "openai", "mcp"} <= set(
        meta.get_all("Provides-Extra", [])
    )
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "shortterm/py.typed" in names
    for part in (
        "shortterm/sidecar/ui/",
        "shortterm/cache/redis/lua/",
        "shortterm/store/migrations/",
    ):
        assert any(n.startswith(part) for n in names), f"the wheel lacks {part}"
    if importlib.util.find_spec("twine") is not None:  # the dev extra has it
        check = subprocess.run(
            [sys.executable, "-m", "twine", "check", "--strict", str(wheel)],
            capture_output=True, text=True,
        )  # fmt: skip
        assert check.returncode == 0, check.stdout + check.stderr


def test_the_wheel_installs_with_the_sidecar_extra_in_a_fresh_venv(
    wheel: Path, tmp_path: Path
) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    env = clean_env()
    done = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--quiet", f"{wheel}[sidecar]"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    help_text = subprocess.run(
        [str(bin_dir / "shortterm"), "--help"],
        capture_output=True, text=True, env=env, check=True, cwd=tmp_path,
    ).stdout  # fmt: skip
    assert "serve" in help_text and "inspect" in help_text
    where = subprocess.run(
        [str(bin_dir / "python"), "-c", "import shortterm.sidecar, shortterm; "
         "print(shortterm.__file__)"],
        capture_output=True, text=True, env=env, check=True, cwd=tmp_path,
    ).stdout  # fmt: skip
    assert where.startswith(str(env_dir)), where  # the installed copy, not the clone's


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_dist_builds_checks_and_packs_both_packages() -> None:
    plan = subprocess.run(
        ["make", "-n", "-B", "dist"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    steps = [
        "-m pip install --quiet 'build>=1.2' 'twine>=5.1'\n",  # the build tools, nothing else
        "-m build --outdir dist .",
        "-m twine check --strict dist/*",
        "cd clients/typescript && npm ci && npm pack --pack-destination ../../dist",
    ]
    where = [plan.find(step) for step in steps]
    assert -1 not in where and where == sorted(where), plan
    # Not the dev venv (hundreds of MB, the project installed with every extra) ...
    assert ".venv/" not in plan and "[dev" not in plan, plan
    # ... and the client compiled once: by npm pack, whose prepack script builds it.
    assert "npm run build" not in plan and "tsc" not in plan, plan
    package = json.loads((ROOT / "clients" / "typescript" / "package.json").read_text("utf-8"))
    assert package["scripts"]["prepack"] == "npm run build"
