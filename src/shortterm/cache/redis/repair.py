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
  journal a page at a time and replayed into the group in bounded steps, each one script that
  moves the mark through what it applied (``replay.lua``): their tombstones recorded, and what
  they name evicted through the indexes (a user's by the digest the journal names them by; an
  author's records are dropped whole, as the journal does not say which messages were
  theirs). A group part-way through serves nothing and refuses fenced writes, as its mark is
  still short; a step stops its evictions after ``STEP_BUDGET_MS``, so no command holds
  Redis up for long however many forgets it lost;
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
from contextlib import suppress
from typing import Any, cast

from ...model import ScopeKey
from ...model.errors import StoreUnavailable
from ...model.fence import JOURNAL_RETENTION_S, JournalEntry
from ..base import JournalReader, OwnEntry
from .codec import dumps, lua_float, member
from .layout import Layout
from .marks import parse_mark
from .scripts import BACKFILL, MARK, REPLAY, Groups

__all__ = ["backfill", "repair"]

log = logging.getLogger("shortterm")

RESET_TRIES = 50  # 0.1 s apart: another process's claim is set within one round trip or expires
_PAGE = 1000  # journal entries read at once
# A replay step (one script in one group) records the tombstones of at most STEP_ENTRIES
# forgets, then runs their evictions until STEP_BUDGET_MS is spent and leaves the rest to the
# next step: a few milliseconds, however much the group has to evict (50 ms on a busy
# machine is far), so no command holds the other clients up for long.
STEP_ENTRIES = 100
STEP_BUDGET_MS = 5
# Groups a pipeline carries: Redis runs a pipeline's commands back to back, so this bounds
# how long the other clients wait behind one round trip of the replay.
STEP_GROUPS = 4
_MAX_TRIPS = 100_000  # round trips on one slice of entries before a replay is given up
_SETTINGS = ("user_settings", "server_settings")


async def repair(
    g: Groups,
    journal: JournalReader,
    token: str,
    now: float,
    to: int = 0,
    own: OwnEntry | None = None,
) -> int:
    """Bring every group's mark up to what this process knows was forgotten
    (``g.marks.known``, or ``to`` if higher), resetting those without one. Returns the
    highest mark: the process's position may stand on it. ``own``: this process's own
    newest entry, replayed without reading the journal where it is all a group lacks."""
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
            if not behind or await _replay(g, behind, known, journal, now, own):
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
    g: Groups,
    groups: Sequence[int],
    to: int,
    journal: JournalReader,
    now: float,
    own: OwnEntry | None = None,
) -> bool:
    """Replay the forgets in (lowest mark, ``to``] into each group, read a page of the
    journal at a time (the next one read while this one is applied) and applied
    ``STEP_ENTRIES`` at a time (:func:`_steps`); False when a group's mark moved below what
    was read meanwhile (or was lost), to be tried again. When the process's own entry is
    all that lies there (``own``: ``to`` is its entry, and no group is short of a forget
    before it), it is replayed as the store wrote it, with no read: a forget committed as
    the durable tier went away still moves the marks."""
    marks = g.marks
    low = min(marks.values[k] or 0 for k in groups)
    if own is not None and own.entry.seq == to and own.after <= low:
        return await _steps(g, groups, [own.entry], (low, to, True), now)
    reading = asyncio.ensure_future(journal.journal_since(low, limit=_PAGE, forgets_only=True))
    try:
        while True:
            page = await reading
            entries = [e for e in page if e.seq <= to]
            last = len(page) < _PAGE or page[-1].seq >= to
            if not last:
                after = page[-1].seq
                reading = asyncio.ensure_future(
                    journal.journal_since(after, limit=_PAGE, forgets_only=True)
                )
            for start in range(0, max(len(entries), 1), STEP_ENTRIES):
                part = entries[start : start + STEP_ENTRIES]
                final = last and start + STEP_ENTRIES >= len(entries)
                high = to if final else part[-1].seq
                behind = [k for k in groups if (marks.values[k] or 0) < high]
                if behind and not await _steps(g, behind, part, (low, high, final), now):
                    return False
                low = high
            if last:
                return True
    finally:
        reading.cancel()  # a read ahead no one waits for: its outcome does not matter
        with suppress(asyncio.CancelledError, StoreUnavailable):
            await reading


async def _steps(
    g: Groups,
    groups: Sequence[int],
    entries: Sequence[JournalEntry],
    span: tuple[int, int, bool],
    now: float,
) -> bool:
    """Bring each group's mark up to ``high`` through ``entries`` (every forget in
    (``low``, ``high``]): in steps of one script per group (``replay.lua``), each running its
    evictions for at most ``STEP_BUDGET_MS``, ``STEP_GROUPS`` groups a pipeline, until every
    group is there. False when a group moved back or lost its mark meanwhile."""
    low, high, last = span
    head = [str(high), str(low), lua_float(now), lua_float(now - JOURNAL_RETENTION_S)]
    head += [str(STEP_BUDGET_MS * 1000), "last" if last else "", *_tombstones(entries)]
    evictions = _evictions(g.layout, entries)
    pending = list(groups)
    for _trip in range(_MAX_TRIPS):
        sent = pending[:STEP_GROUPS]

        def build(pipe: Any, sent: list[int] = sent) -> None:
            for k in sent:
                mine = dumps([e for group, e in evictions if group is None or group == k])
                g.eval(pipe, REPLAY, g.declared(k), [g.layout.base(k), *head, mine])

        replies = await g.batch("forget replay", build)
        again = []
        for k, reply in zip(sent, replies, strict=True):
            mark = g.marks.values[k] = parse_mark(reply) if reply != "short" else None
            if mark is None:
                return False
            if mark < high:
                again.append(k)  # the step's budget ran out: it goes on from its mark
        pending = pending[len(sent) :] + again
        if not pending:
            return True
    log.warning("shortterm Redis replay made no headway in %d round trips", _MAX_TRIPS)
    return False


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


def _tombstones(entries: Sequence[JournalEntry]) -> list[str]:
    """The replay script's ARGV for the entries' tombstones (see replay.lua): the newest
    settings change, and each target with its newest forget (what the fence keeps of it)."""
    newest: dict[str, int] = {}
    settings = 0
    for e in entries:
        if e.kind in _SETTINGS:
            settings = max(settings, e.seq)
        for target in e.targets:
            if newest.get(target, 0) < e.seq:
                newest[target] = e.seq
    pairs = [[target, str(seq)] for target, seq in newest.items()]
    return [str(settings) if settings else "", dumps(pairs)]


Eviction = tuple[int | None, list[Any]]


def _evictions(layout: Layout, entries: Sequence[JournalEntry]) -> list[Eviction]:
    """What each entry evicts (see replay.lua), in journal order, with the one group it
    concerns (``None``: every group): the names follow the group's base, so an eviction
    meant for every group reads the same in each."""
    at = len(layout.base(0))
    out: list[Eviction] = []
    for e in entries:
        subject = e.subject
        seq = str(e.seq)
        if e.kind == "channel" and subject and subject[0] is not None:
            group = layout.group_of(subject[0])
            index = layout.channel_index(subject[0])[len(layout.base(group)) :]
            out.append((group, [seq, ["s", index]]))
        elif e.kind == "user" and subject and subject[0] is not None:
            user = layout.user_index(0, subject[0])[at:]
            author = layout.author_index(0, subject[0])[at:]
            out.append((None, [seq, ["z", user], ["s", author]]))
        elif e.kind == "server_channel" and len(subject) == 3:
            server, channel, persona = subject
            if server is not None and channel is not None:
                name = member(ScopeKey.server(server, channel, persona))
                out.append((layout.group_of(channel), [seq, ["r", name]]))
        elif e.kind == "pruned":
            out.append((None, [seq, ["w", subject[0] if subject and subject[0] else seq]]))
    return out
