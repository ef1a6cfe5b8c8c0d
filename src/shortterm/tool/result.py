"""What a tool call returns."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ToolResult"]


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool call did. ``message`` is meant for the model: pass it back as the tool's
    result. ``ok`` is true only once the update is durable."""

    ok: bool
    message: str
