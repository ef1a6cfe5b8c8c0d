"""An operator's Redis mistakes, against redis-servers and Sentinels of the test's own: each is
refused when memory opens (``shortterm serve`` exits 3, on a fresh store too), in one line of at
most 300 characters that names the cause and the fix, never a client's repr.

A wrong or missing password; ``redis://`` at a port that speaks only TLS; a Redis that is not
running. Through ``redis+sentinel://``: a master name the sentinels do not monitor, a plain
Redis listed as a sentinel, sentinels that are all down (at open, and later: the turns go on,
but /readyz says why in one line), a wrong or missing sentinel password, a CA that did not sign
the sentinels' certificate. A master name percent-encoded in the URL (``%20``) is decoded.

What readiness finds shows in the metrics (``shortterm_cache_degraded``, ``shortterm_ready``,
``shortterm_tier_ready``; ``shortterm_build_info`` names the backends), and readiness asks the
``maxmemory-policy`` again: one turned to evicting at runtime makes the cache not ready.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis
from prometheus_client.parser import text_string_to_metric_families

import shortterm
from shortterm.cli.app import EXIT_UNAVAILABLE
from shortterm.model.errors import CacheUnavailable
from shortterm.sidecar import create_app
from shortterm.sidecar.readiness import Readiness
from tests.cluster_support import require_redis_server
from tests.deploy.tls_support import OPENSSL, Certificates, make_certificates, require
from tests.redis_servers import Servers, redis_servers, wait_until
from tests.test_operator_errors import command, error_line

MAX_LINE = 300
NAME = "stm master"  # a space: percent-encoded in the URL
ENCODED = "stm%20master"
PLAIN = "stm-master"  # for the tests of what follows discovery
BOUND_S = 5.0  # a refusal fails the open at once, not after retries and timeouts
KEY = shortterm.ScopeKey.server("g1", "c1", None)


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    require_redis_server("the Redis operator-error tests")
    with redis_servers() as running:
        yield running


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    require(OPENSSL, install="openssl")
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def guarded(servers: Servers) -> int:
    """A Redis that wants a password (``s3cret``)."""
    return servers.redis("--requirepass", "s3cret")


@pytest.fixture(scope="module")
def master(servers: Servers) -> int:
    return servers.redis()


@pytest.fixture(scope="module")
def sentinels(servers: Servers, master: int) -> list[int]:
    """Two sentinels watching ``master`` as ``stm master``."""
    ports = [servers.sentinel(master, NAME) for _ in range(2)]
    for port in ports:
        wait_until(lambda port=port: servers.watching(port, NAME), f"sentinel {port}")
    return ports


def sentinel_url(ports: list[int], name: str = ENCODED, **options: str) -> str:
    hosts = ",".join(f"127.0.0.1:{p}" for p in ports)
    query = "&".join(
        f"{k}={v}" for k, v in {"prefix": f"t{uuid.uuid4().hex[:8]}:", **options}.items()
    )
    return f"redis+sentinel://{hosts}/{name}?{query}"


def one_line(text: str) -> str:
    assert "\n" not in text, text
    assert len(text) <= MAX_LINE, (len(text), text)
    assert "<redis." not in text and "Redis(" not in text, text  # no client's repr
    return text


async def open_refused(cache: str) -> str:
    """What opening memory on ``cache`` raised (it must fail, and at once)."""
    import time

    started = time.monotonic()
    with pytest.raises(CacheUnavailable) as raised:
        async with shortterm.open(store="memory://", cache=cache):
            pass
    assert time.monotonic() - started < BOUND_S
    return one_line(str(raised.value))


def serve_refused(cache: str, tmp_path: Path) -> str:
    """``shortterm serve`` on a fresh store and ``cache``: exit 3 and its one error line."""
    done, _ = command(["serve", "--port", "0", "--store", "memory://", "--cache", cache], tmp_path)
    assert done.returncode == EXIT_UNAVAILABLE, done.stderr
    assert "listening" not in done.stderr, done.stderr
    line = error_line(done.stderr)
    assert len(line) <= MAX_LINE, (len(line), line)
    return line


async def capture(memory: shortterm.Memory, said: str) -> None:
    turn = memory.turn(user_id="u1", channel_id="c1", server_id="g1")
    await turn.capture(
        history=[shortterm.Message("user", said, author_id="u1")],
        replies=[shortterm.Reply("noted")],
    )


# -- one Redis ---------------------------------------------------------------------------------


async def test_a_wrong_password_is_refused_at_open_naming_the_url(guarded: int) -> None:
    said = await open_refused(f"redis://:wrong@127.0.0.1:{guarded}/0")
    assert "refused the login" in said and "password in the cache URL" in said, said
    missing = await open_refused(f"redis://127.0.0.1:{guarded}/0")
    assert "requires a password" in missing and "cache URL" in missing, missing


def test_serve_exits_3_on_a_wrong_password_with_a_fresh_store(guarded: int, tmp_path: Path) -> None:
    line = serve_refused(f"redis://:wrong@127.0.0.1:{guarded}/0", tmp_path)
    assert "refused the login" in line, line


def test_serve_exits_3_when_redis_is_not_running(servers: Servers, tmp_path: Path) -> None:
    port = servers.redis()
    servers.stop(port)
    line = serve_refused(f"redis://127.0.0.1:{port}/0", tmp_path)
    assert f"127.0.0.1:{port} refused the connection" in line, line


async def test_redis_at_a_tls_only_port_names_rediss(
    servers: Servers, certs: Certificates, tmp_path: Path
) -> None:
    port = servers.redis(certs=certs)
    said = await open_refused(f"redis://127.0.0.1:{port}/0")
    assert f"127.0.0.1:{port} speaks TLS only" in said and "use rediss://" in said, said
    assert "rediss://" in serve_refused(f"redis://127.0.0.1:{port}/0", tmp_path)


# -- through Sentinel --------------------------------------------------------------------------


async def test_a_percent_encoded_master_name_is_decoded(sentinels: list[int]) -> None:
    async with shortterm.open(store="memory://", cache=sentinel_url(sentinels)) as memory:
        await capture(memory, "hello")
        entry = await memory.get(KEY)
        assert entry is not None and entry.messages[0].content == "hello"


async def test_a_master_name_the_sentinels_do_not_monitor_is_refused(
    sentinels: list[int], tmp_path: Path
) -> None:
    said = await open_refused(sentinel_url(sentinels, "nosuch"))
    assert "monitor no master of that name" in said and f"'{NAME}'" in said, said
    assert "fix the name" in said, said
    assert "monitor no master" in serve_refused(sentinel_url(sentinels, "nosuch"), tmp_path)


async def test_a_plain_redis_listed_as_a_sentinel_is_refused(master: int) -> None:
    said = await open_refused(sentinel_url([master]))
    assert f"127.0.0.1:{master} is not a sentinel" in said and "redis://" in said, said


async def test_sentinels_that_are_not_running_are_refused_at_open(
    servers: Servers, tmp_path: Path
) -> None:
    gone = [servers.redis(), servers.redis()]
    for port in gone:
        servers.stop(port)
    said = await open_refused(sentinel_url(gone))
    assert "refused the connection" in said and "are the sentinels running" in said, said
    assert all(f"127.0.0.1:{port}" in said for port in gone), said
    assert "refused the connection" in serve_refused(sentinel_url(gone), tmp_path)


async def test_a_wrong_or_missing_sentinel_password_is_named(
    servers: Servers, master: int, tmp_path: Path
) -> None:
    port = servers.sentinel(master, NAME, password="sentinel-pw")
    wait_until(lambda: servers.watching(port, NAME, "sentinel-pw"), "the sentinel")
    wrong = await open_refused(sentinel_url([port], sentinel_password="nope"))
    assert "refused the login" in wrong and "sentinel_password" in wrong, wrong
    missing = await open_refused(sentinel_url([port]))
    assert "requires a password" in missing and "sentinel_password" in missing, missing
    line = serve_refused(sentinel_url([port], sentinel_password="nope"), tmp_path)
    assert "sentinel_password" in line, line
    async with shortterm.open(
        store="memory://", cache=sentinel_url([port], sentinel_password="sentinel-pw")
    ) as memory:
        await capture(memory, "with the password")


async def test_a_wrong_ca_for_tls_sentinels_is_one_line(
    servers: Servers, certs: Certificates, tmp_path: Path
) -> None:
    master = servers.redis(certs=certs)
    port = servers.sentinel(master, NAME, certs=certs)
    url = sentinel_url([port], ssl_ca_certs=str(certs.other_ca)).replace(
        "redis+sentinel://", "rediss+sentinel://"
    )
    said = await open_refused(url)
    assert "certificate verify failed" in said and "ssl_ca_certs" in said, said
    assert "ssl_ca_certs" in serve_refused(url, tmp_path)


async def test_all_sentinels_down_after_open_is_one_line_in_readyz(
    servers: Servers, master: int
) -> None:
    ports = [servers.sentinel(master, PLAIN) for _ in range(2)]
    for port in ports:
        wait_until(lambda port=port: servers.watching(port, PLAIN), f"sentinel {port}")
    async with shortterm.open(store="memory://", cache=sentinel_url(ports, PLAIN)) as memory:
        await capture(memory, "before")
        for port in ports:
            servers.stop(port)
        await capture(memory, "the master still answers")  # its connection stays open
        verdict = await Readiness(memory).check()
        assert verdict.cache is not None and verdict.store is None, verdict
        reason = one_line(verdict.cache)
        assert "refused the connection" in reason and "sentinels running" in reason, reason


def scraped(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def scrape(memory: shortterm.Memory) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    transport = httpx.ASGITransport(app=create_app(memory))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        answer = await client.get("/metrics")
    assert answer.status_code == 200
    return scraped(answer.text)


async def test_all_sentinels_down_shows_in_the_metrics(servers: Servers, master: int) -> None:
    ports = [servers.sentinel(master, PLAIN) for _ in range(2)]
    for port in ports:
        wait_until(lambda port=port: servers.watching(port, PLAIN), f"sentinel {port}")
    async with shortterm.open(store="memory://", cache=sentinel_url(ports, PLAIN)) as memory:
        before = await scrape(memory)
        assert before[("shortterm_cache_degraded", ())] == 0
        assert before[("shortterm_ready", ())] == 1
        info = ("shortterm_build_info", (("cache", "redis+sentinel"), ("store", "memory"),
                                         ("version", shortterm.__version__)))  # fmt: skip
        assert before[info] == 1
        for port in ports:
            servers.stop(port)
        await capture(memory, "the turns go on")
        after = await scrape(memory)  # a new app: its readiness probes afresh
        assert after[("shortterm_cache_degraded", ())] == 1
        assert after[("shortterm_ready", ())] == 0
        assert after[("shortterm_tier_ready", (("tier", "cache"),))] == 0
        assert after[("shortterm_tier_ready", (("tier", "store"),))] == 1
        assert after[("shortterm_degraded", ())] == 0


async def test_an_eviction_policy_turned_on_at_runtime_makes_the_cache_not_ready(
    servers: Servers,
) -> None:
    port = servers.redis()
    admin = aioredis.Redis(port=port)
    clock = [0.0]
    try:
        async with shortterm.open(store="memory://", cache=f"redis://127.0.0.1:{port}/0") as memory:
            readiness = Readiness(memory, clock=lambda: clock[0])
            assert (await readiness.check()).ready
            await admin.config_set("maxmemory-policy", "allkeys-lru")
            clock[0] += 2  # past the verdict's one second
            verdict = await readiness.check()
            assert verdict.cache is not None and verdict.store is None, verdict
            reason = one_line(verdict.cache)
            assert "maxmemory-policy is allkeys-lru" in reason and "noeviction" in reason, reason
            assert (await scrape(memory))[("shortterm_cache_degraded", ())] == 1
            await admin.config_set("maxmemory-policy", "noeviction")
            clock[0] += 2
            assert (await readiness.check()).ready
    finally:
        await admin.aclose()
