"""Claims on shared turns given back after a call failed, even when Redis failed with it.

A call that answers an error gives its claim back at once (a capture's claim, a tool call's
upgrade guard), so its retry is served. Often what ended the call was Redis itself, and then
the release cannot get through either: left there, the claim would stay its owner's until
its lease ran out (one durable operation and one Redis call at their bounds: 40 s by
default), refusing the retry with ``409 turn_busy`` long after Redis is back. So a release
that failed is *owed*: this process sends it again every :data:`RETRY_S` until Redis takes
it, and first of all before its own next read of that turn (a retry sent to this replica is
then served by the first call Redis answers). Sending one twice is harmless: the scripts
give back only a claim the token still holds, and mark an upgrade that landed as done.

An owed release is dropped once the claim's lease has run out anyway (any request takes the
claim over then, as it does from a replica that died: a dead replica owes nothing, and its
leases lapse as before).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from ..model.errors import StoreUnavailable

__all__ = ["RETRY_S", "OwedReleases", "Release"]

log = logging.getLogger("shortterm.sidecar")

RETRY_S = 0.25  # between attempts: a refused connection fails at once, so this is the pace


class Release(NamedTuple):
    """One registry script call that gives a claim back, as :meth:`RedisCache.run_script`
    takes it."""

    what: str
    source: str
    keys: list[str]
    args: list[str]


class _Owed(NamedTuple):
    turn_id: str
    release: Release
    until: float  # monotonic: the claim's lease has run out by then


Run = Callable[[str, str, list[str], list[str]], Awaitable[Any]]


class OwedReleases:
    """The releases this process owes Redis, by claim token, and the task that pays them."""

    def __init__(self, run: Run, *, keep_s: float) -> None:
        self._run = run
        self._keep_s = keep_s  # a claim's lease, counted from now: it began before
        self._owed: dict[str, _Owed] = {}
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._owed)

    async def send(self, turn_id: str, token: str, release: Release) -> None:
        """Send ``release`` now; owe it when Redis does not take it (never raises for that)."""
        await self.settled(self._run(*release), turn_id, token, release)

    async def settled(
        self, sending: Awaitable[object], turn_id: str, token: str, release: Release
    ) -> None:
        """Await ``sending`` (``release`` under way, e.g. riding with a pipeline); owe the
        release when it failed or was cancelled half-way."""
        try:
            await sending
        except StoreUnavailable as exc:
            self._owe(turn_id, token, release, str(exc))
        except asyncio.CancelledError:
            self._owe(turn_id, token, release, "the request was cancelled")
            raise

    def _owe(self, turn_id: str, token: str, release: Release, why: str) -> None:
        log.warning(
            "shortterm sidecar: the %s did not reach Redis (%s); sent again every %g s until "
            "Redis takes it, so that the turn's next call is served once Redis is back",
            release.what,
            why,
            RETRY_S,
        )
        self._owed[token] = _Owed(turn_id, release, time.monotonic() + self._keep_s)
        if self._task is None or self._task.done():
            # A context of its own: the failed call's (its "Redis already failed" mark
            # included) must not come along into every later attempt.
            loop = asyncio.get_running_loop()
            self._task = loop.create_task(self._pay_all(), context=contextvars.Context())

    async def pay(self, turn_id: str) -> None:
        """Send now what is owed for ``turn_id``, before this process reads the turn again;
        raises (``StoreUnavailable``) while Redis does not take it."""
        for token, owed in list(self._owed.items()):
            if owed.turn_id == turn_id:
                await self._run(*owed.release)
                self._owed.pop(token, None)

    async def _pay_all(self) -> None:
        while self._owed:
            await asyncio.sleep(RETRY_S)
            for token, owed in list(self._owed.items()):
                if time.monotonic() >= owed.until:
                    self._owed.pop(token, None)  # lapsed: the claim is anyone's now
                    continue
                try:
                    await self._run(*owed.release)
                except StoreUnavailable:
                    break  # Redis still fails: all of them wait for the next round
                self._owed.pop(token, None)
