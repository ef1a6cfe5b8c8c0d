"""The facade's one write entry for surfaces, ``Memory.write(plan, fence=...)``, and the raw
write names it replaced: they keep working, with a deprecation warning."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import shortterm
from shortterm import Message, ScopeKey
from shortterm.memory import rules
from shortterm.model import DistilledWrite, ScopeMeta

KEY = ScopeKey.server("g1", "c1", None)
META = ScopeMeta(server_id="g1", channel_name="general")
SAID = (Message("user", "the trip is on friday", author_id="u1", at=1.0),)


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[shortterm.Memory]:
    # A store of the test's own: the default file in the working directory keeps what
    # earlier runs forgot (their horizons too).
    store = f"sqlite:///{tmp_path / 'plans.db'}"
    async with shortterm.open(store, config=shortterm.Config(sweep_interval_s=0)) as m:
        yield m


async def test_a_capture_plan_and_a_distilled_plan_are_written(memory: shortterm.Memory) -> None:
    fence = await memory.begin_write()
    assert await memory.write(rules.CapturePlan([(KEY, SAID)], META, KEY), fence=fence)
    change = DistilledWrite(summary="a trip on friday", set_summary=True)
    [row] = await memory.write(rules.DistilledPlan([(KEY, META)], change, KEY), fence=fence)
    assert row.summary == "a trip on friday" and row.turns_since_refresh == 0
    entry = await memory.get(KEY)
    assert entry is not None and entry.messages == SAID and entry.channel_name == "general"


async def test_a_plan_written_after_a_forget_it_began_before_is_dropped(
    memory: shortterm.Memory,
) -> None:
    fence = await memory.begin_write()
    await memory.clear_channel("c1")
    assert not await memory.write(rules.CapturePlan([(KEY, SAID)], META, None), fence=fence)
    assert await memory.get(KEY) is None


async def test_the_raw_write_names_warn_and_still_write(memory: shortterm.Memory) -> None:
    fence = await memory.begin_write()
    with pytest.warns(DeprecationWarning, match=r"Memory.write_capture is deprecated"):
        ok = await memory.write_capture(
            [(KEY, SAID)], META, increment=None, fence=fence, now=memory.clock()
        )
    assert ok
    change = DistilledWrite(summary="kept", set_summary=True)
    with pytest.warns(DeprecationWarning, match=r"Memory.write_distilled is deprecated"):
        rows = await memory.write_distilled([(KEY, None)], change, reset_counter=None, fence=fence)
    assert [r.summary for r in rows] == ["kept"]


async def test_anything_but_a_plan_is_refused(memory: shortterm.Memory) -> None:
    fence = await memory.begin_write()
    with pytest.raises(shortterm.InvalidInput, match="CapturePlan or DistilledPlan"):
        await memory.write([(KEY, SAID)], fence=fence)  # type: ignore[call-overload]
