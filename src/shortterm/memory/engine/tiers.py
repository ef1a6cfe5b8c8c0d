"""The two tiers one memory works on, held in one place by the engine and its helpers.

The engine, the journal follower and the write-behind all reach the tiers through the same
:class:`Tiers`, so replacing one (a wrapper that adds latency or failures) replaces it for all.
"""

from __future__ import annotations

from ...cache.base import HotTier
from ...store.base import Store

__all__ = ["Tiers"]


class Tiers:
    """The durable tier (``store``) and the hot tier (``cache``)."""

    __slots__ = ("cache", "store")

    def __init__(self, store: Store, cache: HotTier) -> None:
        self.store = store
        self.cache = cache
