"""The durable journal is the authority on what was forgotten: a Redis that goes back in time
(a restart from an older snapshot, a replica promoted before it caught up), or that is full,
never brings a forget back. Real ``redis-server`` processes of the test's own, PostgreSQL as
the durable tier (docs/design.md, "Forgetting": "When Redis goes back in time")."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis.asyncio as aioredis

import shortterm
from shortterm import Message, Privacy, ScopeKey
from shortterm.model.errors import ConfigError
from tests import cluster_support
from tests.cluster_support import Cluster
from tests.support import with_query

pytestmark = pytest.mark.skipif(
    subprocess.run(["which", "redis-server"], capture_output=True).returncode != 0,
    reason="no redis-server binary (apt-get install redis-server)",
)

G, C, U, OTHER = "guild", "plans", "u-secret", "u-other"
ROUNDS = 2  # per forget kind: 3 kinds, 6 rounds per deployment


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A ``redis-server`` of this test's own, with its data directory (``dump.rdb``)."""

    def __init__(self, workdir: Path, *extra: str) -> None:
        self.port = _free_port()
        self.workdir = workdir
        self.extra = extra
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)

    async def start(self) -> None:
        self.proc = subprocess.Popen(  # noqa: ASYNC220 - it returns at once; we poll below
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir), *self.extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while True:
            try:
                async with aioredis.Redis.from_url(self.url) as client:
                    if await client.ping():
                        return
            except (OSError, aioredis.ConnectionError):
                pass
            assert time.monotonic() < deadline, "the test's redis-server did not start"
            await asyncio.sleep(0.02)

    def kill(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                os.kill(self.proc.pid, signal.SIGCONT)  # a stopped process dies only awake
            self.proc.kill()  # no shutdown save: what is on disk is the last snapshot
            self.proc.wait(timeout=20)
            self.proc = None

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    async def admin(self, *command: str) -> object:
        async with aioredis.Redis.from_url(self.url, decode_responses=True) as client:
            return await client.execute_command(*command)


@pytest.fixture
async def servers(tmp_path: Path) -> AsyncIterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.kill()


async def _server(servers: list[Server], workdir: Path, *extra: str) -> Server:
    server = Server(workdir, *extra)
    servers.append(server)
    await server.start()
    return server


Forget = Callable[[shortterm.Memory], Awaitable[object]]
FORGETS: dict[str, Forget] = {
    "clear_channel": lambda m: m.clear_channel(C),
    "clear_user": lambda m: m.clear_user(U),
    "full": lambda m: m.configure_user(U, shortterm.UserSettings(privacy=Privacy.FULL)),
}
KEYS = (ScopeKey.server(G, C, None), ScopeKey.user(U, C, None))


async def _said(memory: shortterm.Memory, word: str) -> None:
    turn = memory.turn(user_id=U, channel_id=C, server_id=G)
    # Written now, as the platform stamps it: a forget's horizon takes an untimed message
    # for an old one.
    now = time.time()
    said = Message("user", f"the code is {word}", author_id=U, speaker="Ana", at=now)
    other = Message("user", "see you", author_id=OTHER, speaker="Bo", at=now)
    await turn.capture(history=[said, other], replies=[shortterm.Reply("noted")])


async def _shows(memory: shortterm.Memory, word: str) -> bool:
    """Whether any read of this process serves the word: each scope twice (the first read
    may be the one that finds the tier behind), and another channel's recall."""
    for _ in range(2):
        for key in KEYS:
            entry = await memory.get(key)
            if entry is not None and any(word in m.content for m in entry.messages):
                return True
    turn = memory.turn(user_id=U, channel_id="elsewhere", server_id=G)
    return any(word in item.text for item in (await turn.context()).items)


async def _open(pg_url: str, schema: str, url: str) -> shortterm.Memory:
    return await shortterm.open(
        store=with_query(pg_url, schema=schema), cache=with_query(url, prefix="stm-auth:")
    )


@pytest.mark.parametrize("forget", sorted(FORGETS) * ROUNDS)
async def test_a_restart_from_an_older_snapshot_does_not_undo_a_forget(
    pg_url: str, schema: str, servers: list[Server], tmp_path: Path, forget: str
) -> None:
    server = await _server(servers, tmp_path / "rdb", "--dbfilename", "dump.rdb")
    word = uuid.uuid4().hex
    memory = await _open(pg_url, schema, server.url)
    try:
        await _said(memory, word)
        assert await _shows(memory, word)
        await server.admin("SAVE")  # the snapshot: the word, and the mark before the forget
        await FORGETS[forget](memory)
        assert not await _shows(memory, word)
        server.kill()
        await server.start()  # Redis loads the snapshot: the forget is gone from it
        assert await server.admin("DBSIZE") != 0
        assert not await _shows(memory, word), "the process that forgot served it again"
        fresh = await _open(pg_url, schema, server.url)
        try:
            assert not await _shows(fresh, word), "a process opened after the restart served it"
        finally:
            await fresh.close()
    finally:
        await memory.close()


@pytest.mark.parametrize("forget", sorted(FORGETS) * ROUNDS)
async def test_a_replica_promoted_before_it_caught_up_does_not_undo_a_forget(
    pg_url: str, schema: str, servers: list[Server], tmp_path: Path, forget: str
) -> None:
    primary = await _server(servers, tmp_path / "primary")
    replica = await _server(
        servers, tmp_path / "replica", "--replicaof", "127.0.0.1", str(primary.port)
    )
    word = uuid.uuid4().hex
    memory = await _open(pg_url, schema, primary.url)
    try:
        await _said(memory, word)
        deadline = time.monotonic() + 20
        while await primary.admin("WAIT", "1", "1000") != 1:  # the replica has the word
            assert time.monotonic() < deadline, "the replica never caught up"
        # It lags from here on: stopped, and its link cut (what the primary had sent before
        # would still wait in its socket, and arrive when it wakes).
        replica.signal(signal.SIGSTOP)
        await primary.admin("CLIENT", "KILL", "TYPE", "replica")
        await FORGETS[forget](memory)
        assert not await _shows(memory, word)
        primary.kill()
        replica.signal(signal.SIGCONT)
        await replica.admin("REPLICAOF", "NO", "ONE")  # promoted, without the forget
        promoted = await _open(pg_url, schema, replica.url)
        try:
            assert not await _shows(promoted, word), "the promoted replica served it"
        finally:
            await promoted.close()
    finally:
        await memory.close()


async def test_a_redis_that_may_evict_is_refused_with_the_setting_and_the_fix(
    pg_url: str, schema: str, servers: list[Server], tmp_path: Path
) -> None:
    server = await _server(
        servers, tmp_path / "lru", "--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru"
    )
    with pytest.raises(ConfigError, match="maxmemory-policy") as caught:
        await _open(pg_url, schema, server.url)
    assert "volatile-lru" in str(caught.value) and "noeviction" in str(caught.value)


async def _fill(server: Server) -> None:
    """Ballast until Redis refuses more: it is full."""
    async with aioredis.Redis.from_url(server.url) as client:
        for i in range(10_000):
            try:
                await client.set(f"ballast:{i}", b"x" * 100_000)
            except aioredis.ResponseError as exc:
                if "maxmemory" not in str(exc):
                    raise
                return
    raise AssertionError("Redis never filled up")


async def test_a_full_redis_still_forgets(
    pg_url: str, schema: str, servers: list[Server], tmp_path: Path
) -> None:
    server = await _server(
        servers, tmp_path / "full", "--maxmemory", "8mb", "--maxmemory-policy", "noeviction"
    )
    words = [uuid.uuid4().hex for _ in range(3)]
    memory = await _open(pg_url, schema, server.url)
    try:
        for word in words:
            await _said(memory, word)
        await _fill(server)
        await memory.clear_channel(C)  # while full: they must not fail
        await FORGETS["clear_user"](memory)
        async with aioredis.Redis.from_url(server.url) as client:
            async for name in client.scan_iter(match="ballast:*", count=1000):
                await client.unlink(name)  # room again, to read (a read may write a marker)
        for word in words:
            assert not await _shows(memory, word)
    finally:
        await memory.close()


@contextmanager
def _cluster_with_replicas() -> Iterator[Cluster]:
    """Three masters, each with a replica, every slot assigned."""
    directory = Path(tempfile.mkdtemp(prefix="stm-cluster-ha-"))
    ports: list[int] = []
    for _ in range(6):
        ports.append(cluster_support._free_port(ports))
    cluster = Cluster(ports, directory)
    try:
        for port in ports:
            cluster.start(port)
        cluster.cli(
            ports[0], "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
            "--cluster-replicas", "1", "--cluster-yes",
        )  # fmt: skip
        cluster_support._wait(cluster.state_ok, "the cluster's state")
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)


def _replica_of(cluster: Cluster, master: int) -> int:
    """The port of the master's replica, once it is connected (the roles take a moment)."""
    master_id = cluster.node_id(master)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for line in cluster.cli(master, "cluster", "nodes").splitlines():
            fields = line.split()
            if "slave" in fields[2] and fields[3] == master_id:
                port = int(fields[1].split("@")[0].rsplit(":", 1)[1])
                if "master_link_status:up" in cluster.cli(port, "info", "replication"):
                    return port
        time.sleep(0.1)
    raise AssertionError(f"no replica of {master}")


@pytest.mark.parametrize("forget", sorted(FORGETS) * ROUNDS)
async def test_a_cluster_failover_to_a_lagging_replica_does_not_undo_a_forget(
    pg_url: str, schema: str, forget: str
) -> None:
    """3 masters + 3 replicas: the channel's master loses its replica (stopped), forgets,
    dies; the replica takes over (``CLUSTER FAILOVER TAKEOVER``) without the forget."""
    cluster_support.require_redis_server()
    word = uuid.uuid4().hex
    with _cluster_with_replicas() as cluster:
        memory = await _open(pg_url, schema, cluster.url)
        try:
            await _said(memory, word)
            group_key = memory.cache.layout.base(memory.cache.group_of(C)) + "n"  # type: ignore[attr-defined]
            slot = int(cluster.cli(cluster.ports[0], "cluster", "keyslot", group_key))
            master = cluster.owner(slot)
            replica = _replica_of(cluster, master)
            assert cluster.cli(master, "wait", "1", "2000").strip() == "1"
            cluster.pause(replica)  # the master loses its replica link from here on
            cluster.cli(master, "client", "kill", "type", "replica")
            await FORGETS[forget](memory)
            assert not await _shows(memory, word)
            cluster.processes[master].kill()
            cluster.processes[master].wait(timeout=20)
            cluster.resume(replica)
            cluster.cli(replica, "cluster", "failover", "takeover")
            survivors = [p for p in cluster.ports if p != master]
            cluster_support._wait(
                lambda: cluster.owner_seen_by(survivors[0], slot) == replica, "the takeover"
            )
        finally:
            await memory.close()
        seeds = "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in survivors)
        promoted = await _open(pg_url, schema, seeds)
        try:
            assert not await _shows(promoted, word), "the promoted replica served it"
        finally:
            await promoted.close()
