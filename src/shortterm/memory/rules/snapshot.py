"""A turn under the settings known at one moment, and where its writes go: the scopes it
writes (capture and upgrade alike), the live one, and what a written scope records of where
it was written."""

from __future__ import annotations

import functools
from typing import NamedTuple

from ...model import Entry, Privacy, ScopeKey, ScopeMeta, ServerSettings, UserSettings
from ...model.config import Config
from ..turn_args import TurnArgs

__all__ = [
    "Snapshot",
    "effective_privacy",
    "here_private",
    "live_scope",
    "meta_of",
    "meta_parts",
    "scope_meta",
    "scopes_written",
]

_PRIVACY_ORDER = (Privacy.NONE, Privacy.PARTIAL, Privacy.FULL)
_FULL = Privacy.FULL


class Snapshot(NamedTuple):
    """A turn under the settings known at one moment."""

    args: TurnArgs
    settings: ServerSettings  # the turn's server's (the defaults in a DM)
    privacy: Privacy  # effective: the stricter of the turn's and the user's stored choice
    config: Config


def effective_privacy(asked: Privacy, stored: UserSettings | None) -> Privacy:
    """The stricter of the level passed for a turn and the user's stored choice."""
    if stored is None or stored.privacy is Privacy.NONE:
        return asked
    return max(asked, stored.privacy, key=_PRIVACY_ORDER.index)


def live_scope(snap: Snapshot, persona_id: str | None) -> ScopeKey:
    """The scope that holds a channel's summary and cadence counter for a persona: the
    channel's shared (server) scope in a guild, the user's scope in a DM."""
    args = snap.args
    if args.server_id is None:
        return ScopeKey._unchecked("user", args.user_id, args.channel_id, persona_id)
    return ScopeKey._unchecked("server", args.server_id, args.channel_id, persona_id)


def scopes_written(snap: Snapshot, persona_id: str | None) -> tuple[list[ScopeKey], ScopeKey]:
    """The scopes a turn writes for one persona (a capture, an upgrade), and the live one:
    the channel's shared (server) scope in a guild, the user's scope in a DM. The user's
    scope only with no privacy restriction; nothing at all under full privacy."""
    args = snap.args
    user = ScopeKey._unchecked("user", args.user_id, args.channel_id, persona_id)
    privacy = snap.privacy
    scopes = [user] if privacy is Privacy.NONE else []  # personal memory: no privacy only
    if args.server_id is None:
        return ([] if privacy is _FULL else scopes), user
    server = ScopeKey._unchecked("server", args.server_id, args.channel_id, persona_id)
    if privacy is not _FULL:
        scopes.append(server)
    return scopes, server


def here_private(snap: Snapshot) -> bool:
    """Whether the turn's channel (or its parent) is private by its server's settings now; a
    DM never is."""
    args = snap.args
    return args.server_id is not None and snap.settings.is_private(
        args.channel_id, args.parent_channel_id
    )


def meta_parts(snap: Snapshot, lineage: str | None) -> tuple[object, ...]:
    """What a written scope records of where it was written (a ``ScopeMeta``'s fields)."""
    args = snap.args
    server_id, parent = args.server_id, args.parent_channel_id
    # here_private(), inline: every capture asks.
    private = server_id is not None and snap.settings.is_private(args.channel_id, parent)
    return (server_id, args.server_name, args.channel_name, parent, private, lineage)


@functools.lru_cache(maxsize=4096)
def scope_meta(parts: tuple[object, ...]) -> ScopeMeta:
    """The one ``ScopeMeta`` of :func:`meta_parts`' value: every turn in a channel shares it
    (a cache, not a rule: the same parts always give an equal value)."""
    return ScopeMeta(*parts)  # type: ignore[arg-type]


def meta_of(entry: Entry) -> ScopeMeta:
    """Where an entry was written, as it records it (private as it was when captured)."""
    return scope_meta(
        (
            entry.server_id,
            entry.server_name,
            entry.channel_name,
            entry.parent_channel_id,
            entry.private,
            entry.persona_lineage_id,
        )
    )
