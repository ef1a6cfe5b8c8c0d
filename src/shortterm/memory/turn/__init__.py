"""One bot turn and what it calls: the capture, the read path and the tool.

::

    turn.py             Turn: one engine call per method, with its TurnArgs and guard
    guards.py           the turn's upgrade guard (and the one shared across processes)
    recall.py           the read path: what memory the turn's prompt gets
    tool_call.py        the tool's durable call and definitions
"""

from .turn import Captured, Turn

__all__ = ["Captured", "Turn"]
