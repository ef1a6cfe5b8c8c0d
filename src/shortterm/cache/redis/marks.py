"""Each Redis group's *mark* as this process last saw it: the journal position up to which
the group has every forget applied (``redis_repair``). Every script's reply and every read
of records carries its group's mark, so a process learns that a group went back in time (a
restart from a snapshot, a promoted replica) or lost its data on a round trip it made anyway.
"""

from __future__ import annotations

__all__ = ["Marks", "parse_mark"]


def parse_mark(raw: object) -> int | None:
    """A mark as Redis returns it; ``None`` when missing or being reset ('pending:…')."""
    if raw is None or raw == "" or (isinstance(raw, str) and raw.startswith("pending:")):
        return None
    return int(str(raw))


class Marks:
    """The marks seen, what this process knows was forgotten (``known``: the newest forget
    its journal follower applied), and whether a group was seen short of it (``due``)."""

    def __init__(self, groups: int) -> None:
        self.values: list[int | None] = [None] * groups
        self.known = 0
        self.due = True  # nothing read yet: the first repair reads every mark

    def seen(self, group: int, raw: object) -> bool:
        """Note a mark a reply carried; returns whether the group vouches for what it
        holds: its mark is at or past ``known`` (a group without one, only while this
        process knows of no forget; it is reset all the same before it takes a write)."""
        mark = self.values[group] = parse_mark(raw)
        if mark is None:
            self.due = True
            return self.known == 0
        if mark < self.known:
            self.due = True
            return False
        return True
