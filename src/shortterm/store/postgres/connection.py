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
import time
from contextlib import suppress
from typing import Any, Self, TypeAlias
from urllib.parse import parse_qsl, urlsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from ...model.errors import ConfigError, ShortTermError, StoreUnavailable
from ...model.urls import shown_url

__all__ = [
    "Conn",
    "Pool",
    "PoolWatch",
    "check_options",
    "first_contact",
    "pooler_hint",
    "recheck",
    "refusal",
    "server_hint",
    "tls_problem",
    "unreachable",
    "watched_connection",
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
# libpq's words when a certificate fails the connection: the server's is not signed by
# sslrootcert ("certificate verify failed") or names another host, a certificate or key file
# is missing or unreadable, the server refused ours ("alert unknown ca", "requires a valid
# client certificate"). Nothing a retry changes.
_TLS_WORDS = re.compile(r"certificate|private key|alert unknown ca", re.IGNORECASE)
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
        own = f"shortterm's {', '.join(ours)}, and " if ours else ""  # none in listen_url
        raise ConfigError(  # the URL is not shown: its query may hold a password
            f"unknown option{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(map(repr, unknown))} in the PostgreSQL URL{hint}; accepted: {own}"
            "libpq's connection parameters "
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
    reasons = _reasons(exc)
    refused = [r for r in reasons if _REFUSED_WORDS.search(r)]
    if refused:
        return "; ".join(refused)
    if getattr(exc, "sqlstate", None) in _REFUSED_STATES:
        return "; ".join(reasons) or " ".join(str(exc).split())
    return None


def tls_problem(exc: psycopg.OperationalError) -> str | None:
    """libpq's words when a certificate failed the connection (see ``_TLS_WORDS``), with
    what to check when the server's was not trusted; ``None`` for anything else."""
    problem = "; ".join(r for r in _reasons(exc) if _TLS_WORDS.search(r))
    if "certificate verify failed" in problem:
        problem += " (is sslrootcert the CA that signed the server's certificate?)"
    elif "alert" in problem:  # the server's alert: it refused the certificate we sent
        problem += " (check sslcert and sslkey: the server refused them)"
    return problem or None


def _reasons(exc: psycopg.OperationalError) -> list[str]:
    """Each distinct reason in libpq's message (a line per address tried)."""
    return list(dict.fromkeys(m.group(1) for m in _REASON.finditer(str(exc))))


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


async def first_contact(
    conninfo: str,
    kwargs: dict[str, Any],
    what: str,
    *,
    listen: bool = False,
    pooler_said: bool = False,
) -> None:
    """One direct connection before the pool opens. The pool retries a failed connection
    until ``pool_timeout_s`` (a warning logged per attempt) and then reports a timeout; a
    server that refuses the login (no such role or database, authentication failed), a
    refused port, a host name that does not resolve or a certificate that fails TLS will not
    answer later either, so that fails at once, with libpq's or the server's own words or
    naming the address and the cause.
    Anything else (a silent server, one still starting up) is left to the pool and the
    operation's timeout, as before.

    Once connected, what the server is (:func:`_check_server`): a standby, or a pooler in
    transaction mode where none was said (``pooler_said``) or where a LISTEN must hold
    (``listen``: the connection is ``listen_url``'s), is refused with the fix."""
    try:
        conn = await psycopg.AsyncConnection.connect(conninfo, **kwargs)
    except psycopg.OperationalError as exc:
        problem = tls_problem(exc)
        if problem is not None:
            raise StoreUnavailable(f"PostgreSQL TLS connection failed: {problem}") from exc
        reason = refusal(exc)
        if reason is not None:
            raise StoreUnavailable(f"PostgreSQL refused the connection: {reason}") from exc
        cause = await unreachable(conninfo)
        if cause is not None:
            raise StoreUnavailable(f"PostgreSQL {what} failed: {cause}") from exc
        return
    try:
        await _check_server(conn, conninfo, kwargs, listen=listen, pooler_said=pooler_said)
    except psycopg.Error:
        pass  # a server that fails these reads fails the pool's operations too, in its words
    finally:
        await conn.close()


async def _check_server(
    conn: Conn, conninfo: str, kwargs: dict[str, Any], *, listen: bool, pooler_said: bool
) -> None:
    """Refuse a standby (it takes no write, and no LISTEN), and a pooler in transaction mode
    the URL does not say (``pooler=transaction``), or behind ``listen_url``: a LISTEN there
    holds only until the transaction ends. A pooler shows itself by the backend id it gives
    us, which is not its server's (``pg_backend_pid()``); one in transaction mode by handing
    our server session to another connection of ours between two transactions."""
    await conn.set_autocommit(True)
    cur = await conn.execute("SELECT pg_backend_pid(), pg_is_in_recovery()", prepare=False)
    row = await cur.fetchone()
    assert row is not None
    pid, standby = row
    where = f"{conn.info.host}:{conn.info.port}"
    if standby:
        raise _standby(conninfo, where, listen)
    if pid == conn.info.backend_pid or (pooler_said and not listen):
        return
    if not await _hands_sessions_on(conn, pid, conninfo, kwargs):
        return  # a pooler in session mode keeps our session ours: nothing to say
    if listen:
        raise ConfigError(
            f"listen_url reaches {where}, a pooler in transaction mode (it gave our session to "
            "another connection), where a LISTEN is lost when the transaction ends: give the "
            "server's own address, or leave listen_url out to poll the journal"
        )
    raise ConfigError(
        f"the store URL reaches {where}, a pooler in transaction mode (it gave our session to "
        "another connection): add pooler=transaction to it, so nothing is prepared there"
    )


_POOLER_ROUNDS = 3  # another client may take the session first: a few tries


async def _hands_sessions_on(conn: Conn, pid: int, conninfo: str, kwargs: dict[str, Any]) -> bool:
    """Whether a second connection, asking after ``conn``'s transaction ended, is served by
    ``conn``'s server session (``pid``): only a pooler in transaction (or statement) mode does
    that; in session mode the session stays ``conn``'s while it is connected. A pooler reuses
    its newest idle session first (PgBouncer's default), so one try mostly tells."""
    other = await psycopg.AsyncConnection.connect(conninfo, **{**kwargs, "autocommit": True})
    try:
        for _ in range(_POOLER_ROUNDS):
            if await _server_pid(other) == pid:
                return True
            pid = await _server_pid(conn)
        return False
    finally:
        await other.close()


async def _server_pid(conn: Conn) -> int:
    cur = await conn.execute("SELECT pg_backend_pid()", prepare=False)
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


def _standby(conninfo: str, where: str, listen: bool) -> ShortTermError:
    """The error for a standby reached: with several hosts, the option that picks the primary."""
    params = conninfo_to_dict(conninfo)
    several = any("," in str(params.get(key) or "") for key in ("host", "hostaddr", "port"))
    url = "listen_url" if listen else "the store URL"
    if several:
        return ConfigError(
            f"PostgreSQL at {where}, the first host of {url} that answered, is a standby "
            "(read-only): add target_session_attrs=read-write to it, so libpq picks the primary"
        )
    return StoreUnavailable(
        f"PostgreSQL at {where} is a standby (read-only, in recovery): point {url} at the "
        "primary, or list both with target_session_attrs=read-write"
    )


async def recheck(pool: Pool) -> None:
    # A dropped connection often means its idle siblings were dropped too (a server
    # restart, a failover): test them now rather than failing the next operations.
    with suppress(psycopg.Error, TimeoutError):
        await asyncio.wait_for(pool.check(), timeout=5.0)


# A prepared statement that is missing, or already there, on a connection that never prepared
# it: a pooler in transaction mode handed us another client's server connection. Or one of
# the same name that takes other parameters (08P01: "bind message supplies 41 parameters, but
# prepared statement "_pg3_3" requires 2").
_POOLED_STATES = frozenset({"26000", "42P05"})
_READ_ONLY_STATE = "25006"


def pooler_hint(exc: psycopg.Error) -> str:
    """For an error that says the URL leads to a transaction pooler, how to say so."""
    state = getattr(exc, "sqlstate", None)
    bind = state == "08P01" and "prepared statement" in str(exc)
    if state not in _POOLED_STATES and not bind:
        return ""
    return (
        " (is this URL a pooler in transaction mode, such as PgBouncer? add pooler=transaction "
        "to it: no statement is prepared then)"
    )


def server_hint(exc: psycopg.Error, *, pooled: bool) -> str:
    """What to change, for an error whose cause is the server the URL reaches: a pooler in
    transaction mode not said (``pooled``: it was), a standby (read-only)."""
    if getattr(exc, "sqlstate", None) == _READ_ONLY_STATE:
        return (
            " (the server is a standby: point the URL at the primary, or list the hosts with "
            "target_session_attrs=read-write)"
        )
    return "" if pooled else pooler_hint(exc)


# A server at its connection limit is busy, not down: a connection the pool holds may come
# back to a waiting request. libpq reports a refused login as text (no SQLSTATE), so by its
# words: "too many clients already", "too many connections for role …", "remaining connection
# slots are reserved …".
_BUSY_WORDS = re.compile(
    r"too many (clients|connections)|remaining connection slots are reserved", re.IGNORECASE
)


class PoolWatch:
    """What the pool met lately: for the error of a wait that timed out, for readiness, and
    whether the server is down.

    The pool retries a refused connection in the background and only logs the server's
    words; a caller waiting for a connection learns "couldn't get a connection". This keeps
    the newest refusal (until a connection succeeds again) and the newest wait that timed out
    (until a wait that began after it is served: the pool serves again). ``down``: the newest
    connection attempt failed, for another reason than the server's connection limit (the
    server is restarting, gone, failing over): requests then stop waiting for the pool (see
    ``pooled.UNREACHABLE_WAIT_S``); the first attempt that succeeds ends it."""

    def __init__(self) -> None:
        self.refused: str | None = None
        self.down = False
        self.trouble: str | None = None
        self._trouble_at = -float("inf")  # monotonic: when the newest wait timed out
        # The waits for a pooled connection under way, by their timeouts: an attempt that
        # fails while they wait ends them.
        self._waits: set[asyncio.Timeout] = set()

    def connect_failed(self, exc: psycopg.OperationalError) -> None:
        self.refused = "; ".join(_reasons(exc)) or " ".join(str(exc).split())
        if _BUSY_WORDS.search(self.refused):
            return
        self.down = True
        # The server has just refused a connection: no wait under way will be served by it.
        now = asyncio.get_running_loop().time()
        for timeout in self._waits:
            _bring_forward(timeout, now)

    def connected(self) -> None:
        self.refused = None
        self.down = False

    def waiting(self, timeout: asyncio.Timeout) -> None:
        """A wait for a pooled connection, bounded by ``timeout``, begins."""
        self._waits.add(timeout)

    def timed_out(self, message: str) -> None:
        self.trouble = message
        self._trouble_at = time.monotonic()

    def served(self, timeout: asyncio.Timeout, waited_from: float | None = None) -> None:
        """The wait bounded by ``timeout`` ended; ``waited_from``: it began then (monotonic)
        and got its connection."""
        self._waits.discard(timeout)
        if waited_from is not None and waited_from > self._trouble_at:
            self.trouble = None


def _bring_forward(timeout: asyncio.Timeout, when: float) -> None:
    deadline = timeout.when()
    if not timeout.expired() and (deadline is None or when < deadline):
        timeout.reschedule(when)


def watched_connection(watch: PoolWatch) -> type[Conn]:
    """The pool's connection class: every connection attempt tells ``watch`` how it went."""

    class Watched(psycopg.AsyncConnection[Any]):
        @classmethod
        async def connect(cls, conninfo: str = "", **kwargs: Any) -> Self:
            try:
                conn = await super().connect(conninfo, **kwargs)
            except psycopg.OperationalError as exc:
                watch.connect_failed(exc)
                raise
            watch.connected()
            return conn

    return Watched
