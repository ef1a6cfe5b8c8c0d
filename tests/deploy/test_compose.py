"""docker-compose.yml's `sidecar` profile agrees with the Dockerfile and deploy/haproxy.cfg
(no Docker engine here to start it: tests/deploy/test_proxy.py runs the same topology)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def compose() -> dict[str, Any]:
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed")
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text("utf-8"))
    return loaded


def test_plain_up_still_starts_only_the_databases(compose: dict[str, Any]) -> None:
    unprofiled = [n for n, s in compose["services"].items() if not s.get("profiles")]
    assert sorted(unprofiled) == ["postgres", "redis"]


def test_two_sidecar_replicas_share_the_compose_databases(compose: dict[str, Any]) -> None:
    services = compose["services"]
    sidecar = services["sidecar"]
    assert sidecar["build"] == "." and sidecar["deploy"]["replicas"] == 2
    env = sidecar["environment"]
    pg = services["postgres"]["environment"]
    user, password, db = pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"], pg["POSTGRES_DB"]
    assert env["SHORTTERM_STORE"].startswith(f"postgresql://{user}:{password}@postgres:5432/{db}")
    assert env["SHORTTERM_CACHE"].startswith("redis://redis:6379/")
    assert "SHORTTERM_TOKEN" in env
    for needed in ("postgres", "redis"):
        assert sidecar["depends_on"][needed]["condition"] == "service_healthy"
    assert "ports" not in sidecar  # reached through the proxy only


def test_the_proxy_serves_the_replicas_with_the_repository_config(
    compose: dict[str, Any],
) -> None:
    proxy = compose["services"]["proxy"]
    assert proxy["image"].startswith("haproxy:")
    assert proxy["volumes"] == ["./deploy/haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro"]
    assert proxy["ports"] == ["127.0.0.1:8765:8765"]
    config = (ROOT / "deploy" / "haproxy.cfg").read_text("utf-8")
    template = re.search(r"(?m)^\s*server-template \w+ (\d+) (\w+):(\d+) ", config)
    assert template is not None
    count, service, port = template.groups()
    assert (int(count), service, port) == (compose["services"]["sidecar"]["deploy"]["replicas"],
                                           "sidecar", "8765")  # fmt: skip
    assert "uri /readyz" in config and "bind :8765" in config
