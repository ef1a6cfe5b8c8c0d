"""The Redis hot tier (redis-py ``redis.asyncio``): one shared cache for many processes, on
one Redis node (or a primary with replicas, which Sentinel may fail over) or on a Redis Cluster.

The key layout (hash-tag groups, one slot per script) is in :mod:`.layout`, the
connection, its bound and its errors in :mod:`.client`, the record encoding in
:mod:`.codec`, the Lua scripts in ``lua/``.

Every change to a record runs as one Lua script in its group's slot, so its revision check
(an older durable row never overwrites a newer one), the fence and mark checks, its index
updates and its group's totals are atomic with respect to every other process; a turn's
capture (the scopes of one channel: one group) is one script, a batch of rows one pipeline.
Every script declares the keys it names in ``KEYS`` (a cluster routes it by them, and refuses
a key of another slot); the records it finds through an index share the index's hash tag.
Floats are written by Python and only compared (or joined as written) inside Lua.

What spans groups is not atomic, and need not be (``docs/design.md``, "Forgetting" and "Two
tiers"): a forget records its tombstone in every group before it evicts anything, a settings
change is copied to every group before its call returns, and an owner read lists the owner's
keys from the owner directory, then reads each record where it lives.

**Two clocks.** The facade passes ``now`` from its (injectable) clock, and every expiry is an
absolute time computed from it and stored in the record: messages live until ``crude_ttl_s``
after the last capture, summary and categories until ``summary_ttl_s`` after they were written.
Reads apply those times; ``sweep`` removes what they have passed. As a safety net for memory,
each key also gets a Redis TTL of its remaining life plus ``safety_margin_s`` (default one
hour), computed relative to ``now``.

**Losing its data, going back in time.** Redis restarted from an older snapshot (or with
none), a replica promoted before it caught up, a flush: the durable journal keeps every
forget, and each group keeps a *mark*, the journal position up to which it has applied every
forget. Every reply carries it; a group short of what the process knows was forgotten serves
nothing until the forgets it lost are replayed from the journal, and a group without a mark is
reset before it takes a fenced write (:mod:`.repair`). Each step of the replay and the
mark's move through it are one script, so a group that goes back in time takes its mark back
with what it lost. A read that finds its group short repairs it and reads again, and a write
it refused is written again once it is repaired (:mod:`.keeper`, which waits for a repair a
bounded time and leaves the rest to the background): an acknowledged capture is never dropped
in silence.

**Eviction.** A forget finds records through indexes; a Redis that evicts keys could drop an
index and keep its records. The tier refuses to open on a Redis whose ``maxmemory-policy`` is
not ``noeviction`` (:meth:`RedisCache.check_eviction`); a full Redis refuses new data, never a
forget (those scripts run ``allow-oom``).

**Settings.** A settings change is copied to every group's ``sv`` before its call returns,
and every owner read returns group 0's copy: a reader whose journal position is older follows
the journal before it renders (see ``memory.turn.recall``), with no round trip of its own.

**Completeness.** A shared Redis cannot prove it holds every durable row, so ``complete`` is
always false, and an owner counts as complete only while a marker set by ``mark_complete``
exists (``owner_complete_ttl_s``, default 300 s).
``stats()`` is synchronous: its ``entries`` and ``bytes`` add up each group's totals as of
this process's last call there.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractContextManager
from functools import partial
from typing import Any, cast
from urllib.parse import quote

from redis.asyncio.cluster import RedisCluster

from ...model import Entry, ScopeKey, ScopeKind, ScopeMeta, ScopeRow
from ...model.config import Config
from ...model.errors import ConfigError, StoreUnavailable
from ...model.fence import WriteFence
from ..base import HotTier, JournalReader, OwnEntry, Owner, Recent
from . import forget as redis_forget
from . import scan as redis_scan
from .client import (
    Calls,
    Client,
    close_client,
    failure_bound_s,
    open_url,
    ping_master,
)
from .codec import Views, counter_of, member
from .directory import Directories
from .keeper import Keeper
from .layout import DEFAULT_GROUPS, Layout
from .recent import RecentReads
from .scripts import DELETE, READ, Groups, Ride
from .writes import Scope, Sender, Writes

__all__ = ["RedisCache", "failure_bound_s"]

log = logging.getLogger("shortterm")


class RedisCache(HotTier):
    """A hot tier in Redis, shared by every process that uses the same server and prefix.

    Pass a ``redis.asyncio.Redis`` (or ``RedisCluster``) client created with
    ``decode_responses=True``, or use :meth:`from_url`.
    """

    def __init__(
        self,
        client: Client,
        *,
        crude_ttl_s: float,
        summary_ttl_s: float,
        prefix: str = "shortterm:",
        groups: int = DEFAULT_GROUPS,
        owner_complete_ttl_s: float = 300.0,
        safety_margin_s: float = 3600.0,
        owns_client: bool = False,
        call_timeout_s: float | None = None,
        tls: bool = False,
    ) -> None:
        self.layout = Layout(prefix, groups)
        self.client = client
        self.crude_ttl_s = crude_ttl_s
        self.summary_ttl_s = summary_ttl_s
        self.prefix = prefix
        self._complete_ttl_ms = max(1, int(owner_complete_ttl_s * 1000))
        self._margin_ms = str(int(safety_margin_s * 1000))
        self._owns_client = owns_client
        self._calls = Calls(call_timeout_s, tls)
        self._g = Groups(client, self.layout, self._calls)
        self._marks = self._g.marks  # each group's mark, as replies carry it (marks.py)
        self._server_checked = False  # its topology and eviction policy, at the first repair
        self._token = uuid.uuid4().hex
        lifetime = max(crude_ttl_s, summary_ttl_s) + safety_margin_s
        self._views = Views((crude_ttl_s, summary_ttl_s))
        self._directories = Directories(self._g, lifetime, self._views)
        self._settings_seen = 0  # the newest settings change an owner read returned
        self._counts = dict.fromkeys(
            ("hits", "misses", "stores", "evictions", "expirations", "invalidations", "fenced"),
            0,
        )
        self._keeper = Keeper(self._g, self._token)
        writes = Writes(self._g, crude_ttl_s, summary_ttl_s, self._margin_ms)
        self._sender = Sender(writes, self._directories, self._keeper, self._counts)
        self._recent = RecentReads(self._g, self._views, self._keeper, self._counts)

    @classmethod
    def from_url(cls, url: str, config: Config) -> RedisCache:
        """See :func:`.client.open_url` for the URL and its options."""
        opened = open_url(url)
        return cls(
            opened.client,
            crude_ttl_s=config.crude_ttl_s,
            summary_ttl_s=config.summary_ttl_s,
            prefix=opened.prefix,
            groups=opened.groups,
            owner_complete_ttl_s=opened.owner_complete_ttl_s,
            safety_margin_s=opened.safety_margin_s,
            owns_client=True,
            call_timeout_s=opened.call_timeout_s,
            tls=url.lstrip().lower().startswith("rediss"),
        )

    # -- plumbing -------------------------------------------------------------------------

    @property
    def call_timeout_s(self) -> float | None:
        return self._calls.call_timeout_s

    def group_of(self, channel_id: str) -> int:
        """The group of a channel's keys (see :mod:`.layout`)."""
        return self.layout.group_of(channel_id)

    def turn_group_prefix(self, group: int) -> str:
        """The start of the sidecar's shared turn keys for turns in the group's channels: in
        the group's slot, with the capture's and the tool call's rows."""
        return self.layout.turns(group)

    @property
    def groups(self) -> int:
        return self.layout.groups

    def operation(self) -> AbstractContextManager[None]:
        return self._calls.operation()

    async def ping(self) -> None:
        """PING every node that holds data, for readiness probes: each primary of a cluster
        (a dead master refuses the connection at once, while the cluster itself takes its
        node timeout to declare it failed), the master the sentinels name now (asked at each
        ping), the one node otherwise. An operation of its own, within the tier's bound;
        raises :class:`CacheUnavailable` when a node does not answer. Changes nothing."""
        client = self.client
        with self._calls.operation():
            if isinstance(client, RedisCluster):
                await self._calls.call(
                    "ping", lambda: client.ping(target_nodes=RedisCluster.PRIMARIES)
                )
            else:
                await self._calls.call("ping", partial(ping_master, client))

    async def run_script(
        self, what: str, source: str, keys: Sequence[str], args: Sequence[str]
    ) -> Any:
        """Run a Lua script of ours (the sidecar's turn registry) with this tier's bound and
        error mapping. Its keys must share one hash tag (see :meth:`turn_group_prefix`)."""
        return await self._g.run(what, self._g.script(source), keys, args)

    def ride(self, what: str, source: str, keys: Sequence[str], args: Sequence[str]) -> Ride:
        """Like :meth:`run_script`, but sent with this task's next pipeline on the tier (a
        read the same request makes anyway), or alone by ``await ride.result()``."""
        return self._g.ride(what, self._g.script(source), keys, args)

    # -- reads ----------------------------------------------------------------------------

    async def get(self, key: ScopeKey, now: float) -> Entry | None:
        return (await self.live(key, now))[0]

    @property
    def _ttls(self) -> tuple[float, float]:
        return self.crude_ttl_s, self.summary_ttl_s

    async def counter(self, key: ScopeKey, now: float) -> int | None:
        d_raw, exp = await self._read(key, ("d", "exp"), now)
        return counter_of(d_raw, exp, now)

    async def _read(self, key: ScopeKey, fields: Sequence[str], now: float) -> list[Any]:
        """One record's fields with its group's mark (one round trip). A group short of what
        this process knows was forgotten is repaired and read again; all ``None`` when it
        cannot be (nothing it cannot vouch for is served)."""
        group = self.layout.key_group(key)
        record, mark = self.layout.record(key, member(key)), self.layout.base(group) + "fm"
        for mended in (False, True):
            values, raw = await self._g.run("read", READ, (record, mark), fields)
            if self._marks.seen(group, raw):
                return cast(list[Any], values)
            if mended or not await self._keeper.mend(now):
                break
        return [None] * len(fields)

    async def live(self, key: ScopeKey, now: float) -> tuple[Entry | None, int | None]:
        name = member(key)
        meta_raw, d_raw, m_raw, exp = await self._read(key, ("meta", "d", "m", "exp"), now)
        entry = None
        if meta_raw is not None:
            entry = self._views.view(name, (meta_raw, d_raw, m_raw), now)
        self._counts["hits" if entry is not None else "misses"] += 1
        return entry, counter_of(d_raw, exp, now)

    async def owner_entries(
        self, kind: ScopeKind, owner_id: str, now: float
    ) -> tuple[list[Entry], bool]:
        """Through the owner directory (see :mod:`.directory`): usually one round trip. A
        group found short is repaired, and the owner read again."""
        read = await self._directories.read(kind, owner_id, now, self._marks)
        if self._marks.due and await self._keeper.mend(now):
            read = await self._directories.read(kind, owner_id, now, self._marks)
        self._settings_seen = max(self._settings_seen, read.settings_seen)
        self._counts["hits"] += len(read.entries)
        return read.entries, read.marked

    async def recent(
        self, owners: Sequence[Owner], now: float, *, page: int, live: ScopeKey | None = None
    ) -> Recent:
        """A turn's recall read: each group's index of the owners, newest first (:mod:`.recent`)."""
        return await self._recent.open(owners, now, page, live)

    async def mark_complete(self, kind: ScopeKind, owner_id: str) -> None:
        marker = self.layout.marker(kind, owner_id)
        await self._calls.call(
            "owner marker", lambda: self.client.set(marker, "1", px=self._complete_ttl_ms)
        )

    def stats(self) -> dict[str, int]:
        entries = sum(n for n, _ in self._g.totals)
        size = sum(b for _, b in self._g.totals)
        return {"entries": entries, "bytes": size, **self._counts}

    # -- writes ---------------------------------------------------------------------------

    async def capture_scopes(
        self,
        scopes: Sequence[Scope],
        meta: ScopeMeta,
        now: float,
        fence: WriteFence | None = None,
        step: ScopeKey | None = None,
        append: int | None = None,
    ) -> int:
        if step is not None:
            # Shared: every process reads this counter, so it is only ever the durable one.
            raise ValueError("a shared hot tier takes no deferred counter step")
        if not scopes:
            return 0
        outcomes = await self._sender.capture(scopes, meta, now, fence, append)
        return sum(outcome == 1 for outcome in outcomes)

    async def apply_rows(
        self, rows: Sequence[ScopeRow], now: float, fence: WriteFence | None = None
    ) -> None:
        if rows:
            await self._sender.apply(rows, now, fence)

    # -- the fence and the mark ----------------------------------------------------------

    async def record_forget(self, seq: int, targets: Sequence[str], now: float) -> None:
        await self._record(seq, targets, now, "")

    async def record_settings(self, seq: int, targets: Sequence[str], now: float) -> None:
        """A settings change ``seq`` made by this process: the newest one the owner reads
        return (so others follow the journal before they render), and its targets fenced
        like a forget's (writes in flight were computed under the old settings)."""
        await self._record(seq, targets, now, "s")

    async def _record(self, seq: int, targets: Sequence[str], now: float, kind: str) -> None:
        """In every group (one pipeline): a write is checked against its own group's copy,
        and the forget evicts only after this returned."""
        await redis_forget.record(self._g, seq, targets, now, kind)

    def journal_due(self, head: int) -> bool:
        """Whether this process must repair the tier or follow the journal before its next
        step: a reply showed a group short of what it knows was forgotten (or a write was
        refused for it), or an owner read returned a settings change newer than ``head``."""
        return self._marks.due or max(self._settings_seen, self._recent.settings_seen) > head

    def followed(self, forgets: int) -> None:
        self._marks.known = max(self._marks.known, forgets)

    async def repair(
        self, journal: JournalReader, now: float, *, to: int = 0, own: OwnEntry | None = None
    ) -> int:
        """See :mod:`.repair`: only when a reply showed a group short of what we know
        (or none was read yet), or ``to`` brings our own forget; run by the keeper, which
        waits for it a bounded time and leaves the rest to the background (:mod:`.keeper`).
        The first call also checks the topology and the eviction policy: a Redis never
        reached fails the open (``CacheUnavailable``). Later, a Redis that does not answer
        is not an error here: the repair is tried again at the next call that follows the
        journal (this process's reads and writes fail on their own)."""
        self._keeper.journal = journal  # what a read or write that finds a group short uses
        if not self._marks.due and to <= self._marks.known:
            return 0  # no reply showed a group short, and we bring no forget of our own
        if not self._server_checked:
            await self.check_topology()
            await self.check_eviction()
        return await self._keeper.repair(now, to, own)

    async def check_topology(self) -> None:
        """Refuse a Redis Cluster node opened as one node (``redis://``, ``rediss://``): it
        would answer MOVED for every key another node serves, so every call would fail.
        One ``INFO cluster`` at open; a server that does not let us run it is not refused."""
        if isinstance(self.client, RedisCluster):
            return
        try:
            info = await self._calls.call("open", lambda: self.client.info("cluster"))
        except StoreUnavailable as exc:
            if _refused_command(exc):
                return
            raise
        if str(info.get("cluster_enabled", 0)) != "1":
            return
        pool = self.client.connection_pool
        where = pool.connection_kwargs
        tls = "s" if "SSL" in pool.connection_class.__name__ else ""
        if where.get("path"):
            node, scheme, seeds = str(where["path"]), "unix", "host:port,host:port"
        else:
            node = f"{where.get('host')}:{where.get('port')}"
            scheme, seeds = f"redis{tls}", node
        raise ConfigError(
            f"the Redis at {node} is a Redis Cluster node (cluster_enabled:1), but a "
            f"{scheme}:// URL opens it as one node, which answers MOVED for the other nodes' "
            f"keys. Use redis{tls}+cluster://{seeds}?prefix={quote(self.prefix, safe=':')} "
            "(a few seed nodes, the topology is discovered; a cluster has only database 0)"
        )

    async def check_eviction(self) -> None:
        """Refuse a Redis that may evict our keys: a forget finds records through indexes,
        and an index evicted before its records would let them outlive the forget. A server
        that does not let us read its configuration (a managed one may not) is warned about."""
        try:
            policies = await self._calls.call(
                "eviction policy", lambda: self.client.config_get("maxmemory-policy")
            )
        except StoreUnavailable as exc:
            if _refused_command(exc):
                log.warning(
                    "shortterm could not read Redis's maxmemory-policy (%s): it must be "
                    "noeviction, or a forget may miss what Redis evicted",
                    exc,
                )
                self.eviction_unknown = True  # readiness does not ask (and warn) again
                self._server_checked = True
                return
            raise
        found = set(_policies(policies))
        if found - {"noeviction"}:
            raise ConfigError(
                f"Redis maxmemory-policy is {', '.join(sorted(found))}: it may evict the "
                "indexes a forget finds records through, so a forgotten record could stay. "
                "Set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, "
                "and in redis.conf); a full Redis then refuses new data, never a forget"
            )
        self._server_checked = True

    async def forget_user_target(self, target: str, now: float) -> int:
        """Nothing to do: the process that purged the user already did it here."""
        return 0

    @property
    def shared(self) -> bool:
        return True

    # -- evictions ------------------------------------------------------------------------

    async def delete(self, key: ScopeKey) -> bool:
        self._directories.drop((key.kind, key.owner_id))
        group, name = self.layout.key_group(key), member(key)
        keys = self._g.declared(group, self.layout.record(key, name))
        reply = await self._g.run("delete", DELETE, keys, [self.layout.base(group), name])
        removed = self._g.total(group, reply)
        self._counts["invalidations"] += removed
        return bool(removed)

    async def _delete_indexes(self, indexes: Sequence[tuple[int, str]], kind: str) -> int:
        removed = await redis_forget.delete_indexes(self._g, indexes, kind)
        self._counts["invalidations"] += removed
        return removed

    async def delete_channel(self, channel_id: str) -> int:
        self._directories.drop()  # its keys belong to owners we cannot name here
        group = self.layout.group_of(channel_id)
        return await self._delete_indexes([(group, self.layout.channel_index(channel_id))], "s")

    async def delete_owner(self, kind: ScopeKind, owner_id: str) -> int:
        """Every group's index of the owner (one pipeline), then the directory and marker."""
        self._directories.drop((kind, owner_id))
        indexes = [(g, self.layout.owner_index(g, kind, owner_id)) for g in self._g.all]
        removed = await self._delete_indexes(indexes, "z")
        directory, marker = (
            self.layout.directory(kind, owner_id),
            self.layout.marker(kind, owner_id),
        )
        await self._g.batch("delete", lambda pipe: (pipe.delete(directory), pipe.delete(marker)))
        return removed

    async def scrub_author(self, author_id: str, now: float) -> int:
        return await redis_forget.scrub_author(
            self._g, author_id, now, self.crude_ttl_s, self._margin_ms
        )

    async def sweep(self, now: float) -> int:
        removed = await redis_forget.sweep(self._g, now)
        self._counts["expirations"] += removed
        return removed

    @property
    def complete(self) -> bool:
        """Always false: a shared Redis cannot prove it holds every durable row."""
        return False

    def set_complete(self, value: bool) -> None:
        """Ignored: one process's hydration says nothing about what the others hold."""

    async def scope_keys(self, *, batch: int) -> AsyncIterator[list[ScopeKey]]:
        """Every key held, in batches (see ``ScopeLister``): a ``ZSCAN`` of each group's
        expiry set, which never blocks Redis for long; its cursor may repeat a key."""
        async for keys in redis_scan.scope_keys(self._g, batch):
            yield keys

    async def clear_prefix(self) -> int:
        """Delete every key under this prefix (tests, resets); returns how many."""
        self._directories.drop()
        return await redis_scan.clear_prefix(self._g, self.prefix)

    async def close(self) -> None:
        # The data is shared: closing only lets go of the connections.
        if self._calls.closed:
            return
        self._calls.closed = True
        await self._keeper.close()
        if self._owns_client:
            await close_client(self.client)


def _refused_command(exc: StoreUnavailable) -> bool:
    """Whether Redis refused the command itself (renamed or not permitted, as a managed
    Redis may do with CONFIG and INFO), rather than failed to answer."""
    said = str(exc).lower()
    return "unknown command" in said or "noperm" in said


def _policies(reply: Any) -> list[str]:
    """``maxmemory-policy`` from CONFIG GET's reply: one node's dict, or a cluster's dict of
    them per node."""
    if isinstance(reply, dict):
        if "maxmemory-policy" in reply:
            return [str(reply["maxmemory-policy"])]
        return [p for value in reply.values() for p in _policies(value)]
    return []
