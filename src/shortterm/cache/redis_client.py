"""The Redis hot tier's connection: URLs, the client (one node or a cluster), the bound on a
call and the mapping of Redis errors to :class:`StoreUnavailable`.

One node: ``redis://host:6379/0`` (also ``rediss://``, ``unix://``), a ``redis.asyncio.Redis``.
A cluster: ``redis+cluster://host:port[,host:port...]`` (``rediss+cluster://`` for TLS), a
``redis.asyncio.cluster.RedisCluster`` that discovers the topology from those seed nodes. Both
run the same scripts on the same key layout (:mod:`.redis_layout`).
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import inspect
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import (
    URL_QUERY_ARGUMENT_PARSERS,
    AbstractConnection,
    ConnectionPool,
    SSLConnection,
    UnixDomainSocketConnection,
    parse_url,
)
from redis.asyncio.connection import Connection as TCPConnection
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import (
    AskError,
    ClusterError,
    NoScriptError,
    RedisClusterException,
    RedisError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..model import urls
from ..model.errors import CacheUnavailable, ConfigError
from .redis_layout import DEFAULT_GROUPS

__all__ = ["Calls", "Opened", "failure_bound_s", "open_url"]

OWN_OPTIONS = ("prefix", "retries", "owner_complete_ttl_s", "safety_margin_s", "groups")
SINGLE_SCHEMES = ("redis", "rediss", "unix")
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
# The options redis-py's URL parser passes on as text (it types those of
# URL_QUERY_ARGUMENT_PARSERS); which of all these a URL may carry depends on the client it
# makes (:func:`_driver_options`).
_TEXT_OPTIONS = (
    "username", "password", "client_name", "lib_name", "lib_version", "encoding",
    "encoding_errors", "ssl_keyfile", "ssl_certfile", "ssl_cert_reqs", "ssl_ca_certs",
    "ssl_ca_data", "ssl_ca_path", "ssl_ciphers", "ssl_password",
)  # fmt: skip
_SOCKET_TIMEOUT_S = 5.0  # redis-py waits for ever by default; a partition must end a call
_BACKOFF_CAP_S = 0.2
# What a cluster answers while it moves slots or elects a master: the call is tried again
# (within its bound) rather than failed. ClusterError: redis-py gave up following redirections.
_TOPOLOGY_ERRORS = (TryAgainError, ClusterError, AskError, SlotNotCoveredError)

Client = aioredis.Redis | RedisCluster


def failure_bound_s(socket_timeout_s: float, retries: int) -> float:
    """The longest one Redis call takes to fail: every attempt waits out the socket timeout,
    and each retry first sleeps at most the backoff cap. :meth:`Calls.call` enforces it
    (connecting and a cluster's redirections included), and a facade call stops at its
    first failing Redis call."""
    return (retries + 1) * socket_timeout_s + retries * _BACKOFF_CAP_S


@dataclass(frozen=True)
class Opened:
    """A client opened from a URL, with our own options read from it."""

    client: Client
    prefix: str
    groups: int
    owner_complete_ttl_s: float
    safety_margin_s: float
    call_timeout_s: float


def open_url(url: str) -> Opened:
    """``redis://host:6379/0?prefix=bot1:&retries=1`` or ``redis+cluster://h1:7000,h2:7000``.

    Our options: ``prefix``, ``retries`` (reconnect attempts after a dropped connection,
    default 1; every operation is safe to repeat), ``owner_complete_ttl_s``,
    ``safety_margin_s``, ``groups`` (hash-tag groups, default 16; see :mod:`.redis_layout`).
    redis-py's own (``socket_timeout``, ``max_connections``, ...) pass through;
    ``socket_timeout`` and ``socket_connect_timeout`` default to 5 s so a hung server becomes
    ``StoreUnavailable``. One call then fails within :func:`failure_bound_s`. Any other
    option is refused by name (``ConfigError``), with the accepted ones."""
    redis_url, options = urls.split_options(
        url,
        schemes=SINGLE_SCHEMES + CLUSTER_SCHEMES,
        ours=OWN_OPTIONS,
        wrong_scheme=(
            f"not a Redis URL: {urls.shown_url(url)!r} "
            "(use redis://host:6379/0 or redis+cluster://host:7000,host:7001)"
        ),
    )
    _check_options(redis_url, url)
    retries = int(urls.non_negative_number(options, "retries", 1, url))
    groups = urls.at_least_one(options, "groups", DEFAULT_GROUPS, url)
    given = dict(parse_qsl(urlsplit(redis_url).query))
    socket_timeout_s = urls.non_negative_number(given, "socket_timeout", _SOCKET_TIMEOUT_S, url)
    if socket_timeout_s <= 0:
        raise ConfigError(
            f"socket_timeout in {urls.shown_url(url)!r} must be a positive number of seconds"
        )
    prefix = options.get("prefix", "shortterm:")
    retry = Retry(ExponentialBackoff(cap=_BACKOFF_CAP_S, base=0.01), retries)
    timeouts: dict[str, Any] = {
        "socket_timeout": _SOCKET_TIMEOUT_S,  # the URL's own values win
        "socket_connect_timeout": min(socket_timeout_s, _SOCKET_TIMEOUT_S),
    }
    client: Client
    try:
        if urlsplit(redis_url).scheme in CLUSTER_SCHEMES:
            client = _cluster_client(redis_url, url, prefix, retry, timeouts)
        else:
            client = aioredis.Redis.from_url(
                redis_url, decode_responses=True, retry=retry, **timeouts
            )
    except (ValueError, RedisClusterException) as exc:
        raise ConfigError(f"cache={urls.shown_url(url)!r}: {exc}") from exc
    return Opened(
        client=client,
        prefix=prefix,
        groups=groups,
        owner_complete_ttl_s=urls.non_negative_number(options, "owner_complete_ttl_s", 300.0, url),
        safety_margin_s=urls.non_negative_number(options, "safety_margin_s", 3600.0, url),
        call_timeout_s=failure_bound_s(socket_timeout_s, retries),
    )


def _check_options(redis_url: str, url: str) -> None:
    """Refuse, by name, an option of ``redis_url`` (the URL without ours) that the client it
    makes does not take, listing the accepted ones: redis-py would pass it on as a keyword
    argument, to fail with a TypeError at the first connection (or at once, for a cluster)."""
    parts = urlsplit(redis_url)
    theirs = _driver_options(parts.scheme)
    names = [name for name, _ in parse_qsl(parts.query, keep_blank_values=True)]
    unknown = sorted({n for n in names if n not in theirs})
    if not unknown:
        return
    close = difflib.get_close_matches(unknown[0], [*OWN_OPTIONS, *theirs], n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    if not hint and unknown[0].startswith("ssl_") and not parts.scheme.startswith("rediss"):
        hint = " (TLS options need rediss://)"
    raise ConfigError(
        # The URL is not shown: its query may hold a password.
        f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
        f"in the Redis URL{hint}; accepted: shortterm's {', '.join(OWN_OPTIONS)}, "
        f"and redis-py's {', '.join(sorted(theirs))}"
    )


@functools.cache
def _driver_options(scheme: str) -> frozenset[str]:
    """The redis-py options a URL of ``scheme`` may carry: those its URL parser reads that
    the client it makes accepts (TLS options only with ``rediss``)."""
    if scheme in CLUSTER_SCHEMES:
        takes = _parameters(RedisCluster)
    else:
        connection: type[AbstractConnection] = {
            "rediss": SSLConnection,
            "unix": UnixDomainSocketConnection,
        }.get(scheme, TCPConnection)
        takes = _parameters(connection) | _parameters(ConnectionPool)
    readable = {*URL_QUERY_ARGUMENT_PARSERS, *_TEXT_OPTIONS} & takes
    if not scheme.startswith("rediss"):
        readable = {name for name in readable if not name.startswith("ssl_")}
    return frozenset(readable)


def _parameters(cls: type) -> set[str]:
    """The keyword parameters of ``cls`` and of the ``__init__`` of every class it derives
    from (redis-py's connection classes pass ``**kwargs`` up)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" in vars(klass) and klass is not object:
            for name, p in inspect.signature(vars(klass)["__init__"]).parameters.items():
                if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and name != "self":
                    names.add(name)
    return names


def _cluster_client(
    redis_url: str, url: str, prefix: str, retry: Retry, timeouts: dict[str, Any]
) -> RedisCluster:
    """A cluster client on the URL's seed nodes; what a cluster cannot do is refused."""
    parts = urlsplit(redis_url)
    shown = urls.shown_url(url)
    if "{" in prefix or "}" in prefix:
        raise ConfigError(f"prefix={prefix!r} in {shown!r}: a cluster's prefix takes no braces")
    if parts.path.strip("/") not in ("", "0"):
        raise ConfigError(f"{shown!r}: a Redis Cluster has only database 0")
    query = dict(parse_qsl(parts.query))
    if query.get("db", "0") != "0":
        raise ConfigError(f"{shown!r}: a Redis Cluster has only database 0")
    query.pop("db", None)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    nodes = []
    for hostport in hosts.split(","):
        node = urlsplit("//" + hostport)
        try:
            port = node.port or 6379
        except ValueError as exc:
            raise ConfigError(f"{shown!r}: bad seed node {hostport!r} ({exc})") from exc
        if not node.hostname:
            raise ConfigError(f"{shown!r}: a seed node needs a host ({hostport!r})")
        nodes.append(ClusterNode(node.hostname, port))
    # redis-py's URL parser reads the options every node shares (credentials, TLS, timeouts,
    # typed as it types them) from the first seed node's URL with the query.
    scheme = parts.scheme.split("+")[0]
    first = hosts.split(",")[0]
    netloc = f"{userinfo}@{first}" if userinfo else first
    kwargs: dict[str, Any] = {
        **timeouts,
        **parse_url(urlunsplit((scheme, netloc, "", urlencode(query), ""))),
    }
    for server_only in ("host", "port", "db", "path", "connection_class"):
        kwargs.pop(server_only, None)
    if scheme == "rediss":
        kwargs["ssl"] = True
    return RedisCluster(startup_nodes=nodes, decode_responses=True, retry=retry, **kwargs)


# The facade call in progress in this task, and which tiers failed during it (by id: one
# task may use several memories). Set by Calls.operation(), read by Calls.call.
_FAILED_IN_CALL: ContextVar[dict[int, str] | None] = ContextVar(
    "shortterm_redis_failed_in_call", default=None
)


# True in a call whose server answered NOSCRIPT (it restarted, was flushed, or took the slot
# over from another node): its next attempt sends the scripts' source (EVAL caches them).
BY_SOURCE: ContextVar[bool] = ContextVar("shortterm_redis_by_source", default=False)


class Calls:
    """Runs one Redis round trip at a time within the tier's bound, mapping its errors."""

    def __init__(self, call_timeout_s: float | None) -> None:
        # None: the client's own timeouts bound each call (a client passed in by the caller).
        self.call_timeout_s = call_timeout_s
        self.closed = False

    @contextmanager
    def operation(self) -> Iterator[None]:
        if _FAILED_IN_CALL.get() is not None:
            yield  # inside a facade call already: it is one call
            return
        token = _FAILED_IN_CALL.set({})
        try:
            yield
        finally:
            _FAILED_IN_CALL.reset(token)

    async def call(self, what: str, make: Callable[[], Awaitable[Any]]) -> Any:
        """``make()`` (a round trip), again while a cluster moves slots or a script was not
        cached, until the bound; every operation of the tier is safe to repeat."""
        failed = _FAILED_IN_CALL.get()
        earlier = None if failed is None else failed.get(id(self))
        if self.closed:
            raise CacheUnavailable("Redis hot tier is closed")
        if earlier is not None:
            raise CacheUnavailable(f"Redis {what} not tried: {earlier}")
        token = BY_SOURCE.set(False)
        try:
            return await self._attempts(what, make, failed)
        finally:
            BY_SOURCE.reset(token)

    async def _attempts(
        self, what: str, make: Callable[[], Awaitable[Any]], failed: dict[int, str] | None
    ) -> Any:
        bound = self.call_timeout_s
        deadline = None if bound is None else time.monotonic() + bound
        pause = 0.01
        try:
            async with asyncio.timeout(bound):
                while True:
                    try:
                        return await make()
                    except NoScriptError:
                        BY_SOURCE.set(True)  # for this call's next attempt
                        if deadline is None:
                            return await make()
                    except _TOPOLOGY_ERRORS:
                        if deadline is None or time.monotonic() + pause >= deadline:
                            raise
                        await asyncio.sleep(pause)
                        pause = min(pause * 2, _BACKOFF_CAP_S)
        except (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError) as exc:
            reason = str(exc) or f"no answer within {bound:g} s"
            if failed is not None:
                failed[id(self)] = f"Redis failed earlier in this call ({reason})"
            raise CacheUnavailable(f"Redis {what} failed: {reason}") from exc
        except (RedisError, RedisClusterException) as exc:
            if failed is not None and isinstance(exc, (*_TOPOLOGY_ERRORS, RedisClusterException)):
                failed[id(self)] = f"Redis failed earlier in this call ({exc})"
            raise CacheUnavailable(f"Redis {what} failed: {exc}") from exc
