"""A PostgreSQL primary and a streaming standby of the test's own, for failover tests
(tests/reliability/test_postgres_failover.py), or one cluster to stop and start again
(tests/reliability/test_postgres_outage.py): ``initdb`` into a temporary directory, the
primary on a free loopback port (``wal_level=replica``, trust authentication, replication
included), the standby made from it with ``pg_basebackup -R`` on another free port. Both are
driven with ``pg_ctl``: stopped (``immediate``: the primary dies as in a crash), started again,
promoted.

As root, initdb and postgres refuse to run: the clusters then belong to the ``postgres`` OS
user (else ``nobody``), as in tests/deploy/tls_support.py, and their directory to that user.
Without the binaries the tests skip, in CI as well (CI may run PostgreSQL in a container).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.deploy.tls_support import PG_BIN, _server_user, free_port

STARTUP_S = 30.0


def _binary(name: str) -> Path:
    """``name`` beside initdb (/usr/local/bin holds links to some of the binaries only: the
    directory they point into holds them all), else on PATH."""
    for directory in (PG_BIN, Path(os.path.realpath(PG_BIN / "initdb")).parent):
        if os.access(directory / name, os.X_OK):
            return directory / name
    found = shutil.which(name)
    return Path(found) if found else PG_BIN / name


INITDB, PG_CTL, PG_BASEBACKUP, POSTGRES = (
    _binary(name) for name in ("initdb", "pg_ctl", "pg_basebackup", "postgres")
)


def require_pg_binaries() -> None:
    """Skip (always, CI included) unless initdb, pg_ctl, pg_basebackup and postgres are here."""
    missing = [
        str(b) for b in (INITDB, PG_CTL, PG_BASEBACKUP, POSTGRES) if not os.access(b, os.X_OK)
    ]
    if missing:
        pytest.skip(
            f"no {', '.join(missing)} (apt-get install postgresql): the failover tests start "
            "a primary and a standby of their own"
        )


@dataclass
class Node:
    """One cluster: its data directory and loopback port."""

    name: str
    data: Path
    port: int
    log: Path
    _uid: int | None
    _gid: int | None

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def run(self, *args: str | Path, timeout: float = 60.0) -> str:
        """Run a PostgreSQL binary as the cluster's owner; its output, or RuntimeError with it
        and the server log's tail."""
        done = subprocess.run(
            [str(a) for a in args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.data.parent,
            user=self._uid,
            group=self._gid,
        )
        if done.returncode != 0:
            tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(
                f"{Path(str(args[0])).name} ({self.name}): {done.stdout}{done.stderr}\nlog:\n{tail}"
            )
        return done.stdout

    def configure(self, **settings: Any) -> None:
        """Append settings to postgresql.conf (a later line wins)."""
        lines = "".join(f"{k} = '{v}'\n" for k, v in settings.items())
        with (self.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write(lines)

    def start(self) -> None:
        self.run(PG_CTL, "-D", self.data, "-l", self.log, "-w", "-t", str(int(STARTUP_S)), "start")
        deadline = time.monotonic() + STARTUP_S
        while not self.answers():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} does not accept logins on port {self.port}")
            time.sleep(0.05)

    def stop(self, mode: str = "fast") -> None:
        """``immediate``: every server process quits at once, nothing flushed or checkpointed
        (a crash, as far as its clients and its standby can tell)."""
        self.run(PG_CTL, "-D", self.data, "-m", mode, "-w", "stop")

    def promote(self) -> None:
        self.run(PG_CTL, "-D", self.data, "-w", "-t", str(int(STARTUP_S)), "promote")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def answers(self) -> bool:
        try:
            psycopg.connect(self.url, connect_timeout=2).close()
        except psycopg.OperationalError:
            return False
        return True

    def sql(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """One statement (autocommit); the rows it returned."""
        with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []


@dataclass
class Pair:
    """A primary and its streaming standby (asynchronous until made otherwise)."""

    primary: Node
    standby: Node

    def url(self, **options: str) -> str:
        """libpq's multi-host URL over both: with ``target_session_attrs=read-write`` a
        connection goes to whichever accepts writes, so after a failover to the promoted
        standby."""
        query = "&".join(
            ["target_session_attrs=read-write", *(f"{k}={v}" for k, v in options.items())]
        )
        return (
            f"postgresql://postgres@127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
            f"/postgres?{query}"
        )

    def wait_replayed(self, timeout: float = 10.0) -> None:
        """Until the standby has replayed every WAL record the primary has written so far."""
        target = self.primary.sql("SELECT pg_current_wal_lsn()::text")[0][0]
        deadline = time.monotonic() + timeout
        while True:
            caught = self.standby.sql("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,))[
                0
            ][0]
            if caught:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the standby did not replay up to {target} in {timeout} s")
            time.sleep(0.02)

    def make_synchronous(self, timeout: float = 10.0) -> None:
        """``synchronous_standby_names='*'`` (``synchronous_commit`` is ``on``): a commit
        returns once the standby has flushed it. Waits until the standby is the sync one."""
        self.primary.sql("ALTER SYSTEM SET synchronous_standby_names = '*'")
        self.primary.sql("ALTER SYSTEM SET synchronous_commit = 'on'")
        self.primary.sql("SELECT pg_reload_conf()")
        deadline = time.monotonic() + timeout
        while self.primary.sql("SELECT sync_state FROM pg_stat_replication") != [("sync",)]:
            if time.monotonic() > deadline:
                raise AssertionError("the standby did not become synchronous")
            time.sleep(0.05)

    def fail_over(self) -> float:
        """The primary dies (immediate stop); the standby is started if it was stopped, and
        promoted. Returns the seconds the promotion took."""
        self.primary.stop("immediate")
        if not self.standby.running():
            self.standby.start()
        began = time.monotonic()
        self.standby.promote()
        return time.monotonic() - began


def _init(node: Node, directory: Path, **settings: Any) -> None:
    """``initdb`` into ``node.data`` (trust authentication on loopback, replication too),
    ``settings`` appended to its configuration, then start it."""
    node.run(
        INITDB, "-D", node.data, "-U", "postgres", "-A", "trust", "--no-sync",
        "--no-instructions",
    )  # fmt: skip
    (node.data / "pg_hba.conf").write_text(
        "local all all trust\nhost all all 127.0.0.1/32 trust\n"
        "local replication all trust\nhost replication all 127.0.0.1/32 trust\n",
        "utf-8",
    )
    node.configure(
        port=node.port,
        listen_addresses="127.0.0.1",
        unix_socket_directories=directory,
        fsync="off",  # a process crash loses nothing unflushed: the OS still has it
        max_connections=40,
        shared_buffers="16MB",
        log_min_messages="warning",
        **settings,
    )
    node.start()


def _owned_directory(prefix: str) -> tuple[Path, int | None, int | None]:
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    user = _server_user()
    uid, gid = (None, None) if user is None else (user.pw_uid, user.pw_gid)
    if uid is not None and gid is not None:
        os.chown(directory, uid, gid)
    return directory, uid, gid


@contextmanager
def one_cluster() -> Iterator[Node]:
    """A running cluster of the test's own (to stop and start again: an outage), stopped and
    removed on the way out."""
    require_pg_binaries()
    directory, uid, gid = _owned_directory("stm-pg-own-")
    node = Node("own", directory / "data", free_port(), directory / "own.log", uid, gid)
    try:
        _init(node, directory)
        yield node
    finally:
        if node.running():
            with suppress(RuntimeError, subprocess.TimeoutExpired):
                node.stop("immediate")
        shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def primary_and_standby() -> Iterator[Pair]:
    """A running primary and a streaming standby, stopped and removed on the way out."""
    require_pg_binaries()
    directory, uid, gid = _owned_directory("stm-pg-failover-")
    primary = Node(
        "primary", directory / "primary", free_port(), directory / "primary.log", uid, gid
    )
    standby = Node(
        "standby", directory / "standby", free_port(), directory / "standby.log", uid, gid
    )
    try:
        _init(
            primary,
            directory,
            wal_level="replica",
            max_wal_senders=4,
            hot_standby="on",
            wal_receiver_status_interval="1s",
        )
        primary.run(
            PG_BASEBACKUP, "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
            "-D", standby.data, "-R", "-X", "stream", "-c", "fast", "--no-sync",
        )  # fmt: skip
        standby.configure(port=standby.port)
        standby.start()
        yield Pair(primary, standby)
    finally:
        for node in (primary, standby):
            if node.running():
                with suppress(RuntimeError, subprocess.TimeoutExpired):
                    node.stop("immediate")
        shutil.rmtree(directory, ignore_errors=True)
