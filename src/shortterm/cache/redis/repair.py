"""Keeping each Redis group honest about what was forgotten, whatever Redis itself forgets.

The durable journal is the only authority on what was forgotten; Redis may lose, roll back or
drop anything (a restart from an older snapshot, a replica promoted before it caught up, a
flush). Each group keeps a *mark* (``fm``): the journal position up to which every forget has
its tombstones recorded and its records evicted there. Because the mark lives in the group,
whatever takes the group back in time takes its mark back with it, so a group never claims a
forget it lost.

Every reply a process gets from a group carries the mark (``redis_marks``); a process that
knows of a newer forget serves nothing from that group and repairs it first:

- **a mark below what the process knows**: the forgets after the mark are read from the
  journal and replayed into the group in one script with the mark's move (``replay.lua``):
  their tombstones recorded, and what they name evicted through the indexes (a user's by the
  digest the journal names them by; an author's records are dropped whole, as the journal
  does not say which messages were theirs);
- **no mark** (the group is new, was emptied, or lost it): a reset (``mark.lua``), in two
  steps around a read of the journal's end, drops whatever records the group holds, fences
  every write that began before that end (the ``*`` tombstone) and sets it as the mark;
- **a prune** between the mark and what the process knows (the group went back more than the
  journal keeps): the group is dropped whole and fenced, as for no mark.

Fenced writes need a group that vouches for them (``unvouched`` in the prelude): a write to a
group without a mark, with a mark below what its process knows was forgotten, or older than
its ``*`` tombstone is refused; the process repairs the group and writes again, after
recording in the group's fence the forgets journaled between the write's position and the
``*`` tombstone (``backfill``), so the write lands unless one of them covers it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, cast

from ...model import ScopeKey
from ...model.fence import JOURNAL_RETENTION_S, JournalEntry
from ..base import JournalReader
from .codec import lua_float, member
from .marks import parse_mark
from .scripts import BACKFILL, MARK, REPLAY, Groups

__all__ = ["backfill", "repair"]

log = logging.getLogger("shortterm")

RESET_TRIES = 50  # 0.1 s apart: another process's claim is set within one round trip or expires
_PAGE = 1000
_SETTINGS = ("user_settings", "server_settings")


async def repair(g: Groups, journal: JournalReader, token: str, now: float, to: int = 0) -> int:
    """Bring every group's mark up to what this process knows was forgotten
    (``g.marks.known``, or ``to`` if higher), resetting those without one. Returns the
    highest mark: the process's position may stand on it."""
    marks = g.marks
    for _round in range(RESET_TRIES):
        raws = await g.batch(
            "mark read", lambda pipe: [pipe.get(g.layout.base(k) + "fm") for k in g.all]
        )
        for group, raw in zip(g.all, raws, strict=True):
            marks.values[group] = parse_mark(raw)
        missing = [k for k in g.all if marks.values[k] is None]
        if missing:
            await _reset(g, missing, token, journal, now)
        if all(mark is not None for mark in marks.values):
            known = max(marks.known, to)
            behind = [k for k in g.all if (marks.values[k] or 0) < known]
            if not behind or await _replay(g, behind, known, journal, now):
                marks.due = False
                break
        await asyncio.sleep(0.1)  # another process is resetting a group, or it moved back
    else:
        log.warning("shortterm Redis repair unfinished: another process held a reset throughout")
    return max((m or 0) for m in marks.values)


async def _reset(
    g: Groups, groups: Sequence[int], token: str, journal: JournalReader, now: float
) -> None:
    """Claim each group's mark, read the journal's end after the claims, and reset the
    groups we still hold a claim on; others are being reset by another process."""
    at = lua_float(now)

    async def mark(groups: Sequence[int], head: str) -> list[str]:
        def build(pipe: Any) -> None:
            for k in groups:
                g.eval(pipe, MARK, g.declared(k), [g.layout.base(k), token, head, at])

        return [cast(str, got) for got in await g.batch("mark reset", build)]

    got = await mark(groups, "")
    claimed = [k for k, value in zip(groups, got, strict=True) if value == "claimed"]
    if claimed:
        head = str(await journal.journal_head())
        for k, value in zip(claimed, await mark(claimed, head), strict=True):
            g.marks.values[k] = parse_mark(value)


async def _forgets(journal: JournalReader, low: int, to: int) -> list[JournalEntry]:
    entries: list[JournalEntry] = []
    while True:
        page = await journal.journal_since(low, limit=_PAGE, forgets_only=True)
        entries += [e for e in page if e.seq <= to]
        if len(page) < _PAGE or page[-1].seq >= to:
            return entries
        low = page[-1].seq


async def _replay(
    g: Groups, groups: Sequence[int], to: int, journal: JournalReader, now: float
) -> bool:
    """Replay the forgets in (lowest mark, ``to``] into each group; False when a group's
    mark moved below what was read meanwhile (or was lost), to be tried again."""
    low = min(g.marks.values[k] or 0 for k in groups)
    entries = await _forgets(journal, low, to)
    head = [str(to), str(low), lua_float(now), lua_float(now - JOURNAL_RETENTION_S)]

    def build(pipe: Any) -> None:
        for k in groups:
            args, keys = _entries_args(g, k, entries)
            g.eval(pipe, REPLAY, g.declared(k, *keys), [g.layout.base(k), *head, *args])

    replies = await g.batch("forget replay", build)
    done = True
    for k, reply in zip(groups, replies, strict=True):
        mark = parse_mark(reply) if reply != "short" else None
        g.marks.values[k] = mark
        done &= mark is not None
    return done


async def backfill(
    g: Groups, groups: Sequence[int], position: int, journal: JournalReader, now: float
) -> list[str]:
    """Let each group (repaired: it has a mark) vouch for a write that began at journal
    position ``position`` although it was reset above it: the forgets journaled since that
    position are recorded in its fence and its ``*`` tombstone moved down to it
    (``backfill.lua``). Per group: 'ok'; 'fenced' when a journaled entry since the position
    fences every write before it (a prune); 'short' when it was reset again meanwhile."""
    up = await journal.journal_head()
    entries = await _forgets(journal, position, up)
    args = [str(position), str(up), lua_float(now), lua_float(now - JOURNAL_RETENTION_S)]
    args.append(str(len(entries)))
    for e in entries:
        args += [str(e.seq), "s" if e.kind in _SETTINGS else "", str(len(e.targets)), *e.targets]

    def build(pipe: Any) -> None:
        for k in groups:
            g.eval(pipe, BACKFILL, g.declared(k), [g.layout.base(k), *args])

    return [str(reply) for reply in await g.batch("forget backfill", build)]


def _entries_args(
    g: Groups, group: int, entries: Sequence[JournalEntry]
) -> tuple[list[str], list[str]]:
    """The replay script's ARGV after its head (see replay.lua), and the keys it names."""
    layout = g.layout
    args = [str(len(entries))]
    keys: list[str] = []
    for e in entries:
        evictions: list[tuple[str, str]] = []
        subject = e.subject
        if e.kind == "channel" and subject and subject[0] is not None:
            if layout.group_of(subject[0]) == group:
                evictions.append(("s", layout.channel_index(subject[0])))
        elif e.kind == "user" and subject and subject[0] is not None:
            evictions.append(("z", layout.user_index(group, subject[0])))
            evictions.append(("s", layout.author_index(group, subject[0])))
        elif e.kind == "server_channel" and len(subject) == 3:
            server, channel, persona = subject
            if server is not None and channel is not None and layout.group_of(channel) == group:
                scope = ScopeKey.server(server, channel, persona)
                evictions.append(("r", member(scope)))
                keys.append(layout.record(scope, member(scope)))
        elif e.kind == "pruned":
            evictions.append(("w", subject[0] if subject and subject[0] else str(e.seq)))
        keys += [key for how, key in evictions if how in ("s", "z")]
        args += [str(e.seq), "s" if e.kind in _SETTINGS else "", str(len(e.targets)), *e.targets]
        args.append(str(len(evictions)))
        for how, key in evictions:
            args += [how, key]
    return args, keys
