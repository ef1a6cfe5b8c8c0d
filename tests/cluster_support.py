"""A throwaway Redis Cluster of three masters on free loopback ports (Debian's redis-server).

Started once per test session by the ``redis_cluster`` fixture (tests/conftest.py) and
stopped by pid at the end, also when a test fails.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support import service_url

REDIS_SERVER = "/usr/bin/redis-server"
REDIS_CLI = "/usr/bin/redis-cli"
MASTERS = 3


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _ephemeral_start() -> int:
    """Where the kernel's range of ports for outgoing connections begins."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _free_port(taken: list[int]) -> int:
    """A free port whose cluster bus port (10000 higher) is free too, both below the range
    the kernel hands outgoing connections: a port picked inside it can be taken by a client
    connection before the server binds it."""
    high = _ephemeral_start() - 10001
    low, high = (10000, high) if high >= 12000 else (20000, 55000)
    while True:
        port = random.randint(low, high)
        if port not in taken and _bindable(port) and _bindable(port + 10000):
            return port


@dataclass
class Cluster:
    """The running masters: their ports and processes (by port)."""

    ports: list[int]
    directory: Path
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def cli(self, port: int, *args: str) -> str:
        done = subprocess.run(
            [REDIS_CLI, "-p", str(port), *args], capture_output=True, text=True, timeout=60
        )
        said = done.stdout.strip()
        if done.returncode != 0 or said.startswith(("ERR", "IOERR", "BUSYKEY", "NOKEY")):
            raise RuntimeError(f"redis-cli {' '.join(args)}: {done.stderr or done.stdout}")
        return done.stdout

    def start(self, port: int) -> None:
        node_dir = self.directory / str(port)
        node_dir.mkdir(exist_ok=True)
        log = (node_dir / "log").open("ab")
        self.processes[port] = subprocess.Popen(
            [
                REDIS_SERVER,
                "--port", str(port),
                "--bind", "127.0.0.1",
                "--cluster-enabled", "yes",
                "--cluster-config-file", str(node_dir / "nodes.conf"),
                "--cluster-node-timeout", "2000",
                "--save", "",
                "--appendonly", "no",
                "--dir", str(node_dir),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()  # the server has its own copy
        _wait(lambda: self._answers(port), f"redis-server on port {port}", node_dir / "log")

    def _answers(self, port: int) -> bool:
        if self.processes[port].poll() is not None:
            raise RuntimeError(f"redis-server on port {port} exited")
        try:
            return "PONG" in self.cli(port, "ping")
        except (RuntimeError, subprocess.TimeoutExpired):
            return False

    def state_ok(self) -> bool:
        """Every node says the cluster is ok, and all agree on who serves which slot (right
        after ``--cluster create`` a node may still point a slot at the wrong master)."""
        if not all("cluster_state:ok" in self.cli(p, "cluster", "info") for p in self.ports):
            return False
        checked = self.cli(self.ports[0], "--cluster", "check", f"127.0.0.1:{self.ports[0]}")
        return "All nodes agree about slots configuration" in checked

    def node_id(self, port: int) -> str:
        return self.cli(port, "cluster", "myid").strip()

    def owner(self, slot: int) -> int:
        """The port of the master serving ``slot``, as the first node sees it."""
        return self.owner_seen_by(self.ports[0], slot)

    def owner_seen_by(self, port: int, slot: int) -> int:
        """The port of the master serving ``slot``, as the node on ``port`` sees it."""
        for line in self.cli(port, "cluster", "nodes").splitlines():
            fields = line.split()
            if "master" not in fields[2]:
                continue
            for spec in fields[8:]:
                if spec.startswith("["):
                    continue  # a slot being moved
                low, _, high = spec.partition("-")
                if int(low) <= slot <= int(high or low):
                    return int(fields[1].split("@")[0].rsplit(":", 1)[1])
        raise RuntimeError(f"no master serves slot {slot}")

    def move_slot(self, slot: int, target: int, batch: int = 5, pause_s: float = 0.01) -> None:
        """Move ``slot`` to the master on port ``target`` the way ``redis-cli --cluster
        reshard`` does: IMPORTING, MIGRATING, ``MIGRATE ... KEYS`` a few keys at a time (with
        a pause, so clients meet the slot half moved), then ``SETSLOT ... NODE`` everywhere."""
        source = self.owner(slot)
        if source == target:
            return
        source_id, target_id = self.node_id(source), self.node_id(target)
        self.cli(target, "cluster", "setslot", str(slot), "importing", source_id)
        self.cli(source, "cluster", "setslot", str(slot), "migrating", target_id)
        while True:
            names = self.cli(source, "cluster", "getkeysinslot", str(slot), str(batch))
            names = [name for name in names.splitlines() if name]
            if not names:
                break
            self.cli(source, "migrate", "127.0.0.1", str(target), "", "0", "5000", "keys", *names)
            time.sleep(pause_s)
        for port in (target, source, *self.ports):
            self.cli(port, "cluster", "setslot", str(slot), "node", target_id)

    def pause(self, port: int) -> None:
        self.processes[port].send_signal(signal.SIGSTOP)

    def resume(self, port: int) -> None:
        self.processes[port].send_signal(signal.SIGCONT)

    def stop(self) -> None:
        stop_processes(self.processes.values())


def stop_processes(processes: Iterable[subprocess.Popen[bytes]]) -> None:
    """Stop redis-server processes, paused ones too: a polite end, then a kill after 10 s."""
    processes = list(processes)
    for process in processes:
        process.send_signal(signal.SIGCONT)
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait(
    ready: Callable[[], bool], what: str, log: Path | None = None, timeout_s: float = 30.0
) -> None:
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if ready():
                return
            time.sleep(0.1)
    except RuntimeError as exc:
        said = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
        raise RuntimeError(f"{exc}: {said}") from None
    raise RuntimeError(f"{what} not ready within {timeout_s:g} s")


def available() -> bool:
    return os.access(REDIS_SERVER, os.X_OK) and os.access(REDIS_CLI, os.X_OK)


def require_redis_server(what: str = "the Redis Cluster tests") -> None:
    """Skip (or, with SHORTTERM_TEST_REQUIRE_SERVICES=1, fail) without Debian's redis-server."""
    if available():
        return
    reason = f"no {REDIS_SERVER} (apt-get install redis-server): {what}"
    if os.environ.get("SHORTTERM_TEST_REQUIRE_SERVICES") == "1":
        pytest.fail(reason + " are mandatory here")
    pytest.skip(reason + " skip")


@contextmanager
def running_cluster() -> Iterator[Cluster]:
    """Three masters with every slot assigned, stopped by pid on the way out."""
    directory = Path(tempfile.mkdtemp(prefix="stm-cluster-"))
    ports: list[int] = []
    for _ in range(MASTERS):
        ports.append(_free_port(ports))
    cluster = Cluster(ports, directory)
    try:
        for port in cluster.ports:
            cluster.start(port)
        cluster.cli(
            cluster.ports[0],
            "--cluster", "create",
            *(f"127.0.0.1:{p}" for p in cluster.ports),
            "--cluster-replicas", "0",
            "--cluster-yes",
        )  # fmt: skip
        _wait(cluster.state_ok, "the cluster's state")
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)


def redis_url_for(request: pytest.FixtureRequest, backend: str) -> str:
    """The Redis URL a ``redis`` or ``redis-cluster`` test parameter runs against (the
    cluster: the session's ``redis_cluster`` fixture)."""
    if backend == "redis-cluster":
        return str(request.getfixturevalue("redis_cluster").url)
    return service_url("SHORTTERM_TEST_REDIS_URL", "Redis")
