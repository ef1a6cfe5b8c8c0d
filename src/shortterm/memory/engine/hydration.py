"""Hydration: the durable rows whose summary or categories are still live, loaded into the hot
tier at the open (and again after a journal gap), without their messages."""

from __future__ import annotations

import gc
import logging
import time

from ...cache.base import HydrationSink
from ...model.config import Config
from ...model.fence import WriteFence
from ...store.base import HydrationSource
from .tiers import Tiers

__all__ = ["hydrate"]

log = logging.getLogger("shortterm")


async def hydrate(tiers: Tiers, config: Config, fence: WriteFence, now: float) -> tuple[int, float]:
    """Load every live row, fenced at ``fence``; returns the rows loaded and the seconds it
    took. The hot tier is marked complete when nothing was evicted meanwhile."""
    started = time.perf_counter()
    store, cache = tiers.store, tiers.cache
    evictions = cache.stats().get("evictions", 0)
    rows = 0
    # A bulk load creates objects that all stay alive; the cyclic collector would walk the
    # growing heap again and again for nothing, so it pauses until the load is done.
    collecting = gc.isenabled()
    gc.disable()
    since, batch_rows = now - config.summary_ttl_s, config.hydrate_batch_rows
    try:
        if isinstance(store, HydrationSource) and isinstance(cache, HydrationSink):
            # Plain tuples from the cursor to the records: no row objects per row.
            async for plain in store.iter_hydration(since=since, batch_rows=batch_rows):
                await cache.apply_hydration(plain, now, fence)
                rows += len(plain)
        else:
            async for batch in store.iter_distilled(since=since, batch_rows=batch_rows):
                await cache.apply_rows(batch, now, fence)
                rows += len(batch)
    finally:
        if collecting:
            _promote_all()
            gc.enable()
    cache.set_complete(cache.stats().get("evictions", 0) == evictions)
    seconds = time.perf_counter() - started
    log.info("shortterm hydrated %d rows in %.3f s", rows, seconds)
    return rows, seconds


def _promote_all() -> None:
    """Move every object the collector tracks into its oldest generation, without walking
    them. What the load built lives as long as the process; left in the youngest generation,
    the first collection after the load would walk all of it, and the next generation's
    collection once more (a second per million rows, before the first turn). ``freeze`` then
    ``unfreeze`` only splice the collector's lists. Skipped when the application froze
    objects itself: ``unfreeze`` would hand those back to the collector."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()
