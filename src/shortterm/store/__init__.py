"""Durable tiers: the contract, the in-memory reference store and SQLite."""

from .base import DistilledWrite, ScopeMeta, ScopeRow, ServerSummary, Store
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
