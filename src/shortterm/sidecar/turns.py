"""Turns that outlive one request: a bounded registry keyed by unguessable ids.

A bot starts a turn with one request, may call the tool with another and captures with a
third. Ids come from :func:`secrets.token_urlsafe`; an id expires ``ttl_s`` seconds after its
last use (by the memory's clock), and at most ``max_turns`` are kept, the least recently used
evicted first. A capture ends the turn: its id is released.

Two registries keep that contract:

- :class:`TurnRegistry` (in-process cache): the :class:`shortterm.Turn` objects themselves,
  in this process. Its per-turn guards hold across requests to this process.
- :class:`RedisTurnRegistry` (Redis cache): one hash per turn in the cache's Redis, under its
  prefix (``turn:<id>``: the turn's arguments, its expiry, the upgrade guard, a capture
  claim) and a sorted set of ids by expiry (``turns``). Any replica on that Redis rebuilds
  the turn from its arguments and serves it; the one-upgrade guard is taken in a Lua script,
  so of parallel tool calls through any replicas exactly one writes; a capture deletes the
  hash, which ends the turn everywhere at once.

The shared registry, rather than a signed self-describing token, because it needs no secret
to distribute to every replica, a capture revokes the turn immediately (a token would stay
valid until it expires), and the guard needs shared state anyway.
"""

from __future__ import annotations

import json
import secrets
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any, Protocol

from ..memory.turn import Turn
from ..memory.turn_args import TurnArgs
from ..model.errors import StoreUnavailable
from ..tool import texts
from .errors import NotFound

if TYPE_CHECKING:
    from ..cache.redis import RedisCache
    from ..memory.facade import Memory

__all__ = ["RedisTurnRegistry", "TurnNotFound", "TurnRegistry", "Turns"]

ID_BYTES = 24  # 192 bits: 32 URL-safe characters


class TurnNotFound(NotFound):
    """No live turn has this id (never issued, expired, evicted or already captured)."""

    def __init__(self, turn_id: str) -> None:
        shown = turn_id if len(turn_id) <= 64 else turn_id[:61] + "..."
        super().__init__(
            f"turn {shown!r} is unknown or expired (ids live for a while after their last use, "
            "and end with their capture): start a new turn"
        )


class Turns(Protocol):
    """What the routes need of a registry."""

    ttl_s: float
    evicted: int
    expired: int

    def __len__(self) -> int: ...

    async def add(self, turn: Turn) -> str: ...

    async def get(self, turn_id: str) -> Turn:
        """The live turn (its expiry pushed forward), or :class:`TurnNotFound`."""
        ...

    async def begin_capture(self, turn_id: str) -> Turn:
        """The live turn, claimed for its capture; :class:`TurnNotFound` when a capture of it
        is already under way."""
        ...

    async def end_capture(self, turn_id: str, *, captured: bool) -> None:
        """Release the turn after a capture (``captured``), or give the claim back so the
        capture can be retried."""
        ...


# -- in-process ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Slot:
    turn: Turn
    expires_at: float
    capturing: bool = False


class TurnRegistry:
    """Live turns by id in this process. Not thread-safe: it lives on the server's event loop.

    Every use pushes the expiry forward by the same ``ttl_s`` and moves the id to the end, so
    the order of the dict is both recency and expiry order: expired ids are always at the
    front, and purging them costs nothing per live id.
    """

    def __init__(self, *, ttl_s: float, max_turns: int, clock: Callable[[], float]) -> None:
        self.ttl_s = ttl_s
        self.max_turns = max_turns
        self._clock = clock
        self._slots: OrderedDict[str, _Slot] = OrderedDict()
        self.evicted = 0
        self.expired = 0

    def __len__(self) -> int:
        return len(self._slots)

    def _purge(self, now: float) -> None:
        slots = self._slots
        while slots:
            first = next(iter(slots.values()))
            if first.expires_at > now:
                break
            slots.popitem(last=False)
            self.expired += 1

    async def add(self, turn: Turn) -> str:
        now = self._clock()
        self._purge(now)
        while len(self._slots) >= self.max_turns:
            self._slots.popitem(last=False)
            self.evicted += 1
        turn_id = secrets.token_urlsafe(ID_BYTES)
        self._slots[turn_id] = _Slot(turn, now + self.ttl_s)
        return turn_id

    def _slot(self, turn_id: str) -> _Slot:
        now = self._clock()
        self._purge(now)
        slot = self._slots.get(turn_id)
        if slot is None:
            raise TurnNotFound(turn_id)
        slot.expires_at = now + self.ttl_s
        self._slots.move_to_end(turn_id)
        return slot

    async def get(self, turn_id: str) -> Turn:
        return self._slot(turn_id).turn

    async def begin_capture(self, turn_id: str) -> Turn:
        slot = self._slot(turn_id)
        if slot.capturing:
            raise TurnNotFound(turn_id)
        slot.capturing = True
        return slot.turn

    async def end_capture(self, turn_id: str, *, captured: bool) -> None:
        if captured:
            self._slots.pop(turn_id, None)
            return
        slot = self._slots.get(turn_id)
        if slot is not None:
            slot.capturing = False


# -- shared through Redis -----------------------------------------------------------------------


def _lua(name: str) -> str:
    return resources.files(__package__).joinpath("lua", f"{name}.lua").read_text("utf-8")


# The registry's Lua scripts live in lua/ (read once, at import); each file says its KEYS and
# ARGV and what it answers.
_ADD = _lua("turn_add")
_GET = _lua("turn_get")
_CLAIM = _lua("turn_claim")  # the one-upgrade guard
_SETTLE = _lua("turn_settle")
_END = _lua("turn_end")


def _turn_args(turn: Turn) -> str:
    # ASCII escapes: a lone surrogate in a JSON string is valid input and must not fail here.
    return json.dumps(turn.args.as_json(), separators=(",", ":"))


class _SharedGuard:
    """The one-upgrade guard of a turn, in its Redis hash (see ``shortterm.memory.guards``)."""

    def __init__(self, registry: RedisTurnRegistry, turn_id: str) -> None:
        self._registry = registry
        self._turn_id = turn_id

    async def claim(self) -> str | None:
        r = self._registry
        state = await r._run("turn guard", r._claim, [r._key(self._turn_id)], [])
        if state == "ok":
            return None
        if state == "gone":
            raise TurnNotFound(self._turn_id)
        return texts.ALREADY if state == "done" else texts.IN_FLIGHT

    async def settle(self, upgraded: bool) -> None:
        r = self._registry
        await r._run("turn guard", r._settle, [r._key(self._turn_id)], ["1" if upgraded else "0"])


class RedisTurnRegistry:
    """Live turns in Redis, shared by every sidecar replica on the same Redis and prefix."""

    def __init__(self, memory: Memory, cache: RedisCache, *, ttl_s: float, max_turns: int) -> None:
        self.ttl_s = ttl_s
        self.max_turns = max_turns
        self._memory = memory
        self._cache = cache
        self._hash_prefix = f"{cache.turn_prefix}turn:"
        self._index = f"{cache.turn_prefix}turns"
        self._ttl_ms = str(max(1, int(ttl_s * 1000)))
        client = cache.client
        self._add = client.register_script(_ADD)
        self._get = client.register_script(_GET)
        self._claim = client.register_script(_CLAIM)
        self._settle = client.register_script(_SETTLE)
        self._end = client.register_script(_END)
        self._live = 0  # as of this replica's last turn start
        self.evicted = 0
        self.expired = 0

    def __len__(self) -> int:
        return self._live

    def _key(self, turn_id: str) -> str:
        return self._hash_prefix + turn_id

    async def _run(self, what: str, script: Any, keys: list[str], args: list[str]) -> Any:
        result: Any = await self._cache.run_script(what, script, keys, args)
        return result

    async def add(self, turn: Turn) -> str:
        turn_id = secrets.token_urlsafe(ID_BYTES)
        now = self._memory.clock()
        args = [
            turn_id,
            _turn_args(turn),
            repr(now + self.ttl_s),
            repr(now),
            str(self.max_turns),
            self._ttl_ms,
            self._hash_prefix,
        ]
        expired, evicted, live = await self._run(
            "turn start", self._add, [self._key(turn_id), self._index], args
        )
        self.expired += int(expired)
        self.evicted += int(evicted)
        self._live = int(live)
        return turn_id

    async def _load(self, turn_id: str, *, claim: bool) -> Turn:
        if not turn_id.isascii():
            raise TurnNotFound(turn_id)  # never issued: ids are URL-safe ASCII
        now = self._memory.clock()
        args = [turn_id, repr(now), repr(now + self.ttl_s), self._ttl_ms, "1" if claim else "0"]
        found = await self._run("turn read", self._get, [self._key(turn_id), self._index], args)
        if not found or found == "capturing":
            raise TurnNotFound(turn_id)
        raw, upgrade = found
        try:
            turn_args = TurnArgs.from_json(json.loads(raw))
        except (ValueError, KeyError, TypeError) as exc:
            # Only this registry writes these hashes; anything else is not a turn of ours.
            raise StoreUnavailable(f"turn {turn_id!r} in Redis is unreadable: {exc}") from exc
        return self._memory.turn_from(
            turn_args, upgraded=upgrade == "done", shared=_SharedGuard(self, turn_id)
        )

    async def get(self, turn_id: str) -> Turn:
        return await self._load(turn_id, claim=False)

    async def begin_capture(self, turn_id: str) -> Turn:
        return await self._load(turn_id, claim=True)

    async def end_capture(self, turn_id: str, *, captured: bool) -> None:
        keys = [self._key(turn_id), self._index]
        await self._run("turn end", self._end, keys, [turn_id, "1" if captured else "0"])
