"""Reaching the server: the connection types, the URL's libpq options, the first-contact probe
and the pool's re-check.

What happens when PostgreSQL is away, or refuses us, lives here, apart from what the store asks
of it.
"""

from __future__ import annotations

import asyncio
import difflib
import os
import re
import socket
from contextlib import suppress
from typing import Any, TypeAlias
from urllib.parse import parse_qsl, urlsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from ...model.errors import ConfigError, StoreUnavailable
from ...model.urls import shown_url

__all__ = [
    "Conn",
    "Pool",
    "check_options",
    "first_contact",
    "recheck",
    "refusal",
    "unreachable",
]

Pool: TypeAlias = "AsyncConnectionPool[psycopg.AsyncConnection[Any]]"
Conn: TypeAlias = "psycopg.AsyncConnection[Any]"

# SQLSTATEs of a server that will never accept this login: invalid authorization
# specification, invalid password, no such database. libpq reports a refused login as text
# (psycopg's sqlstate is None then), so the words of those FATAL messages count too.
_REFUSED_STATES = frozenset({"28000", "28P01", "3D000"})
_REFUSED_WORDS = re.compile(
    r'(role|database) ".*" does not exist|authentication failed|no pg_hba\.conf entry|'
    r"is not permitted to log in|permission denied for database|no password supplied|"
    r"does not support SSL",
    re.IGNORECASE,
)
_LIBPQ_EXAMPLES = ("application_name", "connect_timeout", "sslmode", "options")
_LIBPQ_DOCS = "https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-PARAMKEYWORDS"
# libpq's message has a line per address tried: 'connection to server at "h", port 5432
# failed: FATAL:  role "bot" does not exist'; the reason is what follows the last "failed:".
_REASON = re.compile(r"^(?:.*failed:)?\s*(?:FATAL:|fe_sendauth:)?\s*(.*\S)", re.MULTILINE)


def check_options(conninfo: str, url: str, ours: tuple[str, ...]) -> None:
    """Refuse, by name, a query option of ``conninfo`` (the URL without ``ours``) that
    libpq does not know, listing the accepted ones, and any other URL libpq cannot parse:
    at the first connection they would fail as a bare "invalid URI query parameter"."""
    known = {o.keyword.decode() for o in psycopg.pq.Conninfo.get_defaults()} | {"ssl"}
    names = [name for name, _ in parse_qsl(urlsplit(conninfo).query, keep_blank_values=True)]
    unknown = sorted({n for n in names if n not in known})
    if unknown:
        close = difflib.get_close_matches(unknown[0], [*ours, *known], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(  # the URL is not shown: its query may hold a password
            f"unknown option{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(map(repr, unknown))} in the PostgreSQL URL{hint}; accepted: shortterm's "
            f"{', '.join(ours)}, and libpq's connection parameters "
            f"({', '.join(n for n in _LIBPQ_EXAMPLES if n in known)}, …: {_LIBPQ_DOCS})"
        )
    try:
        conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        said = " ".join(str(exc).split()).replace(conninfo, shown_url(conninfo))  # libpq quotes it
        raise ConfigError(f"{shown_url(url)!r}: {said}") from None


def refusal(exc: psycopg.OperationalError) -> str | None:
    """The server's own reason when it refused the login for good (no such role or database,
    authentication failed, TLS required but not offered): retrying cannot help. ``None`` for
    anything else."""
    reasons = list(dict.fromkeys(m.group(1) for m in _REASON.finditer(str(exc))))
    refused = [r for r in reasons if _REFUSED_WORDS.search(r)]
    if refused:
        return "; ".join(refused)
    if getattr(exc, "sqlstate", None) in _REFUSED_STATES:
        return "; ".join(reasons) or " ".join(str(exc).split())
    return None


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
    server that refuses the login (no such role or database, authentication failed), a
    refused port or a host name that does not resolve will not answer later either, so
    that fails at once, with the server's own words or naming the address and the cause.
    Anything else (a silent server, one still starting up) is left to the pool and the
    operation's timeout, as before."""
    try:
        conn = await psycopg.AsyncConnection.connect(conninfo, **kwargs)
    except psycopg.OperationalError as exc:
        reason = refusal(exc)
        if reason is not None:
            raise StoreUnavailable(f"PostgreSQL refused the connection: {reason}") from exc
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
