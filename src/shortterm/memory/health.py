"""Counters and the durable tier's health, as one process saw them.

Every path that meets a failing durable tier reports it here, so the facade's outage state
(``degraded``) and the counters in ``Memory.stats()`` have one keeper.
"""

from __future__ import annotations

import logging

from ..model.errors import StoreUnavailable

__all__ = ["COUNTERS", "Health"]

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
    "journal_entries",
    "journal_errors",
)


class Health:
    """The counters, and whether the durable tier is failing (logged once per outage)."""

    def __init__(self) -> None:
        self._counts = dict.fromkeys(COUNTERS, 0)
        self.degraded = False

    def count(self, name: str, n: int = 1) -> None:
        self._counts[name] += n  # a KeyError names a counter that does not exist

    def value(self, name: str) -> int:
        return self._counts[name]

    def counts(self) -> dict[str, int]:
        return dict(self._counts)

    def failed(self, what: str, exc: StoreUnavailable, *, counted: bool = True) -> None:
        """The durable tier failed during ``what``; ``counted`` adds one to store_errors."""
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
