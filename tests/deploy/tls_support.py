"""Throwaway TLS servers for tests/deploy/test_tls.py: a CA made with the ``openssl`` CLI, a
``redis-server`` that speaks only TLS and a PostgreSQL cluster of the test's own (``ssl=on``,
``hostssl`` lines only), each on a free loopback port and stopped by pid on the way out.

initdb and postgres refuse to run as root: as root, the cluster belongs to an unprivileged
user (``postgres``, else ``nobody``) and its server runs as that user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

OPENSSL = "/usr/bin/openssl"
REDIS_SERVER = "/usr/bin/redis-server"


def _pg_bin() -> Path:
    """Where initdb and postgres are: /usr/local/bin (this machine's links), else Debian's
    newest /usr/lib/postgresql/<version>/bin."""
    local = Path("/usr/local/bin")
    if (local / "initdb").exists():
        return local
    versions = [p for p in Path("/usr/lib/postgresql").glob("*/bin") if p.parent.name.isdigit()]
    found = sorted(versions, key=lambda p: int(p.parent.name))
    return found[-1] if found else local


PG_BIN = _pg_bin()
INITDB, POSTGRES = PG_BIN / "initdb", PG_BIN / "postgres"
STARTUP_S = 20.0


def require(*binaries: str | Path, install: str, mandatory_in_ci: bool = True) -> None:
    """Skip unless every binary is here; with SHORTTERM_TEST_REQUIRE_SERVICES=1 (CI) fail
    instead, when ``mandatory_in_ci`` (the PostgreSQL server's binaries are not: CI may
    run PostgreSQL in a container of its own)."""
    missing = [str(b) for b in binaries if not os.access(b, os.X_OK)]
    if not missing:
        return
    reason = f"no {', '.join(missing)} (apt-get install {install}): the TLS tests need it"
    if mandatory_in_ci and os.environ.get("SHORTTERM_TEST_REQUIRE_SERVICES") == "1":
        pytest.fail(reason + " and are mandatory here")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- certificates -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Certificates:
    """A CA, a server certificate it signed for 127.0.0.1 and localhost, a client
    certificate it signed (CN ``postgres``); an unrelated CA (the wrong one) and a client
    certificate that CA signed (one the servers refuse)."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    stranger_cert: Path
    stranger_key: Path


def _openssl(*args: str) -> None:
    done = subprocess.run([OPENSSL, *args], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)}: {done.stderr}")


def _self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-days", "2", "-subj", f"/CN=shortterm test {name}", "-keyout", str(key),
        "-out", str(cert),
    )  # fmt: skip
    return cert, key


def _signed(
    directory: Path, name: str, ca: tuple[Path, Path], extensions: str
) -> tuple[Path, Path]:
    cert, key, request = (directory / f"{name}{ext}" for ext in (".crt", ".key", ".csr"))
    _openssl(
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(request),
    )  # fmt: skip
    (directory / f"{name}.ext").write_text(extensions + "\n", "utf-8")
    _openssl(
        "x509", "-req", "-in", str(request), "-CA", str(ca[0]), "-CAkey", str(ca[1]),
        "-CAcreateserial", "-days", "2", "-extfile", str(directory / f"{name}.ext"),
        "-out", str(cert),
    )  # fmt: skip
    key.chmod(0o600)  # libpq refuses a client key others may read
    return cert, key


def make_certificates(directory: Path) -> Certificates:
    ca = _self_signed(directory, "ca")
    other_ca = _self_signed(directory, "other-ca")
    server = _signed(
        directory, "localhost", ca, "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "extendedKeyUsage=serverAuth"
    )  # fmt: skip
    client = _signed(directory, "postgres", ca, "extendedKeyUsage=clientAuth")
    stranger_dir = directory / "stranger"  # the same CN as the client: only the CA differs
    stranger_dir.mkdir()
    stranger = _signed(stranger_dir, "postgres", other_ca, "extendedKeyUsage=clientAuth")
    return Certificates(ca[0], *server, *client, other_ca[0], *stranger)


# -- servers ----------------------------------------------------------------------------------


def _wait(
    ready: Callable[[], bool], process: subprocess.Popen[bytes], what: str, log: Path
) -> None:
    deadline = time.monotonic() + STARTUP_S
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            said = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{what} did not start: {said}")
        time.sleep(0.05)


def _stop(process: subprocess.Popen[bytes], sig: signal.Signals = signal.SIGTERM) -> None:
    with suppress(ProcessLookupError):
        process.send_signal(sig)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _listens(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _pg_answers(port: int) -> bool:
    """Accepting logins: a listening port may still say "the database system is starting up"."""
    import psycopg

    try:
        psycopg.connect(f"host=127.0.0.1 port={port} user=postgres sslmode=require").close()
    except psycopg.OperationalError:
        return False
    return True


@contextmanager
def redis_tls(certs: Certificates) -> Iterator[int]:
    """A redis-server with no plain-text port: TLS on the port yielded, client certificates
    verified when one is sent (``tls-auth-clients optional``)."""
    directory = Path(tempfile.mkdtemp(prefix="stm-redis-tls-"))
    port = free_port()
    log = directory / "log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                REDIS_SERVER,
                "--port", "0",
                "--tls-port", str(port),
                "--bind", "127.0.0.1",
                "--tls-cert-file", str(certs.server_cert),
                "--tls-key-file", str(certs.server_key),
                "--tls-ca-cert-file", str(certs.ca),
                "--tls-auth-clients", "optional",
                "--save", "",
                "--appendonly", "no",
                "--dir", str(directory),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        _wait(lambda: _listens(port), process, f"redis-server --tls-port {port}", log)
        yield port
    finally:
        _stop(process)
        shutil.rmtree(directory, ignore_errors=True)


def _server_user() -> pwd.struct_passwd | None:
    """Who runs the cluster: ``None`` (this process's user) unless we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("running as root, with neither a postgres nor a nobody user for initdb")


@contextmanager
def postgres_tls(certs: Certificates) -> Iterator[int]:
    """A PostgreSQL cluster that takes TLS connections only (trust auth on ``hostssl``
    lines, a client certificate verified when one is sent), on 127.0.0.1 and the port
    yielded, its Unix socket in its own directory."""
    directory = Path(tempfile.mkdtemp(prefix="stm-pg-tls-"))
    data, log = directory / "data", directory / "log"
    user = _server_user()
    uid, gid = (None, None) if user is None else (user.pw_uid, user.pw_gid)
    if uid is not None and gid is not None:
        os.chown(directory, uid, gid)
    port = free_port()
    process: subprocess.Popen[bytes] | None = None
    try:
        done = subprocess.run(
            [str(INITDB), "-D", str(data), "-U", "postgres", "-A", "trust", "--no-sync",
             "--no-instructions"],
            capture_output=True, text=True, timeout=120, cwd=directory, user=uid, group=gid,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"initdb: {done.stderr}")
        (data / "pg_hba.conf").write_text(
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\n", "utf-8"
        )
        files = ((certs.server_cert, "server.crt"), (certs.server_key, "server.key"),
                 (certs.ca, "root.crt"))  # fmt: skip
        for source, name in files:
            shutil.copy(source, data / name)
            (data / name).chmod(0o600)  # postgres refuses a key others may read
            if uid is not None and gid is not None:
                os.chown(data / name, uid, gid)
        settings = {
            "port": str(port),
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(directory),
            "ssl": "on",
            "ssl_cert_file": "server.crt",
            "ssl_key_file": "server.key",
            "ssl_ca_file": "root.crt",  # a client certificate, when one is sent, is verified
            "fsync": "off",
            "max_connections": "20",
            "shared_buffers": "16MB",
        }
        options = [arg for k, v in settings.items() for arg in ("-c", f"{k}={v}")]
        with log.open("wb") as out:
            process = subprocess.Popen(
                [str(POSTGRES), "-D", str(data), *options],
                stdout=out, stderr=subprocess.STDOUT, cwd=directory, user=uid, group=gid,
            )  # fmt: skip
        _wait(lambda: _pg_answers(port), process, f"postgres on port {port}", log)
        yield port
    finally:
        if process is not None:
            _stop(process, signal.SIGINT)  # a fast shutdown: no waiting for clients
        shutil.rmtree(directory, ignore_errors=True)
