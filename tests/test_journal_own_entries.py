"""A process does not read back the journal entries it wrote itself (a tool call's distilled
write): their NOTIFY is known as its own even when it arrives before the writing statement's
answer does. It did in about half the tool calls, and then the next request (the capture
after the tool call, or the next turn's start) read the journal: a second PostgreSQL round
trip in 6-13% of sidecar captures (benchmarks/round_trips.py)."""

from __future__ import annotations

import asyncio

import shortterm
from shortterm import Message, Reply
from shortterm.tool import texts
from tests.support import with_query

TOOL_CALLS = 40


async def test_a_process_own_distilled_writes_do_not_move_its_journal(
    scale_urls: tuple[str, str],
) -> None:
    store_url, cache_url = scale_urls
    # A listen timeout far above the test's pauses: a heartbeat late on a busy machine would
    # say "moved" too, which is not what is tested here.
    store_url = with_query(store_url, listen_timeout_s=30)
    config = shortterm.Config(sweep_interval_s=0)
    async with shortterm.open(store=store_url, cache=cache_url, config=config) as memory:
        store = memory.store
        moved = 0
        for i in range(TOOL_CALLS):
            turn = memory.turn(user_id=f"u{i % 7}", channel_id=f"c{i % 5}", server_id="g")
            said = [Message("user", f"hello {i}", author_id=f"u{i % 7}")]
            await turn.capture(history=said, replies=[Reply("hi")])
            result = await turn.call_tool(texts.TOOL_NAME, {"summary": f"summary {i}"})
            assert result.ok, result.message
            await asyncio.sleep(0.2)  # the tool call's NOTIFY has arrived
            moved += store.journal_moved()
    print(f"the journal read as moved after {moved} of {TOOL_CALLS} of our own tool calls")
    assert moved == 0
