"""TLS to both backends, against servers of the test's own (:mod:`tests.deploy.tls_support`): a
CA made here, a redis-server with no plain-text port, a PostgreSQL cluster with ``hostssl``
lines only.

``rediss://…?ssl_ca_certs=ca.crt`` and ``postgresql://…?sslmode=verify-full&sslrootcert=ca.crt``
carry a turn from one process to the next, with a client certificate too (the README's forms).
A certificate the handshake refuses (the server's, under the wrong CA; ours, signed by a CA the
server does not know) fails the open at once, in one line naming the certificate problem: no
retry would change it. So does the command, with exit code 3.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

import shortterm
from shortterm.cache.redis.client import open_url
from shortterm.cli.app import EXIT_UNAVAILABLE
from shortterm.model.errors import CacheUnavailable, ConfigError
from tests.deploy.tls_support import (
    INITDB,
    OPENSSL,
    POSTGRES,
    REDIS_SERVER,
    Certificates,
    make_certificates,
    postgres_tls,
    redis_tls,
    require,
)
from tests.test_operator_errors import command, error_line

BOUND_S = 5.0  # a refused certificate fails the open within this, not after a pool timeout
KEY = shortterm.ScopeKey.server("333", "222")
SAID = ["Hike on Saturday?", "Yes! Ridge trail, 8am."]
SUMMARY = "Ana and the bot plan a hike."


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    require(OPENSSL, install="openssl")
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def redis_port(certs: Certificates) -> Iterator[int]:
    require(REDIS_SERVER, install="redis-server")
    with redis_tls(certs) as port:
        yield port


@pytest.fixture(scope="module")
def postgres_port(certs: Certificates) -> Iterator[int]:
    require(INITDB, POSTGRES, install="postgresql", mandatory_in_ci=False)
    with postgres_tls(certs) as port:
        yield port


def url_of(
    request: pytest.FixtureRequest,
    tier: str,
    ca: Path,
    cert: tuple[Path, Path] | None = None,
    **ours: str,
) -> str:
    """A URL of ``tier`` to the module's server (started on first use: a test of one tier
    does not wait for, nor skip without, the other's)."""
    if tier == "redis":
        options = {"ssl_ca_certs": ca, **_pair(cert, "ssl_certfile", "ssl_keyfile"), **ours}
        return f"rediss://127.0.0.1:{request.getfixturevalue('redis_port')}/0?{urlencode(options)}"
    options = {"sslmode": "verify-full", "sslrootcert": ca, **_pair(cert, "sslcert", "sslkey")}
    port = request.getfixturevalue("postgres_port")
    return f"postgresql://postgres@127.0.0.1:{port}/postgres?{urlencode({**options, **ours})}"


def _pair(cert: tuple[Path, Path] | None, cert_option: str, key_option: str) -> dict[str, Path]:
    return {} if cert is None else {cert_option: cert[0], key_option: cert[1]}


@pytest.mark.parametrize("client_cert", [False, True], ids=["ca", "ca+client-cert"])
@pytest.mark.parametrize("tier", ["redis", "postgres"])
async def test_a_turn_goes_over_tls_to_the_next_process(
    request: pytest.FixtureRequest,
    certs: Certificates,
    tier: str,
    client_cert: bool,
    tmp_path: Path,
) -> None:
    cert = (certs.client_cert, certs.client_key) if client_cert else None
    tag = uuid.uuid4().hex[:12]
    if tier == "redis":
        store = f"sqlite:///{tmp_path / 'stm.db'}"
        cache = url_of(request, tier, certs.ca, cert, prefix=f"stm-tls:{tag}:")
    else:
        store, cache = url_of(request, tier, certs.ca, cert, schema=f"t_{tag}"), "memory://"
    async with shortterm.open(store=store, cache=cache) as memory:
        turn = memory.turn(user_id="111", channel_id="222", server_id="333")
        said = shortterm.Message("user", SAID[0], author_id="111", speaker="Ana")
        await turn.capture(history=[said], replies=[shortterm.Reply(SAID[1])])
        await memory.set_summary(KEY, SUMMARY)
    async with shortterm.open(store=store, cache=cache) as other:
        entry = await other.get(KEY)
    assert entry is not None
    assert entry.summary == SUMMARY  # from the durable tier
    # The messages live in the hot tier only: Redis shares them, an in-process cache does not.
    assert [m.content for m in entry.messages] == (SAID if tier == "redis" else [])


NAMED = {  # what each error names: the backend, the certificate problem, the option to check
    "redis-wrong-ca": ("Redis TLS handshake with 127.0.0.1:", "certificate verify failed",
                       "ssl_ca_certs"),
    "redis-refused-client-cert": ("Redis TLS handshake", "refused our certificate",
                                  "ssl_certfile"),
    "postgres-wrong-ca": ("PostgreSQL TLS connection failed", "certificate verify failed",
                          "sslrootcert"),
    "postgres-refused-client-cert": ("PostgreSQL TLS connection failed", "unknown ca",
                                     "sslcert"),
    "postgres-missing-ca": ("PostgreSQL TLS connection failed", "root certificate file",
                            "does not exist"),
}  # fmt: skip


def refused_url(request: pytest.FixtureRequest, certs: Certificates, case: str) -> str:
    """The URL of a ``NAMED`` case: the wrong CA for the server's certificate, ours signed
    by a CA the server does not know, or a CA file that is not there."""
    tier = case.split("-")[0]
    if case.endswith("wrong-ca"):
        return url_of(request, tier, certs.other_ca)
    if case.endswith("missing-ca"):
        return url_of(request, tier, certs.ca.with_name("no-such-ca.crt"))
    return url_of(request, tier, certs.ca, (certs.stranger_cert, certs.stranger_key))


async def open_and_close(store: str, cache: str) -> None:
    async with asyncio.timeout(2 * BOUND_S):  # before the change, PostgreSQL took 30 s
        async with shortterm.open(store, cache, config=shortterm.Config(sweep_interval_s=0)):
            pass


@pytest.mark.parametrize("case", list(NAMED))
async def test_a_refused_certificate_fails_the_open_at_once_in_one_line(
    request: pytest.FixtureRequest, certs: Certificates, case: str
) -> None:
    url = refused_url(request, certs, case)
    store, cache = ("memory://", url) if case.startswith("redis") else (url, "memory://")
    started = time.monotonic()
    with pytest.raises(shortterm.StoreUnavailable) as raised:
        await open_and_close(store, cache)
    elapsed = time.monotonic() - started
    said = str(raised.value)
    assert elapsed < BOUND_S, (elapsed, said)
    assert "\n" not in said, said
    if case == "redis-refused-client-cert" and "refused our certificate" not in said:
        # The server may close the connection before its alert is read (seen once in a
        # full run): then redis-py's words, and never a claim that the URL is plain text.
        assert re.search(r"reset by peer|closed", said, re.IGNORECASE), said
        assert "plain text" not in said, said
    else:
        for words in NAMED[case]:
            assert words in said, said
    if case.startswith("redis"):
        assert isinstance(raised.value, CacheUnavailable), said


@pytest.mark.parametrize("tier", ["redis", "postgres"])
def test_the_command_says_it_in_one_line(
    request: pytest.FixtureRequest, certs: Certificates, tier: str, tmp_path: Path
) -> None:
    url = refused_url(request, certs, f"{tier}-wrong-ca")
    if tier == "redis":
        args = ["serve", "--port", "0", "--store", "memory://", "--cache", url]
    else:
        args = ["inspect", "--server", "333", "--store", url]
    done, elapsed = command(args, tmp_path)
    line = error_line(done.stderr)
    assert done.returncode == EXIT_UNAVAILABLE, done.stderr
    assert elapsed < 2 * BOUND_S, (elapsed, done.stderr)  # a process's start-up included
    assert "TLS" in line and "certificate verify failed" in line, line


def test_a_redis_tls_file_that_is_not_there_is_refused_by_name(tmp_path: Path) -> None:
    """Before anything connects (redis-py would say "No such file or directory" at the first
    call); libpq's own words for its files are the "postgres-missing-ca" case above."""
    missing = tmp_path / "ca.crt"
    with pytest.raises(ConfigError, match=r"^ssl_ca_certs='.*/ca\.crt' in the Redis URL: no such"):
        open_url(f"rediss://127.0.0.1:6380/0?ssl_ca_certs={missing}")
