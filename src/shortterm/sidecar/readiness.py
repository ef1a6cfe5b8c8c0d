"""Readiness: whether the durable tier and the hot tier answer now.

``/healthz`` says the process serves; ``/readyz`` says it can do its job. The memory's own
``degraded`` flag only changes when a request meets the store, so it says nothing while no
traffic flows (and stays set after an outage until traffic clears it). Readiness asks both
tiers itself instead, each with one cheap read (the journal head; one hot-tier record) bounded
by ``timeout_s``. A hot tier that can ``ping`` (Redis) is also pinged on every node that holds
data: a Redis Cluster's dead master refuses connections at once, but the one record read
reaches only its own slot's master, and the cluster takes its node timeout (seconds) to
declare the master failed. A PostgreSQL store whose pool let a wait for a connection time out
is not ready until a wait begun after it is served (``pool_trouble``): the probe's one read may
get through while the bot's operations queue. A Redis is also asked its ``maxmemory-policy``
again (an operator may turn eviction on at runtime: the tier is then not ready, with the fix),
unless it refused to say at open. The answer is kept for ``max_age_s``: a load
balancer, a Kubernetes probe and a monitoring scrape hitting every replica cost one round trip
per tier per second, and concurrent requests share one probe.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from ..memory.facade import Memory
from ..model.errors import ConfigError, StoreUnavailable

__all__ = ["PROBE_TIMEOUT_S", "Readiness", "Verdict"]

PROBE_TIMEOUT_S = 1.0
MAX_AGE_S = 1.0
STALE_AFTER_S = 5.0


@dataclass(frozen=True, slots=True)
class Verdict:
    """Each tier's answer: ``None`` when it answered, else why not."""

    store: str | None
    cache: str | None

    @property
    def ready(self) -> bool:
        return self.store is None and self.cache is None


class _Probe:
    """One tier's read, at most one in flight.

    A read that times out is left to finish on its own rather than cancelled: cancelling a
    PostgreSQL query sends a cancel request, which a partition holds for seconds, and the
    answer must not wait for it. A read outstanding longer than ``STALE_AFTER_S`` is given up
    on and a new one started, so a hung connection does not hide the tier's return.
    """

    def __init__(self, tier: str, read: Callable[[], Coroutine[Any, Any, object]]) -> None:
        self._tier = tier
        self._read = read
        self._task: asyncio.Task[object] | None = None
        self._started = 0.0

    async def answer(self, timeout_s: float, now: float) -> str | None:
        task = self._task
        if task is None or task.done() or now - self._started > STALE_AFTER_S:
            task = self._task = asyncio.ensure_future(self._read())
            task.add_done_callback(_retrieve)
            self._started = now
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
        if not done:
            return f"the {self._tier} gave no answer within {timeout_s:g} s"
        failure = task.exception()
        if failure is None:
            return None
        if isinstance(failure, StoreUnavailable):
            return f"the {self._tier} is unavailable: {failure}"
        if isinstance(failure, ConfigError):
            return str(failure)  # it names the setting and the fix
        raise failure


async def _ping_cache(memory: Memory) -> None:
    """Every node of a shared hot tier (when it can ``ping``), then one record's read; then
    the eviction policy of one that has it (``ConfigError`` when it may evict), unless the
    server refused to tell it (which was warned about once, at open)."""
    cache = memory.cache
    ping = getattr(cache, "ping", None)
    if ping is not None:
        await ping()
    await memory.ping_cache()
    check_eviction = getattr(cache, "check_eviction", None)
    if check_eviction is not None and not getattr(cache, "eviction_unknown", False):
        await check_eviction()


def _pool_trouble(memory: Memory) -> str | None:
    """Why the store's pool could not serve lately (PostgreSQL's ``pool_trouble``), known
    without a read."""
    trouble = getattr(memory.store, "pool_trouble", None)
    return f"the store is unavailable: {trouble}" if isinstance(trouble, str) else None


def _retrieve(task: asyncio.Task[object]) -> None:
    # A read given up on may fail later with nobody awaiting it: its error is reported by
    # the probe that follows, not by asyncio's "exception was never retrieved".
    if not task.cancelled():
        task.exception()


class Readiness:
    """Probes ``memory``'s store and cache, at most once per ``max_age_s``."""

    def __init__(
        self,
        memory: Memory,
        *,
        timeout_s: float = PROBE_TIMEOUT_S,
        max_age_s: float = MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._timeout_s = timeout_s
        self._max_age_s = max_age_s
        self._clock = clock  # real time, not the memory's clock: a test's fake clock stands still
        self._lock = asyncio.Lock()
        self._last: tuple[float, Verdict] | None = None

        self._store = _Probe("store", memory.ping_store)
        self._pool_trouble = functools.partial(_pool_trouble, memory)
        self._cache = _Probe("cache", functools.partial(_ping_cache, memory))

    @property
    def last(self) -> Verdict | None:
        """The newest verdict, ``None`` before the first probe (read by the metrics)."""
        return None if self._last is None else self._last[1]

    async def check(self) -> Verdict:
        async with self._lock:  # a request that waited here reuses the probe it waited for
            last = self._last
            now = self._clock()
            if last is not None and now - last[0] < self._max_age_s:
                return last[1]
            store, cache = await asyncio.gather(
                self._store.answer(self._timeout_s, now), self._cache.answer(self._timeout_s, now)
            )
            verdict = Verdict(store=self._pool_trouble() or store, cache=cache)
            self._last = (self._clock(), verdict)
            return verdict
