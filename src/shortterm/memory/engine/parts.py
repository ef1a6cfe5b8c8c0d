"""What the engine hands the helpers that write for it (forgets, settings changes)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .durable import Durable
from .follower import JournalFollower
from .health import Health
from .known_settings import KnownSettings
from .tiers import Tiers

__all__ = ["EngineParts"]


@dataclass(frozen=True, slots=True)
class EngineParts:
    """The tiers, the durable tier as writes go through it (the write-behind commits its
    buffer inside each), the clock, the health, the journal position, the known settings."""

    tiers: Tiers
    durable: Durable
    clock: Callable[[], float]
    health: Health
    journal: JournalFollower
    known: KnownSettings
