"""deploy/haproxy.cfg, run by a real haproxy in front of two real `shortterm serve` replicas on
PostgreSQL + Redis: what docker-compose.yml's `sidecar` profile starts, without Docker.

The file is used as it is, except for the addresses Docker would provide: the frontend binds a
free loopback port instead of :8765, and the two replicas' loopback ports replace the DNS
`server-template` (and its resolvers section).
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.sidecar.live import sidecar_process

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deploy" / "haproxy.cfg"
TOKEN = "proxy-test-token-0123456789abc"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"

needs_haproxy = pytest.mark.skipif(
    not Path(HAPROXY).exists(), reason="haproxy is not installed (apt-get install haproxy)"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def local_config(listen: int, replicas: list[str]) -> str:
    text = CONFIG.read_text("utf-8")
    text, binds = re.subn(r"(?m)^(\s*)bind :8765$", rf"\g<1>bind 127.0.0.1:{listen}", text)
    servers = "\n".join(
        f"    server sidecar{i} {url.removeprefix('http://')}" for i, url in enumerate(replicas)
    )
    text, templates = re.subn(r"(?m)^\s*server-template .*$", servers, text)
    text, resolvers = re.subn(r"(?ms)^resolvers docker\n.*?\n\n", "", text)
    assert (binds, templates, resolvers) == (1, 1, 1), "deploy/haproxy.cfg changed shape"
    return text


@needs_haproxy
def test_the_config_is_valid_as_shipped() -> None:
    done = subprocess.run([HAPROXY, "-c", "-f", str(CONFIG)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def replicas(scale_urls: tuple[str, str]) -> Iterator[list[tuple[ExitStack, str]]]:
    """Two replicas on one PostgreSQL schema and Redis prefix; each can be stopped alone."""
    store, cache = scale_urls
    with ExitStack() as first, ExitStack() as second:
        yield [
            (stack, stack.enter_context(sidecar_process(store, cache, {"SHORTTERM_TOKEN": TOKEN})))
            for stack in (first, second)
        ]


def turn_requests(url: str) -> set[str]:
    """The turn routes this replica answered with success."""
    text = httpx.get(f"{url}/metrics", headers=AUTH).text
    return {
        s.labels["route"]
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "shortterm_http_requests_total"
        and s.labels["route"].startswith("/v1/turns")
        and s.labels["status"] in ("201", "204")
    }


def one_turn(client: httpx.Client, n: int) -> None:
    start = client.post("/v1/turns", json={"user_id": "111", "channel_id": f"c{n}"})
    assert start.status_code == 201, start.text
    turn_id = start.json()["turn_id"]
    capture = {"history": [], "replies": [{"text": f"reply {n}"}]}
    captured = client.post(f"/v1/turns/{turn_id}/capture", json=capture)
    assert captured.status_code == 204, captured.text


@needs_haproxy
def test_two_replicas_behind_the_proxy_share_turns_and_survive_one_stopping(
    tmp_path: Path, replicas: list[tuple[ExitStack, str]]
) -> None:
    urls = [url for _, url in replicas]
    port = free_port()
    config = tmp_path / "haproxy.cfg"
    config.write_text(local_config(port, urls), "utf-8")
    proxy = subprocess.Popen(
        [HAPROXY, "-db", "-f", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=AUTH, timeout=10) as client:
            deadline = time.monotonic() + 20
            while True:
                try:
                    if client.get("/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "the proxy never answered /readyz with 200"
                time.sleep(0.2)
            # Round robin: a turn's start and its capture land on different replicas, and
            # both succeed (the turn lives in Redis).
            for n in range(6):
                one_turn(client, n)
            served = [turn_requests(url) for url in urls]
            assert all(served), served  # both replicas took part
            assert set.union(*served) == {"/v1/turns", "/v1/turns/{turn_id}/capture"}
            # One replica stops: a request sent to it is retried on the other, then the
            # health check takes it out of the rotation. No request fails.
            replicas[0][0].close()
            for n in range(6, 16):
                one_turn(client, n)
    finally:
        proxy.terminate()
        log, errors = proxy.communicate(timeout=10)
    assert "ALERT" not in errors, errors
    # Paths carry user ids: the proxy logs no request that went well, and never a path.
    assert "/v1/" not in log and "Connect from" not in log, log
