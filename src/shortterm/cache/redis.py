"""The Redis hot tier (redis-py ``redis.asyncio``): one shared cache for many processes.

Layout, under a key prefix ``P`` (default ``shortterm:``)::

    P e:<key>                 hash: one record (meta, mirrored durable values, messages, ...)
    P o:<kind>:<owner>        sorted set of the owner's keys, scored by last write (recency)
    P c:<channel>             set of the channel's keys
    P a:<author>              set of the keys holding a message by that author
    P x                       sorted set of every key, scored by its expiry (for ``sweep``)
    P n, P b                  entry and byte totals
    P oc:<kind>:<owner>       "this owner was re-read from the durable tier" marker

``<key>`` is the compact JSON array ``[kind, owner, channel, persona]``, so ids containing
``:`` and ``persona=None`` versus ``"0"`` never collide.

Every change to a record runs as one Lua script, so its revision check (an older durable row
never overwrites a newer one), its index updates and its totals are atomic with respect to
every other process; a capture is one round trip, a batch of rows one pipeline. Floats are
written by Python and only compared inside Lua, never re-formatted there, so timestamps keep
full precision.

**Two clocks.** The facade passes ``now`` from its (injectable) clock, and every expiry is an
absolute time computed from it and stored in the record: messages live until ``crude_ttl_s``
after the last capture, summary and categories until ``summary_ttl_s`` after they were written.
Reads apply those times; ``sweep`` removes what they have passed. As a safety net for memory,
each key also gets a Redis TTL of its remaining life plus ``safety_margin_s`` (default one
hour), computed relative to ``now``: it never fires before the logical expiry while the
injected clock runs at real speed, and a fake clock that jumps hours ahead in tests is simply
ahead of it.

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
primary with replicas) is required: the scripts touch keys they compute, which Redis Cluster
does not allow.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..config import Config
from ..errors import ConfigError, StoreUnavailable
from ..fence import JOURNAL_RETENTION_S, WriteFence, author_targets, scope_targets
from ..model import Entry, Message, Privacy, ScopeKey, ScopeKind, ScopeMeta, ScopeRow

__all__ = ["RedisCache"]

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

# Shared Lua helpers. ARGV[1] is always the key prefix.
_PRELUDE = """
local P = ARGV[1]

local function totals(result)
  return {result, redis.call('GET', P .. 'n') or '0', redis.call('GET', P .. 'b') or '0'}
end

local function set_or_del(rk, field, value)
  if value == '' then redis.call('HDEL', rk, field) else redis.call('HSET', rk, field, value) end
end

-- Never shorten an index key's TTL: it must outlive every record it lists.
local function extend(k, ms)
  local cur = redis.call('PTTL', k)
  if cur == -1 or (cur >= 0 and cur < ms) then redis.call('PEXPIRE', k, ms) end
end

local function set_authors(rk, member, old_json, new_json)
  old_json = old_json or '[]'
  if old_json == new_json then return end
  local old, new = {}, {}
  for _, a in ipairs(cjson.decode(old_json)) do old[a] = true end
  for _, a in ipairs(cjson.decode(new_json)) do new[a] = true end
  for a in pairs(old) do
    if not new[a] then redis.call('SREM', P .. 'a:' .. a, member) end
  end
  for a in pairs(new) do
    if not old[a] then redis.call('SADD', P .. 'a:' .. a, member) end
  end
  redis.call('HSET', rk, 'au', new_json)
end

-- Recompute expiry, size, indexes and TTLs of a record after a change. The expiry is the
-- latest of the message and value expiries (strings written by Python, compared here), or
-- ``fallback`` for a record with no live values ('' keeps the stored expiry).
local function finish(rk, member, now, fallback, margin_ms)
  local f = redis.call('HMGET', rk, 'mexp', 'vexp', 'size', 'ok', 'ck', 'au', 'exp')
  local best, bn = nil, nil
  for i = 1, 2 do
    if f[i] then
      local n = tonumber(f[i])
      if bn == nil or n > bn then best, bn = f[i], n end
    end
  end
  if best == nil then
    if fallback == '' then best = f[7] else best = fallback end
    bn = tonumber(best)
  end
  local size = 200 + redis.call('HSTRLEN', rk, 'm') + redis.call('HSTRLEN', rk, 'd')
    + redis.call('HSTRLEN', rk, 'meta')
  redis.call('INCRBY', P .. 'b', size - (tonumber(f[3]) or 0))
  redis.call('HSET', rk, 'exp', best, 'size', size)
  redis.call('ZADD', P .. 'x', best, member)
  redis.call('ZADD', f[4], now, member)
  redis.call('SADD', f[5], member)
  local ms = math.floor((bn - tonumber(now)) * 1000) + margin_ms
  if ms < 1000 then ms = 1000 end
  redis.call('PEXPIRE', rk, ms)
  extend(f[4], ms)
  extend(f[5], ms)
  for _, a in ipairs(cjson.decode(f[6] or '[]')) do extend(P .. 'a:' .. a, ms) end
end

local function create(rk, ok, ck)
  redis.call('HSET', rk, 'rev', '0', 'ok', ok, 'ck', ck, 'au', '[]')
  redis.call('INCR', P .. 'n')
end

-- The fence (see shortterm.fence): 'tb' maps each target to its newest forget, 'th' is the
-- newest forget recorded. A write that began at position `pos` is covered when one of its
-- targets was forgotten later. Returns true when covered.
local function covered(pos_s, targets_json)
  if pos_s == '' then return false end
  local pos = tonumber(pos_s)
  if tonumber(redis.call('GET', P .. 'th') or '0') <= pos then return false end
  for _, t in ipairs(cjson.decode(targets_json)) do
    local seq = redis.call('HGET', P .. 'tb', t)
    if seq and tonumber(seq) > pos then return true end
  end
  return false
end

local function remove(member)
  local rk = P .. 'e:' .. member
  local f = redis.call('HMGET', rk, 'ok', 'ck', 'au', 'size')
  redis.call('ZREM', P .. 'x', member)
  if not f[1] then return 0 end
  redis.call('ZREM', f[1], member)
  redis.call('SREM', f[2], member)
  for _, a in ipairs(cjson.decode(f[3] or '[]')) do redis.call('SREM', P .. 'a:' .. a, member) end
  redis.call('DEL', rk)
  redis.call('DECR', P .. 'n')
  redis.call('DECRBY', P .. 'b', tonumber(f[4]) or 0)
  return 1
end
"""

# ARGV: P, member, ok, ck, row_rev ('' = no row), meta, d, vexp, m, mexp, au, now, fallback,
# margin_ms, fence position ('' = none), targets, [[author, target], ...]. Returns -1 when the
# fence covers the scope, -2 (and the authors) when authors of the messages were purged since
# the write began: the caller drops their messages and calls again, so the write lands only in
# a call whose every check passed.
_CAPTURE = (
    _PRELUDE
    + """
local member = ARGV[2]
local rk = P .. 'e:' .. member
if covered(ARGV[15], ARGV[16]) then return totals(-1) end
if ARGV[15] ~= '' and tonumber(redis.call('GET', P .. 'th') or '0') > tonumber(ARGV[15]) then
  local gone = {}
  for _, pair in ipairs(cjson.decode(ARGV[17])) do
    local seq = redis.call('HGET', P .. 'tb', pair[2])
    if seq and tonumber(seq) > tonumber(ARGV[15]) then table.insert(gone, pair[1]) end
  end
  if #gone > 0 then
    local t = totals(-2)
    t[4] = cjson.encode(gone)
    return t
  end
end
local cur = redis.call('HMGET', rk, 'rev', 'au', 'meta')
local row_rev = ARGV[5]
if row_rev ~= '' and cur[1] and tonumber(cur[1]) > tonumber(row_rev) then
  return totals(0)  -- a newer write of this scope already landed
end
if not cur[1] then create(rk, ARGV[3], ARGV[4]) end
if row_rev ~= '' then
  redis.call('HSET', rk, 'rev', row_rev, 'd', ARGV[7])
  set_or_del(rk, 'vexp', ARGV[8])
end
local meta = ARGV[6]
if cur[3] and cjson.decode(cur[3])[5] == true then
  local m = cjson.decode(meta)
  if m[5] ~= true then m[5] = true; meta = cjson.encode(m) end  -- private is sticky
end
redis.call('HSET', rk, 'meta', meta, 'm', ARGV[9])
set_or_del(rk, 'mexp', ARGV[10])
set_authors(rk, member, cur[2], ARGV[11])
finish(rk, member, ARGV[12], ARGV[13], tonumber(ARGV[14]))
return totals(1)
"""
)

# ARGV: P, member, ok, ck, rev, meta, d, vexp, now, fallback, margin_ms, fence position
# ('' = none), targets
_APPLY = (
    _PRELUDE
    + """
local member = ARGV[2]
local rk = P .. 'e:' .. member
if covered(ARGV[12], ARGV[13]) then return totals(-1) end
local cur = redis.call('HGET', rk, 'rev')
if cur and tonumber(cur) >= tonumber(ARGV[5]) then return totals(0) end
if not cur then create(rk, ARGV[3], ARGV[4]) end
redis.call('HSET', rk, 'rev', ARGV[5], 'meta', ARGV[6], 'd', ARGV[7])
set_or_del(rk, 'vexp', ARGV[8])
finish(rk, member, ARGV[9], ARGV[10], tonumber(ARGV[11]))
return totals(1)
"""
)

# ARGV: P, seq, now, prune horizon, target... Records a forget's targets, then prunes the ones
# older than the journal's retention.
_RECORD_FORGET = """
local P = ARGV[1]
local seq = tonumber(ARGV[2])
for i = 5, #ARGV do
  local cur = redis.call('HGET', P .. 'tb', ARGV[i])
  if not cur or tonumber(cur) < seq then redis.call('HSET', P .. 'tb', ARGV[i], ARGV[2]) end
  redis.call('ZADD', P .. 'tl', ARGV[3], ARGV[2] .. ' ' .. ARGV[i])
end
if seq > tonumber(redis.call('GET', P .. 'th') or '0') then
  redis.call('SET', P .. 'th', ARGV[2])
end
local old = redis.call('ZRANGEBYSCORE', P .. 'tl', '-inf', '(' .. ARGV[4], 'LIMIT', 0, 1000)
for _, m in ipairs(old) do
  local sp = string.find(m, ' ', 1, true)
  local t = string.sub(m, sp + 1)
  if redis.call('HGET', P .. 'tb', t) == string.sub(m, 1, sp - 1) then
    redis.call('HDEL', P .. 'tb', t)
  end
  redis.call('ZREM', P .. 'tl', m)
end
return 1
"""

# ARGV: P, member
_DELETE = _PRELUDE + "return totals(remove(ARGV[2]))"

# ARGV: P, index key, 'z' (sorted set) or 's' (set), marker ('' = none)
_DELETE_INDEX = (
    _PRELUDE
    + """
local members
if ARGV[3] == 'z' then members = redis.call('ZRANGE', ARGV[2], 0, -1)
else members = redis.call('SMEMBERS', ARGV[2]) end
local n = 0
for _, member in ipairs(members) do n = n + remove(member) end
redis.call('DEL', ARGV[2])
if ARGV[4] ~= '' then redis.call('DEL', ARGV[4]) end
return totals(n)
"""
)

# ARGV: P, now, limit
_SWEEP = (
    _PRELUDE
    + """
local due = redis.call('ZRANGEBYSCORE', P .. 'x', '-inf', ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
local now = tonumber(ARGV[2])
local n = 0
for _, member in ipairs(due) do
  local exp = redis.call('HGET', P .. 'e:' .. member, 'exp')
  if exp and tonumber(exp) > now then
    redis.call('ZADD', P .. 'x', exp, member)
  else
    n = n + remove(member)
  end
end
local t = totals(n)
t[4] = #due
return t
"""
)

# ARGV: P, owner key, marker key. Returns marker, then (member, meta, d, m, exp) per record.
_OWNER = (
    _PRELUDE
    + """
local out = {redis.call('EXISTS', ARGV[3])}
for _, member in ipairs(redis.call('ZRANGE', ARGV[2], 0, -1)) do
  local f = redis.call('HMGET', P .. 'e:' .. member, 'meta', 'd', 'm', 'exp')
  if f[1] then
    table.insert(out, member)
    table.insert(out, f[1])
    table.insert(out, f[2] or '')
    table.insert(out, f[3] or '')
    table.insert(out, f[4])
  else
    redis.call('ZREM', ARGV[2], member)  -- its record outlived its safety TTL
  end
end
return out
"""
)

# ARGV: P, author key. Returns (member, m) per record listed under the author.
_AUTHORED = (
    _PRELUDE
    + """
local out = {}
for _, member in ipairs(redis.call('SMEMBERS', ARGV[2])) do
  local m = redis.call('HGET', P .. 'e:' .. member, 'm')
  if m then
    table.insert(out, member)
    table.insert(out, m)
  else
    redis.call('SREM', ARGV[2], member)
  end
end
return out
"""
)

# ARGV: P, member, expected m, new m, mexp, au, now, margin_ms. Compare-and-set of the
# messages: -1 when another writer changed them since they were read.
_REWRITE = (
    _PRELUDE
    + """
local member = ARGV[2]
local rk = P .. 'e:' .. member
local cur = redis.call('HMGET', rk, 'm', 'au')
if cur[1] ~= ARGV[3] then return totals(-1) end
redis.call('HSET', rk, 'm', ARGV[4])
set_or_del(rk, 'mexp', ARGV[5])
set_authors(rk, member, cur[2], ARGV[6])
finish(rk, member, ARGV[7], '', tonumber(ARGV[8]))
return totals(1)
"""
)


def _dumps(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _lua_float(value: float) -> str:
    """A float as a Lua script reads it back exactly (repr round-trips)."""
    return repr(float(value))


def _member(key: ScopeKey) -> str:
    return _dumps([key.kind, key.owner_id, key.channel_id, key.persona_id])


def _key_of(member: str) -> ScopeKey:
    kind, owner, channel, persona = json.loads(member)
    return ScopeKey(kind, owner, channel, persona)


def _meta_json(meta: ScopeMeta) -> str:
    m = meta
    return _dumps(
        [
            m.server_id,
            m.server_name,
            m.channel_name,
            m.parent_channel_id,
            m.private,
            m.persona_lineage_id,
        ]
    )


def _messages_json(at: float, messages: Sequence[Message]) -> str:
    return _dumps(
        [
            at,
            [
                [m.role, m.content, m.author_id, m.speaker, m.at, m.message_id, m.privacy.value]
                for m in messages
            ],
        ]
    )


def _authors(messages: Sequence[Message]) -> list[str]:
    return sorted({m.author_id for m in messages if m.author_id is not None})


def _authors_json(messages: Sequence[Message]) -> str:
    return _dumps(_authors(messages))


def _decode_messages(raw: list[Any]) -> tuple[Message, ...]:
    return tuple(
        Message(
            role,
            content,
            author_id=author,
            speaker=speaker,
            at=at,
            message_id=message_id,
            privacy=Privacy(privacy),
        )
        for role, content, author, speaker, at, message_id, privacy in raw
    )


def _split_url(url: str) -> tuple[str, dict[str, str]]:
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(f"not a Redis URL: {url!r} (use redis://host:6379/0)")
    ours: dict[str, str] = {}
    theirs: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in _OWN_OPTIONS:
            ours[name] = value
        else:
            theirs.append((name, value))
    return urlunsplit(parts._replace(query=urlencode(theirs))), ours


def _number(options: Mapping[str, str], name: str, default: float, url: str) -> float:
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} in {url!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{name}={raw!r} in {url!r} must be a non-negative number")
    return value


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
        redis_url, options = _split_url(url)
        retries = int(_number(options, "retries", 1, url))
        given = dict(parse_qsl(urlsplit(redis_url).query))
        socket_timeout_s = _number(given, "socket_timeout", _SOCKET_TIMEOUT_S, url)
        if socket_timeout_s <= 0:
            raise ConfigError(f"socket_timeout in {url!r} must be a positive number of seconds")
        try:
            client = aioredis.Redis.from_url(
                redis_url,
                decode_responses=True,
                retry=Retry(ExponentialBackoff(cap=_BACKOFF_CAP_S, base=0.01), retries),
                socket_timeout=_SOCKET_TIMEOUT_S,  # the URL's own values win
                socket_connect_timeout=min(socket_timeout_s, _SOCKET_TIMEOUT_S),
            )
        except ValueError as exc:
            raise ConfigError(f"cache={url!r}: {exc}") from exc
        return cls(
            client,
            crude_ttl_s=config.crude_ttl_s,
            summary_ttl_s=config.summary_ttl_s,
            prefix=options.get("prefix", "shortterm:"),
            owner_complete_ttl_s=_number(options, "owner_complete_ttl_s", 300.0, url),
            safety_margin_s=_number(options, "safety_margin_s", 3600.0, url),
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
        d = _dumps(
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
        return d, _lua_float(max(expiries)) if expiries else ""

    # -- views ----------------------------------------------------------------------------

    def _view(
        self, key: ScopeKey, meta_raw: str, d_raw: str | None, m_raw: str | None, now: float
    ) -> Entry | None:
        messages: tuple[Message, ...] = ()
        messages_at = None
        if m_raw:
            at, raw = json.loads(m_raw)
            if raw and now < at + self.crude_ttl_s:
                messages, messages_at = _decode_messages(raw), at
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
            self.client.hmget(self._record_key(_member(key)), ["meta", "d", "m"]),
        )
        meta_raw, d_raw, m_raw = fields
        view = None if meta_raw is None else self._view(key, meta_raw, d_raw, m_raw, now)
        self._counts["hits" if view is not None else "misses"] += 1
        return view

    async def counter(self, key: ScopeKey, now: float) -> int | None:
        d_raw, exp = await self._call(
            "read",
            self.client.hmget(self._record_key(_member(key)), ["d", "exp"]),
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
        d, vexp = self._durable(row) if row is not None else ("", "")
        position, targets = "", "[]"
        if fence is not None:
            position = str(fence.position)
            targets = _dumps(
                scope_targets(key, meta.server_id, meta.parent_channel_id, fence.triggerer)
            )
        for _attempt in range(3):
            authors = [[a, t] for a, t in author_targets(_authors(messages)).items()]
            args = [
                self.prefix,
                _member(key),
                self._owner_key(key.kind, key.owner_id),
                self._channel_key(key.channel_id),
                str(row.revision) if row is not None else "",
                _meta_json(row.meta if row is not None else meta),
                d,
                vexp,
                _messages_json(now, messages),
                _lua_float(now + self.crude_ttl_s) if messages else "",
                _authors_json(messages),
                _lua_float(now),
                _lua_float(now + self.crude_ttl_s),
                self._margin_ms,
                position,
                targets,
                _dumps(authors),
            ]
            reply = await self._call("capture", self._capture(args=args))
            outcome = self._totals(reply)
            if outcome == -2:  # purged authors: their messages go, the rest is tried again
                gone = set(json.loads(reply[3]))
                messages = tuple(m for m in messages if m.author_id not in gone)
                continue
            if outcome == -1:
                self._counts["fenced"] += 1
                return False
            self._counts["stores"] += 1
            return outcome == 1
        return False  # purges kept landing during this capture: let them win

    def _apply_args(self, row: ScopeRow, now: float, fence: WriteFence | None) -> list[str]:
        d, vexp = self._durable(row)
        key = row.key
        targets = "[]"
        if fence is not None:
            m = row.meta
            targets = _dumps(scope_targets(key, m.server_id, m.parent_channel_id, fence.triggerer))
        return [
            self.prefix,
            _member(key),
            self._owner_key(key.kind, key.owner_id),
            self._channel_key(key.channel_id),
            str(row.revision),
            _meta_json(row.meta),
            d,
            vexp,
            _lua_float(now),
            _lua_float(now + self.crude_ttl_s),
            self._margin_ms,
            "" if fence is None else str(fence.position),
            targets,
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
            self._totals(reply)
            return
        pipe = self.client.pipeline(transaction=False)
        for row in rows:
            await self._apply(args=self._apply_args(row, now, fence), client=pipe)
        replies = await self._call("row write", pipe.execute())
        self._totals(replies[-1])

    async def record_forget(self, seq: int, targets: Sequence[str], now: float) -> None:
        args = [
            self.prefix,
            str(seq),
            _lua_float(now),
            _lua_float(now - JOURNAL_RETENTION_S),
            *targets,
        ]
        await self._call("forget record", self._record_forget(args=args))

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
        out: list[Entry] = []
        for i in range(1, len(reply), 5):
            member, meta_raw, d_raw, m_raw, _exp = reply[i : i + 5]
            view = self._view(_key_of(member), meta_raw, d_raw, m_raw, now)
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
            await self._call("delete", self._delete(args=[self.prefix, _member(key)]))
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
                member, m_raw = reply[i], reply[i + 1]
                at, raw = json.loads(m_raw)
                kept = [m for m in _decode_messages(raw) if m.author_id != author_id]
                await self._rewrite(
                    args=[
                        self.prefix,
                        member,
                        m_raw,
                        _messages_json(at, kept),
                        _lua_float(at + self.crude_ttl_s) if kept else "",
                        _authors_json(kept),
                        _lua_float(now),
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
                "sweep", self._sweep(args=[self.prefix, _lua_float(now), str(_SWEEP_BATCH)])
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
