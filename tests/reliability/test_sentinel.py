"""Redis Sentinel (``redis+sentinel://``): the URL, and one failover of a real primary with its
replica, watched by three sentinels of the module's own (Debian's redis-server, ``--sentinel``).

The master is killed while its replica lags a channel's clear (stopped, its link cut, as in
``test_journal_authority.py``); the sentinels promote the replica. The memory opened before
goes on without reopening: a turn lands within 10 s of the kill, the cleared channel stays
forgotten (the durable journal repairs the promoted replica's group), and readiness pings the
new master.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from redis.asyncio.sentinel import SentinelConnectionPool

import shortterm
from shortterm.cache.redis import RedisCache
from shortterm.memory.backends import make_cache
from shortterm.model.config import Config
from shortterm.model.errors import CacheUnavailable, ConfigError
from shortterm.sidecar.readiness import Readiness
from tests.cluster_support import (
    REDIS_CLI,
    REDIS_SERVER,
    _free_port,
    _wait,
    require_redis_server,
    stop_processes,
)
from tests.reliability.test_journal_authority import C, _open, _said, _shows

MASTER_NAME = "stm-master"
FAILOVER_WITHIN_S = 10.0
SENTINELS = 3
# Low, so the test's failover takes seconds: the master is down after 500 ms without an
# answer, and a failed election is tried again after twice the failover timeout.
DOWN_AFTER_MS = 500
FAILOVER_TIMEOUT_MS = 2000


# -- the URL ------------------------------------------------------------------------------


async def test_a_sentinel_url_names_the_sentinels_the_master_and_the_database() -> None:
    url = (
        "redis+sentinel://:pw@127.0.0.1:26380,10.0.0.2/mymaster/2?prefix=bot:&groups=4"
        "&socket_timeout=0.5&sentinel_password=s3"
    )
    cache = RedisCache.from_url(url, Config())
    try:
        pool = cache.client.connection_pool
        assert isinstance(pool, SentinelConnectionPool)
        assert pool.service_name == "mymaster" and pool.is_master
        assert pool.connection_kwargs["db"] == 2 and pool.connection_kwargs["password"] == "pw"
        sentinels = [s.connection_pool.connection_kwargs for s in pool.sentinel_manager.sentinels]
        assert [(s["host"], s["port"]) for s in sentinels] == [
            ("127.0.0.1", 26380),
            ("10.0.0.2", 26379),  # the sentinel's default port
        ]
        assert {s["password"] for s in sentinels} == {"s3"}  # theirs, not the master's
        assert {s["socket_timeout"] for s in sentinels} == {0.5}
        assert cache.prefix == "bot:" and cache.layout.groups == 4
        assert cache.call_timeout_s == pytest.approx(1.2)  # two attempts of 0.5 s + backoff
    finally:
        await cache.close()


async def test_a_tls_sentinel_url_speaks_tls_to_the_sentinels_and_the_master() -> None:
    cache = RedisCache.from_url("rediss+sentinel://h1,h2/m?ssl_cert_reqs=none", Config())
    try:
        pool = cache.client.connection_pool
        assert "SSL" in pool.connection_class.__name__
        assert pool.sentinel_manager.sentinel_kwargs["ssl"] is True
        assert pool.sentinel_manager.sentinel_kwargs["ssl_cert_reqs"] == "none"
    finally:
        await cache.close()


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("redis+sentinel://127.0.0.1:26379", "name the master"),
        ("redis+sentinel://127.0.0.1:26379/", "name the master"),
        ("redis+sentinel://127.0.0.1:26379/m/two", "is a number"),
        ("redis+sentinel://127.0.0.1:x/m", "bad sentinel '127.0.0.1:x'"),
        ("redis+sentinel://127.0.0.1/m?sentinel_pasword=s3", "'sentinel_pasword'.*did you mean"),
        ("redis+sentinel://127.0.0.1/m?ssl_ca_certs=ca.pem", "'ssl_ca_certs'.*need rediss"),
        ("redis://127.0.0.1/0?sentinel_password=s3", "'sentinel_password'.*redis\\+sentinel"),
    ],
)
def test_what_a_sentinel_url_cannot_take_is_named(url: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        RedisCache.from_url(url, Config())


def test_a_sentinel_password_is_not_shown_in_an_error() -> None:
    url = "redis+sentinel://:pw@127.0.0.1/m?sentinel_password=s3cret&groups=0"
    with pytest.raises(ConfigError, match="groups") as caught:
        RedisCache.from_url(url, Config())
    assert "s3cret" not in str(caught.value) and "pw@" not in str(caught.value)


async def test_the_facade_opens_and_lists_the_sentinel_scheme() -> None:
    cache = make_cache("redis+sentinel://127.0.0.1/m", Config())
    assert isinstance(cache, RedisCache)
    await cache.close()
    with pytest.raises(ConfigError, match="redis\\+sentinel"):
        make_cache("sentinel://127.0.0.1/m", Config())


async def test_a_ping_asks_the_sentinels_so_a_former_master_is_not_ready(redis_url: str) -> None:
    """A connection left open on a master the sentinels no longer name still answers PING:
    readiness's ping asks them first. The sentinels here are a stub that names the test's
    Redis, then a port where nothing listens."""
    live = urlsplit(redis_url)
    named = [(live.hostname, live.port or 6379)]
    asked: list[str] = []

    async def discover_master(name: str) -> tuple[str | None, int]:
        asked.append(name)
        return named[-1]

    db = live.path.strip("/") or "0"
    cache = RedisCache.from_url(f"redis+sentinel://127.0.0.1:1/stub/{db}", Config())
    cache.client.connection_pool.sentinel_manager.discover_master = discover_master
    try:
        await cache.ping()  # asks, then connects (which asks again)
        before = len(asked)
        await cache.ping()  # the connection is open: only the ping itself asks
        assert asked[before:] == ["stub"]
        named.append(("127.0.0.1", _free_port([])))
        with pytest.raises(CacheUnavailable):
            await cache.ping()
    finally:
        await cache.close()


# -- a primary, its replica and three sentinels ---------------------------------------------


@dataclass
class Deployment:
    """The module's servers (by port): the first master, its replica, the sentinels."""

    directory: Path
    master: int
    replica: int
    sentinels: list[int]
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinels)
        return f"redis+sentinel://{hosts}/{MASTER_NAME}"

    def cli(self, port: int, *args: str) -> str:
        done = subprocess.run(
            [REDIS_CLI, "-p", str(port), *args], capture_output=True, text=True, timeout=30
        )
        if done.returncode != 0 or done.stdout.startswith("ERR"):
            raise RuntimeError(
                f"redis-cli -p {port} {' '.join(args)}: {done.stderr or done.stdout}"
            )
        return done.stdout

    def start(self, port: int, *args: str) -> None:
        log = (self.directory / f"{port}.log").open("ab")
        self.processes[port] = subprocess.Popen(
            [REDIS_SERVER, *args], stdout=log, stderr=subprocess.STDOUT, cwd=self.directory
        )
        log.close()  # the server has its own copy
        _wait(
            lambda: self._answers(port), f"redis-server on {port}", self.directory / f"{port}.log"
        )

    def _answers(self, port: int) -> bool:
        if self.processes[port].poll() is not None:
            raise RuntimeError(f"redis-server on port {port} exited")
        try:
            return "PONG" in self.cli(port, "ping")
        except (RuntimeError, subprocess.TimeoutExpired):
            return False

    def start_sentinel(self, port: int) -> None:
        conf = self.directory / f"sentinel-{port}.conf"  # a sentinel rewrites its own
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {self.directory}\n"
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.master} 2\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n"
        )
        self.start(port, str(conf), "--sentinel")

    def watched(self, port: int) -> dict[str, str]:
        """What the sentinel on ``port`` knows of the master (``SENTINEL MASTER``)."""
        said = self.cli(port, "sentinel", "master", MASTER_NAME).splitlines()
        return dict(zip(said[::2], said[1::2], strict=False))

    def all_watch(self) -> bool:
        """Every sentinel sees the master healthy, its replica and the other sentinels (they
        find each other through the master's hello channel, every 2 s)."""
        for port in self.sentinels:
            seen = self.watched(port)
            if seen.get("flags") != "master" or seen.get("num-slaves") != "1":
                return False
            if seen.get("num-other-sentinels") != str(SENTINELS - 1):
                return False
        return True

    def master_port(self) -> int | None:
        """The master's port as redis-py's discovery reads it: from the first sentinel whose
        ``SENTINEL MASTER`` shows a master up (``GET-MASTER-ADDR-BY-NAME`` names the replica
        being promoted earlier, while the old master is still listed, down)."""
        for port in self.sentinels:
            seen = self.watched(port)
            flags = set(seen.get("flags", "").split(","))
            if "master" in flags and not {"s_down", "o_down"} & flags:
                return int(seen["port"])
        return None

    def signal(self, port: int, sig: signal.Signals) -> None:
        self.processes[port].send_signal(sig)

    def kill(self, port: int) -> None:
        self.processes[port].kill()  # no shutdown save (there is no persistence anyway)
        self.processes[port].wait(timeout=20)

    def stop(self) -> None:
        stop_processes(self.processes.values())


@contextmanager
def running_deployment() -> Iterator[Deployment]:
    """A master, its replica (linked up) and three sentinels that see them and each other;
    every process stopped by pid on the way out."""
    directory = Path(tempfile.mkdtemp(prefix="stm-sentinel-"))
    ports: list[int] = []
    for _ in range(2 + SENTINELS):
        ports.append(_free_port(ports))
    deployment = Deployment(directory, ports[0], ports[1], ports[2:])
    plain = ("--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(directory))
    try:
        deployment.start(deployment.master, "--port", str(deployment.master), *plain)
        deployment.start(
            deployment.replica, "--port", str(deployment.replica), *plain,
            "--replicaof", "127.0.0.1", str(deployment.master),
        )  # fmt: skip
        _wait(
            lambda: "master_link_status:up" in deployment.cli(deployment.replica, "info"),
            "the replica's link",
        )
        for port in deployment.sentinels:
            deployment.start_sentinel(port)
        _wait(deployment.all_watch, "the sentinels")
        yield deployment
    finally:
        deployment.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
    require_redis_server("the Redis Sentinel tests")
    started = time.monotonic()
    with running_deployment() as running:
        print(
            f"a master, a replica and {SENTINELS} sentinels in {time.monotonic() - started:.1f} s"
        )
        yield running


def _master_of(memory: shortterm.Memory) -> int:
    """The port of the master this memory's Redis connections go to now."""
    pool = memory.cache.client.connection_pool  # type: ignore[attr-defined]
    assert isinstance(pool, SentinelConnectionPool)
    return int(pool.master_address[1])


async def test_a_sentinel_url_opens_on_the_master_and_is_ready(
    deployment: Deployment,
) -> None:
    url = f"{deployment.url}?prefix=stm-open-{uuid.uuid4().hex[:8]}:"
    key = shortterm.ScopeKey.server("g1", "c1", None)
    async with shortterm.open(store="memory://", cache=url) as memory:
        turn = memory.turn(user_id="u1", channel_id="c1", server_id="g1")
        await turn.capture(
            history=[shortterm.Message("user", "hello there", author_id="u1")],
            replies=[shortterm.Reply("hi")],
        )
        entry = await memory.get(key)
        assert entry is not None and entry.messages[0].content == "hello there"
        verdict = await Readiness(memory).check()
        assert verdict.ready, verdict
        assert _master_of(memory) == deployment.master_port()


async def _turn_within(
    memory: shortterm.Memory, word: str, within_s: float, promoted: Callable[[], bool]
) -> float:
    """Take turns until one lands; the seconds it took. A turn may fail only while the
    sentinels name no new master: one begun after they did reaches it within its retries
    (the connection that met the dead master asks them again)."""
    started = time.monotonic()
    failed: list[str] = []
    late: list[str] = []
    while time.monotonic() - started < within_s:
        named = promoted()
        try:
            await _said(memory, word)
        except CacheUnavailable as exc:
            (late if named else failed).append(str(exc))
            await asyncio.sleep(0.1)
            continue
        took = time.monotonic() - started
        print(f"a turn landed {took:.1f} s after the kill ({len(failed)} failed before)")
        assert not late, f"turns failed after the sentinels named the new master: {late}"
        return took
    raise AssertionError(f"no turn landed within {within_s:g} s; the last said {failed[-1:]}")


async def test_a_failover_is_followed_without_reopening_and_a_cleared_channel_stays_forgotten(
    deployment: Deployment, pg_url: str, schema: str
) -> None:
    master, replica = deployment.master, deployment.replica
    assert deployment.master_port() == master, "the failover runs once per module"
    word, later = uuid.uuid4().hex, uuid.uuid4().hex
    memory = await _open(pg_url, schema, deployment.url)
    try:
        client = memory.cache.client  # type: ignore[attr-defined]
        await _said(memory, word)
        assert await _shows(memory, word)
        assert deployment.cli(master, "wait", "1", "2000").strip() == "1"  # the replica has it
        # It lags from here on: stopped, and its link cut (what the master had sent before
        # would still wait in its socket, and arrive when it wakes).
        deployment.signal(replica, signal.SIGSTOP)
        deployment.cli(master, "client", "kill", "type", "replica")
        await memory.clear_channel(C)
        assert not await _shows(memory, word)
        layout = memory.cache.layout  # type: ignore[attr-defined]
        mark = layout.base(layout.group_of(C)) + "fm"  # see docs/design.md, "the mark"
        forgotten_at = deployment.cli(master, "get", mark)
        deployment.kill(master)
        deployment.signal(replica, signal.SIGCONT)
        assert deployment.cli(replica, "get", mark) != forgotten_at, "the replica has the forget"

        took = await _turn_within(
            memory, later, FAILOVER_WITHIN_S, lambda: deployment.master_port() == replica
        )
        assert took < FAILOVER_WITHIN_S, f"the turn landed {took:.1f} s after the kill"
        assert deployment.master_port() == replica, "the sentinels promoted the replica"
        assert memory.cache.client is client  # type: ignore[attr-defined]  # not reopened
        assert not await _shows(memory, word), "the promoted replica served a cleared channel"
        assert await _shows(memory, later)
        verdict = await Readiness(memory).check()
        assert verdict.ready, verdict
        assert _master_of(memory) == replica, "readiness pinged a former master"
    finally:
        await memory.close()
    fresh = await _open(pg_url, schema, deployment.url)
    try:
        assert not await _shows(fresh, word), "a process opened after the failover served it"
        assert await _shows(fresh, later)
    finally:
        await fresh.close()
