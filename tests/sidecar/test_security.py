"""Bearer auth, refusing to serve a non-loopback address without a token, and the body limit."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

import shortterm
from shortterm.cli import main
from shortterm.sidecar import SidecarSettings, create_app, is_loopback, serve
from shortterm.sidecar.middleware import BodyLimit
from tests.sidecar.conftest import TOKEN
from tests.sidecar.live import serving

TURN = {"user_id": "111", "channel_id": "222"}


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.5", False),
        ("bot.example.org", False),
    ],
)
def test_what_counts_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


async def test_create_app_refuses_an_exposed_address_without_a_token(
    memory: shortterm.Memory,
) -> None:
    with pytest.raises(shortterm.ConfigError, match="SHORTTERM_TOKEN"):
        create_app(memory, SidecarSettings(host="0.0.0.0"))
    create_app(memory, SidecarSettings(host="0.0.0.0", token=TOKEN))  # with a token: fine


async def test_serve_refuses_before_opening_or_binding(tmp_path: Path) -> None:
    db = tmp_path / "never.db"
    with pytest.raises(shortterm.ConfigError, match=r"refusing to listen on '0\.0\.0\.0'"):
        await serve(SidecarSettings(host="0.0.0.0", port=0), store=f"sqlite:///{db}")
    assert not db.exists()


def test_the_serve_command_refuses_an_exposed_address_without_a_token(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["serve", "--host", "0.0.0.0", "--store", f"sqlite:///{tmp_path / 'x.db'}"],
        env={"SHORTTERM_TOKEN": None, "SHORTTERM_HOST": None},
    )
    assert result.exit_code == 2
    assert "refusing to listen on '0.0.0.0' without a token" in result.output
    env = {"SHORTTERM_TOKEN": None, "SHORTTERM_HOST": "0.0.0.0"}
    from_env = CliRunner().invoke(main, ["serve"], env=env)
    assert from_env.exit_code == 2


@pytest.mark.parametrize("token", ["short", " " + TOKEN, "tøken-with-non-ascii-chars", ""])
def test_weak_or_odd_tokens_are_refused(token: str) -> None:
    with pytest.raises(shortterm.InvalidInput, match="token"):
        SidecarSettings(token=token)


def test_settings_from_the_environment() -> None:
    env = {
        "SHORTTERM_TOKEN": TOKEN,
        "SHORTTERM_PORT": "9000",
        "SHORTTERM_MAX_BODY_BYTES": "4096",
        "SHORTTERM_TURN_TTL_S": "30",
        "SHORTTERM_MAX_TURNS": "10",
    }
    settings = SidecarSettings.from_env(env, port=None, host="::1")
    assert settings == SidecarSettings(
        host="::1", port=9000, token=TOKEN, max_body_bytes=4096, turn_ttl_s=30, max_turns=10
    )
    assert settings.base_url == "http://[::1]:9000"
    assert SidecarSettings.from_env({"SHORTTERM_TOKEN": "  "}).token is None
    with pytest.raises(shortterm.ConfigError, match="SHORTTERM_PORT"):
        SidecarSettings.from_env({"SHORTTERM_PORT": "http"})
    with pytest.raises(shortterm.ConfigError, match="max_turns"):
        SidecarSettings.from_env({"SHORTTERM_MAX_TURNS": "0"})


@pytest.fixture
async def guarded(memory: shortterm.Memory) -> AsyncIterator[str]:
    app = create_app(memory, SidecarSettings(token=TOKEN, max_body_bytes=2048))
    async with serving(app) as url:
        yield url


GUARDED_ROUTES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("POST", "/v1/turns", TURN),
    ("GET", "/v1/servers", None),
    ("GET", "/v1/servers/333/entries", None),
    ("GET", "/v1/users/111/settings", None),
    ("DELETE", "/v1/channels/222", None),
    ("POST", "/v1/janitor", None),
    ("GET", "/metrics", None),
    ("GET", "/openapi.json", None),
    ("GET", "/no/such/route", None),
]


async def test_with_a_token_every_route_needs_it(guarded: str) -> None:
    async with httpx.AsyncClient(base_url=guarded) as client:
        for method, path, body in GUARDED_ROUTES:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
                refused = await client.request(method, path, json=body, headers=headers)
                assert refused.status_code == 401, (path, headers, refused.text)
                assert refused.headers["www-authenticate"] == "Bearer"
                assert refused.json()["code"] == "unauthorized"
            for scheme in ("Bearer", "bearer"):
                allowed = await client.request(
                    method, path, json=body, headers={"Authorization": f"{scheme} {TOKEN}"}
                )
                assert allowed.status_code != 401, (path, allowed.text)


async def test_healthz_needs_no_token(guarded: str) -> None:
    async with httpx.AsyncClient(base_url=guarded) as client:
        response = await client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "degraded": False}


async def test_auth_comes_before_the_body_limit(guarded: str) -> None:
    async with httpx.AsyncClient(base_url=guarded) as client:
        response = await client.post("/v1/turns", content=b"x" * 10_000)
    assert response.status_code == 401


async def test_without_a_token_on_loopback_no_header_is_needed(http: httpx.AsyncClient) -> None:
    assert (await http.post("/v1/turns", json=TURN)).status_code == 201
    assert (await http.get("/metrics")).status_code == 200


async def test_bodies_over_the_limit_are_refused(guarded: str) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=guarded, headers=auth) as client:
        big = {**TURN, "user_message": "x" * 3000}
        declared = await client.post("/v1/turns", json=big)  # Content-Length: 3000+
        assert declared.status_code == 413
        assert declared.json()["code"] == "payload_too_large"

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(3):
                yield b" " * 1000  # JSON whitespace: only the size is wrong

        chunked = await client.post(
            "/v1/turns", content=chunks(), headers={"content-type": "application/json"}
        )
        assert chunked.status_code == 413

    async with httpx.AsyncClient(base_url=guarded, headers=auth) as client:
        fits = {**TURN, "user_message": "x" * 1500}
        assert (await client.post("/v1/turns", json=fits)).status_code == 201


async def test_the_limit_stops_reading_early() -> None:
    """Without Content-Length, the body is read only until it passes the limit."""
    consumed = 0

    async def receive() -> dict[str, Any]:
        nonlocal consumed
        consumed += 1
        return {"type": "http.request", "body": b"x" * 1024, "more_body": consumed < 100}

    async def app(scope: Any, receive_: Any, send: Any) -> None:
        while (await receive_()).get("more_body"):
            pass
        raise AssertionError("the whole body was read")

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/turns", "headers": []}
    await BodyLimit(app, max_bytes=2048)(scope, receive, send)
    assert consumed == 3
    assert sent[0]["status"] == 413
