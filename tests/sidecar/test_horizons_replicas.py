"""Forget horizons across two real sidecar processes on one PostgreSQL + Redis (a node, and a
Redis Cluster): a clear, a purge or a FULL choice made through one replica holds on the other,
whose next capture carries the platform's history again (the platform keeps it) and keeps none
of what the forget covered, and every message written after it. The purge takes the bot's
answers to the purged user and keeps its answers to others. Then the replicas started with
``--message-ids discord`` (and ``SHORTTERM_MESSAGE_IDS``) place a message without ``at`` by
its snowflake, and an ``at`` too far ahead is refused, naming it."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from tests.sidecar.live import sidecar_process

G = "333"
DISCORD_EPOCH_MS = 1_420_070_400_000


def snowflake(at: float) -> str:
    """A Discord id made at ``at`` (epoch seconds)."""
    return str((int(at * 1000) - DISCORD_EPOCH_MS) << 22)


class Platform:
    """A channel as the chat platform keeps it: every message ever written, with its time (the
    real clock, the replicas' own). The bot passes the newest ten to every capture."""

    def __init__(self, channel: str, *, timed: bool = True) -> None:
        self.channel = channel
        self.timed = timed  # False: no `at`, a Discord id instead
        self.said: list[dict[str, Any]] = []
        self._last = 0.0

    def tick(self) -> float:
        """The platform's clock: now, and always later than the last tick."""
        self._last = max(self._last + 0.01, time.time())
        return self._last

    def _when(self) -> dict[str, Any]:
        at = self.tick()
        return {"at": at} if self.timed else {"message_id": snowflake(at)}

    def say(self, who: str, text: str) -> None:
        message = {"role": "user", "content": text, "author_id": who, "speaker": who}
        self.said.append({**message, **self._when()})

    async def turn(self, replica: httpx.AsyncClient, who: str, reply: str) -> None:
        """A turn of ``who`` through ``replica``: it captures the platform's recent history."""
        start = {"user_id": who, "channel_id": self.channel, "server_id": G}
        started = await replica.post("/v1/turns", json=start)
        assert started.status_code == 201, started.text
        body = {"history": self.said[-10:], "replies": [{"text": reply, "persona_name": "Tomo"}]}
        captured = await replica.post(f"/v1/turns/{started.json()['turn_id']}/capture", json=body)
        assert captured.status_code == 204, captured.text
        answer = {"role": "assistant", "content": reply, "speaker": "Tomo"}
        self.said.append({**answer, **self._when()})

    async def shared(self, replica: httpx.AsyncClient) -> list[str]:
        return await _shown(replica, f"/v1/servers/{G}/channels/{self.channel}/entry")

    async def personal(self, replica: httpx.AsyncClient, user: str) -> list[str]:
        return await _shown(replica, f"/v1/users/{user}/channels/{self.channel}/entry")


async def _shown(replica: httpx.AsyncClient, path: str) -> list[str]:
    got = await replica.get(path)
    if got.status_code == 404:
        return []
    assert got.status_code == 200, got.text
    return [m["content"] for m in got.json()["messages"]]


@pytest.fixture(params=["redis", "redis-cluster"])
def shared_urls(request: pytest.FixtureRequest) -> tuple[str, str]:
    fixture = "scale_urls" if request.param == "redis" else "cluster_scale_urls"
    store, cache = request.getfixturevalue(fixture)
    return str(store), str(cache)


@pytest.fixture
def replicas(shared_urls: tuple[str, str]) -> Iterator[tuple[str, str]]:
    store, cache = shared_urls
    with sidecar_process(store, cache) as a, sidecar_process(store, cache) as b:
        yield a, b


@pytest.fixture
async def clients(replicas: tuple[str, str]) -> AsyncIterator[tuple[httpx.AsyncClient, ...]]:
    async with (
        httpx.AsyncClient(base_url=replicas[0], timeout=20) as a,
        httpx.AsyncClient(base_url=replicas[1], timeout=20) as b,
    ):
        yield a, b


async def test_a_channel_cleared_on_one_replica_stays_clear_on_the_other(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    a, b = clients
    platform = Platform("plans")
    platform.say("ana", "old secret")
    await platform.turn(b, "ana", "old answer")
    assert await platform.shared(a) == ["old secret", "old answer"]
    command = platform.tick()  # the platform's time of the /forget interaction
    platform.say("ana", "sent while the command travelled")
    cleared = await a.delete(f"/v1/channels/{platform.channel}", params={"at": command})
    assert cleared.status_code == 200 and cleared.json()["deleted"] >= 2, cleared.text
    platform.say("ben", "new question")
    await platform.turn(b, "ben", "new answer")
    after = ["sent while the command travelled", "new question", "new answer"]
    for replica in (a, b):
        assert await platform.shared(replica) == after
        assert await platform.personal(replica, "ana") == []
    # And again, now that the other replica wrote since: the old messages never come back.
    platform.say("ana", "later")
    await platform.turn(a, "ana", "later answer")
    assert await platform.shared(b) == [*after, "later", "later answer"]


async def test_a_purge_on_one_replica_takes_her_words_and_the_answers_to_her_on_the_other(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    a, b = clients
    platform = Platform("general")
    platform.say("dana", "my address is 12 Elm St")
    await platform.turn(b, "dana", "noted, 12 Elm St")
    platform.say("ana", "hello")
    await platform.turn(b, "ana", "hi Ana")
    purged = await a.delete("/v1/users/dana", params={"at": platform.tick()})
    assert purged.status_code == 200, purged.text
    platform.say("ben", "what did dana say?")
    await platform.turn(b, "ben", "nothing I keep")
    for replica in (a, b):
        kept = await platform.shared(replica)
        # Her words, and the bot's answer that retold them, stay out; the answer to Ana stays.
        assert kept == ["hello", "hi Ana", "what did dana say?", "nothing I keep"]
        assert await platform.personal(replica, "dana") == []
        assert await platform.personal(replica, "ana") == ["hello", "hi Ana"]
    # She may speak again: what she writes after the purge is new.
    platform.say("dana", "I am back")
    await platform.turn(b, "dana", "welcome back")
    assert (await platform.shared(a))[-2:] == ["I am back", "welcome back"]
    assert await platform.personal(a, "dana") == ["I am back", "welcome back"]


async def test_a_full_choice_on_one_replica_keeps_her_past_out_on_the_other(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    a, b = clients
    platform = Platform("plans")
    platform.say("ana", "ana's words")
    platform.say("erin", "before the choice")
    await platform.turn(b, "erin", "answered before")
    # No `at`: the horizon is the replica's clock when the choice arrives.
    full = await a.put("/v1/users/erin/settings", json={"privacy": "full"})
    assert full.status_code == 200 and full.json()["privacy"] == "full", full.text
    lifted = await a.put("/v1/users/erin/settings", json={"privacy": "none"})
    assert lifted.status_code == 200, lifted.text
    platform.say("erin", "after the choice")
    await platform.turn(b, "erin", "answered after")
    for replica in (a, b):
        assert await platform.shared(replica) == [
            "ana's words",
            "after the choice",
            "answered after",
        ]
        assert await platform.personal(replica, "erin") == ["after the choice", "answered after"]


@pytest.fixture
def discord_replicas(scale_urls: tuple[str, str]) -> Iterator[tuple[str, str]]:
    """Two replicas told the platform's ids are Discord's: one by flag, one by environment."""
    store, cache = scale_urls
    flag = ("--message-ids", "discord")
    env = {"SHORTTERM_MESSAGE_IDS": "discord"}
    with sidecar_process(store, cache, args=flag) as a, sidecar_process(store, cache, env=env) as b:
        yield a, b


async def test_with_discord_ids_a_message_without_at_is_placed_by_its_snowflake(
    discord_replicas: tuple[str, str],
) -> None:
    async with (
        httpx.AsyncClient(base_url=discord_replicas[0], timeout=20) as a,
        httpx.AsyncClient(base_url=discord_replicas[1], timeout=20) as b,
    ):
        for n, (writer, reader) in enumerate(((a, b), (b, a))):
            platform = Platform(f"ids-{n}", timed=False)
            platform.say("ana", "old secret")
            await platform.turn(writer, "ana", "old answer")
            cleared = await reader.delete(f"/v1/channels/{platform.channel}")
            assert cleared.status_code == 200, cleared.text
            platform.say("ben", "new question")
            platform.said.append({"role": "user", "content": "no id, no time", "author_id": "ben"})
            await platform.turn(writer, "ben", "new answer")
            # Placed by its id: new, kept; a message with neither is taken as old.
            assert await platform.shared(reader) == ["new question", "new answer"]
            stored = await reader.get(f"/v1/servers/{G}/channels/{platform.channel}/entry")
            (asked,) = [m for m in platform.said if m["content"] == "new question"]
            made = ((int(asked["message_id"]) >> 22) + DISCORD_EPOCH_MS) / 1000
            assert stored.json()["messages"][0]["at"] == pytest.approx(made, abs=0.001)


async def test_an_at_far_ahead_is_refused_naming_it_and_forgets_nothing(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    a, b = clients
    platform = Platform("plans")
    ahead = time.time() + 400
    refused = [
        await a.delete(f"/v1/channels/{platform.channel}", params={"at": ahead}),
        await a.delete("/v1/users/ana", params={"at": ahead}),
        await a.put("/v1/users/ana/settings", params={"at": ahead}, json={"privacy": "full"}),
    ]
    for answer in refused:
        assert answer.status_code == 422, answer.text
        problem = answer.json()
        assert problem["code"] == "invalid_input" and problem["field"] == "at", problem
        # About 400 s: the seconds the requests took on a busy machine come off it.
        assert re.search(
            r"not (3\d\d|400) s ahead of this memory's clock \(at most 300 s\)", problem["detail"]
        ), problem
    for bad in ("nan", "inf", "-1", "soon"):
        answer = await b.delete(f"/v1/channels/{platform.channel}", params={"at": bad})
        assert answer.status_code == 422 and answer.json()["field"] == "at", answer.text
    # Nothing was recorded: what the channel says next is captured.
    platform.say("ana", "still here")
    await platform.turn(b, "ana", "hello again")
    assert await platform.shared(a) == ["still here", "hello again"]
    settings = await a.get("/v1/users/ana/settings")
    assert settings.json()["privacy"] == "none"
