"""The engine: the state behind a ``Memory`` and every write path.

::

    engine.py           Engine: the tiers, the write-behind, the journal follower, the write paths
    forget.py           every forget, and those of unknown outcome;  settings.py  settings changes
    parts.py            what the engine shares with its helpers (never the Memory)
    follower.py         the journal position;  write_behind.py  buffered capture touches
    hydration.py        the bulk load at the open;  tiers.py  the two tiers
    health.py, known_settings.py, renders.py   bookkeeping: failures, settings, render cache
"""

from .engine import Clock, Engine

__all__ = ["Clock", "Engine"]
