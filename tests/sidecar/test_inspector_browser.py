"""The web inspector in a real browser: Debian's Chromium, headless, driven by Playwright,
against the sidecar served by uvicorn on loopback over a SQLite memory.

``make test`` installs Chromium where it can (Debian, as root); elsewhere these tests skip and
say why, unless ``SHORTTERM_TEST_REQUIRE_SERVICES=1`` makes the browser mandatory (CI).
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import shortterm
from shortterm import Message, Reply, ScopeKey
from shortterm.sidecar import SidecarSettings
from tests.sidecar.conftest import TOKEN
from tests.support import FakeClock

CHROMIUM = os.environ.get("SHORTTERM_TEST_CHROMIUM", "/usr/bin/chromium")
HOSTILE = '<img src=x onerror="window.pwned = 1"> **bold** </ol><script>window.pwned = 2</script>'

SHARED = ScopeKey.server("333", "222", "7")
PERSONAL = ScopeKey.user("111", "222", "7")


@pytest.fixture
def chromium() -> str:
    if not Path(CHROMIUM).exists():
        why = f"no Chromium at {CHROMIUM} (make test installs Debian's chromium when it can)"
        if os.environ.get("SHORTTERM_TEST_REQUIRE_SERVICES") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return CHROMIUM


@pytest.fixture
async def browser(chromium: str) -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as driver:
        launched = await driver.chromium.launch(
            executable_path=chromium, args=["--no-sandbox"], headless=True
        )
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def page(
    memory: shortterm.Memory, clock: FakeClock, browser: Any, base_url: str
) -> AsyncIterator[Any]:
    """A fresh tab, with the memory behind the served sidecar (``base_url``) seeded: two
    servers, an entry with a summary, categories and a hostile message, five minutes ago."""
    turn = memory.turn(
        user_id="111",
        channel_id="222",
        server_id="333",
        persona_id="7",
        server_name="Trail Club",
        channel_name="plans",
    )
    await turn.capture(
        history=[
            Message("user", "Hike on Saturday?", author_id="111", speaker="Ana"),
            Message("user", HOSTILE, author_id="112", speaker="Bo"),
        ],
        replies=[Reply("Yes! Ridge trail, 8am.", persona_id="7", persona_name="Tomo")],
    )
    other = memory.turn(user_id="111", channel_id="555", server_id="444", server_name="Bakers")
    await other.capture(
        history=[Message("user", "Sourdough tips?", author_id="111", speaker="Ana")],
        replies=[Reply("Feed the starter twice a day.")],
    )
    await memory.set_summary(SHARED, "Hike planned: Saturday, ridge trail, 8am.")
    await memory.set_categories(SHARED, {"plans": "Saturday hike", "gear": "rain jackets"})
    clock.advance(300)
    tab = await browser.new_page(viewport={"width": 1280, "height": 760})
    yield tab
    await tab.close()


def _watch(page: Any) -> list[str]:
    """Every console error and failed request of the page (a CSP violation is one)."""
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("requestfailed", lambda r: problems.append(f"{r.url}: {r.failure}"))
    return problems


async def test_browse_edit_and_clear(memory: shortterm.Memory, page: Any, base_url: str) -> None:
    from playwright.async_api import expect

    problems = _watch(page)
    await page.goto(f"{base_url}/ui")
    assert page.url == f"{base_url}/ui/"

    servers = page.locator("#servers button")
    await servers.first.wait_for()
    # Ordered by id, each with its count of shared (server-scope) entries.
    assert await servers.all_inner_texts() == ["Trail Club (333) · 1", "Bakers (444) · 1"]
    await page.click('#servers button[data-server="333"]')
    await page.click('#channels button[data-channel="222"][data-persona="7"]')

    await page.wait_for_selector("#entry-body:not([hidden])")
    assert await page.inner_text("#entry-title") == "#plans · persona 7"
    assert await page.inner_text("#entry-meta") == (
        "shared memory of server 333 · 1 turn since the last summary · updated 5 minutes ago"
    )
    assert await page.input_value("#summary") == "Hike planned: Saturday, ridge trail, 8am."
    assert await page.inner_text("#summary-age") == "written 5 minutes ago"
    assert await page.inner_text("#categories") == "gear\nrain jackets\nplans\nSaturday hike"
    messages = page.locator("#messages li")
    assert await messages.count() == 3
    first = await messages.nth(0).inner_text()
    assert first.startswith("Ana") and "5 minutes ago" in first and "Hike on Saturday?" in first
    # Hostile text is shown as text: no element was made of it and no script of it ran.
    assert await messages.nth(1).locator(".text").inner_text() == HOSTILE
    assert await page.locator("#messages img, #messages script").count() == 0
    assert await page.evaluate("window.pwned") is None
    shot = os.environ.get("SHORTTERM_UI_SCREENSHOT")
    if shot:
        await page.screenshot(path=shot)

    # An edit goes through the API and is durable when the page says so.
    await page.fill("#summary", "Hike moved to Sunday, same trail.")
    await page.click("#summary-form button")
    await expect(page.locator("#notice")).to_have_text("Summary saved.")
    row = await memory.store.load(SHARED)
    assert row is not None and row.summary == "Hike moved to Sunday, same trail."
    # The address keeps the view: a reload shows the same entry, edited.
    await page.reload()
    await page.wait_for_selector("#entry-body:not([hidden])")
    assert await page.input_value("#summary") == "Hike moved to Sunday, same trail."

    # Clearing asks first, then forgets the channel in both tiers and in every scope.
    asked: list[str] = []

    async def accept(dialog: Any) -> None:
        asked.append(dialog.message)
        await dialog.accept()

    page.once("dialog", accept)
    await page.click("#clear-channel")
    await expect(page.locator("#notice")).to_have_text(re.compile(r"^Cleared #plans"))
    assert asked == ["Forget everything remembered in #plans, for every user and persona?"]
    assert await memory.get(SHARED) is None and await memory.get(PERSONAL) is None
    assert await memory.store.load(SHARED) is None
    assert await page.inner_text("#channels") == "Nothing is remembered here right now."
    assert await page.locator('#servers button[data-server="333"]').count() == 0
    assert problems == []


async def test_a_declined_clear_keeps_everything(
    memory: shortterm.Memory, page: Any, base_url: str
) -> None:
    await page.goto(f"{base_url}/ui/#server=333&channel=222&persona=7")
    await page.wait_for_selector("#entry-body:not([hidden])")
    # Opened from the address, the server is labelled as the list labels it.
    assert (
        await page.inner_text("#channels-title") == "Channels · shared memory of Trail Club (333)"
    )
    page.once("dialog", lambda dialog: dialog.dismiss())
    await page.click("#clear-channel")  # returns once the dialog is answered
    assert await memory.get(SHARED) is not None
    await page.reload()  # what the sidecar holds, not what the page still shows
    await page.wait_for_selector("#entry-body:not([hidden])")
    assert await page.locator("#messages li").count() == 3


async def test_a_users_personal_memory(page: Any, base_url: str) -> None:
    await page.goto(f"{base_url}/ui/")
    await page.fill("#user-id", "111")
    await page.click("#user-form button")
    await page.wait_for_selector('#channels button[data-channel="555"]')
    assert "personal memory of user 111" in await page.inner_text("#channels-title")
    await page.click('#channels button[data-channel="222"][data-persona="7"]')
    await page.wait_for_selector("#entry-body:not([hidden])")
    assert (await page.inner_text("#entry-meta")).startswith("user 111 ·")


@pytest.mark.parametrize("sidecar_settings", [SidecarSettings(token=TOKEN)])
async def test_with_a_token_the_page_asks_for_it(page: Any, base_url: str) -> None:
    await page.goto(f"{base_url}/ui/")
    await page.wait_for_selector("#token-form:not([hidden])")
    assert "token" in await page.inner_text("#notice")
    assert await page.locator("#servers button").count() == 0
    await page.fill("#token", "wrong-token-0123456789")
    await page.click("#token-form button")
    await page.wait_for_selector("#token-form:not([hidden])")
    assert await page.locator("#servers button").count() == 0
    await page.fill("#token", TOKEN)
    await page.click("#token-form button")
    await page.wait_for_selector('#servers button[data-server="333"]')
    assert await page.is_hidden("#token-form")


async def test_a_user_opened_from_the_address(page: Any, base_url: str) -> None:
    await page.goto(f"{base_url}/ui/#user=111&channel=222&persona=7")
    await page.wait_for_selector("#entry-body:not([hidden])")
    assert (await page.inner_text("#entry-meta")).startswith("user 111 ·")
    assert await page.input_value("#user-id") == "111"


def test_the_documented_addresses_are_the_ones_the_page_reads() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "inspector.md").read_text("utf-8")
    for address in ("/ui/#server=333&channel=222&persona=7", "/ui/#user=111&channel=222"):
        assert address in doc
