"""What another web site can make a browser send is refused: cross-site requests (a form that
posts to the janitor, a script that reads memory) and, without a token, DNS rebinding."""

from __future__ import annotations

import httpx
import pytest

import shortterm
from shortterm import Message, Reply, ScopeKey
from shortterm.sidecar import SidecarSettings, create_app
from tests.sidecar.conftest import TOKEN
from tests.sidecar.live import serving

KEY = ScopeKey.server("333", "222")


async def _remember(memory: shortterm.Memory) -> None:
    turn = memory.turn(user_id="111", channel_id="222", server_id="333")
    await turn.capture(history=[Message("user", "hello", author_id="111")], replies=[Reply("hi")])
    await memory.set_summary(KEY, "kept")


@pytest.mark.parametrize(
    "headers",
    [
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Origin": "http://127.0.0.1:1"},  # another port is another origin
    ],
)
async def test_a_cross_site_form_cannot_run_the_janitor(
    memory: shortterm.Memory, http: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    await _remember(memory)
    refused = await http.post(
        "/v1/janitor?retention_days=0",
        headers={"Content-Type": "application/x-www-form-urlencoded", **headers},
    )
    assert refused.status_code == 403
    assert refused.json()["code"] == "forbidden"
    assert (await memory.store.load(KEY)) is not None
    assert (await http.get("/v1/servers/333/entries", headers=headers)).status_code == 403


async def test_the_page_of_this_origin_and_plain_clients_are_served(
    memory: shortterm.Memory, http: httpx.AsyncClient, base_url: str
) -> None:
    await _remember(memory)
    same_origin = {"Origin": base_url, "Sec-Fetch-Site": "same-origin"}
    assert (await http.get("/v1/servers/333/entries", headers=same_origin)).status_code == 200
    assert (await http.get("/v1/servers/333/entries")).status_code == 200  # a bot: no headers
    typed = {"Sec-Fetch-Site": "none"}  # the operator typed the address
    assert (await http.get("/v1/servers/333/entries", headers=typed)).status_code == 200


async def test_a_link_from_another_site_still_opens_the_inspector(
    http: httpx.AsyncClient,
) -> None:
    linked = await http.get("/ui/", headers={"Sec-Fetch-Site": "cross-site"})
    assert linked.status_code == 200


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8765", "127.0.0.1.evil.example"])
async def test_without_a_token_only_loopback_hosts_are_served(
    memory: shortterm.Memory, http: httpx.AsyncClient, host: str
) -> None:
    await _remember(memory)
    rebound = await http.get("/v1/servers/333/entries", headers={"Host": host})
    assert rebound.status_code == 403
    assert "loopback Host" in rebound.json()["detail"]


@pytest.mark.parametrize("host", ["localhost:8765", "127.0.0.1", "[::1]:8765", "127.0.0.2"])
async def test_loopback_host_names_are_served(http: httpx.AsyncClient, host: str) -> None:
    assert (await http.get("/v1/users/111/entries", headers={"Host": host})).status_code == 200


async def test_with_a_token_any_host_is_served(memory: shortterm.Memory) -> None:
    # Behind a reverse proxy the Host is the public name; the token guards the data.
    auth = {"Authorization": f"Bearer {TOKEN}", "Host": "memory.example.org"}
    async with (
        serving(create_app(memory, SidecarSettings(token=TOKEN))) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        assert (await client.get("/v1/users/111/entries", headers=auth)).status_code == 200
        cross = {**auth, "Origin": "https://evil.example"}
        assert (await client.get("/v1/users/111/entries", headers=cross)).status_code == 403
