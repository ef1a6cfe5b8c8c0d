"""Forgets and privacy narrowings on a shared (Redis) hot tier, at its edges, with real
processes on PostgreSQL and Redis.

- **Redis loses its data** (a ``FLUSHDB``, a restart without persistence) between a forget
  and the Redis write of a capture that began before it: the write must not land in a Redis
  that has forgotten the tombstones. A private ``redis-server`` on a port of the test's own;
  the shared one is never flushed.
- **A forget whose COMMIT answer is lost** (or whose connection drops mid-transaction): the
  caller is told the forget may have been saved, and the forgetting process settles it before
  it serves again, so a capture in flight that lands after the eviction does not stay.
- **A privacy narrowing made in one process** (cross-server opt-out, PARTIAL, a channel made
  private) holds for another process's very next ``context()``.

Each test prints its round counts; docs/reliability.md has the figures.
"""

from __future__ import annotations

import asyncio
import random
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

import pytest
import redis.asyncio as aioredis

from tests.reliability.conftest import through
from tests.reliability.proxy import Mode, Proxy
from tests.support import T0, with_query
from tests.workers import Worker

G = "g1"
HOLD_WAIT_S = 30.0
PG_BOUNDS = "operation_timeout_s=2&pool_timeout_s=1&pool_reconnect_timeout_s=0.5"


async def _start(store: str, cache: str, marks: Path, notify_delay_s: float = 0.0) -> Worker:
    return await Worker.start(
        "tests.reliability.redis_edge_worker", store, cache, str(marks), str(notify_delay_s)
    )


async def _touched(marks: Path, token: str) -> None:
    """Wait until the held capture ``token`` has done its durable touch."""
    deadline = time.monotonic() + HOLD_WAIT_S
    while not (marks / token).exists():
        assert time.monotonic() < deadline, f"capture {token} never reached its hot write"
        await asyncio.sleep(0.01)


def _release(marks: Path, token: str) -> None:
    (marks / f"{token}.go").touch()


class PrivateRedis:
    """A ``redis-server`` of this test's own, without persistence: flushing or restarting it
    loses everything, as a real restart or failover to an empty replica would."""

    def __init__(self, port: int, workdir: Path) -> None:
        self.port = port
        self.workdir = workdir
        self.url = f"redis://127.0.0.1:{port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        self.proc = subprocess.Popen(  # noqa: ASYNC220 - it returns at once; we poll below
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while True:
            client = aioredis.Redis.from_url(self.url)
            try:
                if await client.ping():
                    return
            except OSError:
                pass
            except aioredis.ConnectionError:
                pass
            finally:
                await client.aclose()
            assert time.monotonic() < deadline, "the private redis-server did not start"
            await asyncio.sleep(0.02)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()  # no shutdown save: the data is gone
            self.proc.wait(timeout=20)
            self.proc = None

    async def restart(self, *, from_snapshot: bool = False) -> None:
        """Kill and start again: empty, or loading the last :meth:`save`."""
        self.stop()
        if not from_snapshot:
            (self.workdir / "dump.rdb").unlink(missing_ok=True)
        await self.start()

    async def save(self) -> None:
        """A snapshot (``dump.rdb``) of what the server holds now."""
        client = aioredis.Redis.from_url(self.url)
        try:
            await client.save()
        finally:
            await client.aclose()

    async def flush(self) -> None:
        client = aioredis.Redis.from_url(self.url)
        try:
            await client.flushdb()
        finally:
            await client.aclose()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def private_redis(tmp_path: Path) -> AsyncIterator[PrivateRedis]:
    server = PrivateRedis(_free_port(), tmp_path)
    await server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def marks(tmp_path: Path) -> Path:
    path = tmp_path / "marks"
    path.mkdir()
    return path


# -- A. Redis loses its data -------------------------------------------------------------

LOSS_ROUNDS = 12
SNAPSHOT_ROUNDS = 6


async def test_a_capture_held_across_a_loss_of_redis_data_never_lands(
    pg_url: str, schema: str, private_redis: PrivateRedis, marks: Path
) -> None:
    """Each round: a capture does its durable touch and is held before its Redis write; the
    other process clears the channel or purges the user (tombstones written, entries
    evicted); Redis loses everything (FLUSHDB, or a restart without persistence); then, at
    random, nobody or the other process writes first (which resets the groups, from the
    journal's end after the loss); then the held write is let go. Drawn at random per round
    (seeded): the forget, the loss, and who writes first."""
    await _held_across(pg_url, schema, private_redis, marks, ("flushdb", "restart"), LOSS_ROUNDS)


async def test_a_capture_held_across_a_restart_from_an_older_snapshot_never_lands(
    pg_url: str, schema: str, private_redis: PrivateRedis, marks: Path
) -> None:
    """The same rounds, but Redis goes back in time instead of losing everything: a snapshot
    (``SAVE``) is taken after the capture's durable touch and before the forget, and Redis
    restarts from it, so the forget's tombstones and evictions are gone while its marks say
    so: the groups are repaired from the journal before anything is served or written."""
    await _held_across(pg_url, schema, private_redis, marks, ("snapshot",), SNAPSHOT_ROUNDS)


async def _held_across(
    pg_url: str,
    schema: str,
    private_redis: PrivateRedis,
    marks: Path,
    losses: tuple[str, ...],
    rounds: int,
) -> None:
    store = with_query(pg_url, schema=schema)
    cache = with_query(private_redis.url, prefix=quote("stm-edge:"))
    bot, admin = await asyncio.gather(_start(store, cache, marks), _start(store, cache, marks))
    rng = random.Random(3)
    survived: list[str] = []
    try:
        for i in range(rounds):
            forget = rng.choice(("clear", "purge"))
            loss = rng.choice(losses)
            first = rng.randrange(3)  # other captures landing between the loss and ours
            token, channel = f"HELD-{i}-x", f"c{i}"
            await bot.send(
                "capture", user="ana", channel=channel, server=G, text=token, token=token,
                hold=True,
            )  # fmt: skip
            await _touched(marks, token)
            if loss == "snapshot":
                await private_redis.save()
            if forget == "clear":
                assert await admin.call("clear_channel", channel=channel) == "done"
            else:
                assert await admin.call("clear_user", user="ana") == "done"
            if loss == "flushdb":
                await private_redis.flush()
            else:
                await private_redis.restart(from_snapshot=loss == "snapshot")
            for k in range(first):
                await admin.call("capture", user="ben", channel=f"b{i}", server=G, text=f"B{k}")
            _release(marks, token)
            await bot.reply()
            views = [
                await admin.call("get", channel=channel),
                await bot.call("get", channel=channel),
                await admin.call("get", kind="user", user="ana", channel=channel),
            ]
            if any(token in view for view in views):
                survived.append(f"{forget}/{loss}/{first}")
        # The tier works again after the loss: a new capture lands and every process sees it.
        await bot.call("capture", user="ana", channel="after", server=G, text="AFTER-LOSS")
        assert "AFTER-LOSS" in await admin.call("get", channel="after")
        await admin.call("capture", user="ben", channel="after2", server=G, text="AFTER-2")
        assert "AFTER-2" in await bot.call("get", channel="after2")
    finally:
        await asyncio.gather(bot.stop(), admin.stop())
    print(f"\n{len(survived)}/{rounds} captures held across a {losses} came back: {survived}")
    assert survived == []


async def test_a_reset_reads_the_journal_after_its_claim_so_a_loss_between_them_starts_again(
    private_redis: PrivateRedis,
) -> None:
    """Resetting a group without a mark: claim, read the journal's end, set. A loss of data
    just before the journal's end is read takes the claim with it, so the mark set is a
    journal end read after the loss (a forget committed before the loss is at or below it),
    never before."""
    from shortterm.cache.redis import RedisCache
    from shortterm.model.config import Config
    from shortterm.store.reference import ReferenceStore

    cache = RedisCache.from_url(with_query(private_redis.url, prefix="stm-floor:"), Config())
    heads = iter([7, 9])

    class Journal(ReferenceStore):
        async def journal_head(self) -> int:
            head = next(heads)
            if head == 7:
                await private_redis.flush()  # the data (and our claim) is lost here
            return head

    try:
        assert await cache.repair(Journal(), T0) == 9
        assert cache.journal_due(9) is False
        assert await cache.repair(Journal(), T0) == 0  # set: nothing more to do
    finally:
        await cache.close()


# -- B. a forget whose outcome is unknown ------------------------------------------------

UNSURE_ROUNDS = {"commit": 5, "replies": 3}  # a "replies" cut makes each retry wait for the pool


async def _settled(admin: Worker) -> None:
    """The forgetting process's next calls, until its unsure forgets are settled (its pool
    may need a moment to reconnect after the cut)."""
    deadline = time.monotonic() + 60
    while True:
        await admin.call("context", user="zed", channel="elsewhere", server=G)
        if await admin.call("pending") == 0:
            return
        assert time.monotonic() < deadline, "the unsure forget was never settled"
        await asyncio.sleep(0.2)


async def _pooled(admin: Worker) -> None:
    """Until the forgetting process's pool serves again after a cut: while its server looks
    down, a request connects on its own, and through a cut proxy that connection fails
    (nothing sent), which is not the unknown outcome these rounds are about."""
    deadline = time.monotonic() + 60
    while not await admin.call("pooled"):
        assert time.monotonic() < deadline, "the pool never connected again"
        await admin.call("context", user="zed", channel="elsewhere", server=G)
        await asyncio.sleep(0.2)


async def _clears(bot: Worker, channel: str, words: tuple[str, ...]) -> bool:
    deadline = time.monotonic() + 5
    while True:
        seen = await bot.call("get", channel=channel)
        if not any(t in seen for t in words):
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)


@pytest.mark.parametrize(
    ("tier", "cut"), [("redis", "commit"), ("redis", "replies"), ("inprocess", "replies")]
)
async def test_a_forget_of_unknown_outcome_is_settled_before_the_process_serves(
    pg_url: str,
    schema: str,
    redis_url: str,
    prefix: str,
    pg_proxy: Proxy,
    marks: Path,
    tier: str,
    cut: Mode,
) -> None:
    direct = with_query(pg_url, schema=schema)
    proxied = with_query(through(pg_url, pg_proxy), schema=schema) + "&" + PG_BOUNDS
    cache = "memory://" if tier == "inprocess" else with_query(redis_url, prefix=quote(prefix))
    bot, admin = await asyncio.gather(_start(direct, cache, marks), _start(proxied, cache, marks))
    survived, told, rounds = [], 0, UNSURE_ROUNDS[cut]
    try:
        for i in range(rounds):
            token, channel = f"INFLIGHT-{i}-x", f"c{i}"
            await bot.call("capture", user="ana", channel=channel, server=G, text=f"OLD-{i}-x")
            await bot.send(
                "capture", user="ana", channel=channel, server=G, text=token, token=token,
                hold=True,
            )  # fmt: skip
            await _touched(marks, token)
            await _pooled(admin)
            pg_proxy.cut(cut)
            try:
                outcome = await admin.call("clear_channel", channel=channel)
            finally:
                pg_proxy.restore()
            if "may have been saved" in outcome:
                told += 1
            _release(marks, token)  # its Redis write lands after the eviction
            await bot.reply()
            await _settled(admin)
            words = (token, f"OLD-{i}-x")
            views = [
                await admin.call("get", channel=channel),
                await admin.call("context", user="ana", channel="elsewhere", server=G),
            ]
            # An in-process tier learns of the forget by NOTIFY: a few milliseconds late.
            if tier == "redis" or not await _clears(bot, channel, words):
                views.append(await bot.call("get", channel=channel))
            if any(t in view for view in views for t in words):
                survived.append(token)
    finally:
        await asyncio.gather(bot.stop(), admin.stop())
    print(
        f"\n{tier}, {cut} cut: {len(survived)}/{rounds} channels kept words after "
        f"the forget; {told}/{rounds} errors said it may have been saved"
    )
    assert survived == []
    assert told == rounds


# -- C. privacy narrowings honoured at once ----------------------------------------------

NARROW_ROUNDS = 10
DM_WORDS, SECRET_WORDS = "DM-WORDS-51", "SECRET-WORDS-52"


async def _until_shown(reader: Worker, view: dict[str, str], words: str) -> None:
    """Wait until the reader shows ``words`` again: a widening may be learned late."""
    deadline = time.monotonic() + 30
    while words not in await reader.call("context", **view):
        assert time.monotonic() < deadline, f"{words} never shown after the widening"
        await asyncio.sleep(0.05)


async def _narrowing_rounds(reader: Worker, admin: Worker, narrowing: str) -> int:
    """Rounds where ``admin`` narrows and ``reader``'s very next context still shows what
    the narrowing hides. The reader captures the words itself: an in-process tier holds
    only its own process's messages."""
    if narrowing == "private":
        await reader.call("capture", user="ana", channel="secret", server=G, text=SECRET_WORDS)
        view, words = {"user": "ana", "channel": "general", "server": G}, SECRET_WORDS
    else:
        await admin.call("user", user="ana", opt_in=True)
        await reader.call("capture", user="ana", channel="dm-1", text=DM_WORDS)
        view, words = {"user": "ana", "channel": "general", "server": G}, DM_WORDS
        if narrowing == "partial":
            view = {"user": "ana", "channel": "dm-2"}  # other DMs: personal memory
    late = 0
    for _ in range(NARROW_ROUNDS):
        if narrowing == "private":
            await admin.call("private", server=G, channels=[])
        else:
            await admin.call("user", user="ana", opt_in=True)
        await _until_shown(reader, view, words)
        if narrowing == "private":
            await admin.call("private", server=G, channels=["secret"])
        elif narrowing == "partial":
            await admin.call("user", user="ana", privacy="PARTIAL", opt_in=True)
        else:
            await admin.call("user", user="ana", opt_in=False)
        if words in await reader.call("context", **view):
            late += 1
    return late


@pytest.mark.parametrize("notify_delay_s", [0.5])
@pytest.mark.parametrize("narrowing", ["opt_out", "partial", "private"])
async def test_a_narrowing_holds_for_another_process_next_context_on_redis(
    pg_url: str,
    schema: str,
    redis_url: str,
    prefix: str,
    marks: Path,
    narrowing: str,
    notify_delay_s: float,
) -> None:
    """With the reader's NOTIFY delayed too: it must not be what the promise rests on."""
    store = with_query(pg_url, schema=schema)
    cache = with_query(redis_url, prefix=quote(prefix))
    reader, admin = await asyncio.gather(
        _start(store, cache, marks, notify_delay_s), _start(store, cache, marks)
    )
    try:
        late = await _narrowing_rounds(reader, admin, narrowing)
    finally:
        await asyncio.gather(reader.stop(), admin.stop())
    print(
        f"\npostgres+redis, {narrowing}, NOTIFY {notify_delay_s:g} s late: {late}/"
        f"{NARROW_ROUNDS} next contexts ignored it"
    )
    assert late == 0


PARTIAL_ROUNDS = 5


async def test_a_personal_write_in_flight_when_partial_is_chosen_does_not_land(
    pg_url: str, schema: str, redis_url: str, prefix: str, marks: Path
) -> None:
    """A capture computed while the user still kept personal memory, held before its Redis
    write while another process records ``PARTIAL``: the user's personal entry must not
    appear afterwards."""
    store = with_query(pg_url, schema=schema)
    cache = with_query(redis_url, prefix=quote(prefix))
    bot, admin = await asyncio.gather(_start(store, cache, marks), _start(store, cache, marks))
    landed = 0
    try:
        for i in range(PARTIAL_ROUNDS):
            await admin.call("user", user="ana")  # personal memory kept
            token, channel = f"PERSONAL-{i}-x", f"p{i}"
            await bot.send(
                "capture", user="ana", channel=channel, server=G, text=token, token=token,
                hold=True,
            )  # fmt: skip
            await _touched(marks, token)
            await admin.call("user", user="ana", privacy="PARTIAL")
            _release(marks, token)
            await bot.reply()
            views = [
                await bot.call("get", kind="user", user="ana", channel=channel),
                await admin.call("get", kind="user", user="ana", channel=channel),
            ]
            if any(token in view for view in views):
                landed += 1
    finally:
        await asyncio.gather(bot.stop(), admin.stop())
    print(f"\n{landed}/{PARTIAL_ROUNDS} personal writes in flight landed after PARTIAL")
    assert landed == 0


async def test_a_narrowing_holds_for_another_process_next_context_on_sqlite(
    tmp_path: Path, marks: Path
) -> None:
    store = f"sqlite:///{tmp_path / 'narrow.db'}"
    reader = await _start(store, "memory://", marks)  # one at a time: the first migrates
    admin = await _start(store, "memory://", marks)
    try:
        late = await _narrowing_rounds(reader, admin, "opt_out")
    finally:
        await asyncio.gather(reader.stop(), admin.stop())
    assert late == 0
