"""The plans of the write path: a capture's (which history it admits, which scopes get which
messages, which counter steps), and those of the surfaces that write scopes themselves (an
import, a pop)."""

from __future__ import annotations

from collections.abc import Sequence, Set
from typing import NamedTuple

from ...model import (
    DistilledWrite,
    Entry,
    Message,
    Privacy,
    Reply,
    ScopeKey,
    ScopeMeta,
    ServerSettings,
)
from ...model.horizons import MessageIds, id_time
from ...model.text import truncate
from .snapshot import Snapshot, meta_parts, scope_meta, scopes_written
from .tool import tool_possible

__all__ = [
    "CapturePlan",
    "DistilledPlan",
    "admitted",
    "import_plan",
    "plan_capture",
    "pop_plan",
    "popped_index",
]

_FULL = Privacy.FULL
_NONE = Privacy.NONE


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
    history: Sequence[Message],
    full_users: Set[str],
    now: float,
    cap: int,
    ids: MessageIds | None = None,
) -> list[Message]:
    """History minus full-privacy authors (and the bot's answers to them, which may retell
    them) and blank messages, stamped (by the platform's id where ``ids`` says it tells the
    time, else ``now``) and capped."""
    kept = []
    answers_hidden = False  # the user message the next bot messages answer was left out
    for m in history:
        hidden = m.privacy is _FULL or bool(full_users and m.author_id in full_users)
        if m.role == "user":
            answers_hidden = hidden
        if hidden or answers_hidden:
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
                m.at if m.at is not None else id_time(m.message_id, ids) or now,
                m.message_id,
                m.privacy,
                m.raw,
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
    kept = admitted(history, full_users, now, cap, config.message_ids)
    before = len(kept)
    for r in replies:
        text = r.text
        if text and not text.isspace():
            speaker = r.persona_name or args.bot_name
            kept.append(
                Message._unchecked(
                    "assistant", _cap(text, cap), None, speaker, now, None, _NONE, r.raw
                )
            )
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
