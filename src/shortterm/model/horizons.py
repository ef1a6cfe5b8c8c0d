"""Forget horizons: a forget is a point in time as well as a deletion.

A chat platform keeps its history, and a bot passes the channel's recent messages to every
capture again, so a cleared channel or a purged user would come straight back with the next
turn. Each clear of a channel, purge of a user and FULL privacy choice therefore records, in
the journal and in a table of its own, the moment it covers (its *horizon*): the platform's
time of the command when the caller gives it, the memory's clock otherwise. A capture drops
every history message a horizon covers: one written at or before its channel's horizon, or by
an author at or before that author's horizon, and the bot's answers to the latter.

Horizons are keyed by the forget's target digest (``fence.channel_target`` /
``fence.user_target``), never an id: a purged user's id is not kept. Pure code: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal

from .fence import channel_target, user_target
from .messages import Message

__all__ = [
    "HORIZON_AHEAD_S",
    "HORIZON_RETENTION_S",
    "Horizons",
    "MessageIds",
    "id_time",
    "uncovered",
]

# How long a horizon is kept: a quiet channel may keep an old message among its newest for
# weeks, and the platform passes it back with every turn. One row per forgotten channel or
# user (never per message), so the cost follows the forgets, not what they forgot.
HORIZON_RETENTION_S = 365 * 86400.0

# How far past the memory's clock a caller's horizon may lie (the platform's clock runs a
# little ahead of ours): further is a mistake, and would swallow the channel's next messages.
HORIZON_AHEAD_S = 300.0

MessageIds = Literal["discord", "slack"]
"""Platforms whose message ids are ordered in time, and tell it."""

_AUTHORS_KEPT = 100_000  # author ids whose horizon (or its absence) is remembered
_DISCORD_EPOCH_MS = 1_420_070_400_000  # 2015-01-01T00:00:00Z, where snowflakes count from


def id_time(message_id: str | None, ids: MessageIds | None) -> float | None:
    """The epoch seconds a platform's message id was made at, or ``None`` when the id does
    not tell (no id, no such platform, or an id not of its form). Discord ids are snowflakes
    (milliseconds since 2015 in the bits above 22); Slack's ``ts`` is epoch seconds."""
    if message_id is None or ids is None:
        return None
    if ids == "discord":
        if not message_id.isdigit() or len(message_id) > 20:
            return None
        return ((int(message_id) >> 22) + _DISCORD_EPOCH_MS) / 1000.0
    head, dot, tail = message_id.partition(".")
    if not head.isdigit() or (dot and not tail.isdigit()):
        return None
    return float(message_id)


class Horizons:
    """The newest horizon of every forgotten channel and user this process knows of, by
    target digest. Kept current by the journal follower; read by every capture."""

    __slots__ = ("_at", "_authors", "newest")

    def __init__(self, known: Mapping[str, float] | None = None) -> None:
        self._at: dict[str, float] = {}
        # An author id's horizon, looked up once per author rather than hashed per message.
        self._authors: dict[str, float | None] = {}
        # The newest horizon of all: a bot message whose question is out of sight may answer
        # anyone, so it is kept only when written after every forget's horizon.
        self.newest: float | None = None
        self.record_all((known or {}).items())

    def __len__(self) -> int:
        return len(self._at)

    def record(self, target: str, at: float) -> None:
        """A forget of ``target`` covering up to ``at``: a later horizon never moves back."""
        if at > self._at.get(target, float("-inf")):
            self._at[target] = at
            self._authors.clear()
            if self.newest is None or at > self.newest:
                self.newest = at

    def record_all(self, known: Iterable[tuple[str, float]]) -> None:
        for target, at in known:
            self.record(target, at)

    def of(self, target: str) -> float | None:
        return self._at.get(target)

    def channel(self, channel_id: str) -> float | None:
        return self._at.get(channel_target(channel_id)) if self._at else None

    def author(self, author_id: str) -> float | None:
        if not self._at:
            return None
        memo = self._authors
        try:
            return memo[author_id]
        except KeyError:
            if len(memo) >= _AUTHORS_KEPT:
                memo.clear()  # a bound on memory, not on correctness
            found = memo[author_id] = self._at.get(user_target(author_id))
            return found


def uncovered(
    history: Sequence[Message],
    *,
    channel: float | None,
    author: Callable[[str], float | None],
    triggerer: str | None,
    ids: MessageIds | None,
    unanswered: float | None = None,
) -> tuple[Sequence[Message], int]:
    """``history`` without what a horizon covers, and how many messages went.

    A message is placed by its ``at``, else by its id where ``ids`` says the platform's ids
    tell time; a message placed nowhere is taken as written before any horizon that applies
    to it (the safe side: a forget must hold). It is covered when placed at or before the
    channel's horizon (``channel``), or, for a user message, at or before its author's
    (``author``; an unattributed one is ``triggerer``'s, as the scope rules read it). A bot
    message answers the nearest user message before it, so the answers to a covered
    author's message go with it; one before every user message of ``history`` answers a
    question out of sight, perhaps a purged author's, and is covered when placed at or
    before ``unanswered`` (the newest horizon of all)."""
    if channel is None and not _may_cover(history, author, triggerer, unanswered):
        return history, 0  # the common case once anything was forgotten anywhere
    kept: list[Message] = []
    out_of_sight = True  # no user message yet: a bot message answers one we cannot see
    answers_covered = False  # the user message the next bot messages answer was covered
    for m in history:
        at = m.at if m.at is not None else id_time(m.message_id, ids)
        here = channel is not None and (at is None or at <= channel)
        if m.role == "user":
            out_of_sight = False
            if here:
                answers_covered = False  # what answers it and is newer is new data
                continue
            who = m.author_id if m.author_id is not None else triggerer
            horizon = None if who is None else author(who)
            answers_covered = horizon is not None and (at is None or at <= horizon)
            if answers_covered:
                continue
        elif here or (answers_covered if not out_of_sight else _before(at, unanswered)):
            continue
        kept.append(m)
    return kept, len(history) - len(kept)


def _before(at: float | None, horizon: float | None) -> bool:
    """Whether a message placed at ``at`` (``None``: nowhere) is covered by ``horizon``."""
    return horizon is not None and (at is None or at <= horizon)


def _may_cover(
    history: Sequence[Message],
    author: Callable[[str], float | None],
    triggerer: str | None,
    unanswered: float | None,
) -> bool:
    """Whether a horizon other than the channel's may cover a message of ``history``: a user
    message's author has one (a dictionary look-up each), or it opens with a bot message."""
    if unanswered is not None and history and history[0].role == "assistant":
        return True
    for m in history:
        if m.role == "user":
            who = m.author_id if m.author_id is not None else triggerer
            if who is not None and author(who) is not None:
                return True
    return False
