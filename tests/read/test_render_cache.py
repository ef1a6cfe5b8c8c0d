"""The render cache reuses a rendering for the very view it was made from, and no other."""

from __future__ import annotations

from shortterm.memory.engine.renders import RenderCache
from shortterm.model import Entry, ScopeKey


def _view(channel: str, summary: str) -> Entry:
    return Entry(key=ScopeKey.server("g", channel), summary=summary, summary_at=1.0)


def test_the_same_view_gets_its_rendering_and_a_newer_view_a_blank_one() -> None:
    cache = RenderCache()
    old = _view("c", "before")
    cache.of(old).other_inputs = ("rendered",)
    assert cache.of(old).other_inputs == ("rendered",)
    equal = _view("c", "before")  # equal, but another view: never assumed to be the same
    assert cache.of(equal).other_inputs is None
    assert cache.of(old).other_inputs is None  # the older view was let go


def test_the_cache_is_bounded_and_can_be_off() -> None:
    cache = RenderCache(limit=2)
    views = [_view(f"c{i}", "s") for i in range(3)]
    for view in views:
        cache.of(view).other_inputs = (view.key.channel_id,)
    assert cache.of(views[2]).other_inputs == ("c2",)
    assert cache.of(views[0]).other_inputs is None  # the oldest scope went first
    off = RenderCache(limit=0)
    off.of(views[0]).other_inputs = ("x",)
    assert off.of(views[0]).other_inputs is None
