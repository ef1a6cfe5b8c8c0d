"""Where one PostgreSQL store lives in its database: the tables' schema prefix, the statements
built for it, its advisory lock keys and its NOTIFY channel.

Several deployments (or test runs) can share a database, one schema each: every name here is
derived from the schema, so they never see each other's rows, locks or notifications.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..sql_common import Statements
from . import sql
from .values import lock_key

__all__ = ["Layout"]


@dataclass(frozen=True, slots=True)
class Layout:
    t: str
    """The tables' prefix: the quoted schema and a dot, or nothing (the search path's)."""
    common: Statements
    upsert: str
    fenced_upsert: str
    put: str
    load_many: str
    fence_lock: int
    """Fenced writes take it shared, forgets exclusively (see ``sql.FENCED_UPSERT``)."""
    journal_lock: int
    """Held by every journal append, so sequence numbers commit in order."""
    migrate_lock: str
    channel: str

    @classmethod
    def of(cls, schema: str | None) -> Layout:
        """``schema`` must already be checked against ``sql.SCHEMA_NAME``."""
        t = f'"{schema}".' if schema else ""
        common = Statements.of(t, "%s")
        return cls(
            t=t,
            common=common,
            upsert=sql.UPSERT.format(t=t),
            fenced_upsert=sql.FENCED_UPSERT.format(t=t),
            put=sql.PUT.format(t=t),
            load_many=sql.LOAD_MANY.format(t=t),
            fence_lock=lock_key(f"shortterm.fence:{schema or ''}"),
            journal_lock=lock_key(f"shortterm.journal:{schema or ''}"),
            migrate_lock=f"shortterm.migrate:{schema or ''}",
            channel=f"stm_{lock_key(schema or 'public') & 0xFFFFFFFFFFFF:x}",
        )
