"""The Dockerfile's steps, run in a fresh virtualenv: no Docker engine needed, and no drift.

The file is parsed (tests/deploy/dockerfile.py), its COPY lines copy from the clone into a
temporary root, its RUN lines run there (the image's paths mapped under that root), then its
CMD starts the sidecar and its HEALTHCHECK command must pass against it. The user creation is
not run on this machine; the test checks instead that the image runs as that non-root user.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.deploy.dockerfile import Image, expand, mapped, read
from tests.support import with_query

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
TOKEN = "dockerfile-test-token-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_image_runs_as_a_non_root_user_it_creates() -> None:
    image = read(DOCKERFILE)
    version = re.fullmatch(r"python:(\d+)\.(\d+)-slim", image.base)
    assert version is not None, image.base
    major, minor = int(version[1]), int(version[2])
    assert (major, minor) >= (3, 11)
    runs = [arg for name, arg in image.steps if name == "RUN"]
    creates = [shlex.split(arg) for arg in runs if arg.startswith("useradd ")]
    assert len(creates) == 1 and creates[0][-1] == image.user != "root"
    uid = creates[0][creates[0].index("--uid") + 1]
    assert int(uid) >= 1000
    assert image.cmd == ["shortterm", "serve"]
    assert "/healthz" in " ".join(image.healthcheck)
    assert image.exposed == [8765]
    # the extras the issue asks the image for
    assert any("[sidecar,postgres,redis]" in arg for arg in runs)


class Built:
    """The image's filesystem under ``root`` and its environment, after its RUN steps."""

    def __init__(self, image: Image, root: Path, env: dict[str, str], workdir: Path) -> None:
        self.image, self.root, self.env, self.workdir = image, root, env, workdir


def build(image: Image, root: Path) -> Built:
    # The base image's `python` is a plain interpreter: the one this venv was made from.
    base_bin = root / "base-image-bin"
    base_bin.mkdir()
    base = Path(getattr(sys, "_base_executable", sys.executable))
    (base_bin / "python").symlink_to(base)
    env = {
        "PATH": f"{base_bin}{os.pathsep}/usr/bin:/bin",
        "HOME": str(root),
        **{k: v for k, v in os.environ.items() if k.startswith(("PIP_", "SSL_", "REQUESTS_"))},
    }
    workdir = root
    for name, arg in image.steps:
        if name == "ENV":
            for pair in shlex.split(arg):
                key, _, value = pair.partition("=")
                env[key] = mapped(expand(value, env), root)
        elif name == "WORKDIR":
            workdir = Path(mapped(arg, root))
            workdir.mkdir(parents=True, exist_ok=True)
        elif name == "COPY":
            *sources, dest = shlex.split(arg)
            target = workdir / dest
            for source in sources:
                path = ROOT / source
                if path.is_dir():
                    shutil.copytree(path, target, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy(path, target / path.name)
        elif name == "RUN" and not arg.startswith("useradd "):
            done = subprocess.run(
                ["bash", "-c", mapped(arg, root)],
                cwd=workdir, env=env, capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            assert done.returncode == 0, f"RUN {arg}\n{done.stdout}\n{done.stderr}"
    return Built(image, root, env, workdir)


@pytest.fixture
def backends() -> Iterator[dict[str, str]]:
    """PostgreSQL + Redis when the machine has them (the image's extras), else SQLite."""
    pg, redis = (
        os.environ.get("SHORTTERM_TEST_POSTGRES_URL"),
        os.environ.get("SHORTTERM_TEST_REDIS_URL"),
    )
    if not (pg and redis):
        yield {}
        return
    from tests.support import clear_redis_prefix, drop_postgres_schema

    tag = uuid.uuid4().hex[:16]
    yield {
        "SHORTTERM_STORE": with_query(pg, schema=f"t_{tag}"),
        "SHORTTERM_CACHE": with_query(redis, prefix=f"stm-test:{tag}:"),
    }
    import asyncio

    asyncio.run(drop_postgres_schema(pg, f"t_{tag}"))
    asyncio.run(clear_redis_prefix(redis, f"stm-test:{tag}:"))


@pytest.mark.slow  # a pip install into a fresh virtualenv: 15-30 s
def test_the_dockerfile_steps_build_a_sidecar_that_passes_its_healthcheck(
    tmp_path: Path, backends: dict[str, str]
) -> None:
    built = build(read(DOCKERFILE), tmp_path)
    # as `docker run -e SHORTTERM_TOKEN=… -e SHORTTERM_PORT=…` would set them
    port = free_port()
    env = {**built.env, "SHORTTERM_TOKEN": TOKEN, "SHORTTERM_PORT": str(port), **backends}
    assert env["SHORTTERM_HOST"] == "0.0.0.0"
    server = subprocess.Popen(
        built.image.cmd, cwd=built.workdir, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            check = subprocess.run(
                built.image.healthcheck, cwd=built.workdir, env=env, capture_output=True,
                timeout=10,
            )  # fmt: skip
            if check.returncode == 0:
                break
            assert server.poll() is None, f"the sidecar exited: {server.communicate()[1]}"
            assert time.monotonic() < deadline, f"HEALTHCHECK never passed: {check.stderr!r}"
            time.sleep(0.3)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=auth) as client:
            assert client.get("/readyz").json()["status"] == "ready"
            turn = client.post("/v1/turns", json={"user_id": "111", "channel_id": "222"})
            assert turn.status_code == 201, turn.text
            assert client.get("/v1/servers", headers={"Authorization": ""}).status_code == 401
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=30)
    assert "listening on http://0.0.0.0:" in stderr
    if backends:
        assert "postgresql://" in stderr and "redis://" in stderr
    # nothing was installed outside the image's own virtualenv
    assert (tmp_path / "opt" / "shortterm" / "bin" / "shortterm").exists()
