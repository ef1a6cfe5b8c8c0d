"""shortterm.inject: depths, anchoring, tool-call pairs, purity."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import shortterm
from shortterm import Context, ContextItem, InvalidInput

MEM = ContextItem(text="memory block", kind="other_channels")
SAME = ContextItem(text="same block", kind="same_channel")
NUDGE = ContextItem(text="nudge", kind="nudge")

Msg = dict[str, Any]


def sys(text: str = "rules") -> Msg:
    return {"role": "system", "content": text}


def user(text: str) -> Msg:
    return {"role": "user", "content": text}


def bot(text: str) -> Msg:
    return {"role": "assistant", "content": text}


def calls(call_id: str) -> Msg:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "f"}}],
    }


def result(call_id: str) -> Msg:
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


def contents(messages: list[Msg]) -> list[Any]:
    return [m["content"] for m in messages]


DIALOGUE = [sys(), user("u1"), bot("a1"), user("u2"), bot("a2"), user("u3")]


@pytest.mark.parametrize(
    ("depth", "expected"),
    [
        (0, ["rules", "u1", "a1", "u2", "a2", "u3", "memory block"]),
        (1, ["rules", "u1", "a1", "u2", "a2", "memory block", "u3"]),
        (2, ["rules", "u1", "a1", "u2", "memory block", "a2", "u3"]),
        (5, ["rules", "memory block", "u1", "a1", "u2", "a2", "u3"]),
        (9, ["rules", "memory block", "u1", "a1", "u2", "a2", "u3"]),  # fewer turns than depth
        (-1, ["rules", "memory block", "u1", "a1", "u2", "a2", "u3"]),
    ],
)
def test_depth_counts_dialogue_messages_from_the_end(depth: int, expected: list[str]) -> None:
    out = shortterm.inject(DIALOGUE, Context([MEM], None, depth, 0))
    assert contents(out) == expected


def test_anchored_goes_after_every_leading_system_message() -> None:
    dialogue = [sys("a"), sys("b"), user("u1"), sys("mid"), bot("a1")]
    out = shortterm.inject(dialogue, Context([MEM, SAME], None, -1, 0))
    assert contents(out) == ["a", "b", "memory block", "same block", "u1", "mid", "a1"]


def test_system_messages_in_the_middle_do_not_count_as_turns() -> None:
    dialogue = [sys(), user("u1"), bot("a1"), sys("note"), user("u2")]
    out = shortterm.inject(dialogue, Context([MEM], None, 2, 0))
    assert contents(out) == ["rules", "u1", "memory block", "a1", "note", "u2"]


def test_inserted_items_never_count_as_turns() -> None:
    # memory at depth 1 and nudge at depth 2 both measure against the caller's dialogue
    out = shortterm.inject(DIALOGUE, Context([MEM, SAME], NUDGE, 1, 2))
    assert contents(out) == [
        "rules", "u1", "a1", "u2", "nudge", "a2", "memory block", "same block", "u3",
    ]  # fmt: skip


def test_block_comes_before_the_nudge_at_equal_depth() -> None:
    out = shortterm.inject(DIALOGUE, Context([MEM, SAME], NUDGE, 2, 2))
    assert contents(out)[4:7] == ["memory block", "same block", "nudge"]


def test_items_are_user_messages_by_default_and_keep_a_system_role_when_asked() -> None:
    item = ContextItem("system", text="as system", kind="same_channel")
    out = shortterm.inject([user("hi")], Context([MEM, item], NUDGE, 0, 0))
    assert [m["role"] for m in out] == ["user", "user", "system", "user"]


def test_an_empty_dialogue_gets_the_items() -> None:
    out = shortterm.inject([], Context([MEM], NUDGE, 3, 1))
    assert contents(out) == ["memory block", "nudge"]


def test_an_empty_context_returns_an_equal_copy() -> None:
    out = shortterm.inject(DIALOGUE, Context())
    assert out == DIALOGUE and out is not DIALOGUE
    assert all(a is not b for a, b in zip(out, DIALOGUE, strict=True))


def test_a_tool_exchange_is_never_split() -> None:
    dialogue = [sys(), user("u1"), calls("c1"), result("c1"), bot("a1"), user("u2")]
    # depth 3 would land between the call and its result: it moves before the call
    out = shortterm.inject(dialogue, Context([MEM], None, 3, 0))
    assert [m.get("content") for m in out][1:4] == ["u1", "memory block", None]
    assert out[3]["tool_calls"][0]["id"] == "c1" and out[4]["role"] == "tool"


def test_parallel_results_stay_together() -> None:
    dialogue = [user("u1"), calls("c1"), result("c1"), result("c2"), bot("a1")]
    for depth in (2, 3):
        out = shortterm.inject(dialogue, Context([MEM], None, depth, 0))
        roles = [m["role"] for m in out]
        assert roles == ["user", "user", "assistant", "tool", "tool", "assistant"], depth


def test_a_pending_call_at_the_end_keeps_room_for_its_result() -> None:
    dialogue = [user("u1"), calls("c1")]
    out = shortterm.inject(dialogue, Context([MEM], None, 0, 0))
    assert [m.get("content") for m in out] == ["u1", "memory block", None]


def test_anthropic_style_tool_blocks_stay_together() -> None:
    dialogue = [
        user("u1"),
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]},
        bot("done"),
    ]
    out = shortterm.inject(dialogue, Context([MEM], None, 2, 0))
    assert out[1]["content"] == "memory block"
    assert out[2]["content"][0]["type"] == "tool_use"


def test_input_is_not_mutated() -> None:
    dialogue = [sys(), user("u1"), calls("c1"), result("c1"), bot("a1")]
    before = copy.deepcopy(dialogue)
    out = shortterm.inject(dialogue, Context([MEM], NUDGE, 1, 0))
    out[0]["content"] = "changed"
    out[2]["tool_calls"] = []
    assert dialogue == before


@pytest.mark.parametrize(
    "dialogue", ["not a list", [{"content": "no role"}], ["plain string"], [{"role": 3}]]
)
def test_bad_dialogue_is_refused(dialogue: Any) -> None:
    with pytest.raises(InvalidInput, match="dialogue"):
        shortterm.inject(dialogue, Context())


def test_bad_context_values_are_refused() -> None:
    with pytest.raises(InvalidInput, match="ctx"):
        shortterm.inject([], "context")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="memory_depth"):
        Context([], None, -2, 0)
    with pytest.raises(InvalidInput, match="items"):
        Context(["text"], None, 0, 0)  # type: ignore[list-item]
    with pytest.raises(InvalidInput, match="kind"):
        ContextItem(text="x", kind="other")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="text"):
        ContextItem(text="  ", kind="nudge")


def test_value_types_are_frozen_and_hashable() -> None:
    ctx = Context([MEM], NUDGE, 2, 2)
    assert isinstance(ctx.items, tuple)
    assert ctx == Context((MEM,), NUDGE, 2, 2) and hash(ctx) == hash(Context((MEM,), NUDGE, 2, 2))
    with pytest.raises(AttributeError):
        ctx.memory_depth = 3  # type: ignore[misc]


@st.composite
def dialogues(draw: st.DrawFn) -> list[Msg]:
    out: list[Msg] = []
    for i in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["system", "user", "assistant", "exchange"]))
        if kind == "exchange":
            out.append(calls(f"c{i}"))
            out.extend(result(f"c{i}") for _ in range(draw(st.integers(1, 3))))
        else:
            out.append({"role": kind, "content": f"m{i}"})
    return out


@given(dialogues(), st.integers(-1, 15), st.integers(-1, 15))
def test_any_placement_keeps_every_message_and_every_exchange_whole(
    dialogue: list[Msg], memory_depth: int, nudge_depth: int
) -> None:
    out = shortterm.inject(dialogue, Context([MEM, SAME], NUDGE, memory_depth, nudge_depth))
    texts = [m["content"] for m in out]
    theirs = [m for m in out if m["content"] not in ("memory block", "same block", "nudge")]
    assert theirs == dialogue
    block = texts.index("memory block")
    assert texts[block + 1] == "same block"  # the items stay together, in order
    if memory_depth == nudge_depth:
        assert texts[block + 2] == "nudge"
    for i, m in enumerate(out):
        if m["role"] == "tool":
            prev = out[i - 1]
            assert prev["role"] == "tool" or "tool_calls" in prev
        if "tool_calls" in m and i + 1 < len(out):
            assert out[i + 1]["role"] == "tool"
