"""Durable tiers: the contract, the in-memory reference store and SQLite."""

from ..model import DistilledWrite, ScopeMeta, ScopeRow, ServerSummary
from .base import Store
from .reference import ReferenceStore
from .sqlite import SQLiteStore

__all__ = [
    "DistilledWrite",
    "ReferenceStore",
    "SQLiteStore",
    "ScopeMeta",
    "ScopeRow",
    "ServerSummary",
    "Store",
]
