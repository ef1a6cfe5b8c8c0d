"""The tool definition, pinned per provider format (golden tests).

Shapes, as each provider documents them:
- OpenAI chat completions: {"type": "function", "function": {name, description, parameters,
  strict}}; strict mode wants every property required and additionalProperties false.
- Anthropic messages: {name, description, input_schema} with a JSON Schema object.
- Gemini: a FunctionDeclaration {name, description, parameters} whose Schema is an OpenAPI
  subset with upper-case types and no additionalProperties, title, $ref or $defs.
- MCP tools/list: {name, description, inputSchema} with a JSON Schema object.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from shortterm import Category, InvalidInput, ServerSettings
from shortterm.tool import texts
from shortterm.tool.spec import FORMATS, build_spec, render

_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_GEMINI_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]{0,63}")
_GEMINI_TYPES = {"STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT"}
_GEMINI_FORBIDDEN = {"additionalProperties", "title", "$ref", "$defs", "strict", "$schema"}

SUMMARY_PROPERTY = texts.SUMMARY_PROPERTY.format(max_chars=1500)
CATEGORY_PARAMETERS = texts.CATEGORY_PARAMETERS.format(max_chars=1500)
CATEGORIES = (
    Category("Mood", "How the room feels"),
    Category("Plans & ideas", "What {bot} and {{user}} plan; {secret} stays a word"),
    Category("2nd act", "2nd act of the story"),
)


def spec_for(settings: ServerSettings, **kwargs: Any) -> Any:
    return build_spec(
        settings, max_categories=kwargs.pop("max_categories", 5), max_summary_chars=1500, **kwargs
    )


def walk(node: object) -> list[dict[str, Any]]:
    """Every dict in a rendered schema."""
    if isinstance(node, dict):
        return [node, *(d for v in node.values() for d in walk(v))]
    if isinstance(node, list):
        return [d for v in node for d in walk(v)]
    return []


def test_openai_summary_mode_golden() -> None:
    assert render(spec_for(ServerSettings()), "openai") == {
        "type": "function",
        "function": {
            "name": "update_short_term_memory",
            "description": texts.TOOL_DESCRIPTION,
            "parameters": {
                "type": "object",
                "description": texts.SUMMARY_PARAMETERS,
                "properties": {"summary": {"type": "string", "description": SUMMARY_PROPERTY}},
                "required": ["summary"],
                "additionalProperties": False,
            },
            "strict": True,
        },
    }


def test_anthropic_summary_mode_golden() -> None:
    assert render(spec_for(ServerSettings()), "anthropic") == {
        "name": "update_short_term_memory",
        "description": texts.TOOL_DESCRIPTION,
        "input_schema": {
            "type": "object",
            "description": texts.SUMMARY_PARAMETERS,
            "properties": {"summary": {"type": "string", "description": SUMMARY_PROPERTY}},
            "required": ["summary"],
            "additionalProperties": False,
        },
    }


def test_gemini_summary_mode_golden() -> None:
    assert render(spec_for(ServerSettings()), "gemini") == {
        "name": "update_short_term_memory",
        "description": texts.TOOL_DESCRIPTION,
        "parameters": {
            "type": "OBJECT",
            "description": texts.SUMMARY_PARAMETERS,
            "properties": {"summary": {"type": "STRING", "description": SUMMARY_PROPERTY}},
            "required": ["summary"],
        },
    }


def test_mcp_summary_mode_golden() -> None:
    assert render(spec_for(ServerSettings()), "mcp") == {
        "name": "update_short_term_memory",
        "description": texts.TOOL_DESCRIPTION,
        "inputSchema": {
            "type": "object",
            "description": texts.SUMMARY_PARAMETERS,
            "properties": {"summary": {"type": "string", "description": SUMMARY_PROPERTY}},
            "required": ["summary"],
            "additionalProperties": False,
        },
    }


CATEGORY_FIELDS = {
    "mood": "Mood: How the room feels",
    "plans_ideas": "Plans & ideas: What Tomo and the user plan; secret stays a word",
    "c_2nd_act": "2nd act of the story",  # already starts with its label
}


def test_openai_category_mode_golden() -> None:
    settings = ServerSettings(categories=CATEGORIES)
    assert render(spec_for(settings, bot_name="Tomo"), "openai") == {
        "type": "function",
        "function": {
            "name": "update_short_term_memory",
            "description": texts.TOOL_DESCRIPTION,
            "parameters": {
                "type": "object",
                "description": CATEGORY_PARAMETERS,
                "properties": {
                    slug: {"type": ["string", "null"], "description": text}
                    for slug, text in CATEGORY_FIELDS.items()
                },
                # Strict mode: every property listed; null stands for "unchanged".
                "required": ["mood", "plans_ideas", "c_2nd_act"],
                "additionalProperties": False,
            },
            "strict": True,
        },
    }


def test_gemini_category_mode_golden() -> None:
    settings = ServerSettings(categories=CATEGORIES)
    assert render(spec_for(settings, bot_name="Tomo"), "gemini") == {
        "name": "update_short_term_memory",
        "description": texts.TOOL_DESCRIPTION,
        "parameters": {
            "type": "OBJECT",
            "description": CATEGORY_PARAMETERS,
            "properties": {
                slug: {"type": "STRING", "description": text}
                for slug, text in CATEGORY_FIELDS.items()
            },
        },
    }


@pytest.mark.parametrize(("fmt", "key"), [("anthropic", "input_schema"), ("mcp", "inputSchema")])
def test_json_schema_category_mode_golden(fmt: str, key: str) -> None:
    settings = ServerSettings(categories=CATEGORIES)
    assert render(spec_for(settings, bot_name="Tomo"), fmt) == {
        "name": "update_short_term_memory",
        "description": texts.TOOL_DESCRIPTION,
        key: {
            "type": "object",
            "description": CATEGORY_PARAMETERS,
            "properties": {
                slug: {"type": "string", "description": text}
                for slug, text in CATEGORY_FIELDS.items()
            },
            "required": [],  # an update sends only the topics that changed
            "additionalProperties": False,
        },
    }


ALL_SETTINGS = [
    ServerSettings(),
    ServerSettings(categories=CATEGORIES),
    ServerSettings(tool_description="x" * 4000, categories=(Category("気分", "d" * 500),)),
]


@pytest.mark.parametrize("settings", ALL_SETTINGS)
def test_every_rendering_meets_its_provider_rules(settings: ServerSettings) -> None:
    spec = spec_for(settings)
    openai = render(spec, "openai")["function"]
    assert _NAME.fullmatch(openai["name"])
    assert len(openai["description"]) <= 1024
    for schema in walk(openai["parameters"]):
        if schema.get("type") == "object":
            assert schema["additionalProperties"] is False
            assert schema["required"] == list(schema["properties"])
    gemini = render(spec, "gemini")
    for schema in walk(gemini["parameters"]):
        assert not _GEMINI_FORBIDDEN & schema.keys()
        if "type" in schema:
            assert schema["type"] in _GEMINI_TYPES
    for name in gemini["parameters"]["properties"]:
        assert _GEMINI_NAME.fullmatch(name)
    for fmt, key in (("anthropic", "input_schema"), ("mcp", "inputSchema")):
        tool = render(spec, fmt)
        assert _NAME.fullmatch(tool["name"])
        assert tool[key]["type"] == "object"
    for fmt in FORMATS:
        json.dumps(render(spec, fmt))  # plain JSON, nothing exotic


def test_renderings_are_fresh_dicts() -> None:
    spec = spec_for(ServerSettings())
    first = render(spec, "openai")
    first["function"]["name"] = "changed"
    assert render(spec, "openai")["function"]["name"] == "update_short_term_memory"


def test_unknown_format_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="format"):
        render(spec_for(ServerSettings()), "cohere")


def test_description_override_is_honoured_in_summary_mode() -> None:  # W19
    settings = ServerSettings(tool_description="Keep {bot}'s notes for {user}.")
    spec = spec_for(settings, bot_name="Tomo")
    assert spec.mode == "summary"
    assert spec.description == "Keep Tomo's notes for the user."


def test_description_override_is_honoured_in_category_mode() -> None:  # W19
    settings = ServerSettings(tool_description="Custom notes tool.", categories=CATEGORIES)
    spec = spec_for(settings)
    assert spec.mode == "categories"
    assert render(spec, "anthropic")["description"] == "Custom notes tool."


def test_a_single_summary_category_means_summary_mode_with_the_override() -> None:
    settings = ServerSettings(
        tool_description="Override.", categories=(Category("SUMMARY", "the summary"),)
    )
    spec = spec_for(settings)
    assert spec.mode == "summary"
    assert spec.field_names == ("summary",)
    assert spec.description == "Override."


def test_descriptions_are_sanitized_and_capped() -> None:
    settings = ServerSettings(
        tool_description="Line one\x07\u202e\nline {two} by {{Bot}}\x00" + "z" * 3000,
        categories=(
            Category("Mood", "How it feels\nright now\t{here} " + "w" * 470),
            Category("Notes", "Written by {char}, about {user_term}."),
            Category("Long label " * 9, "x" * 500),
        ),
    )
    spec = spec_for(settings, bot_name="{evil} Tomo\n")
    assert spec.description.startswith("Line one\nline two by evil Tomo")
    assert len(spec.description) <= 1024
    mood, notes, long = spec.fields
    assert mood.description.startswith("Mood: How it feels right now here")
    assert len(long.description) == 500  # label + description, cut to the cap
    assert notes.description == "Notes: Written by evil Tomo, about the user."
    for text in [spec.description, *(f.description for f in spec.fields)]:
        assert not re.search(r"[\x00-\x08\x0b-\x1f\u202a-\u202e]", text)


def test_only_max_categories_become_fields() -> None:
    categories = tuple(Category(f"Topic {i}", "d") for i in range(5))
    spec = spec_for(ServerSettings(categories=categories), max_categories=3)
    assert spec.field_names == ("topic_0", "topic_1", "topic_2")
