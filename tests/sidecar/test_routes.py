"""Entries, settings and deletion routes against what the library says directly."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

import shortterm
from shortterm import Message, Reply, ScopeKey
from tests.support import FakeClock


async def remember(
    memory: shortterm.Memory, user: str, channel: str, persona: str | None = None, text: str = "hi"
) -> None:
    turn = memory.turn(user_id=user, channel_id=channel, server_id="333", persona_id=persona)
    await turn.capture(
        history=[Message("user", text, author_id=user)], replies=[Reply(f"re: {text}")]
    )


async def test_list_entries_by_owner_channel_and_persona(
    asgi: httpx.AsyncClient, memory: shortterm.Memory
) -> None:
    await remember(memory, "111", "a")
    await remember(memory, "111", "b", persona="7")
    await remember(memory, "112", "b", persona="8")

    def keys(response: httpx.Response) -> list[tuple[str, str | None]]:
        assert response.status_code == 200, response.text
        return [
            (e["key"]["channel_id"], e["key"]["persona_id"]) for e in response.json()["entries"]
        ]

    assert keys(await asgi.get("/v1/servers/333/entries")) == [("a", None), ("b", "7"), ("b", "8")]
    assert keys(await asgi.get("/v1/servers/333/entries?channel_id=b")) == [("b", "7"), ("b", "8")]
    assert keys(await asgi.get("/v1/servers/333/entries?persona_id=8")) == [("b", "8")]
    assert keys(await asgi.get("/v1/users/111/entries")) == [("a", None), ("b", "7")]
    assert keys(await asgi.get("/v1/users/111/entries?channel_id=b&persona_id=7")) == [("b", "7")]
    assert keys(await asgi.get("/v1/users/999/entries")) == []


async def test_list_servers_pages_with_next_after(
    http: httpx.AsyncClient, memory: shortterm.Memory
) -> None:
    for n in (3, 1, 5, 2, 4):
        turn = memory.turn(
            user_id="111", channel_id=f"c{n}", server_id=f"s{n}", server_name=f"Guild {n}"
        )
        await turn.capture(history=[Message("user", "hi", author_id="111")], replies=[Reply("yo")])
    dm = memory.turn(user_id="111", channel_id="dm")  # a DM: personal memory only
    await dm.capture(history=[Message("user", "hi", author_id="111")], replies=[Reply("yo")])

    pages, after = [], None
    while True:
        query = {"limit": 2} if after is None else {"limit": 2, "after": after}
        response = await http.get("/v1/servers", params=query)
        assert response.status_code == 200, response.text
        body = response.json()
        pages.append([s["server_id"] for s in body["servers"]])
        after = body["next_after"]
        if after is None:
            break
        assert after == body["servers"][-1]["server_id"]
    assert pages == [["s1", "s2"], ["s3", "s4"], ["s5"]]

    everything = (await http.get("/v1/servers")).json()
    assert everything["next_after"] is None  # 5 servers, limit 100: not a full page
    expected = [
        {
            "server_id": s.server_id,
            "server_name": s.server_name,
            "entries": s.entries,
            "updated_at": s.updated_at,
        }
        for s in await memory.servers()
    ]
    assert everything["servers"] == expected
    assert expected[0] == {
        "server_id": "s1",
        "server_name": "Guild 1",
        "entries": 1,
        "updated_at": expected[0]["updated_at"],
    }
    # A full last page still points on; the next one is empty and ends the walk.
    full = (await http.get("/v1/servers?limit=5")).json()
    assert full["next_after"] == "s5"
    assert (await http.get("/v1/servers?after=s5&limit=5")).json() == {
        "servers": [],
        "next_after": None,
    }


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=ten", "limit"),
        ("after=", "after"),
        (f"after={'9' * 257}", "after"),
        ("cursor=s1", "cursor"),
        ("page=2&limit=5", "page"),
        ("limit=1&limit=2", "limit"),
    ],
)
async def test_list_servers_refuses_bad_queries(
    asgi: httpx.AsyncClient, query: str, field: str
) -> None:
    response = await asgi.get(f"/v1/servers?{query}")
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "invalid_input"
    assert response.json()["field"] == field
    assert (await asgi.get("/v1/servers?limit=1000&after=s1")).status_code == 200


async def test_get_one_entry_mirrors_memory_get(
    asgi: httpx.AsyncClient, memory: shortterm.Memory
) -> None:
    await remember(memory, "111", "a", persona="0", text="persona zero is a real persona")
    body = (await asgi.get("/v1/users/111/channels/a/entry?persona_id=0")).json()
    entry = await memory.get(ScopeKey.user("111", "a", "0"))
    assert entry is not None
    assert body["key"] == {"kind": "user", "owner_id": "111", "channel_id": "a", "persona_id": "0"}
    assert [m["content"] for m in body["messages"]] == [m.content for m in entry.messages]
    assert body["turns_since_refresh"] == entry.turns_since_refresh
    assert body["updated_at"] == entry.updated_at
    # Without persona_id: the entry without a persona, which does not exist.
    assert (await asgi.get("/v1/users/111/channels/a/entry")).status_code == 404


async def test_edit_summary_and_categories(
    asgi: httpx.AsyncClient, memory: shortterm.Memory
) -> None:
    url = "/v1/servers/333/channels/a/entry"
    put = await asgi.put(f"{url}/summary", json={"summary": "  Hike on Saturday.  "})
    assert put.status_code == 200
    assert put.json()["entry"]["summary"] == "Hike on Saturday."
    cats = await asgi.put(f"{url}/categories", json={"categories": {"mood": "calm", "x": " "}})
    assert cats.json()["entry"]["categories"] == {"mood": "calm"}
    entry = await memory.get(ScopeKey.server("333", "a"))
    assert entry is not None
    assert entry.summary == "Hike on Saturday."
    assert dict(entry.categories) == {"mood": "calm"}

    await asgi.put(f"{url}/categories", json={"categories": {}})
    cleared = await asgi.put(f"{url}/summary", json={"summary": None})
    assert cleared.json() == {"entry": None}
    assert (await asgi.get(url)).status_code == 404


async def test_server_settings_round_trip(
    asgi: httpx.AsyncClient, memory: shortterm.Memory
) -> None:
    defaults = (await asgi.get("/v1/servers/333/settings")).json()
    assert defaults["refresh_cadence"] == 5
    assert defaults["categories"] == []
    wanted: dict[str, Any] = {
        "refresh_cadence": 3,
        "render_mode": "supersede",
        "categories": [{"label": "Mood", "description": "How the room feels"}],
        "private_channel_ids": ["9", "4"],
        "stm_enabled": False,
    }
    put = await asgi.put("/v1/servers/333/settings", json=wanted)
    assert put.status_code == 200
    assert put.json()["private_channel_ids"] == ["4", "9"]
    got = (await asgi.get("/v1/servers/333/settings")).json()
    assert got == put.json()
    stored = await memory.server_settings("333")
    assert stored.refresh_cadence == 3
    assert stored.categories == (shortterm.Category("Mood", "How the room feels"),)
    assert stored.private_channel_ids == frozenset({"4", "9"})
    assert not stored.stm_enabled
    # A turn in that server now gets no tool.
    turn = await asgi.post(
        "/v1/turns", json={"user_id": "1", "channel_id": "2", "server_id": "333"}
    )
    assert turn.json()["tools"] == []


async def test_user_settings_round_trip_and_full_privacy_forgets(
    asgi: httpx.AsyncClient, memory: shortterm.Memory
) -> None:
    await remember(memory, "111", "a")
    assert (await asgi.get("/v1/users/111/settings")).json() == {
        "privacy": "none",
        "cross_server_opt_in": False,
    }
    put = await asgi.put("/v1/users/111/settings", json={"privacy": "full"})
    assert put.json() == {"privacy": "full", "cross_server_opt_in": False}
    assert (await memory.user_settings("111")).privacy is shortterm.Privacy.FULL
    assert await memory.get(ScopeKey.user("111", "a")) is None


async def test_deletes(asgi: httpx.AsyncClient, memory: shortterm.Memory) -> None:
    await remember(memory, "111", "a")
    await remember(memory, "111", "b", persona="7")
    await remember(memory, "112", "c")

    gone = await asgi.delete("/v1/servers/333/channels/b?persona_id=7")
    assert gone.json()["deleted"] >= 1
    assert await memory.get(ScopeKey.server("333", "b", "7")) is None
    assert await memory.get(ScopeKey.user("111", "b", "7")) is not None

    assert (await asgi.delete("/v1/channels/a")).json()["deleted"] >= 2
    assert await memory.get(ScopeKey.user("111", "a")) is None

    assert (await asgi.delete("/v1/users/112")).json()["deleted"] >= 1
    assert await memory.get(ScopeKey.user("112", "c")) is None

    assert (await asgi.delete("/v1/channels/never-used")).json() == {"deleted": 0}


async def test_janitor_and_sweep(
    asgi: httpx.AsyncClient, memory: shortterm.Memory, clock: FakeClock
) -> None:
    await remember(memory, "111", "a")
    assert (await asgi.post("/v1/janitor")).json() == {"deleted": 0}
    clock.advance(1)
    assert (await asgi.post("/v1/janitor?retention_days=0")).json()["deleted"] == 2
    assert (await asgi.post("/v1/sweep")).json() == {"deleted": 0}
    clock.advance(13 * 3600)  # past the messages' TTL
    assert (await asgi.post("/v1/sweep")).json() == {"deleted": 2}
