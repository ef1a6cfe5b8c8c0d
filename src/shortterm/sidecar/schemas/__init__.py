"""The HTTP boundary: pydantic models for every request and response body, with examples.

Request models are strict (a JSON string is not a boolean, a number is not an id) and forbid
unknown fields, so a typo is a 422 naming the field instead of a silently ignored value. Their
bounds come from the library's own tables; the library validates again, so a bound that
depends on the memory's configuration (``max_messages``, ``max_categories``) is enforced there
and reported the same way. Each model converts to and from its library value type in one
method.

::

    base.py      the strict field types (ids, text, whole numbers) and the strict base model
    turns.py     turn start and its answer, the tool call, the capture
    entries.py   entries, the servers with memory, admin edits, deletion counts
    settings.py  server and user settings, bounded by the library's tables
    service.py   health, and Problem (every error's shape)
"""

from __future__ import annotations

from .base import ID_PATTERN
from .entries import (
    DeletedOut,
    EntriesOut,
    EntryOut,
    EntryResult,
    KeyOut,
    MessageOut,
    ServerOut,
    ServersOut,
    SetCategoriesIn,
    SetSummaryIn,
)
from .service import HealthOut, Problem, ProblemField, ReadyOut
from .settings import CategoryModel, ServerSettingsModel, UserSettingsModel
from .turns import (
    CaptureIn,
    ContextItemOut,
    ContextOut,
    MessageIn,
    ReplyIn,
    ToolCallIn,
    ToolResultOut,
    TurnOut,
    TurnStart,
)

__all__ = [
    "ID_PATTERN",
    "CaptureIn",
    "CategoryModel",
    "ContextItemOut",
    "ContextOut",
    "DeletedOut",
    "EntriesOut",
    "EntryOut",
    "EntryResult",
    "HealthOut",
    "KeyOut",
    "MessageIn",
    "MessageOut",
    "Problem",
    "ProblemField",
    "ReadyOut",
    "ReplyIn",
    "ServerOut",
    "ServerSettingsModel",
    "ServersOut",
    "SetCategoriesIn",
    "SetSummaryIn",
    "ToolCallIn",
    "ToolResultOut",
    "TurnOut",
    "TurnStart",
    "UserSettingsModel",
]
