"""What the engine hands the helpers that write for it (forgets, settings changes)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from .follower import JournalFollower
from .health import Health
from .known_settings import KnownSettings
from .tiers import Tiers

__all__ = ["EngineParts"]


@dataclass(frozen=True, slots=True)
class EngineParts:
    """The tiers, the clock, the health, the journal position, the known settings, and the
    write-behind's flush (committed before every acknowledged write and forget)."""

    tiers: Tiers
    clock: Callable[[], float]
    health: Health
    journal: JournalFollower
    known: KnownSettings
    flush: Callable[[], Awaitable[None]]
