"""Durable tiers: the contract, the in-memory reference store and SQLite."""

from ..model import DistilledWrite, ScopeMeta, ScopeRow, ServerSummary
from .base import Store
from .memory import MemoryStore
from .sqlite import SQLiteStore

__all__ = [
    "DistilledWrite",
    "MemoryStore",
    "SQLiteStore",
    "ScopeMeta",
    "ScopeRow",
    "ServerSummary",
    "Store",
]
