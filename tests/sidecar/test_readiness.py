"""/readyz: open like /healthz, its reasons shown only with the token, one probe per second.

The backends' real outages are in tests/reliability/test_readiness.py; here the store's probe
read is replaced, to count it and to make it fail on demand.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

import shortterm
from shortterm.sidecar import SidecarSettings, create_app
from tests.sidecar.conftest import TOKEN


class Journal:
    """Stands in for the store's journal-head read: counts calls, fails while ``down``."""

    def __init__(self) -> None:
        self.reads = 0
        self.down = False

    async def head(self) -> int:
        self.reads += 1
        if self.down:
            raise shortterm.StoreUnavailable("PostgreSQL journal read failed: db.internal:5432")
        return 0


@pytest.fixture
def journal(memory: shortterm.Memory, monkeypatch: pytest.MonkeyPatch) -> Journal:
    stand_in = Journal()
    monkeypatch.setattr(memory.store, "journal_head", stand_in.head)
    return stand_in


async def get_ready(app: object, headers: dict[str, str] | None = None) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        return await client.get("/readyz", headers=headers)


async def test_readyz_needs_no_token_and_shows_reasons_only_with_it(
    memory: shortterm.Memory, journal: Journal
) -> None:
    app = create_app(memory, SidecarSettings(token=TOKEN))
    ready = await get_ready(app)
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "store": "ok", "cache": "ok"}

    journal.down = True
    await asyncio.sleep(1.1)  # past the one second a verdict is kept
    hidden = await get_ready(app)
    assert hidden.status_code == 503
    assert hidden.json()["store"] == "unavailable (send the token for the reason)"
    assert "db.internal" not in hidden.text
    shown = await get_ready(app, {"Authorization": f"Bearer {TOKEN}"})
    assert shown.status_code == 503
    assert shown.json() == {
        "status": "not_ready",
        "store": "the store is unavailable: PostgreSQL journal read failed: db.internal:5432",
        "cache": "ok",
    }


async def test_a_flood_of_probes_costs_one_read(memory: shortterm.Memory, journal: Journal) -> None:
    app = create_app(memory, SidecarSettings())
    answers = await asyncio.gather(*(get_ready(app) for _ in range(50)))
    assert {a.status_code for a in answers} == {200}
    assert journal.reads == 1
