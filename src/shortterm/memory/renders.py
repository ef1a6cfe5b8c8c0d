"""What the read path rendered, kept per entry view so that a view recalled again is not
planned again (recall.py asks; the engine holds one cache)."""

from __future__ import annotations

from ..model import Entry, ServerSettings
from ..prompt.render import Recollection, Section

__all__ = ["RenderCache", "Rendered"]


class Rendered:
    """What one entry view rendered, with the inputs it was rendered under. Planned sections
    are shared: :func:`build_context` copies them before a token budget trims anything."""

    __slots__ = ("other", "other_inputs", "same", "same_inputs")

    def __init__(self) -> None:
        self.other_inputs: tuple[object, ...] | None = None
        self.other: Recollection | None = None
        self.same_inputs: ServerSettings | None = None
        self.same: Section | None = None


class RenderCache:
    """What the read path rendered, per entry view, for the most recent ``limit`` views.

    Keyed by the view's identity, which is its revision: a hot tier replaces the view
    whenever its entry changes (a capture, an edit, a forget, an expiry), so a rendering is
    never shown for a changed or forgotten entry. The view is held with its rendering, so its
    identity cannot be reused while it is cached."""

    def __init__(self, limit: int = 1024) -> None:  # ~5 kB a view of 10 messages
        self._limit = limit
        self._memos: dict[int, tuple[Entry, Rendered]] = {}

    def of(self, entry: Entry) -> Rendered:
        """The rendering of this view (a blank one the first time it is asked)."""
        memos = self._memos
        slot = memos.get(id(entry))
        if slot is not None and slot[0] is entry:
            return slot[1]
        memo = Rendered()
        if self._limit <= 0:
            return memo  # a hot tier that builds a fresh view per read: nothing to reuse
        if slot is None and len(memos) >= self._limit:
            del memos[next(iter(memos))]  # the oldest view first
        memos[id(entry)] = (entry, memo)
        return memo
