"""Relative times for rendered memory ("5 minutes ago"). Pure.

Every value is labelled by its own timestamp: a summary written yesterday says so even when the
channel's messages are a minute old.
"""

from __future__ import annotations

__all__ = ["relative_time"]

_MINUTE = 60
_HOUR = 3600
_DAY = 86400
_WEEK = 7 * _DAY


def _plural(n: int, unit: str) -> str:
    return f"{n} {unit} ago" if n == 1 else f"{n} {unit}s ago"


def relative_time(then: float, now: float) -> str:
    """How long before ``now`` the moment ``then`` was, in words, rounded down.

    Under a minute (and any moment in the future: clocks of two machines disagree) is
    "just now"; a week or more is "over a week ago".
    """
    age = now - then
    if age < _MINUTE:  # includes every moment in the future
        return "just now"
    if age < _HOUR:
        return _plural(int(age // _MINUTE), "minute")
    if age < _DAY:
        return _plural(int(age // _HOUR), "hour")
    if age < _WEEK:
        return _plural(int(age // _DAY), "day")
    return "over a week ago"
