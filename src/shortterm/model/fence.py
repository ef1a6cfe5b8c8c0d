"""The forget fence: what a forget covers, and how a write knows it was overtaken by one.

Every forget (a cleared channel, a purged user, a FULL privacy choice, one cleared server
channel, a channel turned private) is journaled durably with a sequence number, in the same
transaction as its effect, together with its *targets*: opaque digests naming what it covers
(``channel``, ``user``, ``server channel``, ``private channel``). A write carries the journal
position its process had applied when the write began (its *fence*) and the targets it touches;
it lands only where no journaled target of a later sequence matches — a check made atomically
where the write lands (the SQL statement, the Redis script, the in-process tier's one
synchronous step). So a forget that returned can never be undone by a write that was already
in flight, in this process or any other.

Targets are digests, not ids: the journal of a purged user must not keep their id in clear.
Pure code: no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

from . import ScopeKey

__all__ = [
    "EVERY_TARGET",
    "JOURNAL_RETENTION_S",
    "JournalEntry",
    "JournalKind",
    "WriteFence",
    "channel_target",
    "fence_targets",
    "private_target",
    "scope_targets",
    "server_channel_target",
    "turn_target",
    "user_target",
]

# How long journal entries and fence rows are kept: far longer than any write stays in flight
# and than any hot value lives (summaries expire after a day by default). The store's own
# figure: a caller's data retention (``janitor``) never shortens it. A follower whose position
# is older than what was pruned learns it from the ``pruned`` entry the prune journals.
JOURNAL_RETENTION_S = 7 * 86400.0

# The target every write carries implicitly: a prune (or a journal created anew) fences it, so
# a write that began before it (and may have missed fence rows that are gone now) is refused.
# Not a digest (those are hex), so it names nothing else.
EVERY_TARGET = "*"


JournalKind = Literal[
    "channel",  # clear_channel: subject (channel_id,)
    "user",  # clear_user / configure_user(FULL): subject (digest,) — never the id
    "server_channel",  # clear_server_channel: subject (server_id, channel_id, persona_id)
    "user_settings",  # a user's settings changed: subject ()
    "server_settings",  # a server's settings changed: subject (server_id,)
    "edit",  # a distilled write (tool, admin edit, import): subject = the scope key
    # A turn's upgrade claim taken over from owners that missed their deadline: subject (),
    # the targets their writes carried (see turn_target), so none of those lands any more.
    "turn",
    # Entries up to subject[0] (a sequence, as text) were deleted, or never existed here (a
    # journal created anew): a follower whose position is older cannot know what it missed.
    "pruned",
]


@lru_cache(maxsize=65536)
def _digest(*parts: str | None) -> str:
    # Length-prefixed parts: no id can make two different tuples collide before hashing.
    raw = "\x1f".join("-" if p is None else f"{len(p)}:{p}" for p in parts)
    return hashlib.blake2b(raw.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


def channel_target(channel_id: str) -> str:
    return _digest("c", channel_id)


def user_target(user_id: str) -> str:
    return _digest("u", user_id)


def server_channel_target(server_id: str, channel_id: str, persona_id: str | None) -> str:
    return _digest("s", server_id, channel_id, persona_id)


def private_target(server_id: str, channel_id: str) -> str:
    return _digest("p", server_id, channel_id)


def turn_target(turn_id: str, owner: str) -> str:
    """What the upgrade write of one claim on a turn carries (``owner``: the claim's own
    token), so that whoever takes the claim over can fence that write alone."""
    return _digest("t", turn_id, owner)


def scope_targets(
    key: ScopeKey,
    server_id: str | None,
    parent_channel_id: str | None,
    triggerer: str | None,
    extra: Iterable[str] = (),
) -> tuple[str, ...]:
    """The targets a write of ``key`` touches: its channel, its owner (a user scope) or its
    exact key (a server scope), the channel and its thread parent turning private, the user
    whose turn wrote it (a purge of the triggerer drops the whole capture), and ``extra``
    (a fence's :attr:`WriteFence.extra_targets`: the distiller's authors)."""
    kind, owner, channel, persona = key.astuple
    out = [channel_target(channel)]
    if kind == "user":
        out.append(user_target(owner))
    else:
        out.append(server_channel_target(owner, channel, persona))
    if server_id is not None:
        out.append(private_target(server_id, channel))
        if parent_channel_id is not None:
            out.append(private_target(server_id, parent_channel_id))
    if triggerer is not None and not (kind == "user" and owner == triggerer):
        out.append(user_target(triggerer))
    for t in extra:
        if t not in out:
            out.append(t)
    return tuple(out)


def fence_targets(
    key: ScopeKey, server_id: str | None, parent_channel_id: str | None, fence: WriteFence
) -> tuple[str, ...]:
    """:func:`scope_targets` of a write carrying ``fence``: its triggerer and its extra
    targets included."""
    return scope_targets(key, server_id, parent_channel_id, fence.triggerer, fence.extra_targets)


def author_targets(author_ids: Iterable[str]) -> dict[str, str]:
    """Each distinct author's user target, for dropping purged authors' messages."""
    return {a: user_target(a) for a in set(author_ids)}


@dataclass(frozen=True, slots=True)
class WriteFence:
    """Where a write began: the journal position its process had applied, and the user whose
    turn it is (``None`` for an admin edit or an import). ``extra_targets``: more targets
    every scope of the write carries, beyond what :func:`scope_targets` derives from the key
    (the distiller's: the user target of every author whose words it showed the model)."""

    position: int
    triggerer: str | None = None
    store_down: bool = False  # the journal could not be read as the write began
    extra_targets: tuple[str, ...] = ()

    def covering(self, targets: Iterable[str]) -> WriteFence:
        """This fence, its write also carrying ``targets`` (same position: a forget of any
        of them journaled after the write began refuses it)."""
        more = tuple(sorted(set(targets).difference(self.extra_targets)))
        if not more:
            return self
        return WriteFence(self.position, self.triggerer, self.store_down, self.extra_targets + more)


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One journaled change, as a follower process reads it."""

    seq: int
    kind: JournalKind
    subject: tuple[str | None, ...] = ()
    targets: tuple[str, ...] = field(default=())
    # When it was journaled (epoch seconds): with the rest, how a follower recognises the
    # entry at its position again (a journal that went back may reuse a sequence number).
    at: float | None = field(default=None, compare=False)
    # A clear's, purge's or FULL choice's horizon (epoch seconds): the moment it covers, so
    # that the platform's history cannot bring back what it forgot (model/horizons.py).
    horizon: float | None = field(default=None, compare=False)
