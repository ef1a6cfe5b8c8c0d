"""``shortterm serve --quickstart`` as a user runs it: the command starts, prints three curl
lines, and those exact lines work against it; the README's curl works too."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from shortterm.sidecar import quickstart_lines
from shortterm.sidecar.run import announcement
from tests.support import drop_postgres_schema, service_url, with_query

ROOT = Path(__file__).resolve().parents[2]
SHORTTERM = Path(sys.executable).with_name("shortterm")


def _curl_with_json() -> bool:
    if shutil.which("curl") is None:
        return False
    out = subprocess.run(["curl", "--version"], capture_output=True, text=True, check=True)
    match = re.match(r"curl (\d+)\.(\d+)", out.stdout)
    return match is not None and (int(match[1]), int(match[2])) >= (7, 82)


needs_curl = pytest.mark.skipif(
    not _curl_with_json() and os.environ.get("SHORTTERM_TEST_REQUIRE_SERVICES") != "1",
    reason="curl 7.82 or newer (for --json) is not installed",
)


async def bash(script: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", f"set -euo pipefail\n{script}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, (script, out, err)
    return out.decode()


@needs_curl
async def test_the_serve_command_and_its_quickstart(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHORTTERM_")}
    proc = await asyncio.create_subprocess_exec(
        str(SHORTTERM), "serve", "--port", "0", "--quickstart",
        "--store", f"sqlite:///{tmp_path / 'quick.db'}",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    assert proc.stderr is not None
    printed: list[str] = []
    try:
        while len(printed) < 3 or not printed[-1].startswith("  "):
            line = (await asyncio.wait_for(proc.stderr.readline(), 20)).decode()
            assert line, "the sidecar exited before printing its quickstart"
            if line.startswith("shortterm sidecar listening on "):
                url = line.split()[4]
            if line.startswith("  "):
                printed.append(line.strip())
                if len(printed) == 3:
                    break
        assert printed == quickstart_lines(url)
        output = await bash("\n".join(printed))
        assert "Pack list for Saturday?" in output
        assert "Water, rain jacket, snacks." in output
        assert "#plans" in output
    finally:
        proc.send_signal(signal.SIGTERM)
        rest = (await asyncio.wait_for(proc.stderr.read(), 20)).decode()
        await asyncio.wait_for(proc.wait(), 20)
    # uvicorn shuts down gracefully, then lets the signal end the process as usual.
    assert proc.returncode in (0, -signal.SIGTERM)
    assert "Shutting down" in rest
    assert "Traceback" not in rest


def test_a_token_adds_the_header_to_every_line() -> None:
    lines = quickstart_lines("http://127.0.0.1:8765", token=True)
    assert all('-H "Authorization: Bearer $SHORTTERM_TOKEN"' in line for line in lines)
    assert not any("Authorization" in line for line in quickstart_lines())


@needs_curl
async def test_the_readme_curl_works(base_url: str) -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
    first_screen = readme.split("\n## ", 1)[0]
    (line,) = [ln for ln in first_screen.splitlines() if ln.startswith("curl ")]
    assert "http://127.0.0.1:8765" in line
    body = json.loads(await bash(line.replace("http://127.0.0.1:8765", base_url)))
    assert len(body["turn_id"]) == 32
    assert body["tools"][0]["function"]["name"] == "update_short_term_memory"


def test_the_documented_quickstart_is_the_printed_one() -> None:
    doc = (ROOT / "docs" / "sidecar.md").read_text("utf-8")
    block = doc.split("```bash\nTURN=", 1)[1].split("```", 1)[0]
    assert ("TURN=" + block).strip().splitlines() == quickstart_lines()


@needs_curl
async def test_the_third_line_on_a_fresh_memory_says_nothing_is_recalled(base_url: str) -> None:
    third = quickstart_lines(base_url)[2]
    assert (await bash(third)).strip() == "nothing recalled"


async def test_the_banner_never_prints_a_password() -> None:
    pg_url = service_url("SHORTTERM_TEST_POSTGRES_URL", "PostgreSQL")
    schema = f"t_{uuid.uuid4().hex[:16]}"
    parts = urlsplit(with_query(pg_url, schema=schema))
    host = parts.netloc.rsplit("@", 1)[-1]
    user = parts.username or "postgres"
    store = urlunsplit(parts._replace(netloc=f"{user}:s3cret-pw@{host}"))  # trust auth ignores it
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHORTTERM_")}
    proc = await asyncio.create_subprocess_exec(
        str(SHORTTERM), "serve", "--port", "0", "--store", store,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        line = ""
        while not line.startswith("shortterm sidecar listening on "):
            line = (await asyncio.wait_for(proc.stderr.readline(), 20)).decode()
            assert line, "the sidecar exited before printing its banner"
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 20)
        await drop_postgres_schema(pg_url, schema)
    assert "s3cret-pw" not in line
    assert f"{user}:***@{host}" in line


def test_a_wildcard_address_is_announced_with_a_url_that_opens() -> None:
    """``serve --host 0.0.0.0`` listens everywhere; the inspector link and the quickstart
    name the loopback address, which a browser and curl on this machine can open."""
    lines = announcement(
        "http://0.0.0.0:8765", "sqlite:///shortterm.db", "memory://", quickstart=True
    )
    assert lines[0].startswith("shortterm sidecar listening on http://0.0.0.0:8765 (every")
    assert lines[1] == "web inspector: http://127.0.0.1:8765/ui/ (from this machine)"
    assert [ln.strip() for ln in lines[3:]] == quickstart_lines("http://127.0.0.1:8765")
    assert announcement("http://[::]:8765", "memory://", "memory://")[1].startswith(
        "web inspector: http://[::1]:8765/ui/"
    )
    loopback = announcement("http://127.0.0.1:8765", "memory://", "memory://")
    assert loopback[1] == "web inspector: http://127.0.0.1:8765/ui/"
