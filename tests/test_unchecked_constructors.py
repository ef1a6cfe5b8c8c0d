"""The hot paths' unchecked constructors build exactly what the checked ones do."""

from __future__ import annotations

import dataclasses

from shortterm.model import Entry, Message, Privacy, ScopeKey, ScopeMeta, ScopeRow
from shortterm.prompt.context import Context, ContextItem


def _same(a: object, b: object) -> None:
    assert type(a) is type(b)
    for f in dataclasses.fields(a):  # type: ignore[arg-type]
        assert getattr(a, f.name) == getattr(b, f.name), f.name


def test_scope_key() -> None:
    _same(ScopeKey._unchecked("user", "u1", "c1", "p1"), ScopeKey.user("u1", "c1", "p1"))
    _same(ScopeKey._unchecked("server", "g1", "c1", None), ScopeKey.server("g1", "c1"))


def test_message() -> None:
    checked = Message(
        "user",
        "hi",
        author_id="u1",
        speaker="Ana",
        at=5.0,
        message_id="m1",
        privacy=Privacy.PARTIAL,
    )
    _same(Message._unchecked("user", "hi", "u1", "Ana", 5.0, "m1", Privacy.PARTIAL), checked)
    _same(Message._unchecked("assistant", "ok", None, None, None), Message("assistant", "ok"))


def test_entry_takes_every_field_and_its_newest_stamp() -> None:
    key = ScopeKey.server("g1", "c1", "p1")
    meta = ScopeMeta("g1", "Guild", "general", "parent", True, "lineage")
    messages = (Message("user", "hi", at=1.0),)
    for stamps in [(1.0, 3.0, 2.0), (4.0, None, None), (None, None, 2.0), (None, None, None)]:
        checked = Entry(
            key,
            messages,
            "summary",
            {"a": "b"},
            7,
            *stamps,
            server_id="g1",
            server_name="Guild",
            channel_name="general",
            parent_channel_id="parent",
            private=True,
            persona_lineage_id="lineage",
        )
        fast = Entry._unchecked(key, messages, "summary", {"a": "b"}, 7, *stamps, meta)
        _same(fast, checked)
        assert fast._newest == checked._newest
        assert fast == checked


def test_scope_row() -> None:
    key = ScopeKey.user("u1", "c1")
    meta = ScopeMeta("g1", private=True)
    checked = ScopeRow(key, meta, "s", 1.0, {"a": "b"}, 2.0, 3, 4, 5, 6.0)
    _same(ScopeRow._unchecked(key, meta, "s", 1.0, {"a": "b"}, 2.0, 3, 4, 5, 6.0), checked)


def test_context_and_item() -> None:
    item = ContextItem._unchecked("memory", "other_channels")
    _same(item, ContextItem(text="memory", kind="other_channels"))
    nudge = ContextItem(text="n", kind="nudge")
    _same(Context._unchecked((item,), nudge, 3, 2), Context([item], nudge, 3, 2))
