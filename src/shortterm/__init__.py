"""shortterm: working memory for LLM chat bots across channels, servers and personas.

::

    async with shortterm.open() as memory:          # SQLite + in-process cache
        turn = memory.turn(user_id="111", channel_id="222", server_id="333")
        await turn.capture(history=[...], replies=[shortterm.Reply("hi!")])
"""

from .memory import Memory, open
from .memory.distill import DistillReport, distill
from .memory.turn import Captured, Turn
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
from .model.config import Config
from .model.errors import ConfigError, ExtraMissing, InvalidInput, ShortTermError, StoreUnavailable
from .prompt.context import Context, ContextItem
from .prompt.inject import inject
from .tool import ToolResult

__version__ = "0.1.0"

__all__ = [
    "Captured",
    "Category",
    "Config",
    "ConfigError",
    "Context",
    "ContextItem",
    "DistillReport",
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
    "distill",
    "inject",
    "open",
]
