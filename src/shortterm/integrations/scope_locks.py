"""One lock per (memory, live scope) for the adapters (the Agents SDK session, the LangChain
history): a pop reads a scope's messages and writes them back, so within one process the
captures and pops of one channel take turns, whichever adapter makes them. (Captures append
inside the hot tier's atomic write: across processes they need no lock.)"""

from __future__ import annotations

import asyncio
import weakref
from typing import TYPE_CHECKING

from ..model import ScopeKey

if TYPE_CHECKING:
    from ..memory.facade import Memory

__all__ = ["scope_lock"]

# Kept while someone holds or waits for it.
_SCOPE_LOCKS: weakref.WeakValueDictionary[tuple[int, ScopeKey], asyncio.Lock] = (
    weakref.WeakValueDictionary()
)


def scope_lock(memory: Memory, key: ScopeKey) -> asyncio.Lock:
    """The lock of ``key``'s read-and-write on ``memory`` (kept while it is referenced: a
    memory's id cannot be reused while a task that holds its lock keeps it alive)."""
    ident = (id(memory), key)
    lock = _SCOPE_LOCKS.get(ident)
    if lock is None:
        lock = _SCOPE_LOCKS[ident] = asyncio.Lock()
    return lock
