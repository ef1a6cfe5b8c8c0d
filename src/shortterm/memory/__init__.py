"""The facade: ``Memory``, its turns and reads, and every write path.

::

    facade.py          Memory: settings, reads, the write paths, forgetting
    opening.py         open(): migrations, hydration, the async context manager
    follower.py        the journal position and catching up with other processes
    turn.py, recall.py one bot turn: capture, context assembly
    tool_call.py       the tool's durable write;  guards.py  whether a turn may call it
    backends.py        backends chosen by URL;  health.py, known_settings.py  its bookkeeping
"""

from .facade import Memory
from .opening import open

__all__ = ["Memory", "open"]
