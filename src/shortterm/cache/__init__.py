"""Hot tiers: the contract and the in-process implementation (Redis lives beside them)."""

from .base import HotTier
from .inprocess import InProcessCache

__all__ = ["HotTier", "InProcessCache"]
