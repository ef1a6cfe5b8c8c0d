"""The vocabulary every layer speaks: keys, messages, entries, settings and durable rows.

Nothing here does I/O. Every constructor validates its input and raises ``InvalidInput`` naming
the field; ids are opaque non-empty strings (Matrix ids contain ``:``, so keys are never parsed
from strings) and ``persona_id=None`` means "no persona" while ``"0"`` is a real persona.

::

    keys.py      ids, ScopeKey, Privacy
    messages.py  Message, Reply, Entry
    settings.py  ServerSettings, UserSettings, Category, and their bounds
    rows.py      ScopeMeta, ScopeRow, ServerSummary, DistilledWrite: what the tiers exchange
    fence.py     what a forget covers, and the write fence that refuses what it covered
    errors.py    the exception types;  config.py  Config;  text.py  cleaning and truncation
"""

from __future__ import annotations

from .keys import (
    MAX_ID_CHARS,
    RENDER_MODES,
    Privacy,
    Role,
    ScopeKey,
    ScopeKind,
    check_id,
    check_optional_id,
    check_optional_text,
)
from .messages import Entry, Message, Reply
from .rows import DistilledWrite, ScopeMeta, ScopeRow, ServerSummary, merge_categories
from .settings import Category, ServerSettings, UserSettings

__all__ = [
    "MAX_ID_CHARS",
    "RENDER_MODES",
    "Category",
    "DistilledWrite",
    "Entry",
    "Message",
    "Privacy",
    "Reply",
    "Role",
    "ScopeKey",
    "ScopeKind",
    "ScopeMeta",
    "ScopeRow",
    "ServerSettings",
    "ServerSummary",
    "UserSettings",
    "check_id",
    "check_optional_id",
    "check_optional_text",
    "merge_categories",
]
