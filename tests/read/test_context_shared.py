"""The read path on the shared backends (PostgreSQL + Redis), as several bot processes use it."""

from __future__ import annotations

import shortterm
from shortterm import Config, Privacy, ScopeKey, ServerSettings, UserSettings
from tests.read.helpers import block, context_of, say, upgrade
from tests.support import FakeClock

CONFIG = Config(sweep_interval_s=0)


async def test_recall_rules_hold_on_shared_backends(
    scale_urls: tuple[str, str], clock: FakeClock
) -> None:
    store, cache = scale_urls
    async with shortterm.open(store=store, cache=cache, clock=clock, config=CONFIG) as memory:
        await memory.configure_server(
            "g1", ServerSettings(refresh_cadence=2, private_channel_ids=frozenset({"vip"}))
        )
        await memory.configure_user("u1", UserSettings(cross_server_opt_in=True))
        await say(memory, channel="c1", text="shared talk", lineage="L1", channel_name="plans")
        await say(memory, channel="vip", text="vip talk", lineage="L1")
        await say(memory, channel="c2", text="other lineage", persona="p2", lineage="L2")
        await say(
            memory,
            channel="far",
            server="g2",
            text="ana far",
            others=(("u2", "BOB"),),
            lineage="L1",
        )
        await say(memory, channel="here", lineage="L1")
        await say(memory, channel="here", lineage="L1")
        await upgrade(memory, ScopeKey.server("g1", "here", "p1"), "live summary")
        ctx = await context_of(memory, channel="here", lineage="L1")
        other = block(ctx, "other_channels")
        assert "shared talk" in other and "#plans in this server" in other
        assert "ana far" in other and "BOB" not in other
        assert "vip talk" not in other and "other lineage" not in other
        assert "live summary" in block(ctx, "same_channel")
        assert ctx.nudge is None  # the upgrade reset the counter
        assert ctx.memory_depth == 2  # fresh


async def test_private_flag_and_lineage_survive_a_restart_on_shared_backends(
    scale_urls: tuple[str, str], clock: FakeClock
) -> None:
    store, cache = scale_urls
    async with shortterm.open(store=store, cache=cache, clock=clock, config=CONFIG) as memory:
        await memory.configure_server("g1", ServerSettings(private_channel_ids=frozenset({"vip"})))
        await say(memory, channel="vip", lineage="L1")
        await say(memory, channel="open", lineage="L1")
        await say(memory, channel="kai", persona="p2", lineage="L2")
        for channel, persona in (("vip", "p1"), ("open", "p1"), ("kai", "p2")):
            await upgrade(memory, ScopeKey.server("g1", channel, persona), f"{channel} summary")
        await memory.configure_server("g1", ServerSettings())  # no longer private
    clock.advance(60)
    async with shortterm.open(store=store, cache=cache, clock=clock, config=CONFIG) as memory:
        text = block(await context_of(memory, channel="lobby", lineage="L1"), "other_channels")
        assert "open summary" in text
        assert "vip summary" not in text  # private when captured
        assert "kai summary" not in text  # another lineage


async def test_partial_privacy_set_elsewhere_is_respected(
    scale_urls: tuple[str, str], clock: FakeClock
) -> None:
    store, cache = scale_urls
    async with (
        shortterm.open(store=store, cache=cache, clock=clock, config=CONFIG) as here,
        shortterm.open(store=store, cache=cache, clock=clock, config=CONFIG) as there,
    ):
        await here.configure_user("u1", UserSettings(cross_server_opt_in=True))
        await say(here, channel="far", server="g2", text="from elsewhere")
        clock.advance(CONFIG.settings_refresh_s + 1)
        assert "from elsewhere" in block(await context_of(there, channel="c1"), "other_channels")
        await there.configure_user("u1", UserSettings(Privacy.PARTIAL, cross_server_opt_in=True))
        clock.advance(CONFIG.settings_refresh_s + 1)
        assert block(await context_of(here, channel="c1"), "other_channels") == ""


async def test_the_live_scope_a_context_read_is_what_a_get_returns(
    scale_urls: tuple[str, str], clock: FakeClock
) -> None:
    """``Turn.live_seen`` hands a surface the live entry the context read (the adapters show
    its messages without a second read): the same entry ``Memory.get`` returns, on both
    tiers; none before a context, and none where the turn may not read it."""
    store, cache = scale_urls
    for hot in ("memory://", cache):
        async with shortterm.open(store=store, cache=hot, clock=clock, config=CONFIG) as memory:
            # A channel of each tier's own (a clear would make the next capture's untimed
            # history older than its horizon).
            seen = f"seen-{hot[:5]}"
            await say(memory, channel=seen, text="first words")
            turn = memory.turn(user_id="u1", channel_id=seen, server_id="g1", persona_id="p1")
            assert turn.live_seen is None
            await turn.context()
            assert turn.live_seen is not None
            [entry] = turn.live_seen
            assert entry is not None and entry == await memory.get(turn.live_key)
            assert [m.content for m in entry.messages][-2:] == ["first words", "hi there"]
            blank = memory.turn(user_id="u1", channel_id="empty", server_id="g1", persona_id="p1")
            await blank.context()
            assert blank.live_seen == (None,)
            await memory.configure_user("u9", UserSettings(privacy=Privacy.PARTIAL))
            dm = memory.turn(user_id="u9", channel_id="dm9", persona_id="p1")
            await dm.context()
            assert dm.live_seen is None  # a DM keeps nothing for a partial-privacy user
