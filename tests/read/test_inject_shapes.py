"""inject() for every provider shape: one golden splice per shape, and shapes refused by index
and field."""

from __future__ import annotations

from typing import Any

import pytest

import shortterm
from shortterm import Context, ContextItem, InvalidInput

MEM = ContextItem(text="memory block", kind="other_channels")
NUDGE = ContextItem(text="nudge", kind="nudge")
# Memory one dialogue message up (lands inside the tool exchange, so it moves before the
# call); the nudge at the very end.
CTX = Context([MEM], NUDGE, 1, 0)


def test_openai_chat_completions() -> None:
    dialogue: list[dict[str, Any]] = [
        {"role": "system", "content": "You are Tomo."},
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "w"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    assert shortterm.inject(dialogue, CTX, format="openai") == [
        dialogue[0],
        dialogue[1],
        {"role": "user", "content": "memory block"},
        dialogue[2],
        dialogue[3],
        {"role": "user", "content": "nudge"},
    ]


def test_openai_developer_messages_lead_like_system_ones() -> None:
    dialogue = [{"role": "developer", "content": "rules"}, {"role": "user", "content": "hi"}]
    out = shortterm.inject(dialogue, Context([MEM], None, -1, 0))
    assert [m["content"] for m in out] == ["rules", "memory block", "hi"]
    out = shortterm.inject(dialogue, Context([MEM], None, 5, 0))  # only "hi" is dialogue
    assert [m["content"] for m in out] == ["rules", "memory block", "hi"]


def test_openai_responses_input_items() -> None:
    dialogue: list[dict[str, Any]] = [
        {"role": "developer", "content": "You are Tomo."},
        {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
    ]
    assert shortterm.inject(dialogue, CTX, format="openai-responses") == [
        dialogue[0],
        dialogue[1],
        {"role": "user", "content": "memory block"},
        dialogue[2],
        dialogue[3],
        dialogue[4],
        {"role": "user", "content": "nudge"},
    ]
    anchored = shortterm.inject(dialogue, Context([MEM], None, -1, 0), format="openai-responses")
    assert anchored[1] == {"role": "user", "content": "memory block"}


def test_anthropic_messages_keep_tool_use_and_result_together() -> None:
    dialogue: list[dict[str, Any]] = [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "t1", "name": "w", "input": {}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]},
    ]
    assert shortterm.inject(dialogue, CTX, format="anthropic") == [
        dialogue[0],
        {"role": "user", "content": "memory block"},
        dialogue[1],
        dialogue[2],
        {"role": "user", "content": "nudge"},
    ]
    # The system prompt is a separate field: anchored memory goes first, and a system-role
    # item becomes a user message (the list has no system role).
    item = ContextItem("system", text="as system", kind="same_channel")
    out = shortterm.inject(dialogue, Context([item], None, -1, 0), format="anthropic")
    assert out[0] == {"role": "user", "content": "as system"}


def test_gemini_contents() -> None:
    dialogue: list[dict[str, Any]] = [
        {"role": "user", "parts": [{"text": "weather?"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "w", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "w", "response": {}}}]},
    ]
    assert shortterm.inject(dialogue, CTX, format="gemini") == [
        dialogue[0],
        {"role": "user", "parts": [{"text": "memory block"}]},
        dialogue[1],
        dialogue[2],
        {"role": "user", "parts": [{"text": "nudge"}]},
    ]
    snake = [{"role": "model", "parts": [{"function_call": {"name": "w"}}]}]
    out = shortterm.inject(snake, Context([MEM], None, 0, 0), format="gemini")
    assert out[0]["parts"] == [{"text": "memory block"}]  # never after a pending call


@pytest.mark.parametrize(
    ("fmt", "dialogue", "field"),
    [
        ("openai", [{"role": "user", "content": "a"}, {"role": "robot"}], "dialogue[1].role"),
        ("openai", [{"role": "user", "content": 5}], "dialogue[0].content"),
        ("openai", [{"role": "assistant", "tool_calls": {}}], "dialogue[0].tool_calls"),
        ("openai-responses", [{"type": 7}], "dialogue[0].type"),
        ("openai-responses", [{"role": "tool", "content": "x"}], "dialogue[0].role"),
        ("openai-responses", [{"type": "function_call", "name": "w"}], "dialogue[0].call_id"),
        ("anthropic", [{"role": "system", "content": "x"}], "dialogue[0].role"),
        ("anthropic", [{"role": "user"}], "dialogue[0].content"),
        ("anthropic", [{"role": "user", "content": [{"text": "x"}]}], "dialogue[0].content[0]"),
        ("gemini", [{"role": "assistant", "parts": []}], "dialogue[0].role"),
        ("gemini", [{"role": "user", "content": "x"}], "dialogue[0].parts"),
        ("gemini", [{"role": "user", "parts": ["x"]}], "dialogue[0].parts[0]"),
        ("openai", ["plain"], "dialogue[0]"),
    ],
)
def test_a_message_not_of_the_shape_is_named_by_index_and_field(
    fmt: str, dialogue: list[Any], field: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        shortterm.inject(dialogue, CTX, format=fmt)
    assert caught.value.field == field


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(InvalidInput, match="format"):
        shortterm.inject([], CTX, format="cohere")
