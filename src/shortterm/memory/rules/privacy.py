"""Privacy: what a user's stored choice means, and what recall may show (which owners'
entries, which private entries, which messages)."""

from __future__ import annotations

from collections.abc import Set

from ...model import Entry, Message, Privacy, ScopeRow, ServerSettings, UserSettings
from ...prompt.render import Origin
from .snapshot import Snapshot

__all__ = [
    "hidden_as_private",
    "importable",
    "is_forgotten",
    "keeps_personal",
    "kept_on_clear",
    "origin",
    "private_by",
    "reads_live",
    "reads_personal",
    "recalled_personal",
    "server_of",
    "shown_messages",
]

_FULL = Privacy.FULL


def keeps_personal(settings: UserSettings) -> bool:
    """Whether a user's choice keeps personal (user-scope) memory: only with no privacy."""
    return settings.privacy is Privacy.NONE


def is_forgotten(settings: UserSettings) -> bool:
    """Whether a user's choice forgets them: full privacy, nothing of them kept or shown."""
    return settings.privacy is _FULL


def kept_on_clear(stored: UserSettings | None) -> UserSettings | None:
    """What a user's clear keeps of their settings: a full-privacy choice, so it stays
    honoured; nothing else."""
    return stored if stored is not None and is_forgotten(stored) else None


def importable(row: ScopeRow, owner: UserSettings) -> bool:
    """Whether a restore may write a durable row: a server's always, a user's only when
    their choice (``owner``: the settings of the row's owner) keeps personal memory."""
    return row.key.kind == "server" or keeps_personal(owner)


def reads_personal(snap: Snapshot, opted_in: bool) -> bool:
    """Whether recall reads the user's own (user-scope) entries at all: never with a privacy
    restriction; in a guild only with the cross-server opt-in (this server's personal memory
    shows through the shared scope)."""
    if snap.privacy is not Privacy.NONE:  # personal memory is kept with no privacy only
        return False
    return opted_in if snap.args.server_id is not None else True


def reads_live(snap: Snapshot) -> bool:
    """Whether recall reads the channel's live scope: a guild's shared one always; a DM's
    (the user's own) only when they keep personal memory (otherwise nothing is kept there)."""
    return snap.args.server_id is not None or snap.privacy is Privacy.NONE


def recalled_personal(snap: Snapshot, opted_in: bool, entries: list[Entry]) -> list[Entry]:
    """Which of the user's own entries may be recalled, when :func:`reads_personal`: in a
    guild, those of other servers and DMs; in a DM, other DMs, and with the opt-in servers
    too."""
    here = snap.args.server_id
    if here is not None:
        return [e for e in entries if e.server_id != here]
    if opted_in:
        return entries
    return [e for e in entries if e.server_id is None]


def server_of(entry: Entry) -> str | None:
    """The server an entry lives in (``None``: a DM)."""
    return entry.key.owner_id if entry.key.kind == "server" else entry.server_id


def hidden_as_private(
    entry: Entry, owner: ServerSettings, *, here_server: str | None, here_private: bool
) -> bool:
    """Whether a private-channel entry is hidden from a turn: when its channel (or its
    parent) is private by ``owner``'s (its own server's) settings now, or was private when
    captured, unless that server allows it; inside a private channel, the same server's
    private entries show. Each server's own list decides: another's never leaks."""
    server_id = server_of(entry)
    if server_id is None:
        return False  # direct messages have no private channels
    if not private_by(entry, owner):
        return False
    return not (server_id == here_server and here_private)


def private_by(entry: Entry, owner: ServerSettings) -> bool:
    """Whether ``owner`` (the entry's own server's settings) keeps an entry private: its
    channel (or parent) is private now, or was when captured, and privacy is not bypassed."""
    if owner.privacy_bypass:
        return False
    return entry.private or owner.is_private(entry.key.channel_id, entry.parent_channel_id)


def shown_messages(entry: Entry, user_id: str, hidden: Set[str]) -> list[Message]:
    """The messages of ``entry`` a turn of ``user_id`` may see: never a full-privacy
    author's (``hidden``: the users who chose full privacy), and in personal (user-scope)
    memory only the user's own and the bot's."""
    personal = entry.key.kind == "user"
    out = []
    for m in entry.messages:
        author = m.author_id
        if m.privacy is _FULL or (hidden and author in hidden):
            continue
        if personal and author is not None and m.role == "user" and author != user_id:
            continue
        out.append(m)
    return out


def origin(entry: Entry, in_dm: bool) -> Origin:
    """Where an entry comes from, as seen from the turn."""
    if entry.key.kind == "server":
        return "this_server"
    if server_of(entry) is None:
        return "another_dm" if in_dm else "a_dm"
    return "a_server" if in_dm else "another_server"
