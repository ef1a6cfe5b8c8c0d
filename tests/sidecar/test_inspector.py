"""The inspector's files: where they are served, with which headers, and that they hold no
memory (so serving them without a token gives nothing away)."""

from __future__ import annotations

import re

import httpx
import pytest

import shortterm
from shortterm import Message, Reply
from shortterm.sidecar import SidecarSettings, create_app
from tests.sidecar.conftest import TOKEN
from tests.sidecar.live import serving

ASSETS = {
    "/ui/": "text/html; charset=utf-8",
    "/ui/app.js": "text/javascript; charset=utf-8",
    "/ui/app.css": "text/css; charset=utf-8",
    "/ui/favicon.svg": "image/svg+xml",
}


async def test_bare_ui_redirects_to_the_page(http: httpx.AsyncClient) -> None:
    response = await http.get("/ui")
    assert response.status_code == 308
    assert response.headers["location"].endswith("/ui/")


@pytest.mark.parametrize(("path", "media_type"), ASSETS.items())
async def test_assets_are_served_with_a_strict_policy(
    http: httpx.AsyncClient, path: str, media_type: str
) -> None:
    response = await http.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"] == media_type
    policy = response.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src 'self'" in policy
    assert "frame-ancestors 'none'" in policy and "unsafe" not in policy
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["x-frame-options"] == "DENY"


async def test_the_page_has_no_inline_script_or_style(http: httpx.AsyncClient) -> None:
    page = (await http.get("/ui/")).text
    # Every <script> loads a file of this origin; the policy would block anything inline.
    assert re.findall(r"<script[^>]*>", page) == ['<script type="module" src="app.js">']
    assert "<style" not in page and " style=" not in page
    assert not re.search(r"\son[a-z]+\s*=", page, re.IGNORECASE)  # no event-handler attribute


async def test_the_script_never_writes_markup(http: httpx.AsyncClient) -> None:
    script = (await http.get("/ui/app.js")).text
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script


async def test_with_a_token_the_files_are_open_and_the_data_is_not(
    memory: shortterm.Memory,
) -> None:
    turn = memory.turn(user_id="111", channel_id="222", server_id="333")
    await turn.capture(
        history=[Message("user", "a secret plan", author_id="111")], replies=[Reply("noted")]
    )
    async with (
        serving(create_app(memory, SidecarSettings(token=TOKEN))) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        for path in ASSETS:
            served = await client.get(path)
            assert served.status_code == 200
            assert "secret" not in served.text
        refused = await client.get("/v1/servers/333/entries")
        assert refused.status_code == 401
        allowed = await client.get(
            "/v1/servers/333/entries", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert allowed.json()["entries"][0]["messages"][0]["content"] == "a secret plan"


async def test_other_ui_paths_are_not_open(memory: shortterm.Memory) -> None:
    async with (
        serving(create_app(memory, SidecarSettings(token=TOKEN))) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        for path in ("/ui/../v1/servers/333/entries", "/ui/index.html", "/ui/app.js/x"):
            assert (await client.get(path)).status_code == 401, path


async def test_the_inspector_stays_out_of_the_api_document(http: httpx.AsyncClient) -> None:
    paths = (await http.get("/openapi.json")).json()["paths"]
    assert not [p for p in paths if p.startswith("/ui")]


async def test_entry_listings_carry_the_memorys_clock(
    memory: shortterm.Memory, http: httpx.AsyncClient
) -> None:
    listed = (await http.get("/v1/users/111/entries")).json()
    assert listed == {"entries": [], "now": memory.clock()}
