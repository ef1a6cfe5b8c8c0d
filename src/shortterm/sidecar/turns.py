"""Turns that outlive one request: a bounded registry keyed by unguessable ids.

A bot starts a turn with one request, may call the tool with another and captures with a
third. Ids come from :func:`secrets.token_urlsafe`; an id expires ``ttl_s`` seconds after its
last use (by the memory's clock), and at most ``max_turns`` are kept, the least recently used
evicted first. A capture ends the turn: its id is released.

Two registries keep that contract:

- :class:`TurnRegistry` (in-process cache): the :class:`shortterm.Turn` objects themselves,
  in this process. Its per-turn guards hold across requests to this process.
- :class:`RedisTurnRegistry` (Redis cache): one hash per turn in the cache's Redis, under its
  prefix and in the hash-tag group of the turn's channel (``{g<k>}t:<id>``: the turn's
  arguments, its expiry, the upgrade guard, a capture claim; the id ends with ``.<k>``) and
  per group a sorted set of ids by expiry (``{g<k>}ts``) holding the group's share of
  ``max_turns``. Any replica on that Redis rebuilds the turn from its arguments and serves
  it; the one-upgrade guard is taken in a Lua script, so of parallel tool calls through any
  replicas exactly one writes; a capture deletes the hash, which ends the turn everywhere at
  once.

  The guard and the capture claim are leases: the claim's owner (a token: this replica's
  random id and a count) and a deadline on Redis's clock, one durable operation and one
  Redis call at their bounds after the claim. A call that fails gives its claim back at
  once, even when Redis failed with it (:mod:`.releases`: the release is sent again until
  Redis takes it). A replica that dies mid-call leaves its claim to lapse. Until then, the
  same call sent again is answered :class:`TurnBusy` (409, with the time left); after it,
  the call takes the claim over. A capture is a replace of the turn's stored messages, so
  it is simply done again. An update is not: its write carries its claim's fence target
  (:func:`shortterm.model.fence.turn_target`), and the call that takes the claim over asks
  the durable tier, once, whether a lapsed owner's write landed, fencing their writes off
  for good when none did (``Engine.take_over_upgrade``). So an update lands once, whichever
  replica dies when.

  Deadlines are read from Redis's clock rather than passed in by the replica (as the turn's
  expiry is): a lease is short, and compared by replicas other than its owner, so the skew
  between their clocks would eat into it; Redis's is the one clock they all read.

  Each route costs the fewest round trips: a turn's registration rides with the pipeline of
  the start's owner read, a tool call's turn read takes the guard too and the guard's settle
  rides with the mirror of the written rows, and a capture's turn end rides with the capture
  (see ``Groups.ride`` in the Redis tier).

The shared registry, rather than a signed self-describing token, because it needs no secret
to distribute to every replica, a capture revokes the turn immediately (a token would stay
valid until it expires), and the guard needs shared state anyway.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import secrets
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from ..cache.redis.sources import lua_source
from ..memory.turn import Turn
from ..memory.turn.guards import Lapsed
from ..memory.turn_args import TurnArgs
from ..model.errors import StoreUnavailable
from ..model.fence import turn_target
from ..tool import texts
from .errors import Busy, NotFound
from .releases import OwedReleases, Release

if TYPE_CHECKING:
    from ..cache.redis import RedisCache
    from ..memory.facade import Memory

__all__ = [
    "Capture",
    "Pending",
    "RedisTurnRegistry",
    "TurnBusy",
    "TurnNotFound",
    "TurnRegistry",
    "Turns",
    "call_digest",
]

ID_BYTES = 24  # 192 bits: 32 URL-safe characters


def _shown(turn_id: str) -> str:
    return turn_id if len(turn_id) <= 64 else turn_id[:61] + "..."


class TurnNotFound(NotFound):
    """No live turn has this id (never issued, expired, evicted or already captured)."""

    def __init__(self, turn_id: str) -> None:
        super().__init__(
            f"turn {_shown(turn_id)!r} is unknown or expired (ids live for a while after their "
            "last use, and end with their capture): start a new turn"
        )


class TurnBusy(Busy):
    """Another request holds the turn's capture, or is saving this same update, and its
    claim has ``left_s`` to run: the same request sent after that is served."""

    def __init__(self, turn_id: str, *, capture: bool, left_s: float, where: str) -> None:
        shown, wait = _shown(turn_id), f"retry in {left_s:.1f} s (Retry-After)"
        unless = "if that request has not finished by then (its replica died), the retry"
        if capture:
            message = (
                f"turn {shown!r} is being captured by another request, on {where}; {wait}: "
                f"{unless} captures the turn"
            )
        else:
            message = (
                f"turn {shown!r}: this same update is being saved by another request, on "
                f"{where}; {wait} to learn whether it landed: {unless} saves it, once"
            )
        super().__init__(message, retry_after_s=left_s)


def call_digest(name: object, arguments: object) -> str:
    """What tells a tool call sent again from another call of the same turn: its name and
    arguments, as sent (a JSON string as is, an object with its keys sorted)."""
    raw = json.dumps([name, arguments], sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(raw.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


class Capture(NamedTuple):
    """A turn claimed for its capture, and the claim's token (to give it back)."""

    turn: Turn
    token: str


class Pending(Protocol):
    """A registry step under way: its result, or given up."""

    async def result(self) -> Any: ...

    def drop(self) -> None: ...


class _Local:
    """An in-process registry step, done at once: a turn's registration (its id; dropped, the
    slot goes) or, with ``ending``, its end (the slot goes when the capture returned)."""

    def __init__(self, slots: OrderedDict[str, _Slot], turn_id: str, *, ending: bool) -> None:
        self._slots = slots
        self._turn_id = turn_id
        self._ending = ending

    async def result(self) -> str:
        if self._ending:
            self._slots.pop(self._turn_id, None)
        return self._turn_id

    def drop(self) -> None:
        if not self._ending:
            self._slots.pop(self._turn_id, None)


class Turns(Protocol):
    """What the routes need of a registry."""

    ttl_s: float
    evicted: int
    expired: int

    def __len__(self) -> int: ...

    def add(self, turn: Turn) -> Pending:
        """Register the turn; the pending result is its id (a shared registry sends the
        registration with the next pipeline of this request: start it before the reads)."""
        ...

    def tool_call(self, turn_id: str, *, call: str) -> AbstractAsyncContextManager[Turn]:
        """The live turn (its expiry pushed forward) for one tool call (``call``: its
        :func:`call_digest`), or :class:`TurnNotFound`; a shared registry takes the upgrade
        guard with the read and gives it back on exit if the call never used it, and answers
        :class:`TurnBusy` while another request holds the guard for this same call."""
        ...

    async def begin_capture(self, turn_id: str) -> Capture:
        """The live turn, claimed for its capture; :class:`TurnBusy` while a capture of it
        is under way."""
        ...

    def end_with_capture(self, turn_id: str) -> Pending:
        """End the turn with its capture (a shared registry sends the end with the capture's
        pipeline); :meth:`Pending.drop` it when the capture failed."""
        ...

    async def give_back_capture(self, turn_id: str, token: str) -> None:
        """After a failed capture: give the claim back, so the capture can be retried. Never
        fails for the tier: a release Redis does not take is sent again until it does."""
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

    def add(self, turn: Turn) -> Pending:
        now = self._clock()
        self._purge(now)
        while len(self._slots) >= self.max_turns:
            self._slots.popitem(last=False)
            self.evicted += 1
        turn_id = secrets.token_urlsafe(ID_BYTES)
        self._slots[turn_id] = _Slot(turn, now + self.ttl_s)
        return _Local(self._slots, turn_id, ending=False)

    def _slot(self, turn_id: str) -> _Slot:
        now = self._clock()
        self._purge(now)
        slot = self._slots.get(turn_id)
        if slot is None:
            raise TurnNotFound(turn_id)
        slot.expires_at = now + self.ttl_s
        self._slots.move_to_end(turn_id)
        return slot

    @asynccontextmanager
    async def tool_call(self, turn_id: str, *, call: str) -> AsyncIterator[Turn]:
        # One process: parallel calls share the turn's own guard (a retry is one of them).
        yield self._slot(turn_id).turn

    async def begin_capture(self, turn_id: str) -> Capture:
        slot = self._slot(turn_id)
        if slot.capturing:
            # Its request runs in this process and ends soon, captured or given back.
            raise TurnBusy(turn_id, capture=True, left_s=1.0, where="this sidecar")
        slot.capturing = True
        return Capture(slot.turn, "")

    def end_with_capture(self, turn_id: str) -> Pending:
        return _Local(self._slots, turn_id, ending=True)

    async def give_back_capture(self, turn_id: str, token: str) -> None:
        slot = self._slots.get(turn_id)
        if slot is not None:
            slot.capturing = False


# -- shared through Redis -----------------------------------------------------------------------


# The registry's Lua scripts live with every other Redis script, in cache/redis/lua/ (read
# once, at import); each file says its KEYS and ARGV and what it answers.
_ADD = lua_source("turn_add")
_GET = lua_source("turn_get")
_SETTLE = lua_source("turn_settle")
_END = lua_source("turn_end")
_GIVE_BACK = lua_source("turn_give_back")


def _turn_args(turn: Turn) -> str:
    # ASCII escapes: a lone surrogate in a JSON string is valid input and must not fail here.
    return json.dumps(turn.args.as_json(), separators=(",", ":"))


class _Read(NamedTuple):
    """A turn as its read found it: its arguments, the upgrade guard's state (``claimed``:
    ours to use; ``lapsed``: ours, taken over, see :class:`Lapsed`; ``busy``, ``done`` or
    ``''``), the token this read's claim (if any) holds, and what lapsed."""

    args: TurnArgs
    state: str
    token: str
    lapsed: Lapsed | None = None


class _SharedGuard:
    """The one-upgrade guard of a turn, in its Redis hash (see ``shortterm.memory.turn.guards``),
    as the tool call's turn read took it."""

    def __init__(self, registry: RedisTurnRegistry, turn_id: str, read: _Read) -> None:
        self._registry = registry
        self._turn_id = turn_id
        self._read = read
        self.used = False

    @property
    def ours(self) -> bool:
        return self._read.state in ("claimed", "lapsed")

    @property
    def targets(self) -> tuple[str, ...]:
        return (turn_target(self._turn_id, self._read.token),) if self.ours else ()

    async def claim(self) -> str | Lapsed | None:
        self.used = True
        state = self._read.state
        if state == "claimed":
            return None
        if state == "lapsed":
            return self._read.lapsed
        return texts.ALREADY if state == "done" else texts.IN_FLIGHT

    def settle(self, upgraded: bool) -> Awaitable[object]:
        # Owed when Redis does not take it: an update that landed is still ok for the
        # model, and the guard is settled as soon as Redis is back.
        r, token = self._registry, self._read.token
        keys, args = [r._keys(self._turn_id)[0]], ["1" if upgraded else "0", token]
        release = Release("turn guard's release", _SETTLE, keys, args)
        riding = r._cache.ride(*release).result()
        return r._owed.settled(riding, self._turn_id, token, release)


class RedisTurnRegistry:
    """Live turns in Redis, shared by every sidecar replica on the same Redis and prefix."""

    def __init__(
        self, memory: Memory, cache: RedisCache, *, ttl_s: float, max_turns: int, lease_s: float
    ) -> None:
        self.ttl_s = ttl_s
        self.max_turns = max_turns
        self.lease_s = lease_s
        self._memory = memory
        self._cache = cache
        self._lease_ms = str(max(1, int(lease_s * 1000)))
        self._replica = secrets.token_hex(6)  # this process, in its claims' tokens
        self._owed = OwedReleases(self._run, keep_s=lease_s + 1.0)
        self._claims = itertools.count(1)
        # Turns live in their channel's group (its slot), and each group keeps its share of
        # ``max_turns``: eviction is one script, in one slot.
        self._per_group = str(max(1, -(-max_turns // cache.groups)))
        self._ttl_ms = str(max(1, int(ttl_s * 1000)))
        self._live = [0] * cache.groups  # per group, as of this replica's last turn start
        self.evicted = 0
        self.expired = 0

    def __len__(self) -> int:
        return sum(self._live)

    def _keys(self, turn_id: str) -> tuple[str, str, str]:
        """The turn's hash, its group's index and the prefix of its group's hashes. The id
        ends with its group's number: ``<token>.<group>``."""
        _, dot, number = turn_id.rpartition(".")
        if not (dot and number.isascii() and number.isdigit()) or int(number) >= len(self._live):
            raise TurnNotFound(turn_id)  # never issued
        base = self._cache.turn_group_prefix(int(number))
        return f"{base}:{turn_id}", f"{base}s", f"{base}:"

    async def _run(self, what: str, source: str, keys: list[str], args: list[str]) -> Any:
        result: Any = await self._cache.run_script(what, source, keys, args)
        return result

    def add(self, turn: Turn) -> Pending:
        group = self._cache.group_of(turn.args.channel_id)
        turn_id = f"{secrets.token_urlsafe(ID_BYTES)}.{group}"
        key, index, hashes = self._keys(turn_id)
        now = self._memory.clock()
        args = [
            turn_id,
            _turn_args(turn),
            repr(now + self.ttl_s),
            repr(now),
            self._per_group,
            self._ttl_ms,
            hashes,
        ]
        ride = self._cache.ride("turn start", _ADD, [key, index], args)
        return _Added(self, ride, turn_id, group)

    async def _load(self, turn_id: str, *, claim: str, call: str = "") -> _Read:
        key, index, _ = self._keys(turn_id)
        if self._owed:
            await self._owed.pay(turn_id)  # a retry here: our failed call's claim goes first
        now = self._memory.clock()
        token = f"{self._replica}.{next(self._claims)}"
        # The claimer's journal position: older than any write it makes after the claim.
        since = str(self._memory.journal.head)
        args = [turn_id, repr(now), repr(now + self.ttl_s), self._ttl_ms, claim]
        args += [self._lease_ms, token, since, call]
        found = await self._run("turn read", _GET, [key, index], args)
        if not found:
            raise TurnNotFound(turn_id)
        raw, state, *lapse = found
        if state in ("capturing", "retry"):
            left_ms, owner = lapse
            ours = owner.startswith(f"{self._replica}.")
            where = "this sidecar" if ours else "another sidecar replica"
            left_s = int(left_ms) / 1000
            raise TurnBusy(turn_id, capture=state == "capturing", left_s=left_s, where=where)
        try:
            turn_args = TurnArgs.from_json(json.loads(raw))
        except (ValueError, KeyError, TypeError) as exc:
            # Only this registry writes these hashes; anything else is not a turn of ours.
            raise StoreUnavailable(f"turn {turn_id!r} in Redis is unreadable: {exc}") from exc
        if state != "lapsed":
            return _Read(turn_args, state, token)
        since_raw, owners = lapse
        targets = tuple(turn_target(turn_id, owner) for owner in owners.split())
        return _Read(turn_args, state, token, Lapsed(int(since_raw), targets))

    @asynccontextmanager
    async def tool_call(self, turn_id: str, *, call: str) -> AsyncIterator[Turn]:
        read = await self._load(turn_id, claim="g", call=call)
        guard = _SharedGuard(self, turn_id, read)
        turn = self._memory.turn_from(read.args, upgraded=read.state == "done", shared=guard)
        try:
            yield turn
        finally:
            if guard.ours and not guard.used:
                # Refused before it wrote: the guard is free again (or, lapsed owners still
                # undecided, free to be taken over at once).
                await guard.settle(False)

    async def begin_capture(self, turn_id: str) -> Capture:
        read = await self._load(turn_id, claim="1")
        done = read.state == "done"
        guard = _SharedGuard(self, turn_id, read._replace(state="done" if done else "busy"))
        turn = self._memory.turn_from(read.args, upgraded=done, shared=guard)
        return Capture(turn, read.token)

    def end_with_capture(self, turn_id: str) -> Pending:
        key, index, _ = self._keys(turn_id)
        return self._cache.ride("turn end", _END, [key, index], [turn_id])

    async def give_back_capture(self, turn_id: str, token: str) -> None:
        release = Release("capture claim's release", _GIVE_BACK, [self._keys(turn_id)[0]], [token])
        await self._owed.send(turn_id, token, release)


class _Added:
    """A turn's registration riding with the start's first pipeline."""

    def __init__(
        self, registry: RedisTurnRegistry, ride: Pending, turn_id: str, group: int
    ) -> None:
        self._registry = registry
        self._ride = ride
        self._turn_id = turn_id
        self._group = group

    async def result(self) -> str:
        expired, evicted, live = await self._ride.result()
        registry = self._registry
        registry.expired += int(expired)
        registry.evicted += int(evicted)
        registry._live[self._group] = int(live)
        return self._turn_id

    def drop(self) -> None:
        self._ride.drop()
