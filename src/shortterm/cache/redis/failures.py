"""What a failed Redis connection tells an operator: one line naming the cause and the fix.

redis-py's own words are often not enough: a refused login does not say where, a TLS-only port
met with ``redis://`` shows as "Connection reset by peer", and a certificate refused by either
side is buried in the chain of causes. :func:`explain` reads the chain and, where it knows
better, says what happened and what to change; :class:`RedisRefused` marks a failure no retry
can mend (a refused login or certificate, a TLS-only port, a Sentinel setup that cannot name
the master), so an open that meets it fails instead of leaving every call to fail later.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import Iterator
from dataclasses import dataclass

from redis.exceptions import AuthenticationError

from ...model.errors import CacheUnavailable

__all__ = [
    "Explained",
    "RedisRefused",
    "SentinelFailure",
    "certificate_problem",
    "explain",
    "peer",
    "refused_for_good",
    "tls_only",
]

# OpenSSL's verify codes for a server certificate whose issuer we do not trust
# (X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT and the self-signed ones), and for one made out to
# another host name or address: what to change.
_VERIFY_HINTS = {
    **dict.fromkeys(
        (2, 18, 19, 20, 21), " (is ssl_ca_certs the CA that signed the server's certificate?)"
    ),
    **dict.fromkeys((62, 64), " (connect by a name or address the certificate holds)"),
}
# The alerts of a server that refused the certificate we sent (or wanted one).
_REFUSED_OURS = re.compile(r"CERTIFICATE|UNKNOWN_CA")
_PEER = re.compile(r"(?:connecting to|reading from|writing to) (\S+?)\.?(?:\s|$)")
# What a TLS-only port does to a connection that speaks plain text: it drops it.
_DROPPED = re.compile(r"reset by peer|closed by server|Connection closed", re.IGNORECASE)
_TLS_PROBE_S = 0.5  # once per address and process, after a failed call (never inside its bound)
# Answers of the TLS probe, by address: a port's protocol does not change under a process.
_PROBED: dict[str, bool] = {}


class RedisRefused(CacheUnavailable):
    """Redis (or a sentinel) refused us in a way no retry mends: an open that meets it fails."""


class SentinelFailure(Exception):
    """Mixed into the sentinels' discovery error (:mod:`.sentinels`): its text is complete,
    and ``for_good`` says whether asking again can help."""

    for_good = False


@dataclass(frozen=True, slots=True)
class Explained:
    """The cause and the fix, in words; ``for_good``: no retry mends it."""

    text: str
    for_good: bool


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        yield cause
        cause = cause.__cause__ or cause.__context__


def certificate_problem(exc: BaseException) -> str | None:
    """What was wrong with a certificate, when one failed the TLS handshake: the server's
    (not signed by ``ssl_ca_certs``, expired, for another name) or the one we sent. Retrying
    cannot help. redis-py keeps the ssl error as the cause of its ConnectionError; ``None``
    when there is none in ``exc``'s chain."""
    for cause in _chain(exc):
        if isinstance(cause, ssl.SSLCertVerificationError):
            hint = _VERIFY_HINTS.get(cause.verify_code, "")
            return f"certificate verify failed: {cause.verify_message}{hint}"
        if isinstance(cause, ssl.SSLError) and _REFUSED_OURS.search(cause.reason or ""):
            return (
                f"the server refused our certificate ({cause.reason}; check ssl_certfile "
                "and ssl_keyfile)"
            )
    return None


def peer(exc: BaseException, default: str = "the server") -> str:
    """The address in redis-py's "Error 1 connecting to host:port. ..." (or reading from)."""
    for cause in _chain(exc):
        found = _PEER.search(str(cause))
        if found:
            return found.group(1)
    return default


def refused_for_good(exc: BaseException) -> bool:
    """Whether ``exc`` (what a call of the tier raised) is a refusal no retry mends."""
    return isinstance(exc, RedisRefused)


def login_refused(exc: BaseException, whose: str) -> str | None:
    """The words for a refused login (``whose``: which credentials to check), or ``None``."""
    for cause in _chain(exc):
        if isinstance(cause, AuthenticationError):
            said = str(cause).rstrip(".")
            if said.startswith(("NOAUTH", "HELLO must be called", "Authentication required")):
                return f"requires a password and got none: give {whose}"
            return f"refused the login ({said[:80]}): check {whose}"
    return None


async def tls_only(address: str, dropped: BaseException) -> bool:
    """Whether the plain-text connection that was ``dropped`` at ``address`` met a port that
    speaks TLS only: one TLS handshake (no certificate checked) tells, once per address."""
    causes = list(_chain(dropped))
    if not any(_DROPPED.search(str(c)) or isinstance(c, ConnectionResetError) for c in causes):
        return False
    if any(isinstance(c, ssl.SSLError) for c in causes):
        return False  # it was TLS already
    if address in _PROBED:
        return _PROBED[address]
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return False
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    answer = False
    try:
        async with asyncio.timeout(_TLS_PROBE_S):
            _, writer = await asyncio.open_connection(host.strip("[]"), int(port), ssl=context)
        writer.close()
        answer = True
    except ssl.SSLError as exc:
        # A handshake that got as far as an alert is TLS (it wanted our certificate); a
        # reply that is no TLS record at all is a plain-text server.
        answer = "WRONG_VERSION" not in (exc.reason or "") and "RECORD" not in (exc.reason or "")
    except TimeoutError:
        answer = False  # it waits for more of what it took for a plain-text command
    except OSError:
        return False  # nothing to learn now (refused: restarting?): not remembered
    _PROBED[address] = answer
    return answer


def _refused(exc: BaseException) -> bool:
    return any(isinstance(c, ConnectionRefusedError) for c in _chain(exc)) or (
        "Connect call failed" in str(exc) or "Connection refused" in str(exc)
    )


async def explain(
    exc: BaseException, *, sentinel: bool = False, tls: bool = False
) -> Explained | None:
    """What a failed connection or call met, in words naming the cause and the fix; ``None``
    when redis-py's own words say it (a refused connection, a timeout). ``sentinel``: the
    connection was the master's, found through sentinels (the TLS fix names that scheme).
    ``tls``: the URL asked for TLS, so a dropped connection is not a plain-text one that met
    a TLS port (a server refusing our certificate may close it before its alert is read)."""
    for cause in _chain(exc):
        if isinstance(cause, SentinelFailure):
            return Explained(str(cause), cause.for_good)
    problem = certificate_problem(exc)
    if problem is not None:
        return Explained(f"TLS handshake with {peer(exc)} failed: {problem}", True)
    refused = login_refused(exc, "the user and password in the cache URL")
    if refused is not None:
        return Explained(refused, True)
    address = peer(exc, "")
    if address and _refused(exc):
        return Explained(f"{address} refused the connection (is Redis running there?)", False)
    if address and not tls and await tls_only(address, exc):
        scheme = "rediss+sentinel" if sentinel else "rediss"
        return Explained(
            f"at {address} speaks TLS only, and the URL says plain text: use {scheme}:// "
            "(with ssl_ca_certs=<the CA's certificate file> unless a public CA signed the "
            "server's)",
            True,
        )
    return None
