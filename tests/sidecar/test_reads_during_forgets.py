"""Two real sidecar processes on one PostgreSQL + Redis: reads of entries on both replicas
while one of them clears an unrelated channel always find the entries. A replica that has
followed the clear before the forgetting replica moved the groups' marks sees its group
behind what it knows was forgotten; the read repairs the group and reads again instead of
answering 404 for an entry that exists (docs/design.md, "When Redis forgets, goes back in
time, or fills up")."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from tests.sidecar.live import sidecar_process

SERVER = "333"
KEPT = [f"kept-{i}" for i in range(24)]  # enough channels that every group holds some
CLEARS = 20
READERS = 6  # reads in flight at once, spread over both replicas


@pytest.fixture
def replicas(scale_urls: tuple[str, str]) -> Iterator[tuple[str, str]]:
    store, cache = scale_urls
    with sidecar_process(store, cache) as a, sidecar_process(store, cache) as b:
        yield a, b


async def _capture(client: httpx.AsyncClient, channel: str, text: str) -> None:
    start = await client.post(
        "/v1/turns", json={"user_id": "111", "channel_id": channel, "server_id": SERVER}
    )
    assert start.status_code == 201, start.text
    turn_id = start.json()["turn_id"]
    body = {
        "history": [{"role": "user", "content": text, "author_id": "111", "speaker": "Ana"}],
        "replies": [{"text": "noted"}],
    }
    assert (await client.post(f"/v1/turns/{turn_id}/capture", json=body)).status_code == 204


async def _read_until(
    clients: tuple[httpx.AsyncClient, ...], first: int, done: asyncio.Future[httpx.Response]
) -> list[tuple[str, int, int]]:
    """Read kept entries, alternating replicas, until ``done``: (channel, replica, status)
    of every read. Every third read lists the channel's entries (the owner read) instead:
    a list without the entry counts as a 404."""
    answers = []
    i = first
    while not done.done():
        channel, replica = KEPT[i % len(KEPT)], i % len(clients)
        if i % 3:
            got = await clients[replica].get(f"/v1/servers/{SERVER}/channels/{channel}/entry")
            status = got.status_code
        else:
            got = await clients[replica].get(f"/v1/servers/{SERVER}/entries?channel_id={channel}")
            status = got.status_code if got.status_code != 200 or got.json()["entries"] else 404
        answers.append((channel, replica, status))
        i += 1
    return answers


async def test_reads_of_other_channels_while_one_is_cleared_never_miss(
    replicas: tuple[str, str],
) -> None:
    async with (
        httpx.AsyncClient(base_url=replicas[0], timeout=30) as a,
        httpx.AsyncClient(base_url=replicas[1], timeout=30) as b,
    ):
        for channel in KEPT:
            await _capture(b, channel, f"kept in {channel}")
        during, wrong = 0, []
        for round_ in range(CLEARS):
            doomed = f"doomed-{round_}"
            await _capture(b, doomed, "soon forgotten")
            clearing = asyncio.ensure_future(b.delete(f"/v1/channels/{doomed}"))
            reads = await asyncio.gather(
                *(_read_until((a, b), round_ + i, clearing) for i in range(READERS))
            )
            assert (await clearing).status_code == 200
            for channel, replica, status in (r for batch in reads for r in batch):
                during += 1
                if status != 200:
                    wrong.append((round_, channel, "ab"[replica], status))
        print(f"reads during {CLEARS} clears on two replicas: {during}, wrong: {len(wrong)}")
        assert not wrong, wrong
        for client in (a, b):  # and once the clears returned, every kept entry is there
            for channel in KEPT:
                answer = await client.get(f"/v1/servers/{SERVER}/channels/{channel}/entry")
                assert answer.status_code == 200, (channel, answer.text)
