"""Reaching the server: the connection types, the first-contact probe and the pool's re-check.

What happens when PostgreSQL is away lives here, apart from what the store asks of it.
"""

from __future__ import annotations

import asyncio
import os
import socket
from contextlib import suppress
from typing import Any, TypeAlias

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from ...model.errors import StoreUnavailable

__all__ = ["Conn", "Pool", "first_contact", "recheck", "unreachable"]

Pool: TypeAlias = "AsyncConnectionPool[psycopg.AsyncConnection[Any]]"
Conn: TypeAlias = "psycopg.AsyncConnection[Any]"


async def unreachable(conninfo: str) -> str | None:
    """Why nothing will answer at the single TCP address ``conninfo`` names, or ``None``
    (something listens there, or the address is not one plain host and port: a Unix socket,
    several hosts, ``hostaddr``)."""
    params = conninfo_to_dict(conninfo)
    host = str(params.get("host") or os.environ.get("PGHOST") or "")
    port_text = str(params.get("port") or os.environ.get("PGPORT") or "5432")
    if not host or host.startswith("/") or "," in host + port_text or params.get("hostaddr"):
        return None
    try:
        port = int(port_text)
    except ValueError:
        return None
    where = f"{host}:{port}"
    try:
        _, writer = await asyncio.open_connection(host, port)
    except ConnectionRefusedError:
        return f"{where} refused the connection (is PostgreSQL running and listening there?)"
    except socket.gaierror as exc:
        return f"{where}: the host name does not resolve ({exc.strerror})"
    except OSError as exc:
        return f"{where} is unreachable ({exc.strerror or exc})"
    writer.close()
    with suppress(OSError):
        await writer.wait_closed()
    return None


async def first_contact(conninfo: str, kwargs: dict[str, Any], what: str) -> None:
    """One direct connection before the pool opens. The pool retries a failed connection
    until ``pool_timeout_s`` (a warning logged per attempt) and then reports a timeout; a
    server that refuses, or a host name that does not resolve, will not answer later
    either, so that fails at once, naming the address and the cause. Anything else (a
    silent server, one still starting up) is left to the pool and the operation's
    timeout, as before."""
    try:
        conn = await psycopg.AsyncConnection.connect(conninfo, **kwargs)
    except psycopg.OperationalError as exc:
        cause = await unreachable(conninfo)
        if cause is not None:
            raise StoreUnavailable(f"PostgreSQL {what} failed: {cause}") from exc
        return
    await conn.close()


async def recheck(pool: Pool) -> None:
    # A dropped connection often means its idle siblings were dropped too (a server
    # restart, a failover): test them now rather than failing the next operations.
    with suppress(psycopg.Error, TimeoutError):
        await asyncio.wait_for(pool.check(), timeout=5.0)
