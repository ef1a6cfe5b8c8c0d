"""The Redis hot tier's writes as script calls: a turn's capture (the scopes of one group in
one script) and a durable row's mirror, each queued on a pipeline with its arguments laid out
as ``capture.lua`` and ``apply.lua`` read them (:class:`Writes`), and sent with the owner
directories' listings, again where a group refused them until it is repaired
(:class:`Sender`, see :mod:`.keeper`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...model import Message, ScopeKey, ScopeMeta, ScopeRow
from ...model.errors import CacheUnavailable
from ...model.fence import WriteFence, author_targets, fence_targets
from .codec import authors, dumps, durable_json, lua_float, member, message_json, meta_json
from .directory import Directories, Listed
from .keeper import WRITE_TRIES, Keeper
from .scripts import APPLY, CAPTURE, Groups

__all__ = ["Scope", "Sender", "Writes"]

Scope = tuple[ScopeKey, tuple[Message, ...], ScopeRow | None]


@dataclass
class Writes:
    """What every write of one tier passes to its script besides the data."""

    g: Groups
    crude_ttl_s: float
    summary_ttl_s: float
    margin_ms: str

    def capture(
        self,
        pipe: Any,
        group: int,
        scopes: Sequence[Scope],
        meta: ScopeMeta,
        now: float,
        fence: WriteFence | None,
        append: int | None = None,
    ) -> None:
        """One script call for every scope of one group (``append``: see
        :meth:`HotTier.capture_scopes`)."""
        layout = self.g.layout
        args = [
            layout.base(group),
            lua_float(now),
            lua_float(now + self.crude_ttl_s),
            self.margin_ms,
            "" if fence is None else str(fence.position),
            dumps(now),
            str(len(scopes)),
            "" if append is None else str(append),
            _vouch_level(self.g.marks.known, fence),  # a group short of it refuses the write
        ]
        keys = self.g.declared(group)
        for key, messages, row in scopes:
            scope_args = self._capture_args(group, key, messages, meta, row, fence)
            args += scope_args
            keys += [layout.record(key, scope_args[0]), scope_args[1], scope_args[2]]
        self.g.eval(pipe, CAPTURE, keys, args)

    def _capture_args(
        self,
        group: int,
        key: ScopeKey,
        messages: tuple[Message, ...],
        meta: ScopeMeta,
        row: ScopeRow | None,
        fence: WriteFence | None,
    ) -> list[str]:
        """One scope's part of the capture script's ARGV (its layout is in capture.lua).
        Messages go one by one, each with its author's number, so the script can drop the
        messages of an author purged meanwhile without re-encoding the rest."""
        d, vexp = durable_json(row, self.summary_ttl_s) if row is not None else ("", "")
        targets = "[]"
        if fence is not None:
            targets = dumps(fence_targets(key, meta.server_id, meta.parent_channel_id, fence))
        args = [
            member(key),
            self.g.layout.owner_index(group, key.kind, key.owner_id),
            self.g.layout.channel_index(key.channel_id),
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
        for author in named:  # au holds digests, as authors_json writes them
            args += [author, dumps(targets_of[author]), targets_of[author]]
        args.append(str(len(messages)))
        for m in messages:
            args.append(str(0 if m.author_id is None else number[m.author_id]))
            args.append(message_json(m))
        return args

    def apply(self, pipe: Any, row: ScopeRow, now: float, fence: WriteFence | None) -> None:
        """One durable row's mirror (its group's apply script)."""
        layout = self.g.layout
        d, vexp = durable_json(row, self.summary_ttl_s)
        key = row.key
        group = layout.key_group(key)
        targets = "[]"
        if fence is not None:
            m = row.meta
            targets = dumps(fence_targets(key, m.server_id, m.parent_channel_id, fence))
        name = member(key)
        owner_index = layout.owner_index(group, key.kind, key.owner_id)
        channel_index = layout.channel_index(key.channel_id)
        args = [
            layout.base(group),
            name,
            owner_index,
            channel_index,
            str(row.revision),
            meta_json(row.meta),
            d,
            vexp,
            lua_float(now),
            lua_float(now + self.crude_ttl_s),
            self.margin_ms,
            "" if fence is None else str(fence.position),
            targets,
            _vouch_level(self.g.marks.known, fence),
        ]
        keys = self.g.declared(group, layout.record(key, name), owner_index, channel_index)
        self.g.eval(pipe, APPLY, keys, args)


@dataclass
class Sender:
    """Sends one tier's writes: each in one pipeline with the owner directories' listings,
    then again, for the groups that refused it as unable to vouch for it (``-2``), once the
    keeper repaired them (at most ``WRITE_TRIES`` sends)."""

    writes: Writes
    directories: Directories
    keeper: Keeper
    counts: dict[str, int]

    async def capture(
        self,
        scopes: Sequence[Scope],
        meta: ScopeMeta,
        now: float,
        fence: WriteFence | None,
        append: int | None = None,
    ) -> list[int]:
        """Every scope of a group in one script call, every group (a turn has one) and the
        owner directories in one pipeline: 1 written, 0 older than the cached row, -1 refused
        by the fence, per scope in order. Raises :class:`CacheUnavailable` when a group still
        cannot vouch for the write after its repair: its messages were not kept."""
        g = self.writes.g
        by_group: dict[int, list[int]] = {}
        for i, (key, _, _) in enumerate(scopes):
            by_group.setdefault(g.layout.key_group(key), []).append(i)
        outcomes = [0] * len(scopes)
        listed: list[Listed] = []
        pending = list(by_group)
        for attempt in range(WRITE_TRIES):

            def build(pipe: Any, groups: list[int] = pending, first: bool = attempt == 0) -> None:
                for group in groups:
                    chosen = [scopes[i] for i in by_group[group]]
                    self.writes.capture(pipe, group, chosen, meta, now, fence, append)
                if first:
                    keys = [key for key, _, _ in scopes]
                    listed.extend(self.directories.list_keys(pipe, keys, now))

            replies = await g.batch("capture", build)
            if attempt == 0:
                self.directories.noted(listed, now)
            refused = []
            for group, reply in zip(pending, replies, strict=False):
                g.total(group, reply)
                for i, outcome in zip(by_group[group], reply[4:], strict=True):
                    outcomes[i] = int(outcome)
                if int(reply[4]) == -2:  # a refusal of the group's: every scope has it
                    refused.append(group)
            if not refused or fence is None:
                break
            verdict = await self.keeper.vouch(refused, fence.position, attempt, now)
            if verdict == "fenced":  # a prune since the write began refuses it
                outcomes = [-1 if o == -2 else o for o in outcomes]
            if verdict != "again":
                break
            pending = refused
        written = outcomes.count(1) + outcomes.count(0)
        self.counts["fenced"] += len(outcomes) - written
        self.counts["stores"] += written
        if -2 in outcomes:
            g.marks.due = True
            raise CacheUnavailable(
                f"Redis could not vouch for this capture in its group "
                f"{', '.join(map(str, pending))}: it lost or rolled back its data and the "
                "repair did not finish (see the warning logged). The messages were not kept "
                "in the hot tier: capture the turn again"
            )
        return outcomes

    async def apply(
        self, rows: Sequence[ScopeRow], now: float, fence: WriteFence | None = None
    ) -> None:
        """Each row's mirror (its group's apply script), all in one pipeline with the owner
        directories. A row still refused after the repair is left out: it is durable, and
        read through when asked for."""
        g = self.writes.g
        listed: list[Listed] = []
        pending = list(range(len(rows)))
        for attempt in range(WRITE_TRIES):

            def build(pipe: Any, picked: list[int] = pending, first: bool = attempt == 0) -> None:
                for i in picked:
                    self.writes.apply(pipe, rows[i], now, fence)
                if first:
                    listed.extend(self.directories.list_keys(pipe, [r.key for r in rows], now))

            replies = await g.batch("row write", build)
            if attempt == 0:
                self.directories.noted(listed, now)
            refused = [
                i
                for i, reply in zip(pending, replies, strict=False)
                if g.total(g.layout.key_group(rows[i].key), reply) == -2
            ]
            if not refused or fence is None:
                break
            groups = sorted({g.layout.key_group(rows[i].key) for i in refused})
            if await self.keeper.vouch(groups, fence.position, attempt, now) != "again":
                break
            pending = refused


def _vouch_level(known: int, fence: WriteFence | None) -> str:
    """The mark a group needs to take a write (``unvouched`` in prelude.lua): the newest
    forget the process knows *up to the write's position*. A group short of it went back in
    time past what the write saw forgotten (the records those forgets evicted may be back);
    forgets after the position are the fence's, not the mark's: asking for them too would
    refuse a write again and again while forgets keep coming elsewhere."""
    return str(known if fence is None else min(known, fence.position))
