"""Forget horizons on the write path: a capture keeps nothing that a clear, a purge or a FULL
choice covered, however often the platform passes it back (``model/horizons.py``)."""

from __future__ import annotations

from collections.abc import Sequence

from ...model import Message
from ...model.horizons import Horizons, MessageIds, uncovered
from .capture import CapturePlan

__all__ = ["outside_horizons", "plan_outside_horizons"]


def outside_horizons(
    history: Sequence[Message],
    *,
    channel_id: str,
    triggerer: str | None,
    horizons: Horizons,
    ids: MessageIds | None,
) -> tuple[Sequence[Message], int]:
    """A capture's history without what a horizon covers (its channel's, its authors'), and
    how many messages went. Nothing to check, and nothing copied, while no forget recorded a
    horizon."""
    if not len(horizons):
        return history, 0
    return uncovered(
        history,
        channel=horizons.channel(channel_id),
        author=horizons.author,
        triggerer=triggerer,
        ids=ids,
        unanswered=horizons.newest,
    )


def plan_outside_horizons(
    plan: CapturePlan, horizons: Horizons, ids: MessageIds | None
) -> tuple[CapturePlan, int]:
    """A surface's own capture plan (an import, a pop) without what a horizon covers, scope by
    scope; an unattributed user message is its personal scope's owner's, and nobody's in a
    shared one."""
    if not len(horizons):
        return plan, 0
    scopes, dropped = [], 0
    for key, messages in plan.scopes:
        owner = key.owner_id if key.kind == "user" else None
        kept, gone = outside_horizons(
            messages, channel_id=key.channel_id, triggerer=owner, horizons=horizons, ids=ids
        )
        scopes.append((key, messages if not gone else tuple(kept)))
        dropped += gone
    return (plan if not dropped else plan._replace(scopes=scopes)), dropped
