"""What the Redis hot tier does across its groups: the forget fence recorded in every group,
and evictions that fan out (an owner, an author, the sweep).

Each is one pipeline of one script per group (one round trip per node); none is atomic across
groups, and none needs to be: a write is checked, in its own script, against its own group's
copy of the fence and mark, and ``docs/design.md`` ("Forgetting") says why that suffices.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ...model.dialogue import without_authors
from ...model.fence import JOURNAL_RETENTION_S, user_target
from .codec import authors_json, decode_messages, key_of, lua_float, messages_json
from .scripts import AUTHORED, DELETE_INDEX, RECORD_FORGET, REWRITE, SWEEP, Groups

__all__ = ["delete_indexes", "record", "scrub_author", "sweep"]

SWEEP_BATCH = 500


async def record(g: Groups, seq: int, targets: Sequence[str], now: float, kind: str) -> None:
    """A forget's (``kind`` '') or settings change's ('s') targets in every group's fence,
    and a settings change in every group's ``sv``; returns once every group has them."""
    rest = [str(seq), lua_float(now), lua_float(now - JOURNAL_RETENTION_S), kind, *targets]

    def build(pipe: Any) -> None:
        for group in g.all:
            g.eval(pipe, RECORD_FORGET, g.declared(group), [g.layout.base(group), *rest])

    replies = await g.batch("forget record", build)
    for group, reply in zip(g.all, replies, strict=True):
        g.total(group, reply)


async def delete_indexes(g: Groups, indexes: Sequence[tuple[int, str]], kind: str) -> int:
    """Remove every record an index lists, for each (group, index) (one pipeline)."""

    def build(pipe: Any) -> None:
        for group, index in indexes:
            args = [g.layout.base(group), index, kind, ""]
            g.eval(pipe, DELETE_INDEX, g.declared(group, index), args)

    replies = await g.batch("delete", build)
    return sum(g.total(group, r) for (group, _), r in zip(indexes, replies, strict=True))


async def scrub_author(
    g: Groups, author_id: str, now: float, crude_ttl_s: float, margin_ms: str
) -> int:
    """Read every group's records listing the author (one pipeline), then rewrite each (a
    compare-and-set, another pipeline); returns how many changed."""
    groups = list(g.all)
    target = user_target(author_id)
    gone = (author_id,)  # the bot's answers to them go too (model.dialogue)
    changed = 0
    # A record a concurrent capture rewrote between our read and our write is read again;
    # one still listed after a few passes was captured anew after the scrub began.
    for _attempt in range(5):

        def read(pipe: Any, groups: Sequence[int] = groups) -> None:
            for group in groups:
                index = g.layout.author_index(group, target)
                g.eval(pipe, AUTHORED, g.declared(group, index), [g.layout.base(group), index])

        found = await g.batch("scrub read", read)
        writes = [
            (group, reply[i], reply[i + 1])
            for group, reply in zip(groups, found, strict=True)
            for i in range(0, len(reply), 2)
        ]
        if not writes:
            break
        groups = sorted({group for group, _, _ in writes})

        def write(pipe: Any, writes: Sequence[tuple[int, str, str]] = writes) -> None:
            for group, key_json, m_raw in writes:
                at, raw = json.loads(m_raw)
                kept = without_authors(decode_messages(raw), gone)
                args = [
                    g.layout.base(group),
                    key_json,
                    m_raw,
                    messages_json(at, kept),
                    lua_float(at + crude_ttl_s) if kept else "",
                    authors_json(kept),
                    lua_float(now),
                    margin_ms,
                ]
                record_key = g.layout.record(key_of(key_json), key_json)
                g.eval(pipe, REWRITE, g.declared(group, record_key), args)

        results = await g.batch("scrub write", write)
        for (group, _, _), result in zip(writes, results, strict=True):
            changed += g.total(group, result) == 1
    return changed


async def sweep(g: Groups, now: float) -> int:
    """Every group in one pipeline, again for those that had a full batch due."""
    removed = 0
    groups = list(g.all)
    args = [lua_float(now), str(SWEEP_BATCH)]
    while groups:

        def build(pipe: Any, due: Sequence[int] = groups) -> None:
            for group in due:
                g.eval(pipe, SWEEP, g.declared(group), [g.layout.base(group), *args])

        replies = await g.batch("sweep", build)
        removed += sum(g.total(group, r) for group, r in zip(groups, replies, strict=True))
        groups = [
            group for group, r in zip(groups, replies, strict=True) if int(r[4]) >= SWEEP_BATCH
        ]
    return removed
