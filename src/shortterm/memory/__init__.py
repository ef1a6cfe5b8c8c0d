"""The facade: ``Memory``, the engine behind it, its turns and reads, and every write path.

::

    facade.py           Memory: checks arguments, one engine call per method
    opening.py          open(): backends, start, the async context manager
    turn/               one bot turn: Turn, its guard, the read path, the tool's call
    engine/             the state and the write paths: Engine, forgets, settings, the journal
                        follower, the write-behind, hydration, the tiers, bookkeeping
    rules.py            the turn rules, pure: scopes, admission, refusal, recall visibility
    turn_args.py        what a turn is about (TurnArgs): shared by the turn and the engine
    distill.py          the distiller;  admin.py  the facade's listings and exports
    backends.py         backends chosen by URL
"""

from .facade import Memory
from .opening import open

__all__ = ["Memory", "open"]
