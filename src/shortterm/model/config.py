"""Library configuration: one frozen value object, read from the environment in one place."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError, InvalidInput
from .horizons import MessageIds

__all__ = ["Config"]

_MESSAGE_IDS = ("discord", "slack")

# (low, high) for every numeric setting; from_env and __post_init__ share it.
_RANGES: dict[str, tuple[float, float]] = {
    "max_messages": (1, 200),
    "crude_ttl_s": (1, 30 * 86400),
    "summary_ttl_s": (1, 365 * 86400),
    "max_summary_chars": (50, 20000),
    "max_message_chars": (100, 100_000),
    "max_categories": (1, 20),
    "max_other_channels": (0, 50),
    "fresh_window_s": (0, 7 * 86400),
    "fresh_depth": (0, 20),
    "janitor_retention_days": (1, 3650),
    "max_entries": (1, 1 << 40),
    "max_bytes": (1 << 16, 1 << 50),
    "sweep_interval_s": (0, 86400),
    "settings_refresh_s": (0, 86400),
    "hydrate_batch_rows": (1, 1_000_000),
    "write_behind_ms": (0, 10_000),
    "write_behind_turns": (1, 100_000),
}


@dataclass(frozen=True, slots=True)
class Config:
    """How much to keep and for how long. Every field is validated on construction.

    ``max_entries`` and ``max_bytes`` bound the hot tier (least recently used entries are
    evicted; durable values are read back on the next miss). ``sweep_interval_s=0`` turns the
    background sweeper off (``memory.sweep()`` still works).

    ``write_behind_ms`` and ``write_behind_turns`` bound the write-behind of a capture's durable
    part (its scope rows and cadence counter step) on a SQLite store with the in-process hot tier:
    buffered touches are committed together at most that many milliseconds, or that many captures,
    after the first of them, with every acknowledged write (in its transaction), and before every
    forget and durable read. A crash loses at most that window of counter steps, never an
    acknowledged write. ``write_behind_ms=0`` awaits every capture's durable part, as the other
    backends always do.
    """

    max_messages: int = 10
    crude_ttl_s: int = 12 * 3600
    summary_ttl_s: int = 24 * 3600
    max_summary_chars: int = 1500
    max_message_chars: int = 4000
    max_categories: int = 5
    max_other_channels: int = 3
    fresh_window_s: int = 3600
    fresh_depth: int = 2
    janitor_retention_days: int = 90
    max_entries: int = 2_000_000
    max_bytes: int = 4 << 30
    sweep_interval_s: int = 60
    settings_refresh_s: int = 30
    hydrate_batch_rows: int = 5000
    write_behind_ms: int = 50
    write_behind_turns: int = 256
    tool_less_providers: frozenset[str] = field(default_factory=lambda: frozenset({"novelai"}))
    # The platform whose message ids tell when a message was written ("discord": snowflakes,
    # "slack": ts), for placing a message with no ``at`` against a forget's horizon.
    message_ids: MessageIds | None = None

    def __post_init__(self) -> None:
        for name, (low, high) in _RANGES.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise InvalidInput(name, value, f"an integer from {int(low)} to {int(high)}")
        providers = self.tool_less_providers
        if isinstance(providers, str) or not all(isinstance(p, str) for p in providers):
            raise InvalidInput("tool_less_providers", providers, "a set of provider names")
        object.__setattr__(self, "tool_less_providers", frozenset(p.lower() for p in providers))
        if self.message_ids is not None and self.message_ids not in _MESSAGE_IDS:
            raise InvalidInput(
                "message_ids", self.message_ids, "'discord', 'slack' or None (ids tell no time)"
            )

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Config:
        """Read ``SHORTTERM_<FIELD>`` variables (e.g. ``SHORTTERM_MAX_MESSAGES=20``).

        ``SHORTTERM_TOOL_LESS_PROVIDERS`` is a comma-separated list. Unknown ``SHORTTERM_*``
        variables are left alone: the sidecar and the tests read their own.
        """
        changes: dict[str, Any] = {}
        for name in _RANGES:
            raw = environ.get(f"SHORTTERM_{name.upper()}")
            if raw is None or not raw.strip():
                continue
            try:
                changes[name] = int(raw.strip())
            except ValueError:
                raise ConfigError(f"SHORTTERM_{name.upper()}={raw!r} is not an integer") from None
        raw = environ.get("SHORTTERM_TOOL_LESS_PROVIDERS")
        if raw is not None:
            changes["tool_less_providers"] = frozenset(
                p.strip() for p in raw.split(",") if p.strip()
            )
        raw = environ.get("SHORTTERM_MESSAGE_IDS")
        if raw is not None and raw.strip():
            changes["message_ids"] = raw.strip().lower()
        try:
            return cls(**changes)
        except InvalidInput as exc:
            raise ConfigError(f"environment: {exc}") from exc
