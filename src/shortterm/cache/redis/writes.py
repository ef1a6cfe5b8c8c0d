"""The Redis hot tier's writes as script calls: a turn's capture (the scopes of one group in
one script) and a durable row's mirror, each queued on a pipeline with its arguments laid out
as ``capture.lua`` and ``apply.lua`` read them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...model import Message, ScopeKey, ScopeMeta, ScopeRow
from ...model.fence import WriteFence, author_targets, fence_targets
from .codec import authors, dumps, durable_json, lua_float, member, message_json, meta_json
from .scripts import APPLY, CAPTURE, Groups

__all__ = ["Scope", "Writes"]

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
        ]
        keys = self.g.declared(group, layout.record(key, name), owner_index, channel_index)
        self.g.eval(pipe, APPLY, keys, args)
