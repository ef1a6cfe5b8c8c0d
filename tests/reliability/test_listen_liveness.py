"""A forget made by another process reaches a PostgreSQL + in-process memory through its
``LISTEN`` connection; these tests break that connection, or pause the whole process, and check
how long the forgotten entry can still be served.

- Silent death: a loopback proxy holds the ``LISTEN`` connection open and delivers nothing
  either way (a NAT that forgot the flow). Another process clears a channel; this process
  serves it for less than ``listen_timeout_s`` after the clear returned (the max over rounds).
- Visible drop: the proxy aborts the ``LISTEN`` connection. While it cannot come back, no read
  that starts after the clear returned serves the channel; when it comes back at once, no
  later than the clear's NOTIFY would have told (the control rounds cut nothing).
- Pause: a bot process is stopped (SIGSTOP) while another process clears a channel and purges
  a user, and a capture of the bot is in flight into a third channel that is cleared too. The
  bot's first call after SIGCONT serves none of them.
- A NOTIFY that arrives while the heartbeat's query runs is not lost.

``pytest -s`` prints the measured windows.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal, cast

import psycopg
import pytest

import shortterm
from shortterm import ConfigError, Message, Reply, ScopeKey
from shortterm.store.postgres import PostgresStore
from shortterm.store.postgres.journal import JournalListener
from shortterm.store.postgres.values import one
from tests.reliability.conftest import through
from tests.reliability.proxy import Proxy
from tests.stale_reads import late_reads, shows, until_listening
from tests.support import with_query
from tests.workers import Worker

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGSTOP and SIGCONT")

G, P = "g1", "p1"
TIMEOUT_S = 0.5  # listen_timeout_s in these tests (the default is 1 s)
NOTIFY_SLACK_S = 0.25  # a NOTIFY in flight on a loaded machine (the control rounds: under 50 ms)
WATCH_S = 2.0  # how long after the clear returned a round waits for the entry to go
CONFIG = shortterm.Config(sweep_interval_s=0)


def _bounded(url: str, schema: str) -> str:
    return with_query(url, schema=schema, listen_timeout_s=TIMEOUT_S)


@pytest.fixture
async def clearer(pg_url: str, schema: str) -> AsyncIterator[Worker]:
    """Another process on the same memory, which does the forgetting."""
    worker = await Worker.start("tests.reliability.listen_worker", _bounded(pg_url, schema))
    yield worker
    await worker.stop()


@pytest.fixture
async def memory(pg_url: str, schema: str, pg_proxy: Proxy) -> AsyncIterator[shortterm.Memory]:
    """This process's memory, every PostgreSQL connection through the proxy."""
    url = _bounded(through(pg_url, pg_proxy), schema)
    async with shortterm.open(store=url, cache="memory://", config=CONFIG) as opened:
        yield opened


async def _remember(memory: shortterm.Memory, channel: str, token: str) -> ScopeKey:
    turn = memory.turn(user_id="u1", channel_id=channel, server_id=G, persona_id=P)
    await turn.capture(history=[Message("user", token, author_id="u1")], replies=[Reply("ok")])
    key = ScopeKey.server(G, channel, P)
    assert shows(await memory.get(key), token)
    return key


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


async def test_a_silently_dead_listen_hides_a_forget_for_less_than_its_timeout(
    memory: shortterm.Memory, clearer: Worker, pg_proxy: Proxy
) -> None:
    rng, rounds, lates, cuts = random.Random(7), 12, [], 0
    for i in range(rounds):
        key = await _remember(memory, f"dead{i}", f"DEAD-{i}")
        await until_listening(memory)
        cuts += pg_proxy.cut_those(b"LISTEN", "blackhole")
        # The last proof is at most TIMEOUT_S / 3 old; clear at a random point after it.
        await asyncio.sleep(rng.uniform(0, TIMEOUT_S / 2))
        lates.append(
            max(
                await late_reads(memory, clearer, f"dead{i}", key, f"DEAD-{i}", watch_s=WATCH_S),
                default=0,
            )
        )
    print(
        f"\nsilent death, listen_timeout_s={TIMEOUT_S:g}: {sum(x > 0 for x in lates)}/{rounds} "
        "rounds served the cleared channel after the clear returned; the last such read "
        f"began {_ms(statistics.median(lates))} after it (median), {_ms(max(lates))} (max)"
    )
    assert max(lates) < TIMEOUT_S
    assert cuts == rounds  # each round held a LISTEN connection that had proved itself alive


@pytest.mark.parametrize("cut", ["reconnecting", "reconnected", "control"])
async def test_a_dropped_listen_hides_no_forget(
    memory: shortterm.Memory,
    clearer: Worker,
    pg_proxy: Proxy,
    cut: Literal["reconnecting", "reconnected", "control"],
) -> None:
    """``reconnecting``: the LISTEN connection is aborted and cannot come back until the round
    is over. ``reconnected``: aborted, and comes back at once. ``control``: nothing is cut, a
    NOTIFY in flight is the only window (this one passed before the fix as well)."""
    rounds, worst, stale = 25, 0.0, 0
    for i in range(rounds):
        key = await _remember(memory, f"drop{i}", f"DROP-{i}")
        await until_listening(memory)
        if cut != "control":
            assert pg_proxy.cut_those(b"LISTEN", "reset", new_too=cut == "reconnecting") == 1
        late = await late_reads(memory, clearer, f"drop{i}", key, f"DROP-{i}", watch_s=WATCH_S)
        pg_proxy.restore()
        stale += bool(late)
        worst = max([worst, *late])
    print(
        f"\n{cut}: {stale}/{rounds} rounds served the cleared channel after the clear "
        f"returned, the latest read {_ms(worst)} after"
    )
    if cut == "reconnecting":
        assert stale == 0  # every call read the journal itself
    else:
        assert worst < NOTIFY_SLACK_S


async def test_a_paused_bot_serves_nothing_forgotten_while_it_was_stopped(
    pg_url: str, schema: str
) -> None:
    url = _bounded(pg_url, schema)
    rng, rounds, served = random.Random(11), 8, {}
    bot = await Worker.start("tests.reliability.listen_worker", url)
    admin = await Worker.start("tests.reliability.listen_worker", url)
    try:
        for i in range(rounds):
            # Odd rounds: a capture is in flight at the stop, into a channel cleared meanwhile.
            found = await _pause_round(bot, admin, i, rng, in_flight=i % 2 == 1)
            if found:
                served[i] = found
    finally:
        await asyncio.gather(bot.stop(), admin.stop())
    print(
        f"\npause: the first call after SIGCONT served something forgotten in "
        f"{len(served)}/{rounds} rounds ({rounds // 2} with a capture in flight): {served}"
    )
    assert served == {}


async def _pause_round(
    bot: Worker, admin: Worker, i: int, rng: random.Random, *, in_flight: bool
) -> list[str]:
    """Stop the bot; meanwhile the admin clears ``x{i}`` and purges ``v{i}`` (or clears the
    channel a capture is in flight into); wake the bot past the listen timeout and read.
    What it served of the forgotten."""
    kept, gone = f"KEPT-{i}", [f"X-{i}", f"V-{i}", f"Z-{i}"]
    keys = [["server", G, f"x{i}"], ["user", f"a{i}", f"x{i}"], ["user", f"v{i}", f"y{i}"],
            ["server", G, f"y{i}"], ["server", G, f"z{i}"], ["user", f"a{i}", f"z{i}"]]  # fmt: skip
    forgets: list[tuple[str, dict[str, str]]] = []
    if in_flight:
        await bot.call("listening")
        await bot.send("capture", user=f"a{i}", channel=f"z{i}", said=[[f"a{i}", gone[2]]],
                       report=True)  # fmt: skip
        assert await bot.reply() == "began"
        await asyncio.sleep(rng.uniform(0, 0.01))
        forgets.append(("clear_channel", {"channel": f"z{i}"}))
    else:
        await bot.call("capture", user=f"a{i}", channel=f"x{i}", said=[[f"a{i}", gone[0]]])
        await bot.call("capture", user=f"v{i}", channel=f"y{i}",
                       said=[[f"v{i}", gone[1]], [f"b{i}", kept]])  # fmt: skip
        await bot.call("listening")
        forgets += [("clear_channel", {"channel": f"x{i}"}), ("clear_user", {"user": f"v{i}"})]
    os.kill(bot.proc.pid, signal.SIGSTOP)
    try:
        returned = 0.0
        for op, args in forgets:
            returned = (await admin.call(op, **args))[1]
        await bot.send("read", keys=keys)  # in the pipe when it wakes: its first call
        await asyncio.sleep(max(0.0, returned + TIMEOUT_S + 0.05 - time.monotonic()))
    finally:
        os.kill(bot.proc.pid, signal.SIGCONT)
    if in_flight:
        assert await bot.reply() is None  # the capture, done
    seen = await bot.reply()
    if not in_flight:
        assert kept in seen  # the purged user's words went, the bystander's stayed
    return [token for token in gone if token in seen]


async def test_a_notify_that_arrives_during_a_heartbeat_is_not_lost(
    pg_url: str, schema: str
) -> None:
    """The server holds a notification back while the listening connection runs a query and
    sends it with the answer; it must still count (psycopg keeps it for ``notifies()``). The
    heartbeat is made slow, and the journal's end it reads never moves, so only the NOTIFY
    can say "moved"."""
    tag = uuid.uuid4().hex[:12]
    store = PostgresStore.from_url(with_query(pg_url, schema=schema))
    await store.migrate()
    listener = JournalListener(
        store.pool, f"stm_{tag}", f"SELECT 0 /* {tag} */ FROM pg_sleep(0.3)", timeout_s=2.0
    )
    busy = (
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
        f"AND query LIKE '%%/* {tag} */%%' AND pid <> pg_backend_pid()"
    )
    try:
        listener.moved()
        await _until(lambda: listener.alive)
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as other:
            for _ in range(3):
                listener.moved()  # what was announced so far (the first heartbeat)
                deadline = time.monotonic() + 10
                while not one(await (await other.execute(busy)).fetchone())[0]:
                    assert time.monotonic() < deadline, "no heartbeat ran within 10 s"
                await other.execute(f"SELECT pg_notify('stm_{tag}', '')")
                await _until(lambda: not listener.alive or listener.moved())
                assert listener.alive  # the proof held: "moved" came from the notification
                assert not listener.moved()
    finally:
        await listener.close()
        await store.close()


async def _until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "not within 10 s"
        await asyncio.sleep(0.005)


@pytest.mark.parametrize("value", ["0", "-1", "soon", "inf"])
def test_a_bad_listen_timeout_is_a_config_error(pg_url: str, value: str) -> None:
    with pytest.raises(ConfigError, match="listen_timeout_s"):
        PostgresStore.from_url(with_query(pg_url, listen_timeout_s=value))
    with pytest.raises(ConfigError, match="listen_timeout_s"):
        PostgresStore(cast(Any, None), listen_timeout_s=0.0)  # checked before the pool is used
