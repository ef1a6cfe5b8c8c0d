"""Whether a turn may use the tool, and if not, why (pure over the turn's state).

One function decides both: the tool is offered exactly when :func:`refusal` returns ``None``,
and a call on a turn that may not use it is refused with the same reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..model import Privacy
from ..tool import texts

if TYPE_CHECKING:
    from .turn import Turn

__all__ = ["SharedGuard", "refusal"]


class SharedGuard(Protocol):
    """The one-upgrade-per-turn guard of a turn that several processes serve (the sidecar's
    Redis turn registry). ``turn.upgraded`` and the in-flight flag only hold in one process;
    with a shared guard, a tool call also claims the turn's upgrade where every process sees
    it, atomically, just before it writes."""

    async def claim(self) -> str | None:
        """``None`` when this call may write now; otherwise the refusal for the model."""
        ...

    async def settle(self, upgraded: bool) -> None:
        """Release the claim: the upgrade landed (or may have), or it did not."""
        ...


def refusal(turn: Turn, privacy: Privacy | None = None) -> str | None:
    """The reason ``turn`` may not update short-term memory now, or ``None`` when it may.
    ``privacy`` is the turn's effective privacy, when the caller already has it.

    In order: a provider without tools, tools switched off for the turn, short-term memory
    switched off on the server, a user who keeps nothing personal here, explicit long-term
    intent, and the one-upgrade-per-turn rule.
    """
    memory = turn.memory
    if turn.provider is not None and turn.provider in memory.config.tool_less_providers:
        return texts.PROVIDER
    if not turn.has_tools:
        return texts.NO_TOOLS
    if not turn.settings.stm_enabled:
        return texts.DISABLED
    if privacy is None:
        privacy = turn.effective_privacy()
    # Full privacy: the user is never captured, so nothing is distilled from their turns
    # either. Partial privacy keeps no personal scope, and a DM has no other.
    if privacy is Privacy.FULL or (privacy is Privacy.PARTIAL and turn.is_dm):
        return texts.PRIVACY
    if turn.long_term_intent:
        return texts.LONG_TERM
    if turn.upgraded:
        return texts.ALREADY
    if turn._upgrading:
        return texts.IN_FLIGHT
    return None
