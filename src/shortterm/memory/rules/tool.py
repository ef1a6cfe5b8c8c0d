"""The tool: whether a turn may update short-term memory (and if not, why), and whether the
distiller may distill a scope."""

from __future__ import annotations

from collections.abc import Callable

from ...model import Entry, Privacy, ServerSettings, UserSettings
from ...tool import texts
from .privacy import keeps_personal, private_by
from .snapshot import Snapshot

__all__ = ["distill_refusal", "refusal", "tool_possible", "unavailable"]

_FULL = Privacy.FULL


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
    if private_by(entry, server):
        return "private channel"
    return None
