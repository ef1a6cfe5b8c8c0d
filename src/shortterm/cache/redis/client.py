"""The Redis hot tier's connection: URLs, the client (one node, a Sentinel-managed master or a
cluster), the bound on a call and the mapping of Redis errors to :class:`StoreUnavailable`.

One node: ``redis://host:6379/0`` (also ``rediss://``, ``unix://``), a ``redis.asyncio.Redis``.
A cluster: ``redis+cluster://host:port[,host:port...]`` (``rediss+cluster://`` for TLS), a
``redis.asyncio.cluster.RedisCluster`` that discovers the topology from those seed nodes.
A master that Sentinel fails over: ``redis+sentinel://host:port[,host:port...]/<master>[/db]``
(``rediss+sentinel://`` for TLS to the sentinels and the master alike), a ``redis.asyncio.Redis``
whose connections ask the sentinels where the master is each time they connect, so a failover
is followed without reopening. All run the same scripts on the same key layout
(:mod:`.layout`).
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import inspect
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, parse_qsl, unquote, urlencode, urlsplit, urlunsplit

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
from redis.asyncio.sentinel import (
    SentinelConnectionPool,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)
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

from ...model import urls
from ...model.errors import CacheUnavailable, ConfigError
from .failures import RedisRefused, certificate_problem, explain, refused_for_good
from .layout import DEFAULT_GROUPS
from .sentinels import Sentinels

__all__ = [
    "Calls",
    "Opened",
    "certificate_problem",
    "close_client",
    "failure_bound_s",
    "open_url",
    "ping_master",
    "refused_for_good",
]

OWN_OPTIONS = ("prefix", "retries", "owner_complete_ttl_s", "safety_margin_s", "groups")
SINGLE_SCHEMES = ("redis", "rediss", "unix")
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
# Ours too, with a sentinel URL only: the sentinels' own credentials (the URL's user and
# password are the master's, as in redis://).
SENTINEL_OPTIONS = ("sentinel_username", "sentinel_password")
_SENTINEL_PORT = 26379
# The options redis-py's URL parser passes on as text (it types those of
# URL_QUERY_ARGUMENT_PARSERS); which of all these a URL may carry depends on the client it
# makes (:func:`_driver_options`).
_TEXT_OPTIONS = (
    "username", "password", "client_name", "lib_name", "lib_version", "encoding",
    "encoding_errors", "ssl_keyfile", "ssl_certfile", "ssl_cert_reqs", "ssl_ca_certs",
    "ssl_ca_data", "ssl_ca_path", "ssl_ciphers", "ssl_password",
)  # fmt: skip
# What a sentinel's client takes (a TLS option the connection takes may not be among them).
_REDIS_ARGS = frozenset(inspect.signature(aioredis.Redis.__init__).parameters)
_FILE_OPTIONS = ("ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile")
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
    """``redis://host:6379/0?prefix=bot1:&retries=1``, ``redis+cluster://h1:7000,h2:7000`` or
    ``redis+sentinel://h1:26379,h2:26379/mymaster/0``.

    Our options: ``prefix``, ``retries`` (reconnect attempts after a dropped connection,
    default 1; every operation is safe to repeat), ``owner_complete_ttl_s``,
    ``safety_margin_s``, ``groups`` (hash-tag groups, default 16; see :mod:`.layout`);
    with a sentinel URL also ``sentinel_username`` and ``sentinel_password``.
    redis-py's own (``socket_timeout``, ``max_connections``, ...) pass through;
    ``socket_timeout`` and ``socket_connect_timeout`` default to 5 s so a hung server becomes
    ``StoreUnavailable``. One call then fails within :func:`failure_bound_s`. Any other
    option is refused by name (``ConfigError``), with the accepted ones. TLS (``rediss``):
    ``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``, ...; a file they name must exist
    (``ConfigError``), and a certificate the handshake refuses fails the open
    (:func:`certificate_problem`)."""
    redis_url, options = urls.split_options(
        url,
        schemes=SINGLE_SCHEMES + CLUSTER_SCHEMES + SENTINEL_SCHEMES,
        ours=_own_options(urlsplit(url).scheme),
        wrong_scheme=(
            f"not a Redis URL: {urls.shown_url(url)!r} (use redis://host:6379/0, "
            "redis+cluster://host:7000,host:7001 or redis+sentinel://host:26379/mymaster)"
        ),
    )
    _check_options(redis_url, url)
    _check_files(redis_url)
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
        scheme = urlsplit(redis_url).scheme
        if scheme in CLUSTER_SCHEMES:
            client = _cluster_client(redis_url, url, prefix, retry, timeouts)
        elif scheme in SENTINEL_SCHEMES:
            client = _sentinel_client(redis_url, url, options, retry, timeouts)
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
    theirs, ours = _driver_options(parts.scheme), _own_options(parts.scheme)
    names = [name for name, _ in parse_qsl(parts.query, keep_blank_values=True)]
    unknown = sorted({n for n in names if n not in theirs})
    if not unknown:
        return
    close = difflib.get_close_matches(unknown[0], [*ours, *theirs], n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    if unknown[0] in SENTINEL_OPTIONS:
        hint = " (sentinel options need redis+sentinel://)"
    if not hint and unknown[0].startswith("ssl_") and not parts.scheme.startswith("rediss"):
        hint = " (TLS options need rediss://)"
    raise ConfigError(
        # The URL is not shown: its query may hold a password.
        f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
        f"in the Redis URL{hint}; accepted: shortterm's {', '.join(ours)}, "
        f"and redis-py's {', '.join(sorted(theirs))}"
    )


def _own_options(scheme: str) -> tuple[str, ...]:
    """Our options a URL of ``scheme`` may carry."""
    return OWN_OPTIONS + SENTINEL_OPTIONS if scheme in SENTINEL_SCHEMES else OWN_OPTIONS


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
            "redis+sentinel": SentinelManagedConnection,
            "rediss+sentinel": SentinelManagedSSLConnection,
        }.get(scheme, TCPConnection)
        takes = _parameters(connection) | _parameters(ConnectionPool)
    readable = {*URL_QUERY_ARGUMENT_PARSERS, *_TEXT_OPTIONS} & takes
    if not scheme.startswith("rediss"):
        readable = {name for name in readable if not name.startswith("ssl_")}
    return frozenset(readable)


def _check_files(redis_url: str) -> None:
    """Refuse, by name, a TLS option naming a file that is not there: every connection
    would fail on it, as a bare "No such file or directory" at the first call."""
    for name, value in parse_qsl(urlsplit(redis_url).query):
        if name in _FILE_OPTIONS and not os.path.exists(value):
            raise ConfigError(f"{name}={value!r} in the Redis URL: no such file or directory")


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
    nodes = [ClusterNode(host, port) for host, port in _hosts(parts.netloc, shown, "seed node")]
    kwargs = _shared_options(parts._replace(query=urlencode(query)), "", timeouts)
    kwargs.pop("db", None)
    return RedisCluster(startup_nodes=nodes, decode_responses=True, retry=retry, **kwargs)


def _sentinel_client(
    redis_url: str, url: str, options: dict[str, str], retry: Retry, timeouts: dict[str, Any]
) -> aioredis.Redis:
    """A client of the master the URL's sentinels name. Each connection asks them where the
    master is when it connects, so after a failover the retry of a call that met the old
    master (refused, or a demoted master's READONLY) reaches the new one; what a call met
    before the sentinels elected one fails within its bound, and the next call asks again."""
    parts = urlsplit(redis_url)
    shown = urls.shown_url(url)
    master, _, db = parts.path.strip("/").partition("/")
    master = unquote(master)  # a name with a space or a slash is percent-encoded in a URL
    if not master:
        raise ConfigError(
            f"{shown!r}: name the master the sentinels monitor "
            "(redis+sentinel://host:26379,host:26379/mymaster[/db])"
        )
    if db and not db.isdigit():
        raise ConfigError(f"{shown!r}: the database after the master's name is a number ({db!r})")
    sentinels = _hosts(parts.netloc, shown, "sentinel", _SENTINEL_PORT)
    kwargs = _shared_options(parts, f"/{db}" if db else "", timeouts)
    # The sentinels take the master's timeouts and TLS settings, and their own credentials.
    on_sentinels = {
        k: v for k, v in kwargs.items() if k.startswith(("socket_", "ssl")) and k in _REDIS_ARGS
    }
    for option, argument in zip(SENTINEL_OPTIONS, ("username", "password"), strict=True):
        if option in options:
            on_sentinels[argument] = options[option]
    manager = Sentinels(sentinels, sentinel_kwargs=on_sentinels)
    client: aioredis.Redis = manager.master_for(
        master, decode_responses=True, retry=retry, **kwargs
    )
    return client


def _hosts(netloc: str, shown: str, what: str, port: int = 6379) -> list[tuple[str, int]]:
    """The ``host:port`` list of a URL's netloc (after any ``user:password@``)."""
    found = []
    for hostport in netloc.rpartition("@")[2].split(","):
        node = urlsplit("//" + hostport)
        try:
            found_port = node.port or port
        except ValueError as exc:
            raise ConfigError(f"{shown!r}: bad {what} {hostport!r} ({exc})") from exc
        if not node.hostname:
            raise ConfigError(f"{shown!r}: a {what} needs a host ({hostport!r})")
        found.append((node.hostname, found_port))
    return found


def _shared_options(parts: SplitResult, path: str, timeouts: dict[str, Any]) -> dict[str, Any]:
    """The connection options every node shares (credentials, TLS, timeouts, the database
    in ``path``), read and typed by redis-py's URL parser from the URL's first node."""
    scheme = parts.scheme.split("+")[0]
    userinfo, _, hosts = parts.netloc.rpartition("@")
    first = hosts.split(",")[0]
    netloc = f"{userinfo}@{first}" if userinfo else first
    kwargs: dict[str, Any] = {
        **timeouts,
        **parse_url(urlunsplit((scheme, netloc, path, parts.query, ""))),
    }
    for server_only in ("host", "port", "path", "connection_class"):
        kwargs.pop(server_only, None)
    if scheme == "rediss":
        kwargs["ssl"] = True
    return kwargs


async def ping_master(client: Client) -> Any:
    """PING. A Sentinel-managed client first asks the sentinels where the master is now: a
    connection left open on a master that was since demoted would still answer."""
    pool = client.connection_pool if isinstance(client, aioredis.Redis) else None
    if isinstance(pool, SentinelConnectionPool):
        # It also drops the idle connections to a former master.
        await pool.get_master_address()  # type: ignore[no-untyped-call]
    return await client.ping()


async def close_client(client: Client) -> None:
    """Close the client's connections; a Sentinel-managed client's connections to the
    sentinels too (redis-py closes those only with the ``Sentinel`` that made it)."""
    await client.aclose()
    pool = client.connection_pool if isinstance(client, aioredis.Redis) else None
    if isinstance(pool, SentinelConnectionPool):
        await pool.sentinel_manager.aclose()


# The facade call in progress in this task, and which tiers failed during it (by id: one
# task may use several memories). Set by Calls.operation(), read by Calls.call.
_FAILED_IN_CALL: ContextVar[dict[int, str] | None] = ContextVar(
    "shortterm_redis_failed_in_call", default=None
)


def failed_in_call() -> bool:
    """Whether the facade call in progress already met a failed Redis call (of any tier):
    what it would wait for next (a repair) cannot help it within its bound."""
    return bool(_FAILED_IN_CALL.get())


# True in a call whose server answered NOSCRIPT (it restarted, was flushed, or took the slot
# over from another node): its next attempt sends the scripts' source (EVAL caches them).
BY_SOURCE: ContextVar[bool] = ContextVar("shortterm_redis_by_source", default=False)


class Calls:
    """Runs one Redis round trip at a time within the tier's bound, mapping its errors."""

    def __init__(self, call_timeout_s: float | None, tls: bool = False) -> None:
        # None: the client's own timeouts bound each call (a client passed in by the caller).
        self.call_timeout_s = call_timeout_s
        self.tls = tls  # the URL asked for TLS (see failures.explain)
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
            explained = await explain(exc, tls=self.tls)
            reason = str(exc) or f"no answer within {bound:g} s"
            if explained is not None:
                reason = explained.text
            refused = explained is not None and explained.for_good
            # Refused for good: the refusal is the news, not which call met it.
            message = f"Redis {reason}" if refused else f"Redis {what} failed: {reason}"
            if failed is not None:
                failed[id(self)] = f"Redis failed earlier in this call ({reason})"
            raise (RedisRefused if refused else CacheUnavailable)(message) from exc
        except (RedisError, RedisClusterException) as exc:
            if failed is not None and isinstance(exc, (*_TOPOLOGY_ERRORS, RedisClusterException)):
                failed[id(self)] = f"Redis failed earlier in this call ({exc})"
            raise CacheUnavailable(f"Redis {what} failed: {exc}") from exc
