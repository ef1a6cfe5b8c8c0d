"""The ``update_short_term_memory`` tool as data: its definition, arguments and texts. Pure.

::

    spec.py       the neutral definition and its renderings (OpenAI, Anthropic, Gemini, MCP)
    slug.py       category labels to property names: slug_map(categories)
    arguments.py  decoding, validating and cleaning what a model sent
    result.py     ToolResult, what a call returns
    texts.py      every sentence shown to a model

Whether a turn may use it and the durable write live with the facade
(``memory/turn/guards.py``, ``memory/turn/tool_call.py``). Use it through a turn:
``turn.tools("openai")``, ``await turn.call_tool(name, args)``, ``await turn.maintenance_due()``.
"""

from __future__ import annotations

from .result import ToolResult
from .slug import slug_map, slugify
from .spec import FORMATS, ToolField, ToolSpec, build_spec, render
from .texts import TOOL_NAME

__all__ = [
    "FORMATS",
    "TOOL_NAME",
    "ToolField",
    "ToolResult",
    "ToolSpec",
    "build_spec",
    "render",
    "slug_map",
    "slugify",
]
