"""shortterm: working memory for LLM chat bots across channels, servers and personas.

::

    async with shortterm.open() as memory:          # SQLite + in-process cache
        turn = memory.turn(user_id="111", channel_id="222", server_id="333")
        await turn.capture(history=[...], replies=[shortterm.Reply("hi!")])
"""

from .config import Config
from .context import Context, ContextItem
from .errors import ConfigError, ExtraMissing, InvalidInput, ShortTermError, StoreUnavailable
from .inject import inject
from .memory import Memory, open
from .model import (
    Category,
    Entry,
    Message,
    Privacy,
    Reply,
    ScopeKey,
    ServerSettings,
    ServerSummary,
    UserSettings,
)
from .tool import ToolResult
from .turn import Turn

__version__ = "0.1.0"

__all__ = [
    "Category",
    "Config",
    "ConfigError",
    "Context",
    "ContextItem",
    "Entry",
    "ExtraMissing",
    "InvalidInput",
    "Memory",
    "Message",
    "Privacy",
    "Reply",
    "ScopeKey",
    "ServerSettings",
    "ServerSummary",
    "ShortTermError",
    "StoreUnavailable",
    "ToolResult",
    "Turn",
    "UserSettings",
    "__version__",
    "inject",
    "open",
]
