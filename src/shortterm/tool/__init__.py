"""The ``update_short_term_memory`` tool: its definition, guards and execution.

::

    spec.py       the neutral definition and its renderings (OpenAI, Anthropic, Gemini, MCP)
    slug.py       category labels to property names: slug_map(categories)
    guards.py     whether a turn may use the tool, and why not
    arguments.py  decoding, validating and cleaning what a model sent
    execute.py    the durable write, ToolResult, maintenance_due
    texts.py      every sentence shown to a model

Use it through a turn: ``turn.tools("openai")``, ``await turn.call_tool(name, args)``,
``await turn.maintenance_due()``.
"""

from __future__ import annotations

from .execute import ToolResult
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
