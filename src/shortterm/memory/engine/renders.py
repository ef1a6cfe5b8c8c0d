"""What the read path rendered, kept per entry view so that a view recalled again is not
planned again (recall.py asks; the engine holds one cache)."""

from __future__ import annotations

from ...model import Entry, ServerSettings
from ...prompt.render import Recollection, Section

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
    """What the read path rendered, for the newest view of each of at most ``limit`` scopes.

    A hot tier replaces an entry's view whenever the entry changes (a capture, an edit, a
    forget, an expiry), so the view's identity is its revision: a rendering is reused only for
    the very view it was made from, never for a changed or forgotten entry. One slot per
    scope: a newer view replaces the older one, which is then let go."""

    def __init__(self, limit: int = 16384) -> None:
        self._limit = limit
        self._slots: dict[tuple[str, str, str, str | None], tuple[Entry, Rendered]] = {}

    def of(self, entry: Entry) -> Rendered:
        """The rendering of this view (a blank one the first time it is asked)."""
        slots = self._slots
        key = entry.key.astuple
        slot = slots.get(key)
        if slot is not None and slot[0] is entry:
            return slot[1]
        rendered = Rendered()
        if self._limit <= 0:
            return rendered  # a hot tier that builds a fresh view per read: nothing to reuse
        if slot is None and len(slots) >= self._limit:
            del slots[next(iter(slots))]  # the scope rendered longest ago goes first
        slots[key] = (entry, rendered)
        return rendered
