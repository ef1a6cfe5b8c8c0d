"""The forget journal and the fence in SQLite: entries appended inside the caller's transaction."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from ...model import ScopeKey, ScopeMeta
from ...model.fence import EVERY_TARGET, JOURNAL_RETENTION_S, WriteFence
from ...model.horizons import HORIZON_RETENTION_S
from ..own_entries import OwnEntries
from .values import padded_targets


def append(
    db: sqlite3.Connection,
    kind: str,
    subject: Sequence[str | None],
    targets: Sequence[str],
    now: float,
    subject_user: str | None = None,
    horizon: float | None = None,
    own: OwnEntries | None = None,
) -> int:
    """Append one journal entry and its fence rows (and, with ``horizon``, the newest
    horizon of each target); returns its sequence number. Kept in ``own`` too."""
    # An edit fences nothing: its "[]" is what json.dumps writes, without the encoder.
    encoded = json.dumps(list(targets)) if targets else "[]"
    cur = db.execute(
        "INSERT INTO journal (kind, subject, subject_user, targets, at, horizon) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (kind, json.dumps(list(subject)), subject_user, encoded, now, horizon),
    )
    seq = int(cur.lastrowid or 0)
    if own is not None:
        own.add(seq, kind, subject, targets, now, horizon)
    if targets:  # edits and settings changes fence nothing
        db.executemany(
            "INSERT OR IGNORE INTO fence VALUES (?, ?, ?)", [(t, seq, now) for t in targets]
        )
    if horizon is not None:
        db.executemany(
            "INSERT INTO horizon VALUES (?, ?, ?) ON CONFLICT (target) DO UPDATE SET "
            "at = max(at, excluded.at), written = excluded.written",
            [(t, horizon, now) for t in targets],
        )
    return seq


def rewound(db: sqlite3.Connection, past: int, now: float) -> int:
    """The journal went back below ``past`` (see ``Store.journal_rewound``): a ``pruned``
    entry through a floor above ``past`` and above every number handed out (no entry's), its
    own number above the floor. Returns that number."""
    given = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'journal'").fetchone()
    floor = max(past, given[0] if given else 0) + 1
    # AUTOINCREMENT numbers above the largest ever used: the floor is skipped for good.
    db.execute("DELETE FROM sqlite_sequence WHERE name = 'journal'")
    db.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('journal', ?)", (floor,))
    return append(db, "pruned", [str(floor)], [EVERY_TARGET], now)


def prune(db: sqlite3.Connection, now: float) -> int | None:
    """Delete the journal entries and fence rows older than the journal's retention, and
    journal what went: a ``pruned`` entry naming the newest deleted sequence, fencing every
    write that began before it (it may have missed fence rows that are gone). Returns its
    sequence, or None when nothing was old enough."""
    # Horizons outlive the journal by far (the platform keeps old messages): their own age.
    db.execute("DELETE FROM horizon WHERE written < ?", (now - HORIZON_RETENTION_S,))
    oldest = now - JOURNAL_RETENTION_S
    through = db.execute("SELECT MAX(seq) FROM journal WHERE at < ?", (oldest,)).fetchone()[0]
    if through is None:
        return None
    db.execute("DELETE FROM journal WHERE at < ?", (oldest,))
    db.execute("DELETE FROM fence WHERE at < ?", (oldest,))
    return append(db, "pruned", [str(through)], [EVERY_TARGET], now)


def append_edit(db: sqlite3.Connection, key: ScopeKey, now: float) -> int:
    owner = key.owner_id if key.kind == "user" else None
    return append(db, "edit", key.astuple, (), now, subject_user=owner)


def fenced(
    db: sqlite3.Connection, key: ScopeKey, meta: ScopeMeta | None, fence: WriteFence
) -> bool:
    """Whether a forget journaled after ``fence`` covers this write (inside its transaction)."""
    targets = [t for t in padded_targets(key, meta, fence.triggerer) if t is not None]
    targets.append(EVERY_TARGET)
    return covered(db, fence.position, [*targets, *fence.extra_targets])


# Targets per lookup: far below SQLite's bound on a statement's parameters.
_LOOKUP_TARGETS = 500


def covered(db: sqlite3.Connection, position: int, targets: Sequence[str]) -> bool:
    """Whether a fence row of a sequence above ``position`` names one of ``targets`` (any
    number of them). Atomic with a write only inside the write's transaction."""
    for start in range(0, len(targets), _LOOKUP_TARGETS):
        chunk = targets[start : start + _LOOKUP_TARGETS]
        marks = ", ".join("?" * len(chunk))
        found = db.execute(
            f"SELECT 1 FROM fence WHERE seq > ? AND target IN ({marks}) LIMIT 1",
            (position, *chunk),
        ).fetchone()
        if found is not None:
            return True
    return False


def extra_fenced(db: sqlite3.Connection, fence: WriteFence) -> bool:
    """Whether a forget journaled after ``fence`` names one of its extra targets (which the
    fixed-width fenced statements leave out): inside the write's transaction."""
    return bool(fence.extra_targets) and covered(db, fence.position, fence.extra_targets)
