"""Counters and the health of both tiers, as one process saw them.

Every path that meets a failing durable tier reports it here, so the facade's outage state
(``degraded``) and the counters in ``Memory.stats()`` have one keeper. A failing hot tier
(Redis: :class:`CacheUnavailable`) is kept apart (``cache_errors``, ``cache_degraded``): it
says nothing about the durable tier, and a context cannot be served without it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from ...model.errors import CacheUnavailable, StoreUnavailable

__all__ = ["COUNTERS", "Health", "Seen", "watching"]

log = logging.getLogger("shortterm")

COUNTERS = (
    "captures",
    "captures_skipped",
    "store_errors",
    "degraded_captures",
    "read_through",
    "hydrated_rows",
    "upgrades",
    "degraded_contexts",
    "upgrade_refusals",
    "fenced_writes",
    "horizon_dropped",  # history messages a forget's horizon kept out of a capture
    "journal_entries",
    "journal_errors",
    "cache_errors",
)


@dataclass
class Seen:
    """What one call (a capture) met of the durable tier: whether its write was kept in the
    hot tier only (``degraded``), and the durable tier's error that made it so."""

    degraded: bool = False
    reason: str | None = None


# The call in progress in this task that watches (see watching()); None: nobody asks.
_SEEN: ContextVar[Seen | None] = ContextVar("shortterm_seen", default=None)


@contextmanager
def watching() -> Iterator[Seen]:
    """What the durable tier did to the calls made inside, in this task: the process-wide
    ``degraded`` flag and counters cannot tell the caller whether its own write was kept."""
    seen = Seen()
    token = _SEEN.set(seen)
    try:
        yield seen
    finally:
        _SEEN.reset(token)


class Health:
    """The counters, and whether the durable tier and the hot tier are failing (each logged
    once per outage)."""

    def __init__(self) -> None:
        self._counts = dict.fromkeys(COUNTERS, 0)
        self.degraded = False
        self.cache_degraded = False

    def count(self, name: str, n: int = 1) -> None:
        self._counts[name] += n  # a KeyError names a counter that does not exist
        if name == "degraded_captures" and (seen := _SEEN.get()) is not None:
            seen.degraded = True  # the caller watching learns it of its own capture

    def value(self, name: str) -> int:
        return self._counts[name]

    def counts(self) -> dict[str, int]:
        """The counters, and ``cache_degraded`` (``Memory.stats()`` adds ``degraded``)."""
        return {**self._counts, "cache_degraded": self.cache_degraded}

    def failed(self, what: str, exc: StoreUnavailable, *, counted: bool = True) -> None:
        """The durable tier failed during ``what``; ``counted`` adds one to store_errors.
        A failure of the hot tier (a :class:`CacheUnavailable`, which code around either
        tier may catch as a ``StoreUnavailable``) is counted as the hot tier's instead."""
        if isinstance(exc, CacheUnavailable):
            self.cache_failed(what, exc)
            return
        if (seen := _SEEN.get()) is not None:
            seen.reason = str(exc)
        if counted:
            self._counts["store_errors"] += 1
        if not self.degraded:
            self.degraded = True
            log.warning("shortterm durable tier failed during %s: %s", what, exc)

    def ok(self) -> None:
        """The durable tier answered."""
        if self.degraded:
            self.degraded = False
            log.info("shortterm durable tier is back")

    def cache_failed(self, what: str, exc: CacheUnavailable) -> None:
        """The hot tier failed during ``what``: one more cache_errors; the durable tier's
        state is left as it is."""
        self._counts["cache_errors"] += 1
        if not self.cache_degraded:
            self.cache_degraded = True
            log.warning("shortterm hot tier failed during %s: %s", what, exc)

    def cache_ok(self) -> None:
        """The hot tier answered every read of a call."""
        if self.cache_degraded:
            self.cache_degraded = False
            log.info("shortterm hot tier is back")
