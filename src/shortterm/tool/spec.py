"""The tool's definition: one neutral spec, rendered for each provider (pure).

Two modes. **Summary mode** (the default) has one ``summary`` string. **Category mode**, when a
server configured categories, has one string per category, named by its slug; an update
changes only the topics it sends. One category labelled "summary" (any case) means summary
mode. The server's description override replaces the default description in both modes.

Renderings, each pinned by a golden test against the provider's documented shape:

- ``openai``: ``{"type": "function", "function": {name, description, parameters, strict}}``.
  Strict mode requires every property and ``additionalProperties: false``, so in category mode
  each topic is ``["string", "null"]`` and ``null`` means "unchanged".
- ``anthropic``: ``{name, description, input_schema}`` (JSON Schema).
- ``gemini``: a function declaration ``{name, description, parameters}`` in Gemini's OpenAPI
  subset: upper-case types, no ``additionalProperties``, ``title``, ``$ref`` or ``$defs``.
- ``mcp``: ``{name, description, inputSchema}`` (JSON Schema), as listed by ``tools/list``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ..model import Category, ServerSettings
from ..model.errors import InvalidInput
from ..model.placeholders import IDENTITY_PLACEHOLDERS, expand_identity, sanitize_placeholders
from ..model.text import strip_controls, truncate
from . import texts
from .slug import slug_map

__all__ = [
    "FORMATS",
    "ToolField",
    "ToolSpec",
    "active_categories",
    "build_spec",
    "field_names",
    "render",
    "renderer",
]

# OpenAI refuses function descriptions over 1024 characters; the others accept more, but a
# longer description only costs tokens on every turn.
MAX_TOOL_DESCRIPTION_CHARS = 1024
MAX_FIELD_DESCRIPTION_CHARS = 500


@dataclass(frozen=True, slots=True)
class ToolField:
    """One string property. ``label`` is the category label (``None`` in summary mode)."""

    name: str
    description: str
    label: str | None = None


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    parameters_description: str
    mode: Literal["summary", "categories"]
    fields: tuple[ToolField, ...]

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)


def active_categories(settings: ServerSettings, max_categories: int) -> tuple[Category, ...]:
    """The categories that put the tool in category mode; empty for summary mode."""
    categories = settings.categories[:max_categories]
    if len(categories) == 1 and categories[0].label.casefold() == "summary":
        return ()
    return categories


def field_names(settings: ServerSettings, max_categories: int) -> tuple[str, ...] | None:
    """The category slugs of the tool's fields, or ``None`` in summary mode (cheaper than
    building the whole spec when only the names matter)."""
    categories = active_categories(settings, max_categories)
    return tuple(slug_map(categories)) if categories else None


def _identity_values(bot_name: str) -> dict[str, str]:
    # The bot's name is known and the same for everyone; who "the user" is changes from turn
    # to turn, so a schema never names one.
    bot = sanitize_placeholders(strip_controls(bot_name, keep_newlines=False)).strip()
    values = dict.fromkeys(IDENTITY_PLACEHOLDERS, texts.SOMEONE)
    values["bot"] = values["char"] = bot or "the assistant"
    return values


def _clean(text: str, max_chars: int, values: dict[str, str], *, newlines: bool) -> str:
    text = expand_identity(strip_controls(text, keep_newlines=newlines), values)
    if not newlines:
        text = " ".join(text.split())
    return truncate(text.strip(), max_chars).rstrip()


def _field_description(category: Category, values: dict[str, str]) -> str:
    text = category.description
    if not text.casefold().startswith(category.label.casefold()):
        text = f"{category.label}: {text}"
    return _clean(text, MAX_FIELD_DESCRIPTION_CHARS, values, newlines=False)


def build_spec(
    settings: ServerSettings,
    *,
    max_categories: int,
    max_summary_chars: int,
    bot_name: str = "Assistant",
) -> ToolSpec:
    """The neutral tool spec for a server's settings."""
    values = _identity_values(bot_name)
    description = ""
    if settings.tool_description is not None:
        description = _clean(
            settings.tool_description, MAX_TOOL_DESCRIPTION_CHARS, values, newlines=True
        )
    description = description or texts.TOOL_DESCRIPTION
    categories = active_categories(settings, max_categories)
    if not categories:
        return ToolSpec(
            name=texts.TOOL_NAME,
            description=description,
            parameters_description=texts.SUMMARY_PARAMETERS,
            mode="summary",
            fields=(
                ToolField("summary", texts.SUMMARY_PROPERTY.format(max_chars=max_summary_chars)),
            ),
        )
    slugs = slug_map(categories)
    fields = tuple(
        ToolField(slug, _field_description(category, values), category.label)
        for slug, category in zip(slugs, categories, strict=True)
    )
    return ToolSpec(
        name=texts.TOOL_NAME,
        description=description,
        parameters_description=texts.CATEGORY_PARAMETERS.format(max_chars=max_summary_chars),
        mode="categories",
        fields=fields,
    )


# -- renderings ------------------------------------------------------------------------------


def _properties(spec: ToolSpec, kind: str | list[str]) -> dict[str, Any]:
    return {f.name: {"type": kind, "description": f.description} for f in spec.fields}


def _json_schema(spec: ToolSpec) -> dict[str, Any]:
    return {
        "type": "object",
        "description": spec.parameters_description,
        "properties": _properties(spec, "string"),
        "required": list(spec.field_names) if spec.mode == "summary" else [],
        "additionalProperties": False,
    }


def _openai(spec: ToolSpec) -> dict[str, Any]:
    kind: str | list[str] = "string" if spec.mode == "summary" else ["string", "null"]
    parameters = {
        "type": "object",
        "description": spec.parameters_description,
        "properties": _properties(spec, kind),
        "required": list(spec.field_names),
        "additionalProperties": False,
    }
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": parameters,
            "strict": True,
        },
    }


def _openai_responses(spec: ToolSpec) -> dict[str, Any]:
    # The Responses API takes the chat-completions function flattened into the tool itself.
    tool = _openai(spec)
    return {"type": "function", **tool["function"]}


def _anthropic(spec: ToolSpec) -> dict[str, Any]:
    return {"name": spec.name, "description": spec.description, "input_schema": _json_schema(spec)}


def _gemini(spec: ToolSpec) -> dict[str, Any]:
    parameters: dict[str, Any] = {
        "type": "OBJECT",
        "description": spec.parameters_description,
        "properties": _properties(spec, "STRING"),
    }
    if spec.mode == "summary":
        parameters["required"] = list(spec.field_names)
    return {"name": spec.name, "description": spec.description, "parameters": parameters}


def _mcp(spec: ToolSpec) -> dict[str, Any]:
    return {"name": spec.name, "description": spec.description, "inputSchema": _json_schema(spec)}


FORMATS: dict[str, Callable[[ToolSpec], dict[str, Any]]] = {
    "openai": _openai,
    "openai-responses": _openai_responses,
    "anthropic": _anthropic,
    "gemini": _gemini,
    "mcp": _mcp,
}


def renderer(format: object) -> Callable[[ToolSpec], dict[str, Any]]:
    """The renderer for ``format``; ``InvalidInput`` for an unknown one."""
    found = FORMATS.get(format) if isinstance(format, str) else None
    if found is None:
        raise InvalidInput("format", format, f"one of {', '.join(map(repr, FORMATS))}")
    return found


def render(spec: ToolSpec, format: str) -> dict[str, Any]:
    """The tool definition in ``format`` ("openai", "openai-responses", "anthropic", "gemini"
    or "mcp"); a new dict on every call, so callers may change it."""
    return renderer(format)(spec)
