"""The rules of a turn, as pure functions over a frozen snapshot: the privacy contract in code.

A :class:`Snapshot` is what a turn is (its :class:`TurnArgs`), under the settings known when
it was taken (the server's settings, the user's effective privacy) and the limits of the
configuration. Everything a turn decides is decided here, with no I/O and no tier:

* which scopes a turn writes (capture and upgrade alike), and which one is live;
* which history a capture admits, and the plan of the whole capture;
* whether the tool may be used (and if not, why), and whether the distiller may distill;
* what recall may show: which owners' entries, which private entries, which messages;
* what a user's stored choice means: personal memory kept, or the user forgotten;
* the plans of the surfaces that write scopes themselves (an import, a pop, the distiller).

The engine carries the plans out; these functions never see it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence, Set
from typing import NamedTuple

from ..model import (
    DistilledWrite,
    Entry,
    Message,
    Privacy,
    Reply,
    ScopeKey,
    ScopeMeta,
    ScopeRow,
    ServerSettings,
    UserSettings,
)
from ..model.config import Config
from ..model.text import truncate
from ..prompt.render import Origin
from ..tool import texts
from .turn_args import TurnArgs

__all__ = [
    "CapturePlan",
    "DistilledPlan",
    "Snapshot",
    "admitted",
    "distill_refusal",
    "effective_privacy",
    "here_private",
    "hidden_as_private",
    "import_plan",
    "importable",
    "is_forgotten",
    "keeps_personal",
    "kept_on_clear",
    "live_scope",
    "meta_of",
    "origin",
    "plan_capture",
    "pop_plan",
    "popped_index",
    "reads_live",
    "reads_personal",
    "recalled_personal",
    "refusal",
    "scope_meta",
    "scopes_written",
    "shown_messages",
    "tool_possible",
    "unavailable",
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


# -- a user's stored choice -----------------------------------------------------------------


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


# -- scopes ---------------------------------------------------------------------------------


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


# -- the tool -------------------------------------------------------------------------------


def unavailable(snap: Snapshot) -> str | None:
    """Why this kind of turn could never be offered the tool (a provider without tools, tools
    switched off for the turn, short-term memory switched off on the server), or ``None``."""
    args = snap.args
    if args.provider is not None and args.provider in snap.config.tool_less_providers:
        return texts.PROVIDER
    if not args.has_tools:
        return texts.NO_TOOLS
    if not snap.settings.stm_enabled:
        return texts.DISABLED
    return None


def tool_possible(snap: Snapshot) -> bool:
    """Whether this kind of turn could ever be offered the tool; only such turns advance the
    cadence counter."""
    return unavailable(snap) is None


def refusal(
    snap: Snapshot, *, long_term_intent: Callable[[], bool], upgraded: bool, in_flight: bool
) -> str | None:
    """The reason the turn may not update short-term memory now, or ``None`` when it may. The
    tool is offered exactly when this is ``None``, and a call is refused with the same reason.

    In order: :func:`unavailable`, a user who keeps nothing personal here, explicit long-term
    intent (asked last of the scans: it reads the message), one upgrade per turn, one at a
    time."""
    reason = unavailable(snap)
    if reason is not None:
        return reason
    # Full privacy: the user is never captured, so nothing is distilled from their turns
    # either. Partial privacy keeps no personal scope, and a DM has no other.
    privacy = snap.privacy
    if privacy is _FULL or (privacy is Privacy.PARTIAL and snap.args.server_id is None):
        return texts.PRIVACY
    if long_term_intent():
        return texts.LONG_TERM
    if upgraded:
        return texts.ALREADY
    if in_flight:
        return texts.IN_FLIGHT
    return None


def distill_refusal(entry: Entry, server: ServerSettings, user: UserSettings) -> str | None:
    """Why the distiller may not distill a live scope now, or ``None``: short-term memory off
    on its server (``server``: its settings), its counter short of the cadence, a DM whose
    user (``user``: the scope owner's settings, read in a DM only) keeps nothing personal, a
    private channel of a server that does not bypass privacy. The distiller shows a model
    what recall would show in the scope's own channel, and a private channel's memory is
    shown nowhere else."""
    if not server.stm_enabled:
        return "short-term memory is off on the server"
    if entry.turns_since_refresh < server.refresh_cadence:
        return "not due"
    if entry.server_id is None and not keeps_personal(user):
        return "the user keeps nothing personal"
    if _private_by(entry, server):
        return "private channel"
    return None


# -- capture --------------------------------------------------------------------------------


class CapturePlan(NamedTuple):
    """One persona's part of a capture, as the engine writes it: the scopes with their
    messages, where they were written, and the scope whose counter steps (``None``: none)."""

    scopes: list[tuple[ScopeKey, tuple[Message, ...]]]
    meta: ScopeMeta
    increment: ScopeKey | None


class DistilledPlan(NamedTuple):
    """A distilled write, as the engine writes it: the scopes (with where they were written,
    ``None`` keeping what is stored), the change, and the scope whose counter resets."""

    scopes: list[tuple[ScopeKey, ScopeMeta | None]]
    change: DistilledWrite
    reset_counter: ScopeKey | None


def _cap(text: str, cap: int) -> str:
    return text if len(text) <= cap else truncate(text, cap)


def admitted(
    history: Sequence[Message], full_users: Set[str], now: float, cap: int
) -> list[Message]:
    """History minus full-privacy authors and blank messages, stamped and capped."""
    kept = []
    for m in history:
        if m.privacy is _FULL or (full_users and m.author_id in full_users):
            continue
        content = m.content
        if not content or content.isspace():
            continue
        if m.at is None or len(content) > cap:
            m = Message._unchecked(
                m.role,
                content if len(content) <= cap else truncate(content, cap),
                m.author_id,
                m.speaker,
                now if m.at is None else m.at,
                m.message_id,
                m.privacy,
            )
        kept.append(m)
    return kept


def plan_capture(
    snap: Snapshot,
    history: Sequence[Message],
    replies: Sequence[Reply],
    *,
    stopped: bool,
    full_users: Set[str],
    upgraded: bool,
    now: float,
) -> list[CapturePlan]:
    """What a capture writes: per reply persona, the newest ``max_messages`` of the admitted
    history and the replies into the scopes of :func:`scopes_written` (the user's own scope
    keeps only what they and the bot said). Nothing for a stopped turn, a turn without a
    non-blank reply or a full-privacy user. The live counter steps on turns that could be
    offered the tool and were not upgraded. Empty: the capture is skipped."""
    if stopped or not replies or snap.privacy is _FULL:
        return []
    args, config = snap.args, snap.config
    cap = config.max_message_chars
    kept = admitted(history, full_users, now, cap)
    before = len(kept)
    for r in replies:
        text = r.text
        if text and not text.isspace():
            speaker = r.persona_name or args.bot_name
            kept.append(Message._unchecked("assistant", _cap(text, cap), None, speaker, now))
    if len(kept) == before:
        return []  # every reply was blank
    limit = config.max_messages
    dialogue = tuple(kept[-limit:] if len(kept) > limit else kept)
    own = _personal(dialogue, args.user_id, replies_from=len(dialogue) - (len(kept) - before))
    personas: dict[str | None, str | None] = {}
    for r in replies:
        pid = r.persona_id if r.persona_id is not None else args.persona_id
        if pid not in personas:
            personas[pid] = r.persona_lineage_id or args.persona_lineage_id
    counts = not upgraded and tool_possible(snap)
    writes = []
    for pid, lineage in personas.items():
        keys, live = scopes_written(snap, pid)
        if not keys:
            continue  # a partial-privacy user in a DM: nothing personal is kept
        scopes = [(k, own if k.kind == "user" else dialogue) for k in keys]
        meta = scope_meta(meta_parts(snap, lineage))
        writes.append(CapturePlan(scopes, meta, live if counts else None))
    return writes


def _personal(
    dialogue: tuple[Message, ...], user_id: str, *, replies_from: int
) -> tuple[Message, ...]:
    """What the user's personal scope keeps of a capture: what they said, and what the bot
    answered them; other people's messages, and the bot's answers to those, never follow this
    user to another server. An earlier bot message belongs to the user message before it (one
    whose question fell out of the window belongs to no one); this turn's replies, from
    ``replies_from`` on, answer the user. Unattributed user messages count as the user's."""
    own: list[Message] = []
    answers_user = False  # before any user message, a bot message answers no one we know
    for i, m in enumerate(dialogue):
        if m.role == "user":
            answers_user = (a := m.author_id) is None or a == user_id
            if answers_user:
                own.append(m)
        elif answers_user or i >= replies_from:
            own.append(m)
    return dialogue if len(own) == len(dialogue) else tuple(own)


# -- the surfaces' own writes ---------------------------------------------------------------


def import_plan(
    key: ScopeKey,
    messages: Sequence[Message],
    settings: ServerSettings | None,
    *,
    server_name: str | None,
    channel_name: str | None,
    parent_channel_id: str | None,
    lineage: str | None,
) -> CapturePlan:
    """An import's write: ``messages`` into the one scope ``key``, recorded as private when
    its channel (or parent) is private by its server's ``settings`` now (``None``: a DM, never
    private), with no counter step (an import is no turn)."""
    server_id = key.owner_id if key.kind == "server" else None
    private = (
        server_id is not None
        and settings is not None
        and settings.is_private(key.channel_id, parent_channel_id)
    )
    meta = scope_meta((server_id, server_name, channel_name, parent_channel_id, private, lineage))
    return CapturePlan([(key, tuple(messages))], meta, None)


def popped_index(live: Entry, user_id: str) -> int | None:
    """Which message of the live scope a pop by ``user_id`` removes, or ``None``: the newest
    of theirs. In their own scope (a DM) every message is theirs; in a shared one, those they
    wrote and the bot's answers to them (an answer follows its question, before the next user
    message; one at the head of the list lost its question to the window and is nobody's).
    Another person's messages, and the bot's answers to them, are never theirs to pop."""
    messages = live.messages
    if live.key.kind == "user":
        return len(messages) - 1 if messages else None
    owner: str | None = None  # whose turn each message belongs to, oldest first
    mine = None
    for i, m in enumerate(messages):
        if m.role == "user":
            owner = m.author_id
        if owner == user_id:
            mine = i
    return mine


def pop_plan(snap: Snapshot, live: Entry, at: int, personal: Entry | None) -> CapturePlan:
    """A pop's write: the message at ``at`` (:func:`popped_index`) out of the live scope, and
    its newest copy out of the user's own scope (``personal``: that entry, when it is not the
    live one) when it holds one; recorded where the turn is, as its capture would be, with no
    counter step (a pop is no turn)."""
    stored = live.messages
    popped = stored[at]
    scopes = [(live.key, (*stored[:at], *stored[at + 1 :]))]
    if personal is not None:
        kept = personal.messages
        there = next((i for i in reversed(range(len(kept))) if kept[i] == popped), None)
        if there is not None:
            scopes.append((personal.key, (*kept[:there], *kept[there + 1 :])))
    meta = scope_meta(meta_parts(snap, snap.args.persona_lineage_id))
    return CapturePlan(scopes, meta, None)


# -- recall ---------------------------------------------------------------------------------


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
    if not _private_by(entry, owner):
        return False
    return not (server_id == here_server and here_private)


def _private_by(entry: Entry, owner: ServerSettings) -> bool:
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
