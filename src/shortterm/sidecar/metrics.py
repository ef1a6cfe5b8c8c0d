"""Prometheus metrics behind a small facade: one registry per app, nothing global.

Request latency and counts are recorded as requests finish; the memory's own figures
(``memory.stats()``: entries, bytes, evictions, expirations, store errors, …) and the turn
registry's are read when ``/metrics`` is scraped, so they cost nothing in between.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .turns import Turns

__all__ = ["CONTENT_TYPE", "Metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Seconds; the sidecar answers most routes well under a millisecond on loopback.
LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

# memory.stats() keys that are levels; every other number there is a running count.
GAUGES: dict[str, str] = {
    "entries": "Live entries in the hot tier.",
    "bytes": "Estimated bytes held by the hot tier.",
    "degraded": "1 while the durable tier is failing and the memory serves degraded.",
    "hydration_s": "Seconds the last hydration at open took.",
}
HELP: dict[str, str] = {
    "evictions": "Hot-tier entries evicted by the max_entries / max_bytes ceilings.",
    "expirations": "Hot-tier entries dropped because their TTL passed.",
    "store_errors": "Durable-tier operations that failed.",
    "hits": "Hot-tier reads that found a live entry.",
    "misses": "Hot-tier reads that found nothing.",
}


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class _MemoryCollector(Collector):
    def __init__(self, stats: Callable[[], Mapping[str, Any]], turns: Turns) -> None:
        self._stats = stats
        self._turns = turns

    def collect(self) -> Iterator[Metric]:
        for name, value in sorted(self._stats().items()):
            if isinstance(value, bool):
                value = int(value)
            if not isinstance(value, int | float):
                continue
            if name in GAUGES:
                yield GaugeMetricFamily(f"shortterm_{name}", GAUGES[name], value=value)
            else:
                text = HELP.get(name, f"memory.stats()[{name!r}]: a running count.")
                yield CounterMetricFamily(f"shortterm_{name}", text, value=value)
        turns = self._turns
        yield GaugeMetricFamily("shortterm_sidecar_turns", "Live turn ids.", value=len(turns))
        yield CounterMetricFamily(
            "shortterm_sidecar_turns_evicted",
            "Turn ids evicted because max_turns were live.",
            value=turns.evicted,
        )
        yield CounterMetricFamily(
            "shortterm_sidecar_turns_expired",
            "Turn ids that expired unused for turn_ttl_s.",
            value=turns.expired,
        )


class Metrics:
    """``observe(route, method, status, seconds)`` per request; ``render()`` for a scrape."""

    def __init__(self, stats: Callable[[], Mapping[str, Any]], turns: Turns) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._latency = Histogram(
            "shortterm_http_request_duration_seconds",
            "Time to answer an HTTP request, by route template and method.",
            ("route", "method"),
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._requests = Counter(
            "shortterm_http_requests",
            "HTTP requests answered, by route template, method and status.",
            ("route", "method", "status"),
            registry=self.registry,
        )
        self.registry.register(_MemoryCollector(stats, turns))
        # Bound children, so a request costs a dict lookup instead of a labels() call.
        self._bound: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        if method not in _METHODS:
            method = "OTHER"  # a client's made-up method must not create a series per name
        key = (route, method, status)
        bound = self._bound.get(key)
        if bound is None:
            bound = (
                self._latency.labels(route, method),
                self._requests.labels(route, method, str(status)),
            )
            self._bound[key] = bound
        bound[0].observe(seconds)
        bound[1].inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
