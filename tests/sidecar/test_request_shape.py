"""Requests whose parts could mean two things, sent byte for byte over a real socket to the
sidecar on loopback: two Host headers, and paths or queries that are not UTF-8."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import urlsplit

import pytest

import shortterm
from shortterm import Message, Reply


async def send_raw(base_url: str, request: bytes) -> tuple[int, dict[str, object]]:
    url = urlsplit(base_url)
    assert url.hostname is not None and url.port is not None
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    try:
        writer.write(request)
        await writer.drain()
        head, _, body = (await asyncio.wait_for(reader.read(), 10)).partition(b"\r\n\r\n")
    finally:
        writer.close()
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body) if body.startswith(b"{") else {}


def get(target: str, *hosts: str) -> bytes:
    lines = [f"GET {target} HTTP/1.1", *(f"Host: {h}" for h in hosts), "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def test_one_host_is_served(base_url: str) -> None:
    status, _ = await send_raw(base_url, get("/v1/servers", "127.0.0.1"))
    assert status == 200


@pytest.mark.parametrize("hosts", [("127.0.0.1", "evil"), ("127.0.0.1", "127.0.0.1")])
async def test_two_host_headers_are_a_bad_request(base_url: str, hosts: tuple[str, str]) -> None:
    status, body = await send_raw(base_url, get("/v1/servers", *hosts))
    assert status == 400
    assert body["code"] == "bad_request" and "2 Host headers" in str(body["detail"])


async def test_invalid_utf8_ids_address_nothing(memory: shortterm.Memory, base_url: str) -> None:
    """%FF%FE and %C0%AF would both decode to "\\ufffd\\ufffd": neither may reach that id."""
    turn = memory.turn(user_id="\ufffd\ufffd", channel_id="c1", server_id="g1")
    said = Message("user", "mine", author_id="\ufffd\ufffd")
    await turn.capture(history=[said], replies=[Reply("ok")])
    for raw in ("%FF%FE", "%C0%AF", "%E9t%E9"):
        read = get(f"/v1/users/{raw}/entries", "127.0.0.1")
        forget = get(f"/v1/users/{raw}", "127.0.0.1").replace(b"GET", b"DELETE", 1)
        for request in (read, forget):
            status, body = await send_raw(base_url, request)
            assert status == 422, (request, status)
            assert body["code"] == "invalid_input" and body["field"] == "path"
    assert await memory.get(shortterm.ScopeKey.user("\ufffd\ufffd", "c1")) is not None
    status, _ = await send_raw(base_url, get("/v1/users/%C3%A9t%C3%A9/entries", "127.0.0.1"))
    assert status == 200  # UTF-8, percent-encoded: the id "été"


async def test_an_invalid_utf8_query_is_refused(base_url: str) -> None:
    status, body = await send_raw(base_url, get("/v1/servers?after=%FF", "127.0.0.1"))
    assert status == 422 and body["field"] == "query"
    status, _ = await send_raw(base_url, get("/v1/servers?after=%C3%A9", "127.0.0.1"))
    assert status == 200
