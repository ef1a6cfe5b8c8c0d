"""What a turn hands to the prompt: memory items, an optional nudge, and where they go. Pure.

``turn.context()`` builds a :class:`Context`; :func:`shortterm.inject` splices it into a message
list. Both types are plain frozen values, so a bot may also build or adjust one itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..model.errors import InvalidInput
from ..model.keys import slot_filler

__all__ = ["ITEM_KINDS", "Context", "ContextItem", "ItemKind"]

ItemKind = Literal["other_channels", "same_channel", "nudge"]
ITEM_KINDS: tuple[ItemKind, ...] = ("other_channels", "same_channel", "nudge")
_ROLES = ("user", "system")


@dataclass(frozen=True, slots=True)
class ContextItem:
    """One message to add to the prompt.

    ``role`` is ``"user"`` by default (memory is data the conversation brought along, not a
    system instruction); ``"system"`` is accepted for hosts that prefer it.
    """

    role: Literal["user", "system"] = "user"
    text: str = field(kw_only=True)
    kind: ItemKind = field(kw_only=True)

    def __post_init__(self) -> None:
        if self.role not in _ROLES:
            raise InvalidInput("role", self.role, "'user' or 'system'")
        if not isinstance(self.text, str) or not self.text.strip():
            raise InvalidInput("text", self.text, "a non-blank string")
        if self.kind not in ITEM_KINDS:
            raise InvalidInput("kind", self.kind, "'other_channels', 'same_channel' or 'nudge'")

    @classmethod
    def _unchecked(cls, text: str, kind: ItemKind) -> ContextItem:
        """A user-role item the read path rendered (non-blank text, a known kind)."""
        return _fill_item("user", text, kind)

    def as_message(self) -> dict[str, str]:
        """The item as an OpenAI-style chat message."""
        return {"role": self.role, "content": self.text}


@dataclass(frozen=True, slots=True)
class Context:
    """Memory for one turn.

    ``items`` (a tuple: the other-channel block first, then the same-channel block) go at
    ``memory_depth``; ``nudge`` goes at ``nudge_depth``. A depth counts dialogue messages from
    the end of the conversation: 0 is after the last one, 2 is before the second-to-last;
    -1 anchors the items near the top, right after the leading system message(s).
    """

    items: Sequence[ContextItem] = ()
    nudge: ContextItem | None = None
    memory_depth: int = -1
    nudge_depth: int = 2

    def __post_init__(self) -> None:
        items, nudge = self.items, self.nudge
        if (
            type(items) is list
            and all(type(item) is ContextItem for item in items)
            and (nudge is None or type(nudge) is ContextItem)
            and type(self.memory_depth) is int
            and type(self.nudge_depth) is int
            and -1 <= self.memory_depth <= 1000
            and -1 <= self.nudge_depth <= 1000
        ):
            object.__setattr__(self, "items", tuple(items))  # as the read path builds it
            return
        self._check()

    @classmethod
    def _unchecked(
        cls,
        items: tuple[ContextItem, ...],
        nudge: ContextItem | None,
        memory_depth: int,
        nudge_depth: int,
    ) -> Context:
        """The read path's context: items it built, depths from checked settings."""
        return _fill_context(items, nudge, memory_depth, nudge_depth)

    def _check(self) -> None:
        if isinstance(self.items, str | bytes) or not isinstance(self.items, Sequence):
            raise InvalidInput("items", self.items, "a sequence of shortterm.ContextItem")
        items = tuple(self.items)
        for i, item in enumerate(items):
            if not isinstance(item, ContextItem):
                raise InvalidInput(f"items[{i}]", item, "a shortterm.ContextItem")
        object.__setattr__(self, "items", items)
        if self.nudge is not None and not isinstance(self.nudge, ContextItem):
            raise InvalidInput("nudge", self.nudge, "a shortterm.ContextItem or None")
        for name in ("memory_depth", "nudge_depth"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not -1 <= value <= 1000:
                raise InvalidInput(name, value, "an integer from -1 (anchored) to 1000")


_fill_item = slot_filler(ContextItem, "role", "text", "kind")
_fill_context = slot_filler(Context, "items", "nudge", "memory_depth", "nudge_depth")
