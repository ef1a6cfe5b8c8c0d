"""Prometheus metrics behind a small facade: one registry per app, nothing global.

Request latency and counts are recorded as requests finish; the memory's own figures
(``memory.stats()``: entries, bytes, evictions, expirations, store errors, …), the turn
registry's and the newest readiness verdict are read when ``/metrics`` is scraped, so they
cost nothing in between. A tier readiness found failing counts as degraded even when no turn
met it: with every sentinel down the master still serves the turns, but a failover would not
be followed.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal, NamedTuple

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from .. import __version__
from .readiness import Verdict
from .turns import Turns

__all__ = ["CONTENT_TYPE", "STATS", "Metrics", "Stat", "backend_labels"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Seconds; the sidecar answers most routes well under a millisecond on loopback.
LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip


class Stat(NamedTuple):
    """How one ``memory.stats()`` key is exported: its metric name (without ``_total``, which
    the client library appends to a counter's sample), its type and its HELP text."""

    name: str
    kind: Literal["gauge", "counter"]
    help: str


# Every key of memory.stats(), for every backend: the HELP says what the figure means to an
# operator and, where it matters, what a rise calls for. A key missing here is still exported
# (as a counter, with a HELP naming it), and a test fails until it is described.
STATS: dict[str, Stat] = {
    "entries": Stat("entries", "gauge", "Scopes held in the hot tier now."),
    "bytes": Stat(
        "bytes", "gauge", "Estimated bytes held by the hot tier now (bounded by max_bytes)."
    ),
    "degraded": Stat(
        "degraded",
        "gauge",
        "1 while the durable tier is failing (a call met it, or the last readiness probe "
        "did): turns are served from the hot tier alone, durable writes are refused (see "
        "/readyz).",
    ),
    "cache_degraded": Stat(
        "cache_degraded",
        "gauge",
        "1 while the hot tier (Redis) is failing (a call met it, or the last readiness probe "
        "did: every sentinel down, an evicting maxmemory-policy): turns may fail with 503 "
        "cache_unavailable (see /readyz); the durable tier's state is shortterm_degraded.",
    ),
    "hydration_s": Stat(
        "hydration_seconds",
        "gauge",
        "Seconds the hydration at startup took (reading the live summaries into the hot tier).",
    ),
    "write_behind_pending": Stat(
        "write_behind_pending",
        "gauge",
        "Turn-counter steps buffered by the SQLite write-behind, not yet committed.",
    ),
    "hits": Stat("hits", "counter", "Hot-tier reads that found a live entry."),
    "misses": Stat(
        "misses", "counter", "Hot-tier reads that found nothing (the durable tier may be read)."
    ),
    "stores": Stat("stores", "counter", "Entries written to the hot tier."),
    "evictions": Stat(
        "evictions",
        "counter",
        "Hot-tier entries evicted by the max_entries / max_bytes ceilings; a steady rise "
        "means the ceilings are too low for the traffic.",
    ),
    "expirations": Stat(
        "expirations", "counter", "Hot-tier entries dropped because their TTL passed."
    ),
    "invalidations": Stat(
        "invalidations",
        "counter",
        "Hot-tier entries dropped by a forget, a privacy choice or a change made elsewhere.",
    ),
    "fenced": Stat(
        "fenced",
        "counter",
        "Hot-tier writes refused because a forget began after them (the forget was kept).",
    ),
    "captures": Stat("captures", "counter", "Turns captured (their messages remembered)."),
    "captures_skipped": Stat(
        "captures_skipped",
        "counter",
        "Captures that kept nothing: stopped, no reply, blank replies or a user's full privacy.",
    ),
    "degraded_captures": Stat(
        "degraded_captures",
        "counter",
        "Captures kept in the hot tier only because the durable tier failed (a counter step "
        "was lost).",
    ),
    "degraded_contexts": Stat(
        "degraded_contexts",
        "counter",
        "Turn contexts served from the hot tier alone because the durable tier failed (a "
        "context the hot tier could not serve either is not counted).",
    ),
    "store_errors": Stat(
        "store_errors",
        "counter",
        "Durable-tier operations that failed; any rise means the store (SQLite file, "
        "PostgreSQL) needs attention.",
    ),
    "cache_errors": Stat(
        "cache_errors",
        "counter",
        "Hot-tier (Redis) failures that failed a turn's context; any rise means Redis needs "
        "attention. Not counted in store_errors.",
    ),
    "read_through": Stat(
        "read_through", "counter", "Hot-tier misses answered from the durable tier."
    ),
    "hydrated_rows": Stat(
        "hydrated_rows", "counter", "Rows with a live summary read into the hot tier at startup."
    ),
    "upgrades": Stat(
        "upgrades", "counter", "Memory updates the model made with the tool and that were saved."
    ),
    "upgrade_refusals": Stat(
        "upgrade_refusals",
        "counter",
        "Tool calls refused (a second update in one turn, a guard, a forget that overtook it, "
        "or the durable tier failing).",
    ),
    "fenced_writes": Stat(
        "fenced_writes",
        "counter",
        "Durable writes refused because a forget began after them (the forget was kept).",
    ),
    "horizon_dropped": Stat(
        "horizon_dropped",
        "counter",
        "History messages kept out of a capture because a clear, a purge or a FULL choice "
        "covered them (the platform passed them back).",
    ),
    "journal_entries": Stat(
        "journal_entries",
        "counter",
        "Forget-journal entries applied: forgets and privacy choices made by any process.",
    ),
    "journal_errors": Stat(
        "journal_errors",
        "counter",
        "Failed reads of the forget journal; while they last, this process answers only after "
        "a bounded wait.",
    ),
    "lost_counter_steps": Stat(
        "lost_counter_steps",
        "counter",
        "Turn-counter steps a failed SQLite write-behind flush could not save (a summary "
        "refresh comes that many turns late).",
    ),
    "write_behind_flushes": Stat(
        "write_behind_flushes", "counter", "SQLite write-behind flushes committed."
    ),
}


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def _family(key: str, value: float) -> Metric:
    stat = STATS.get(key) or Stat(key, "counter", f"memory.stats()[{key!r}] (not described yet).")
    name = f"shortterm_{stat.name}"
    if stat.kind == "gauge":
        return GaugeMetricFamily(name, stat.help, value=value)
    return CounterMetricFamily(name, stat.help, value=value)


def _build_info(backends: tuple[str, str]) -> Metric:
    info = GaugeMetricFamily(
        "shortterm_build_info",
        "Always 1; the labels say which shortterm this process runs, and on which store and "
        "cache (their URL schemes).",
        labels=["version", "store", "cache"],
    )
    info.add_metric([__version__, *backends], 1)
    return info


# What a backend class is called in a URL: the scheme an operator wrote.
_STORES = {"PostgresStore": "postgresql", "SQLiteStore": "sqlite", "ReferenceStore": "memory"}


def backend_labels(store: object, cache: object) -> tuple[str, str]:
    """The store's and the cache's scheme (``postgresql``, ``redis+sentinel``, …), read from
    the objects (no driver is imported here); a backend of the caller's own by its class."""
    store_name = _STORES.get(type(store).__name__, type(store).__name__)
    client = getattr(cache, "client", None)
    if type(cache).__name__ == "InProcessCache":
        cache_name = "memory"
    elif client is None:
        cache_name = type(cache).__name__
    elif type(client).__name__ == "RedisCluster":
        cache_name = "redis+cluster"
    elif type(getattr(client, "connection_pool", None)).__name__ == "SentinelConnectionPool":
        cache_name = "redis+sentinel"
    else:
        cache_name = "redis"
    return store_name, cache_name


class _MemoryCollector(Collector):
    def __init__(
        self,
        stats: Callable[[], Mapping[str, Any]],
        turns: Turns,
        ready: Callable[[], Verdict | None],
        backends: tuple[str, str],
    ) -> None:
        self._stats = stats
        self._turns = turns
        self._ready = ready
        self._backends = backends

    def collect(self) -> Iterator[Metric]:
        yield _build_info(self._backends)
        stats = dict(self._stats())
        verdict = self._ready()
        if verdict is not None:
            stats["degraded"] = bool(stats.get("degraded")) or verdict.store is not None
            stats["cache_degraded"] = bool(stats.get("cache_degraded")) or verdict.cache is not None
            yield from _readiness(verdict)
        for key, value in sorted(stats.items()):
            if isinstance(value, bool):
                value = int(value)
            if isinstance(value, int | float):
                yield _family(key, value)
        turns = self._turns
        yield GaugeMetricFamily(
            "shortterm_sidecar_turns",
            "Live turn ids (with Redis: every replica's, as of this replica's last turn start).",
            value=len(turns),
        )
        yield CounterMetricFamily(
            "shortterm_sidecar_turns_evicted",
            "Turn ids this replica evicted because max_turns were live; their captures get 404.",
            value=turns.evicted,
        )
        yield CounterMetricFamily(
            "shortterm_sidecar_turns_expired",
            "Turn ids this replica dropped unused after turn_ttl_s.",
            value=turns.expired,
        )


def _readiness(verdict: Verdict) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "shortterm_ready",
        "1 when both tiers answered the last readiness probe (/readyz, or this scrape's), "
        "0 when either did not.",
        value=int(verdict.ready),
    )
    tiers = GaugeMetricFamily(
        "shortterm_tier_ready",
        "1 when the tier answered the last readiness probe, 0 when it did not (/readyz, "
        "with the token, says why).",
        labels=["tier"],
    )
    tiers.add_metric(["store"], int(verdict.store is None))
    tiers.add_metric(["cache"], int(verdict.cache is None))
    yield tiers


class _Latency:
    """One (route, method)'s histogram: a count per bucket, the total count and sum."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.sum += seconds

    def cumulative(self) -> list[tuple[str, float]]:
        bounds = [*(str(b) for b in LATENCY_BUCKETS), "+Inf"]
        return list(zip(bounds, itertools.accumulate(self.counts), strict=True))


class _RequestCollector(Collector):
    """The request figures, kept as plain numbers: prometheus_client's own Counter and
    Histogram would add a ``_created`` gauge per series, noise on every scrape."""

    def __init__(self) -> None:
        self.latency: dict[tuple[str, str], _Latency] = {}
        self.requests: dict[tuple[str, str, str], int] = {}

    def collect(self) -> Iterator[Metric]:
        latency = HistogramMetricFamily(
            "shortterm_http_request_duration_seconds",
            "Seconds to answer an HTTP request, by route template and method.",
            labels=["route", "method"],
        )
        for (route, method), series in sorted(self.latency.items()):
            latency.add_metric([route, method], series.cumulative(), sum_value=series.sum)
        yield latency
        requests = CounterMetricFamily(
            "shortterm_http_requests",
            "HTTP requests answered, by route template, method and status (refused ones "
            "included: 401, 413, … carry the route they were sent to).",
            labels=["route", "method", "status"],
        )
        for labels, count in sorted(self.requests.items()):
            requests.add_metric(list(labels), count)
        yield requests


class Metrics:
    """``observe(route, method, status, seconds)`` per request; ``render()`` for a scrape."""

    def __init__(
        self,
        stats: Callable[[], Mapping[str, Any]],
        turns: Turns,
        *,
        ready: Callable[[], Verdict | None] = lambda: None,
        backends: tuple[str, str] = ("", ""),
    ) -> None:
        """``ready``: the newest readiness verdict (``None`` before the first probe);
        ``backends``: the store's and the cache's scheme (:func:`backend_labels`)."""
        self.registry = CollectorRegistry(auto_describe=False)
        self._requests = _RequestCollector()
        self.registry.register(self._requests)
        self.registry.register(_MemoryCollector(stats, turns, ready, backends))

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        if method not in _METHODS:
            method = "OTHER"  # a client's made-up method must not create a series per name
        latency = self._requests.latency.get((route, method))
        if latency is None:
            latency = self._requests.latency[(route, method)] = _Latency()
        latency.observe(seconds)
        key = (route, method, str(status))
        self._requests.requests[key] = self._requests.requests.get(key, 0) + 1

    def render(self) -> bytes:
        return generate_latest(self.registry)
