"""Fixtures of the reliability suite: private PostgreSQL schemas and Redis prefixes (removed
after each test), and loopback proxies in front of the real servers that a test may cut."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.reliability.proxy import Proxy


def _target(url: str, default_port: int) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or default_port


def through(url: str, proxy: Proxy) -> str:
    """``url`` with its host and port replaced by the proxy's."""
    parts = urlsplit(url)
    user = f"{parts.username}@" if parts.username else ""
    if parts.password:
        user = f"{parts.username}:{parts.password}@"
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{proxy.port}"))


@pytest.fixture
async def pg_proxy(pg_url: str) -> AsyncIterator[Proxy]:
    proxy = await Proxy(*_target(pg_url, 5432)).start()
    yield proxy
    await proxy.close()


@pytest.fixture
async def redis_proxy(redis_url: str) -> AsyncIterator[Proxy]:
    proxy = await Proxy(*_target(redis_url, 6379)).start()
    yield proxy
    await proxy.close()
