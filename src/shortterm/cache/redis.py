"""The Redis hot tier (redis-py ``redis.asyncio``): one shared cache for many processes.

Over 500 lines on purpose: one class whose every method is one Lua script call plus its
error handling, which reads best beside the layout below. The scripts are in ``lua/``, the
record encoding in :mod:`.redis_codec`.

Layout, under a key prefix ``P`` (default ``shortterm:``)::

    P e:<key>                 hash: one record (meta, mirrored durable values, messages, ...)
    P o:<kind>:<owner>        sorted set of the owner's keys, scored by last write (recency)
    P c:<channel>             set of the channel's keys
    P a:<author>              set of the keys holding a message by that author
    P x                       sorted set of every key, scored by its expiry (for ``sweep``)
    P n, P b                  entry and byte totals
    P oc:<kind>:<owner>       "this owner was re-read from the durable tier" marker
    P tb, P th, P tl          the forget fence: each target's newest forget, the newest, a log
    P ep                      the floor: the durable journal's end when the tier was initialised
    P sv                      the newest settings change (a journal sequence)

``<key>`` is the compact JSON array ``[kind, owner, channel, persona]``, so ids containing
``:`` and ``persona=None`` versus ``"0"`` never collide.

Every change to a record runs as one Lua script, so its revision check (an older durable row
never overwrites a newer one), its index updates and its totals are atomic with respect to
every other process; a turn's capture is one round trip for all its scopes (user and server),
a batch of rows one pipeline. Floats are written by Python and only compared (or joined as
written) inside Lua, never re-formatted there, so timestamps keep full precision.

**Two clocks.** The facade passes ``now`` from its (injectable) clock, and every expiry is an
absolute time computed from it and stored in the record: messages live until ``crude_ttl_s``
after the last capture, summary and categories until ``summary_ttl_s`` after they were written.
Reads apply those times; ``sweep`` removes what they have passed. As a safety net for memory,
each key also gets a Redis TTL of its remaining life plus ``safety_margin_s`` (default one
hour), computed relative to ``now``: it never fires before the logical expiry while the
injected clock runs at real speed, and a fake clock that jumps hours ahead in tests is simply
ahead of it.

**Losing its data.** Redis restarted without persistence, flushed, or failed over to an
empty replica keeps no tombstones, while the durable journal keeps every forget: a write that
began before a forget could land there afterwards. So every process sets, or reads, a *floor*
at start (:meth:`RedisCache.restore_floor`): ``P ep``, the durable journal's end when the key
was first set. From then on its fenced writes are refused (outcome ``-2``) when the key is
gone or above the write's position; the process then sets the floor again, from the journal's
end as it is *after* the loss, catches its position up to it, and writes again from there.
A write refused that way is dropped, not retried: it was computed before what the floor
stands for.

**Settings.** A settings change (a privacy choice, a server's settings) is recorded in
``P sv`` by the process that made it, before its call returns, and every owner read returns
it: a reader whose journal position is older follows the journal before it renders (see
``memory.recall``), with no round trip of its own.

**Completeness.** A shared Redis cannot prove it holds every durable row: other processes
write it, it may be restarted without persistence, and a ``maxmemory`` policy may evict keys.
So ``complete`` is always false (a miss reads the durable tier), and an owner counts as
complete only while a marker set by ``mark_complete`` exists; the marker expires after
``owner_complete_ttl_s`` (default 300 s), which bounds how long a key lost without notice can
be missed by other-channel recall. Run Redis with ``maxmemory-policy noeviction`` (or a
``volatile-*`` policy with enough memory) to keep that case theoretical.

Bounds: the entry and byte ceilings of the in-process tier do not apply; memory is bounded by
the TTLs and by Redis's own ``maxmemory``. ``stats()`` is synchronous, so its ``entries`` and
``bytes`` are the shared totals as of this process's last write. A single Redis node (or a
primary with replicas) is required: the scripts touch keys they compute from the prefix (no
``KEYS`` are declared and no hash tag groups them), which Redis Cluster does not allow.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from importlib import resources
from typing import Any, cast
from urllib.parse import parse_qsl, urlsplit

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..model import Entry, Message, ScopeKey, ScopeKind, ScopeMeta, ScopeRow, urls
from ..model.config import Config
from ..model.errors import ConfigError, StoreUnavailable
from ..model.fence import JOURNAL_RETENTION_S, WriteFence, author_targets, scope_targets
from .redis_codec import (
    authors,
    authors_json,
    decode_messages,
    dumps,
    key_of,
    lua_float,
    member,
    message_json,
    messages_json,
    meta_json,
)

__all__ = ["RedisCache"]

log = logging.getLogger("shortterm")

_OWN_OPTIONS = ("prefix", "retries", "owner_complete_ttl_s", "safety_margin_s")
_SWEEP_BATCH = 500
_SOCKET_TIMEOUT_S = 5.0  # redis-py waits for ever by default; a partition must end a call
_BACKOFF_CAP_S = 0.2


def failure_bound_s(socket_timeout_s: float, retries: int) -> float:
    """The longest one Redis call takes to fail: every attempt waits out the socket timeout,
    and each retry first sleeps at most the backoff cap. :meth:`RedisCache._call` enforces it
    (connecting included), and a facade call stops at its first failing Redis call."""
    return (retries + 1) * socket_timeout_s + retries * _BACKOFF_CAP_S


# The facade call in progress in this task, and which caches failed during it (by id: one
# task may use several memories). Set by RedisCache.operation(), read by RedisCache._call.
_FAILED_IN_CALL: ContextVar[dict[int, str] | None] = ContextVar(
    "shortterm_redis_failed_in_call", default=None
)


def _lua(name: str) -> str:
    return resources.files(__package__).joinpath("lua", f"{name}.lua").read_text("utf-8")


# The Lua scripts live in lua/, read once at import. Every one but record_forget and floor
# starts with the shared helpers of prelude.lua; ARGV[1] is always the key prefix, and each
# file says what the rest of its ARGV is and what it returns.
_PRELUDE = _lua("prelude")
_CAPTURE = _PRELUDE + _lua("capture")
_APPLY = _PRELUDE + _lua("apply")
_DELETE = _PRELUDE + _lua("delete")
_DELETE_INDEX = _PRELUDE + _lua("delete_index")
_SWEEP = _PRELUDE + _lua("sweep")
_OWNER = _PRELUDE + _lua("owner")
_AUTHORED = _PRELUDE + _lua("authored")
_REWRITE = _PRELUDE + _lua("rewrite")
_RECORD_FORGET = _lua("record_forget")
_FLOOR = _lua("floor")
_FLOOR_TRIES = 50  # 0.1 s apart: another process's claim is set within one round trip or expires


class RedisCache:
    """A hot tier in Redis, shared by every process that uses the same server and prefix.

    Pass a ``redis.asyncio.Redis`` client created with ``decode_responses=True``, or use
    :meth:`from_url`.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        crude_ttl_s: float,
        summary_ttl_s: float,
        prefix: str = "shortterm:",
        owner_complete_ttl_s: float = 300.0,
        safety_margin_s: float = 3600.0,
        owns_client: bool = False,
        call_timeout_s: float | None = None,
    ) -> None:
        if not isinstance(prefix, str) or "\x00" in prefix:
            raise ConfigError(f"prefix={prefix!r}: use a string without NUL")
        self.client = client
        self.crude_ttl_s = crude_ttl_s
        self.summary_ttl_s = summary_ttl_s
        self.prefix = prefix
        self._complete_ttl_ms = max(1, int(owner_complete_ttl_s * 1000))
        self._margin_ms = str(int(safety_margin_s * 1000))
        self._owns_client = owns_client
        # None: the client's own timeouts bound each call (a client passed in by the caller).
        self.call_timeout_s = call_timeout_s
        self._closed = False
        self._capture = client.register_script(_CAPTURE)
        self._apply = client.register_script(_APPLY)
        self._delete = client.register_script(_DELETE)
        self._delete_index = client.register_script(_DELETE_INDEX)
        self._sweep = client.register_script(_SWEEP)
        self._owner = client.register_script(_OWNER)
        self._authored = client.register_script(_AUTHORED)
        self._rewrite = client.register_script(_REWRITE)
        self._record_forget = client.register_script(_RECORD_FORGET)
        self._floor_script = client.register_script(_FLOOR)
        # The floor (see restore_floor): '1' once this process set or read it, so its writes
        # require it; `_floor_lost` until then, and when a write found it gone or above its
        # position.
        self._floor_required = ""
        self._floor_lost = True
        self._token = uuid.uuid4().hex
        self._settings_seen = 0  # the newest settings change an owner read returned
        self._entries = 0
        self._bytes = 0
        self._counts = dict.fromkeys(
            ("hits", "misses", "stores", "evictions", "expirations", "invalidations", "fenced"),
            0,
        )

    @classmethod
    def from_url(cls, url: str, config: Config) -> RedisCache:
        """``redis://host:6379/0?prefix=bot1:&retries=1``.

        Our options: ``prefix``, ``retries`` (reconnect attempts after a dropped connection,
        default 1; every operation is safe to repeat), ``owner_complete_ttl_s``,
        ``safety_margin_s``. redis-py's own (``socket_timeout``, ``max_connections``, ...) pass
        through; ``socket_timeout`` and ``socket_connect_timeout`` default to 5 s so a hung
        server becomes ``StoreUnavailable``. One call then fails within
        :func:`failure_bound_s` (``(retries + 1) × socket_timeout + retries × 0.2 s``), and a
        facade call within that of its first failing Redis call.
        """
        redis_url, options = urls.split_options(
            url,
            schemes=("redis", "rediss", "unix"),
            ours=_OWN_OPTIONS,
            wrong_scheme=f"not a Redis URL: {urls.shown_url(url)!r} (use redis://host:6379/0)",
        )
        retries = int(urls.non_negative_number(options, "retries", 1, url))
        given = dict(parse_qsl(urlsplit(redis_url).query))
        socket_timeout_s = urls.non_negative_number(given, "socket_timeout", _SOCKET_TIMEOUT_S, url)
        if socket_timeout_s <= 0:
            raise ConfigError(
                f"socket_timeout in {urls.shown_url(url)!r} must be a positive number of seconds"
            )
        try:
            client = aioredis.Redis.from_url(
                redis_url,
                decode_responses=True,
                retry=Retry(ExponentialBackoff(cap=_BACKOFF_CAP_S, base=0.01), retries),
                socket_timeout=_SOCKET_TIMEOUT_S,  # the URL's own values win
                socket_connect_timeout=min(socket_timeout_s, _SOCKET_TIMEOUT_S),
            )
        except ValueError as exc:
            raise ConfigError(f"cache={urls.shown_url(url)!r}: {exc}") from exc
        return cls(
            client,
            crude_ttl_s=config.crude_ttl_s,
            summary_ttl_s=config.summary_ttl_s,
            prefix=options.get("prefix", "shortterm:"),
            owner_complete_ttl_s=urls.non_negative_number(
                options, "owner_complete_ttl_s", 300.0, url
            ),
            safety_margin_s=urls.non_negative_number(options, "safety_margin_s", 3600.0, url),
            owns_client=True,
            call_timeout_s=failure_bound_s(socket_timeout_s, retries),
        )

    # -- plumbing -------------------------------------------------------------------------

    @contextmanager
    def operation(self) -> Iterator[None]:
        if _FAILED_IN_CALL.get() is not None:
            yield  # inside a facade call already: it is one call
            return
        token = _FAILED_IN_CALL.set({})
        try:
            yield
        finally:
            _FAILED_IN_CALL.reset(token)

    async def _call(self, what: str, awaitable: Any) -> Any:
        failed = _FAILED_IN_CALL.get()
        earlier = None if failed is None else failed.get(id(self))
        if self._closed or earlier is not None:
            if inspect.iscoroutine(awaitable):
                awaitable.close()  # never started: let it go without a "never awaited" warning
            if earlier is not None:
                raise StoreUnavailable(f"Redis {what} not tried: {earlier}")
            raise StoreUnavailable("Redis hot tier is closed")
        try:
            async with asyncio.timeout(self.call_timeout_s):
                return await awaitable
        except (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError) as exc:
            reason = str(exc) or f"no answer within {self.call_timeout_s:g} s"
            if failed is not None:
                failed[id(self)] = f"Redis failed earlier in this call ({reason})"
            raise StoreUnavailable(f"Redis {what} failed: {reason}") from exc
        except RedisError as exc:
            raise StoreUnavailable(f"Redis {what} failed: {exc}") from exc

    def _totals(self, reply: Sequence[Any]) -> int:
        self._entries = int(reply[1])
        self._bytes = int(reply[2])
        return int(reply[0])

    def _record_key(self, member: str) -> str:
        return f"{self.prefix}e:{member}"

    def _owner_key(self, kind: str, owner_id: str) -> str:
        return f"{self.prefix}o:{kind}:{owner_id}"

    def _marker_key(self, kind: str, owner_id: str) -> str:
        return f"{self.prefix}oc:{kind}:{owner_id}"

    def _channel_key(self, channel_id: str) -> str:
        return f"{self.prefix}c:{channel_id}"

    def _durable(self, row: ScopeRow) -> tuple[str, str]:
        """The mirrored durable values of a row, and when the last of them expires."""
        d = dumps(
            [
                row.summary,
                row.summary_at,
                dict(row.categories),
                row.categories_at,
                row.turns_since_refresh,
            ]
        )
        expiries = []
        if row.summary is not None and row.summary_at is not None:
            expiries.append(row.summary_at + self.summary_ttl_s)
        if row.categories and row.categories_at is not None:
            expiries.append(row.categories_at + self.summary_ttl_s)
        return d, lua_float(max(expiries)) if expiries else ""

    # -- views ----------------------------------------------------------------------------

    def _view(
        self, key: ScopeKey, meta_raw: str, d_raw: str | None, m_raw: str | None, now: float
    ) -> Entry | None:
        messages: tuple[Message, ...] = ()
        messages_at = None
        if m_raw:
            at, raw = json.loads(m_raw)
            if raw and now < at + self.crude_ttl_s:
                messages, messages_at = decode_messages(raw), at
        summary = summary_at = categories_at = None
        categories: Mapping[str, str] = {}
        turns = 0
        if d_raw:
            s, s_at, cats, c_at, turns = json.loads(d_raw)
            if s is not None and s_at is not None and now < s_at + self.summary_ttl_s:
                summary, summary_at = s, s_at
            if cats and c_at is not None and now < c_at + self.summary_ttl_s:
                categories, categories_at = cats, c_at
        if not messages and summary is None and not categories:
            return None
        server_id, server_name, channel_name, parent, private, lineage = json.loads(meta_raw)
        return Entry(
            key=key,
            messages=messages,
            summary=summary,
            categories=categories,
            turns_since_refresh=turns,
            messages_at=messages_at,
            summary_at=summary_at,
            categories_at=categories_at,
            server_id=server_id,
            server_name=server_name,
            channel_name=channel_name,
            parent_channel_id=parent,
            private=private,
            persona_lineage_id=lineage,
        )

    # -- the contract ---------------------------------------------------------------------

    async def get(self, key: ScopeKey, now: float) -> Entry | None:
        fields = await self._call(
            "read",
            self.client.hmget(self._record_key(member(key)), ["meta", "d", "m"]),
        )
        meta_raw, d_raw, m_raw = fields
        view = None if meta_raw is None else self._view(key, meta_raw, d_raw, m_raw, now)
        self._counts["hits" if view is not None else "misses"] += 1
        return view

    async def counter(self, key: ScopeKey, now: float) -> int | None:
        d_raw, exp = await self._call(
            "read",
            self.client.hmget(self._record_key(member(key)), ["d", "exp"]),
        )
        if exp is None or now >= float(exp):
            return None
        return int(json.loads(d_raw)[4]) if d_raw else 0

    async def capture(
        self,
        key: ScopeKey,
        messages: tuple[Message, ...],
        meta: ScopeMeta,
        row: ScopeRow | None,
        now: float,
        fence: WriteFence | None = None,
    ) -> bool:
        [outcome] = await self._capture_all([(key, messages, row)], meta, now, fence)
        return outcome == 1

    async def capture_scopes(
        self,
        scopes: Sequence[tuple[ScopeKey, tuple[Message, ...], ScopeRow | None]],
        meta: ScopeMeta,
        now: float,
        fence: WriteFence | None = None,
        step: ScopeKey | None = None,
    ) -> int:
        if step is not None:
            # Shared: every process reads this counter, so it is only ever the durable one.
            raise ValueError("a shared hot tier takes no deferred counter step")
        if not scopes:
            return 0
        outcomes = await self._capture_all(scopes, meta, now, fence)
        return sum(outcome == 1 for outcome in outcomes)

    async def _capture_all(
        self,
        scopes: Sequence[tuple[ScopeKey, tuple[Message, ...], ScopeRow | None]],
        meta: ScopeMeta,
        now: float,
        fence: WriteFence | None,
    ) -> list[int]:
        """Every scope in one script call (one round trip): 1 written, 0 older than the
        cached row, -1 refused by the fence, per scope in order."""
        args = [
            self.prefix,
            lua_float(now),
            lua_float(now + self.crude_ttl_s),
            self._margin_ms,
            "" if fence is None else str(fence.position),
            dumps(now),
            self._floor_required,
            str(len(scopes)),
        ]
        for key, messages, row in scopes:
            args += self._capture_args(key, messages, meta, row, fence)
        reply = await self._call("capture", self._capture(args=args))
        self._totals(reply)
        outcomes = [int(outcome) for outcome in reply[3:]]
        refused = len(outcomes) - outcomes.count(1) - outcomes.count(0)
        if refused and -2 in outcomes:
            self._floor_lost = True
        self._counts["fenced"] += refused
        self._counts["stores"] += len(outcomes) - refused
        return outcomes

    def _capture_args(
        self,
        key: ScopeKey,
        messages: tuple[Message, ...],
        meta: ScopeMeta,
        row: ScopeRow | None,
        fence: WriteFence | None,
    ) -> list[str]:
        """One scope's part of the capture script's ARGV (its layout is in capture.lua).
        Messages go one by one, each with its author's number, so the script can drop the
        messages of an author purged meanwhile without re-encoding the rest."""
        d, vexp = self._durable(row) if row is not None else ("", "")
        targets = "[]"
        if fence is not None:
            targets = dumps(
                scope_targets(key, meta.server_id, meta.parent_channel_id, fence.triggerer)
            )
        args = [
            member(key),
            self._owner_key(key.kind, key.owner_id),
            self._channel_key(key.channel_id),
            str(row.revision) if row is not None else "",
            meta_json(row.meta if row is not None else meta),
            d,
            vexp,
            targets,
        ]
        named = authors(messages)  # sorted, so the script's joined list is authors_json's
        targets_of = author_targets(named)
        number = {author: n for n, author in enumerate(named, 1)}
        args.append(str(len(named)))
        for author in named:
            args += [author, dumps(author), targets_of[author]]
        args.append(str(len(messages)))
        for m in messages:
            args.append(str(0 if m.author_id is None else number[m.author_id]))
            args.append(message_json(m))
        return args

    def _apply_args(self, row: ScopeRow, now: float, fence: WriteFence | None) -> list[str]:
        d, vexp = self._durable(row)
        key = row.key
        targets = "[]"
        if fence is not None:
            m = row.meta
            targets = dumps(scope_targets(key, m.server_id, m.parent_channel_id, fence.triggerer))
        return [
            self.prefix,
            member(key),
            self._owner_key(key.kind, key.owner_id),
            self._channel_key(key.channel_id),
            str(row.revision),
            meta_json(row.meta),
            d,
            vexp,
            lua_float(now),
            lua_float(now + self.crude_ttl_s),
            self._margin_ms,
            "" if fence is None else str(fence.position),
            targets,
            self._floor_required,
        ]

    async def apply_rows(
        self, rows: Sequence[ScopeRow], now: float, fence: WriteFence | None = None
    ) -> None:
        if not rows:
            return
        if len(rows) == 1:
            reply = await self._call(
                "row write", self._apply(args=self._apply_args(rows[0], now, fence))
            )
            replies = [reply]
        else:
            pipe = self.client.pipeline(transaction=False)
            for row in rows:
                await self._apply(args=self._apply_args(row, now, fence), client=pipe)
            replies = await self._call("row write", pipe.execute())
        self._totals(replies[-1])
        if any(int(reply[0]) == -2 for reply in replies):
            self._floor_lost = True

    async def record_forget(self, seq: int, targets: Sequence[str], now: float) -> None:
        await self._record(seq, targets, now, "")

    async def record_settings(self, seq: int, targets: Sequence[str], now: float) -> None:
        """A settings change ``seq`` made by this process: the newest one the owner reads
        return (so others follow the journal before they render), and its targets fenced
        like a forget's (writes in flight were computed under the old settings)."""
        await self._record(seq, targets, now, "s")

    async def _record(self, seq: int, targets: Sequence[str], now: float, kind: str) -> None:
        args = [
            self.prefix,
            str(seq),
            lua_float(now),
            lua_float(now - JOURNAL_RETENTION_S),
            kind,
            *targets,
        ]
        await self._call("forget record", self._record_forget(args=args))

    def journal_due(self, head: int) -> bool:
        """Whether this process must follow the journal before its next step: a write found
        the floor gone or above its position, or an owner read returned a settings change
        newer than ``head``."""
        return self._floor_lost or self._settings_seen > head

    async def restore_floor(self, journal_head: Callable[[], Awaitable[int]]) -> int:
        """Set the floor if it is missing, or read it; returns it (0 when nothing is to be
        done). The claim comes first and the durable journal's end is read after it, so a
        loss of data between the two takes the claim with it and we start again: the floor
        is never a journal end read before the data was lost. Called at start and after a
        write found the floor lost.

        A Redis that does not answer is not an error here: the floor stays to be set, at the
        next call that follows the journal (this process's writes, refused or not, fail on
        their own). Until it is set, they do not require it, as before the floor existed."""
        if not self._floor_lost:
            return 0
        try:
            for _try in range(_FLOOR_TRIES):
                got = await self._call(
                    "floor", self._floor_script(args=[self.prefix, self._token, ""])
                )
                if got == "claimed":
                    head = str(await journal_head())
                    got = await self._call(
                        "floor", self._floor_script(args=[self.prefix, self._token, head])
                    )
                if got not in ("", "busy", "claimed"):
                    self._floor_required, self._floor_lost = "1", False
                    return int(got)
                await asyncio.sleep(0.1)
        except StoreUnavailable as exc:
            log.warning("shortterm Redis floor not set (tried again at the next call): %s", exc)
            return 0
        log.warning("shortterm Redis floor not set: another process held its claim throughout")
        return 0

    async def forget_user_target(self, target: str, now: float) -> int:
        """Nothing to do: the process that purged the user already did it here."""
        return 0

    @property
    def shared(self) -> bool:
        return True

    async def owner_entries(
        self, kind: ScopeKind, owner_id: str, now: float
    ) -> tuple[list[Entry], bool]:
        reply = await self._call(
            "owner read",
            self._owner(
                args=[
                    self.prefix,
                    self._owner_key(kind, owner_id),
                    self._marker_key(kind, owner_id),
                ]
            ),
        )
        complete = bool(reply[0])
        seen = int(reply[1])
        if seen > self._settings_seen:
            self._settings_seen = seen
        out: list[Entry] = []
        for i in range(2, len(reply), 5):
            key_json, meta_raw, d_raw, m_raw, _exp = reply[i : i + 5]
            view = self._view(key_of(key_json), meta_raw, d_raw, m_raw, now)
            if view is not None:
                out.append(view)
        self._counts["hits"] += len(out)
        return out, complete

    async def mark_complete(self, kind: ScopeKind, owner_id: str) -> None:
        await self._call(
            "owner marker",
            self.client.set(self._marker_key(kind, owner_id), "1", px=self._complete_ttl_ms),
        )

    async def delete(self, key: ScopeKey) -> bool:
        removed = self._totals(
            await self._call("delete", self._delete(args=[self.prefix, member(key)]))
        )
        self._counts["invalidations"] += removed
        return bool(removed)

    async def _delete_by(self, index: str, kind: str, marker: str) -> int:
        reply = await self._call(
            "delete", self._delete_index(args=[self.prefix, index, kind, marker])
        )
        removed = self._totals(reply)
        self._counts["invalidations"] += removed
        return removed

    async def delete_channel(self, channel_id: str) -> int:
        return await self._delete_by(self._channel_key(channel_id), "s", "")

    async def delete_owner(self, kind: ScopeKind, owner_id: str) -> int:
        return await self._delete_by(
            self._owner_key(kind, owner_id), "z", self._marker_key(kind, owner_id)
        )

    async def scrub_author(self, author_id: str, now: float) -> int:
        author_key = f"{self.prefix}a:{author_id}"
        changed = 0
        # A record a concurrent capture rewrote between our read and our write is read again;
        # one still listed after a few passes was captured anew after the scrub began.
        for _attempt in range(5):
            reply = await self._call("scrub read", self._authored(args=[self.prefix, author_key]))
            if not reply:
                break
            pipe = self.client.pipeline(transaction=False)
            for i in range(0, len(reply), 2):
                key_json, m_raw = reply[i], reply[i + 1]
                at, raw = json.loads(m_raw)
                kept = [m for m in decode_messages(raw) if m.author_id != author_id]
                await self._rewrite(
                    args=[
                        self.prefix,
                        key_json,
                        m_raw,
                        messages_json(at, kept),
                        lua_float(at + self.crude_ttl_s) if kept else "",
                        authors_json(kept),
                        lua_float(now),
                        self._margin_ms,
                    ],
                    client=pipe,
                )
            results = await self._call("scrub write", pipe.execute())
            for result in results:
                if self._totals(result) == 1:
                    changed += 1
        return changed

    async def sweep(self, now: float) -> int:
        removed = 0
        while True:
            reply = await self._call(
                "sweep", self._sweep(args=[self.prefix, lua_float(now), str(_SWEEP_BATCH)])
            )
            removed += self._totals(reply)
            if int(reply[3]) < _SWEEP_BATCH:
                break
        self._counts["expirations"] += removed
        return removed

    @property
    def complete(self) -> bool:
        """Always false: a shared Redis cannot prove it holds every durable row."""
        return False

    def set_complete(self, value: bool) -> None:
        """Ignored: one process's hydration says nothing about what the others hold."""

    def stats(self) -> dict[str, int]:
        return {"entries": self._entries, "bytes": self._bytes, **self._counts}

    async def scope_keys(self, *, batch: int) -> AsyncIterator[list[ScopeKey]]:
        """Every key held, in batches (see ``ScopeLister``): a ``ZSCAN`` of the expiry set,
        which never blocks Redis for long; its cursor may repeat a key."""
        batched: list[ScopeKey] = []
        try:
            async for name, _score in self.client.zscan_iter(f"{self.prefix}x", count=batch):
                batched.append(key_of(cast(str, name)))
                if len(batched) >= batch:
                    yield batched
                    batched = []
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"Redis scan failed: {exc}") from exc
        if batched:
            yield batched

    async def clear_prefix(self) -> int:
        """Delete every key under this prefix (tests, resets); returns how many."""
        removed = 0
        pattern = _glob_escape(self.prefix) + "*"
        async for batch in _scan_batches(self.client, pattern):
            removed += int(await self._call("clear", self.client.unlink(*batch)))
        self._entries = self._bytes = 0
        return removed

    async def close(self) -> None:
        # The data is shared: closing only lets go of the connections.
        if self._closed:
            return
        self._closed = True
        if self._owns_client:
            await self.client.aclose()


def _glob_escape(text: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


async def _scan_batches(client: aioredis.Redis, pattern: str) -> AsyncIterator[list[str]]:
    batch: list[str] = []
    try:
        async for name in client.scan_iter(match=pattern, count=1000):
            batch.append(cast(str, name))
            if len(batch) >= 1000:
                yield batch
                batch = []
    except (RedisError, OSError) as exc:
        raise StoreUnavailable(f"Redis scan failed: {exc}") from exc
    if batch:
        yield batch
