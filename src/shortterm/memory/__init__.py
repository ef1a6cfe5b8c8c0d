"""The facade: ``Memory``, turns, recall, and every write path."""

from .facade import Memory, open

__all__ = ["Memory", "open"]
