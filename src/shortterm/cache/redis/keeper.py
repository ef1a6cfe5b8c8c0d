"""What a read or a write of the Redis tier does when its group cannot vouch for it.

- **A read that finds its group short** (its mark below what this process knows was
  forgotten: another process's forget whose marks are still moving, a Redis gone back in time)
  repairs it at once and reads again, rather than serving nothing: an entry that exists is
  found, whatever forget is running elsewhere.
- **A write refused because its group cannot vouch for it** (``-2``: no mark, a mark behind,
  a reset above the write's position) is written again once the group is repaired and, for a
  reset above it, once the forgets since the write's position are in the group's fence
  (:func:`.repair.backfill`). A write still refused after that is reported, never dropped in
  silence.

Repairs a read or a write asks for run one at a time in a process (concurrent calls that
found the same group short wait for the first, then find nothing left to do). The repair
needs the journal: the one the tier's last repair was given (the journal follower repairs
when the process opens), so a tier never repaired only notes the group as due.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from ...model.errors import StoreUnavailable
from ..base import JournalReader
from . import repair as redis_repair
from .scripts import Groups

__all__ = ["WRITE_TRIES", "Keeper"]

log = logging.getLogger("shortterm")

# A refused write is sent again after a repair, then after a backfill (and once more, for a
# group reset again meanwhile).
WRITE_TRIES = 3

Repair = Callable[[JournalReader, float], Awaitable[int]]


class Keeper:
    """The repairs one tier's reads and writes ask for."""

    def __init__(self, g: Groups, repair: Repair) -> None:
        self._g = g
        self._repair = repair  # the tier's: it checks the server at its first call
        self._lock = asyncio.Lock()
        self.journal: JournalReader | None = None  # the tier's last repair's

    async def mend(self, now: float) -> bool:
        """Repair now what a reply showed short; whether every group vouches again."""
        journal, marks = self.journal, self._g.marks
        if journal is None:
            return False
        async with self._lock:
            if marks.due:  # else another call of ours repaired it meanwhile
                await self._repair(journal, now)
        return not marks.due

    async def vouch(self, groups: Sequence[int], position: int, attempt: int, now: float) -> str:
        """After a write at ``position`` was refused in ``groups`` (``-2``) on its try
        ``attempt`` (from 0): 'again' to send it again, 'fenced' when a journaled entry since
        its position refuses every write before it (a prune), 'no' when nothing more can be
        done (the repair failed, or the journal could not be read)."""
        self._g.marks.due = True
        if not await self.mend(now) or self.journal is None:
            return "no"
        if attempt == 0:
            return "again"  # a mark that was missing or behind: repaired
        try:
            replies = await redis_repair.backfill(self._g, groups, position, self.journal, now)
        except StoreUnavailable as exc:
            log.warning("shortterm could not read the journal to rewrite a refused write: %s", exc)
            return "no"
        return "fenced" if "fenced" in replies else "again"
