"""A PgBouncer of our own in transaction mode (Debian's pgbouncer), in front of the test
PostgreSQL: what a deployment's transaction pooler does to our connections.

It listens on a free loopback port, passes the test URL's database and user on (``auth_type =
trust``: the server still checks the login), and runs until stopped by its pid. PgBouncer
refuses to run as root: as root it is started with ``-u`` and an unprivileged user.
"""

from __future__ import annotations

import getpass
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

PGBOUNCER = "/usr/sbin/pgbouncer"
POOL_SIZE = 8  # server connections PgBouncer keeps: fewer than the clients our tests open
START_WITHIN_S = 10.0


def require_pgbouncer() -> None:
    """Skip (or, with SHORTTERM_TEST_REQUIRE_SERVICES=1, fail) without Debian's pgbouncer."""
    if os.access(PGBOUNCER, os.X_OK):
        return
    reason = f"no {PGBOUNCER} (apt-get install pgbouncer, or make pgbouncer): the pooler tests"
    if os.environ.get("SHORTTERM_TEST_REQUIRE_SERVICES") == "1":
        pytest.fail(reason + " are mandatory here")
    pytest.skip(reason + " skip")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(pg_url: str, port: int, auth_file: Path, mode: str, pool_size: int) -> str:
    server = conninfo_to_dict(pg_url)
    target = " ".join(
        f"{name}={server[key]}"
        for name, key in (("host", "host"), ("port", "port"), ("dbname", "dbname"))
        if server.get(key)
    )
    return f"""[databases]
{server.get("dbname") or "postgres"} = {target}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
pidfile =
logfile =
auth_type = trust
auth_file = {auth_file}
pool_mode = {mode}
default_pool_size = {pool_size}
max_client_conn = 500
"""


def _user_args() -> list[str]:
    """``-u <user>`` as root (PgBouncer will not run as root), nothing otherwise."""
    if os.geteuid() != 0:
        return []
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return ["-u", name]
    pytest.fail("pgbouncer will not run as root, and there is no postgres or nobody user")


def _through(pg_url: str, port: int) -> str:
    parts = urlsplit(pg_url)
    user = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{port}"))


@contextmanager
def running_pgbouncer(
    pg_url: str, *, mode: str = "transaction", pool_size: int = POOL_SIZE
) -> Iterator[str]:
    """PgBouncer (``mode``: transaction by default, or session) in front of ``pg_url``'s
    server, with ``pool_size`` server connections; yields ``pg_url`` as seen through it (same
    user and database, its address)."""
    require_pgbouncer()
    directory = Path(tempfile.mkdtemp(prefix="stm-pgbouncer-"))
    server = conninfo_to_dict(pg_url)
    auth_file = directory / "users.txt"
    user = server.get("user") or os.environ.get("PGUSER") or getpass.getuser()  # libpq's default
    auth_file.write_text(f'"{user}" "{server.get("password", "")}"\n')
    port = _free_port()
    (directory / "pgbouncer.ini").write_text(_config(pg_url, port, auth_file, mode, pool_size))
    log = (directory / "pgbouncer.log").open("w")
    proc = subprocess.Popen(
        [PGBOUNCER, *_user_args(), str(directory / "pgbouncer.ini")], stdout=log, stderr=log
    )
    url = _through(pg_url, port)
    try:
        _wait_until_serving(url, proc, directory / "pgbouncer.log")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(directory, ignore_errors=True)


def _wait_until_serving(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_WITHIN_S
    while True:
        if proc.poll() is not None:
            pytest.fail(f"pgbouncer exited with {proc.returncode}: {log.read_text()}")
        try:
            with psycopg.connect(url, connect_timeout=2, prepare_threshold=None) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError as exc:
            if time.monotonic() > deadline:
                pytest.fail(f"pgbouncer did not serve within {START_WITHIN_S:g} s: {exc}")
            time.sleep(0.1)
