"""The journal entries a store appended lately, as its own process knows them.

A process that journals a forget or a settings change moves a shared hot tier's marks past it
right after (``cache.redis.repair``): the tier replays the entry into each group that lacks it.
Reading the entry back from the journal for that needs the durable tier once more, so a forget
that commits just as PostgreSQL goes away would leave every group short of it for the whole
outage (each group then serves nothing and refuses captures). The store knows the entry it
wrote; kept here, the repair takes it from memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from ..model.fence import JournalEntry, JournalKind

__all__ = ["OwnEntries"]

_KEPT = 256  # the newest entries: a repair asks for the one just written


class OwnEntries:
    """The newest entries this store appended, by sequence number. An entry of a
    transaction that rolled back may be here: callers look up only the number a committed
    call returned (a number SQLite hands out again after a rollback is overwritten by the
    append that reuses it)."""

    def __init__(self) -> None:
        self._entries: dict[int, JournalEntry] = {}

    def add(
        self,
        seq: int,
        kind: str,
        subject: Sequence[str | None],
        targets: Sequence[str],
        now: float,
        horizon: float | None,
    ) -> None:
        entries = self._entries
        entries.pop(seq, None)  # reinserted as the newest
        entries[seq] = JournalEntry(
            seq, cast(JournalKind, kind), tuple(subject), tuple(targets), at=now, horizon=horizon
        )
        if len(entries) > _KEPT:
            del entries[next(iter(entries))]

    def get(self, seq: int) -> JournalEntry | None:
        return self._entries.get(seq)
