"""A PostgreSQL URL nothing answers at: a refused port or an unknown host fails at once, naming
the address and the cause; a server that accepts and then stays silent still times out after
``operation_timeout_s``."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import AsyncIterator

import pytest

import shortterm
from shortterm.model.errors import StoreUnavailable


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # nothing listens there once the socket is closed


async def open_fails(url: str) -> tuple[str, float]:
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as caught:
        async with shortterm.open(store=url):
            pass
    return str(caught.value), time.monotonic() - started


async def test_a_refused_port_fails_at_once(caplog: pytest.LogCaptureFixture) -> None:
    port = closed_port()
    with caplog.at_level(logging.WARNING):
        message, elapsed = await open_fails(f"postgresql://postgres@127.0.0.1:{port}/test")
    assert elapsed <= 2.0
    assert f"127.0.0.1:{port} refused the connection" in message
    assert not [r for r in caplog.records if r.name.startswith("psycopg")]


async def test_an_unknown_host_fails_at_once() -> None:
    message, elapsed = await open_fails("postgresql://postgres@no-such-host.invalid:5432/test")
    assert elapsed <= 2.0
    assert "no-such-host.invalid:5432: the host name does not resolve" in message


@pytest.fixture
async def silent_port() -> AsyncIterator[int]:
    """Accepts connections and never says a word (a stalled host behind a live socket)."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    for writer in held:
        writer.close()
    server.close()
    await server.wait_closed()


async def test_a_silent_server_still_times_out_as_configured(silent_port: int) -> None:
    url = f"postgresql://postgres@127.0.0.1:{silent_port}/test?operation_timeout_s=1"
    message, elapsed = await open_fails(url)
    assert 1.0 <= elapsed < 3.0
    assert "got no answer within 1 s (operation_timeout_s)" in message
