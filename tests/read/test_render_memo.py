"""An entry view's rendering is kept: reused while nothing it shows changed, never after.

Each test renders once (so the view holds a rendering), changes one input of the rendering,
and checks that the next context shows the change: a new capture, a forget, a privacy choice
learnt only through settings, the server's settings, the bot's name, a token budget.
"""

from __future__ import annotations

from typing import Any

import pytest

import shortterm
from shortterm import Privacy, ServerSettings, UserSettings
from shortterm.memory.turn import recall
from shortterm.model import Entry
from shortterm.prompt.render import plan_recollection
from tests.read.helpers import block, context_of, say
from tests.support import FakeClock

OTHER = "other_channels"


async def _recalled(memory: shortterm.Memory, **kw: object) -> str:
    return block(await context_of(memory, channel="here", **kw), OTHER)


async def test_the_same_entry_is_rendered_once_and_reused(
    memory: shortterm.Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    await say(memory, channel="c1", text="the plan is set")
    planned: list[object] = []

    def plan(*args: Any, **kwargs: Any) -> Any:
        planned.append(result := plan_recollection(*args, **kwargs))
        return result

    monkeypatch.setattr(recall, "plan_recollection", plan)
    first = await _recalled(memory)
    if memory.cache.shared:
        return  # a shared hot tier builds a fresh view per read: nothing is kept to reuse
    assert planned
    rendered = len(planned)
    assert await _recalled(memory) == first
    assert len(planned) == rendered  # the second context reused the first one's rows


async def test_a_new_capture_is_shown_at_once(memory: shortterm.Memory, clock: FakeClock) -> None:
    await say(memory, channel="c1", text="first words")
    assert "first words" in await _recalled(memory)
    clock.advance(5)
    await say(memory, channel="c1", text="second words")
    assert "second words" in await _recalled(memory)


async def test_a_forgotten_author_is_gone_from_a_rendered_entry(memory: shortterm.Memory) -> None:
    await say(memory, channel="c1", text="mine", others=(("u2", "bob's secret"),))
    assert "bob's secret" in await _recalled(memory)
    await memory.clear_user("u2")
    assert "bob's secret" not in await _recalled(memory)


async def test_a_full_privacy_choice_learnt_from_settings_hides_a_rendered_author(
    memory: shortterm.Memory,
) -> None:
    await say(memory, channel="c1", text="mine", others=(("u2", "bob's words"),))
    assert "bob's words" in await _recalled(memory)
    # Another process stored the choice; this one has only learnt the setting so far (no
    # scrub of its hot tier yet): the rendering must not outlive it.
    memory.known_settings.put_users({"u2": UserSettings(privacy=Privacy.FULL)})
    assert "bob's words" not in await _recalled(memory)
    memory.known_settings.put_users({"u2": UserSettings()})
    assert "bob's words" in await _recalled(memory)


async def test_the_servers_settings_rerender(memory: shortterm.Memory) -> None:
    await say(memory, channel="c1", text="two", others=(("u2", "one"),))
    assert (await _recalled(memory)).count("\n│ ") == 3
    await memory.configure_server("g1", ServerSettings(crude_message_count=1))
    text = await _recalled(memory)
    assert text.count("\n│ ") == 1 and "Tomo: hi there" in text


async def test_the_bot_name_is_an_input(memory: shortterm.Memory) -> None:
    # An assistant message without a speaker is shown under the reading turn's bot name.
    now = memory.clock()
    history = [shortterm.Message("assistant", "earlier answer", at=now)]
    turn = memory.turn(user_id="u1", channel_id="c1", server_id="g1", persona_id="p1")
    await turn.capture(history=history, replies=[shortterm.Reply("ok", persona_name="Tomo")])
    tomo = await _recalled(memory)
    other = memory.turn(
        user_id="u1", channel_id="here", server_id="g1", persona_id="p1", bot_name="Kai"
    )
    kai = block(await other.context(), OTHER)
    assert "Tomo: earlier answer" in tomo and "Kai: earlier answer" in kai


async def test_a_token_budget_never_trims_the_kept_rendering(memory: shortterm.Memory) -> None:
    for n in range(6):
        await say(memory, channel="c1", text=f"line {n} " + "words " * 20)
    full = await _recalled(memory)
    turn = memory.turn(
        user_id="u1",
        channel_id="here",
        server_id="g1",
        persona_id="p1",
        user_name="Ana",
        bot_name="Tomo",
    )  # the same inputs as _recalled's turn, so both read one kept rendering
    budgeted = block(await turn.context(max_tokens=120), OTHER)
    assert len(budgeted) < len(full)
    assert await _recalled(memory) == full


async def test_views_of_other_users_do_not_share_a_personal_rendering(
    memory: shortterm.Memory,
) -> None:
    await memory.configure_user("u1", UserSettings(cross_server_opt_in=True))
    await memory.configure_user("u2", UserSettings(cross_server_opt_in=True))
    await say(memory, channel="d1", server=None, user="u1", text="u1 private plan")
    await say(memory, channel="d2", server=None, user="u2", text="u2 private plan")
    mine = block(await context_of(memory, channel="g-here", user="u1"), OTHER)
    theirs = block(await context_of(memory, channel="g-here", user="u2"), OTHER)
    assert "u1 private plan" in mine and "u2 private plan" not in mine
    assert "u2 private plan" in theirs and "u1 private plan" not in theirs


def test_an_entry_compares_and_prints_without_its_rendering() -> None:
    key = shortterm.ScopeKey.server("g", "c")
    a, b = Entry(key=key, summary="s", summary_at=1.0), Entry(key=key, summary="s", summary_at=1.0)
    assert a == b and "_memo" not in repr(a) and a._newest == 1.0
