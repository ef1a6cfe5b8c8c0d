"""The ``update_short_term_memory`` tool: its definition, renderings and category slugs.

::

    spec.py       the neutral definition and its renderings (OpenAI, Anthropic, Gemini, MCP)
    slug.py       category labels to property names: slug_map(categories)
    texts.py      every sentence shown to a model
"""

from __future__ import annotations

from .slug import slug_map, slugify
from .spec import FORMATS, ToolField, ToolSpec, build_spec, render
from .texts import TOOL_NAME

__all__ = [
    "FORMATS",
    "TOOL_NAME",
    "ToolField",
    "ToolSpec",
    "build_spec",
    "render",
    "slug_map",
    "slugify",
]
