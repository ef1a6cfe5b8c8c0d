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

A repair runs as a task of the tier's, one at a time in a process: the calls that need one
start it or ask the one running for another pass, and wait at most ``REPAIR_WAIT_S`` for a
pass that began after they asked (not for the task to end: it goes on while forgets come).
A repair still running then (Redis lost many forgets: a replay of 100,000 takes seconds)
goes on in the background while calls answer: reads serve nothing from the groups still
short, and a capture into one raises ``CacheUnavailable`` (its durable part is written;
the sidecar answers 503 with ``Retry-After``). The repair needs the journal: the one the
tier's last repair was given (the journal follower repairs when the process opens), so a
tier never repaired only notes the group as due.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from contextvars import Context

from ...model.errors import StoreUnavailable
from ..base import JournalReader, OwnEntry
from . import repair as redis_repair
from .client import failed_in_call
from .scripts import Groups

__all__ = ["REPAIR_WAIT_S", "WRITE_TRIES", "Keeper"]

log = logging.getLogger("shortterm")

# A refused write is sent again after a repair, then after a backfill (and once more, for a
# group reset again meanwhile).
WRITE_TRIES = 3

# How long after a repair began the calls that need it wait for it; past that they answer
# without it (reads serve nothing from a group still short), so a call that finds Redis
# far behind answers within about this bound, whatever the repair has left to do.
REPAIR_WAIT_S = 1.0


class Keeper:
    """The repairs one tier's reads, writes and journal follower ask for."""

    def __init__(self, g: Groups, token: str) -> None:
        self._g = g
        self._token = token  # the tier's: it names this process's claims on a reset
        self.journal: JournalReader | None = None  # the tier's last repair's
        self._task: asyncio.Task[int] | None = None
        self._to = 0  # the highest ``to`` asked of the running task
        self._own: OwnEntry | None = None  # the newest own entry asked with it
        # Asks, numbered; a pass of the task serves every ask made before it began. A call
        # waits for a pass that began after it asked (so it saw the groups as they are now,
        # and covered what the call knows was forgotten), not for the task to end: while
        # forgets keep coming, the task keeps going, and a call would wait for all of them.
        self._asked = 0
        self._served = 0  # the newest ask a pass that succeeded served
        self._highest = 0  # the highest mark that pass left
        self._passed = asyncio.Event()  # set at the end of each pass, then replaced
        self._told = False  # the background warning was logged for the running task

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def repair(self, now: float, to: int = 0, own: OwnEntry | None = None) -> int:
        """Bring every group's mark up to what this process knows was forgotten (or ``to``):
        start the repair, or ask the one running for another pass, and wait for a pass that
        began after this call asked, at most ``REPAIR_WAIT_S``. Returns the highest mark
        that pass left (see :func:`.repair.repair`), or 0 while the repair goes on in the
        background or when it failed (logged; tried again at the next call that finds a
        group short). ``own``: the entry ``to`` names, replayed without reading it."""
        return await self._wait(now, to, own) or 0

    async def _wait(self, now: float, to: int, own: OwnEntry | None) -> int | None:
        """The highest mark of a pass that began after this call asked, or ``None``."""
        journal = self.journal
        if journal is None:
            return None
        self._to = max(self._to, to)
        if own is not None and (self._own is None or own.entry.seq > self._own.entry.seq):
            self._own = own
        self._asked += 1
        ask = self._asked
        loop = asyncio.get_running_loop()
        task = self._task
        if task is None or task.done():
            self._told = False
            # A context of its own: it outlives the call that started it, whose per-call
            # state (a failure met earlier in the call) is not its own.
            run = self._run(journal, now)
            task = loop.create_task(run, name="shortterm-redis-repair", context=Context())
            self._task = task
            task.add_done_callback(_reported)
        deadline = loop.time() + REPAIR_WAIT_S
        while self._served < ask:
            if failed_in_call():
                # Redis failed this call already: the repair (a task of its own, outside the
                # call's bound) meets the same failure; the call answers within its bound.
                return None
            if task.done():
                return None  # it failed (logged)
            passed = self._passed
            left = deadline - loop.time()
            if left <= 0:
                if not self._told:
                    self._told = True  # said once per repair
                    log.warning(
                        "shortterm Redis repair goes on in the background: Redis lost forgets "
                        "it had applied (a restart from an older snapshot, a promoted "
                        "replica); until they are replayed, the groups short of them serve "
                        "nothing and refuse captures"
                    )
                return None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(passed.wait(), left)
        return self._highest

    async def _run(self, journal: JournalReader, now: float) -> int:
        """Passes until one began after the last ask: each brings every group up to the
        highest ``to`` asked (and what the process knows) when it began."""
        highest = 0
        try:
            while True:
                serves, to = self._asked, self._to
                mark = await redis_repair.repair(self._g, journal, self._token, now, to, self._own)
                highest = max(highest, mark)
                if not self._g.marks.due:  # every group vouches: the asks before it are served
                    self._served, self._highest = serves, mark
                self._pass_ended()
                if self._asked == serves:  # no call asked meanwhile
                    return highest
        except StoreUnavailable as exc:
            self._g.marks.due = True
            log.warning(
                "shortterm could not replay the journal's forgets into Redis (tried again at "
                "the next call; until then what Redis may have lost of them is not served): %s",
                exc,
            )
            return 0
        finally:
            self._pass_ended()

    def _pass_ended(self) -> None:
        passed, self._passed = self._passed, asyncio.Event()
        passed.set()

    async def close(self) -> None:
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])

    async def mend(self, now: float) -> bool:
        """Repair now what a reply showed short; whether every group vouches again (a pass
        that began after this call succeeded)."""
        if self.journal is None:
            return False
        if not self._g.marks.due:  # a repair of ours finished meanwhile
            return True
        return await self._wait(now, 0, None) is not None

    async def vouch(self, groups: Sequence[int], position: int, attempt: int, now: float) -> str:
        """After a write at ``position`` was refused in ``groups`` (``-2``) on its try
        ``attempt`` (from 0): 'again' to send it again, 'fenced' when a journaled entry since
        its position refuses every write before it (a prune), 'no' when nothing more can be
        done (the repair failed or goes on in the background, or the journal could not be
        read)."""
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


def _reported(task: asyncio.Task[int]) -> None:
    """A repair that failed other than by a tier being unavailable, with no call waiting."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("shortterm Redis repair failed", exc_info=exc)
