"""The facade: ``Memory``, the engine behind it, its turns and reads, and every write path.

::

    facade.py           Memory: checks arguments, one engine call per method
    opening.py          open(): backends, start, the async context manager
    engine.py           the state and the write paths; engine_forget.py, engine_settings.py,
                        hydration.py beside it; tiers.py the tiers it shares with its helpers
    follower.py         the journal position;  write_behind.py  buffered capture touches
    turn.py             one bot turn: TurnArgs (turn_args.py) and its guard (guards.py)
    rules.py            the turn rules, pure: scopes, admission, refusal, recall visibility
    recall.py           the read path (renders.py: what it rendered);  tool_call.py  the tool
    backends.py         backends chosen by URL;  health.py, known_settings.py  bookkeeping
"""

from .facade import Memory
from .opening import open

__all__ = ["Memory", "open"]
