"""Settings written by another process are picked up even when the writer's timestamp is a
little older than the reader's last check (a commit in flight, a clock slightly behind)."""

from __future__ import annotations

import shortterm
from tests.support import T0, FakeClock


async def test_a_write_stamped_before_the_last_check_is_not_missed(db_url: str) -> None:
    config = shortterm.Config(sweep_interval_s=0, settings_refresh_s=0)
    reader_clock, writer_clock = FakeClock(T0), FakeClock(T0 - 1.5)
    async with (
        shortterm.open(store=db_url, config=config, clock=reader_clock) as reader,
        shortterm.open(store=db_url, config=config, clock=writer_clock) as writer,
    ):
        assert (await reader.server_settings("g1")).refresh_cadence == 5  # checked at T0
        await writer.configure_server("g1", shortterm.ServerSettings(refresh_cadence=9))
        reader_clock.advance(0.5)
        assert (await reader.server_settings("g1")).refresh_cadence == 9
