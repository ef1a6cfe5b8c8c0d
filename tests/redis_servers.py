"""Throwaway redis-server processes (Debian's) for the operator-error tests: a Redis with its own
options (a password, TLS only) and Sentinels watching it (with a password, TLS), each on a
free loopback port and stopped by pid on the way out.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.cluster_support import REDIS_CLI, REDIS_SERVER, _free_port, stop_processes
from tests.deploy.tls_support import Certificates

START_WITHIN_S = 20.0


def _listens(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _tls_args(certs: Certificates, port: int) -> list[str]:
    return [
        "--port", "0", "--tls-port", str(port),
        "--tls-cert-file", str(certs.server_cert), "--tls-key-file", str(certs.server_key),
        "--tls-ca-cert-file", str(certs.ca), "--tls-auth-clients", "optional",
    ]  # fmt: skip


class Servers:
    """The redis-server processes a test started, by port; all stopped by :meth:`stop`."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="stm-redis-errors-"))
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    def _start(self, port: int, args: list[str]) -> int:
        log = (self.directory / f"{port}.log").open("ab")
        self.processes[port] = subprocess.Popen(
            [REDIS_SERVER, *args], stdout=log, stderr=subprocess.STDOUT, cwd=self.directory
        )
        log.close()
        deadline = time.monotonic() + START_WITHIN_S
        while not _listens(port):
            if self.processes[port].poll() is not None or time.monotonic() > deadline:
                said = (self.directory / f"{port}.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server on {port} did not start: {said}")
            time.sleep(0.05)
        return port

    def redis(self, *options: str, certs: Certificates | None = None) -> int:
        """A Redis (TLS only with ``certs``) with ``options`` (``--requirepass``, …)."""
        port = _free_port(list(self.processes))
        listen = _tls_args(certs, port) if certs else ["--port", str(port)]
        plain = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        return self._start(port, [*listen, *plain, "--dir", str(self.directory), *options])

    def sentinel(
        self,
        master: int,
        name: str,
        *,
        password: str | None = None,
        certs: Certificates | None = None,
    ) -> int:
        """A sentinel watching the master on ``master`` as ``name`` (quorum 1)."""
        port = _free_port(list(self.processes))
        lines = [f"bind 127.0.0.1\ndir {self.directory}\n"]
        if certs is None:
            lines.append(f"port {port}\n")
        else:
            lines.append(
                f"port 0\ntls-port {port}\ntls-cert-file {certs.server_cert}\n"
                f"tls-key-file {certs.server_key}\ntls-ca-cert-file {certs.ca}\n"
                "tls-auth-clients optional\ntls-replication yes\n"
            )
        lines.append(f'sentinel monitor "{name}" 127.0.0.1 {master} 1\n')
        if password is not None:
            lines.append(f"requirepass {password}\n")
        conf = self.directory / f"sentinel-{port}.conf"  # a sentinel rewrites its own
        conf.write_text("".join(lines))
        return self._start(port, [str(conf), "--sentinel"])

    def watching(self, sentinel: int, name: str, password: str | None = None) -> bool:
        """Whether the (plain-text) sentinel on ``sentinel`` sees master ``name`` up."""
        auth = ["-a", password, "--no-auth-warning"] if password else []
        done = subprocess.run(
            [REDIS_CLI, "-p", str(sentinel), *auth, "sentinel", "master", name],
            capture_output=True,
            text=True,
            timeout=10,
        )
        said = done.stdout.splitlines()
        return dict(zip(said[::2], said[1::2], strict=False)).get("flags") == "master"

    def stop(self, port: int) -> None:
        stop_processes([self.processes.pop(port)])

    def stop_all(self) -> None:
        stop_processes(self.processes.values())
        self.processes.clear()
        shutil.rmtree(self.directory, ignore_errors=True)


@contextmanager
def redis_servers() -> Iterator[Servers]:
    servers = Servers()
    try:
        yield servers
    finally:
        servers.stop_all()


def wait_until(ready: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not within {timeout_s:g} s")
        time.sleep(0.1)
