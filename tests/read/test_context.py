"""turn.context(): who sees what, in which order, with which times and depths."""

from __future__ import annotations

import pytest

import shortterm
from shortterm import Category, Config, Privacy, ScopeKey, ServerSettings, UserSettings
from tests.read.helpers import block, context_of, say, upgrade
from tests.support import FakeClock

OTHER = "other_channels"
SAME = "same_channel"


# -- other channels in a guild ------------------------------------------------------------


async def test_a_guild_turn_recalls_this_servers_other_channels_newest_first(
    memory: shortterm.Memory, clock: FakeClock
) -> None:
    for n in range(5):
        await say(memory, channel=f"c{n}", text=f"topic {n}", channel_name=f"chan{n}")
        clock.advance(60)
    ctx = await context_of(memory, channel="c4")
    text = block(ctx, OTHER)
    # never the current channel; at most max_other_channels (3); newest first
    assert "topic 4" not in text
    assert [f"topic {n}" in text for n in range(4)] == [False, True, True, True]
    assert text.index("topic 3") < text.index("topic 2") < text.index("topic 1")
    assert "#chan3 in this server" in text
    assert ctx.items[0].kind == OTHER and ctx.items[0].role == "user"


async def test_the_limit_follows_the_config(tmp_path: object, clock: FakeClock) -> None:
    config = Config(sweep_interval_s=0, max_other_channels=1)
    async with shortterm.open(store="memory://", clock=clock, config=config) as memory:
        for n in range(3):
            await say(memory, channel=f"c{n}", text=f"topic {n}")
            clock.advance(1)
        text = block(await context_of(memory, channel="x"), OTHER)
        assert "topic 2" in text and "topic 1" not in text and "topic 0" not in text


async def test_shared_memory_shows_everyone_in_the_channel(memory: shortterm.Memory) -> None:
    await say(memory, channel="c1", text="mine", others=(("u2", "bob says hi"),))
    text = block(await context_of(memory, channel="c2"), OTHER)
    assert "name-u2: bob says hi" in text and "Ana: mine" in text and "Tomo: hi there" in text


async def test_lineage_limits_recall_unless_the_turn_has_none(memory: shortterm.Memory) -> None:
    await say(memory, channel="c1", text="tomo talk", persona="p1", lineage="L1")
    await say(memory, channel="c2", text="kai talk", persona="p2", lineage="L2")
    tomo = block(await context_of(memory, channel="c3", persona="p1", lineage="L1"), OTHER)
    assert "tomo talk" in tomo and "kai talk" not in tomo
    anyone = block(await context_of(memory, channel="c3", persona="p1"), OTHER)
    assert "tomo talk" in anyone and "kai talk" in anyone


async def test_same_lineage_on_another_persona_id_is_recalled(memory: shortterm.Memory) -> None:
    await say(memory, channel="c1", text="old persona id", persona="p-old", lineage="L1")
    text = block(await context_of(memory, channel="c2", persona="p-new", lineage="L1"), OTHER)
    assert "old persona id" in text


async def test_another_servers_memory_needs_the_users_opt_in(memory: shortterm.Memory) -> None:
    await say(memory, channel="far", server="g2", text="from elsewhere")
    await say(memory, channel="dm1", server=None, text="a secret dm")
    assert block(await context_of(memory, channel="c1"), OTHER) == ""
    await memory.configure_user("u1", UserSettings(cross_server_opt_in=True))
    text = block(await context_of(memory, channel="c1"), OTHER)
    assert "from elsewhere" in text and "a secret dm" in text
    assert "with Ana in a channel on another server" in text
    assert "with Ana in a direct message" in text
    assert "far" not in text.replace("from elsewhere", "")  # another server is not named


async def test_cross_server_recall_never_shows_third_parties(memory: shortterm.Memory) -> None:
    await memory.configure_user("u1", UserSettings(cross_server_opt_in=True))
    await say(memory, channel="far", server="g2", text="ana here", others=(("u2", "BOB SECRET"),))
    # Even an entry that somehow holds a third party's message (an older capture, an import)
    # shows only the user's and the bot's lines.
    key = ScopeKey.user("u1", "far2", "p1")
    entry = await memory.get(ScopeKey.user("u1", "far", "p1"))
    assert entry is not None
    bob = shortterm.Message("user", "BOB AGAIN", author_id="u2", at=memory.clock())
    meta = shortterm.store.base.ScopeMeta(server_id="g2")
    await memory.cache.capture(key, (*entry.messages, bob), meta, None, memory.clock())
    text = block(await context_of(memory, channel="c1"), OTHER)
    assert "ana here" in text and "hi there" in text
    assert "BOB" not in text


async def test_partial_privacy_gets_no_personal_recall(memory: shortterm.Memory) -> None:
    await memory.configure_user("u1", UserSettings(cross_server_opt_in=True))
    await say(memory, channel="far", server="g2", text="from elsewhere")
    await say(memory, channel="c1", text="shared here")
    await memory.configure_user(
        "u1", UserSettings(privacy=Privacy.PARTIAL, cross_server_opt_in=True)
    )
    text = block(await context_of(memory, channel="c2"), OTHER)
    assert "shared here" in text and "from elsewhere" not in text
    per_turn = block(await context_of(memory, channel="c2", server=None), OTHER)
    assert per_turn == ""


async def test_a_full_privacy_authors_lines_are_never_shown(
    db_url: str, clock: FakeClock, config: Config
) -> None:
    async with shortterm.open(store=db_url, clock=clock, config=config) as memory:
        await say(memory, channel="c1", text="ana", others=(("u2", "BOB TEXT"),))
        # another process records u2's choice; this one learns it at the next refresh
        await memory.store.save_user_settings("u2", UserSettings(privacy=Privacy.FULL), now=clock())
        clock.advance(config.settings_refresh_s + 1)
        text = block(await context_of(memory, channel="c2"), OTHER)
        assert "ana" in text and "BOB" not in text


# -- other channels in a DM ---------------------------------------------------------------


async def test_a_dm_recalls_the_users_other_dms_and_servers_only_with_opt_in(
    memory: shortterm.Memory,
) -> None:
    await say(memory, channel="dm1", server=None, text="first dm")
    await say(memory, channel="c1", text="guild talk")
    ctx = await context_of(memory, channel="dm2", server=None)
    text = block(ctx, OTHER)
    assert "first dm" in text and "with Ana in another direct message" in text
    assert "guild talk" not in text
    await memory.configure_user("u1", UserSettings(cross_server_opt_in=True))
    text = block(await context_of(memory, channel="dm2", server=None), OTHER)
    assert "guild talk" in text and "with Ana in a server channel" in text


# -- private channels ---------------------------------------------------------------------


async def test_private_channels_stay_inside_private_channels(memory: shortterm.Memory) -> None:
    await memory.configure_server("g1", ServerSettings(private_channel_ids=frozenset({"vip"})))
    await say(memory, channel="vip", text="vip only")
    await say(memory, channel="open", text="open talk")
    public = block(await context_of(memory, channel="lobby"), OTHER)
    assert "vip only" not in public and "open talk" in public
    inside = block(await context_of(memory, channel="vip2"), OTHER)
    assert "vip only" not in inside  # vip2 is not private
    await memory.configure_server(
        "g1", ServerSettings(private_channel_ids=frozenset({"vip", "vip2"}))
    )
    inside = block(await context_of(memory, channel="vip2"), OTHER)
    assert "vip only" in inside and "open talk" in inside
    await memory.configure_server(
        "g1", ServerSettings(private_channel_ids=frozenset({"vip"}), privacy_bypass=True)
    )
    assert "vip only" in block(await context_of(memory, channel="lobby"), OTHER)


async def test_channels_private_now_are_hidden_even_if_captured_before(
    memory: shortterm.Memory,
) -> None:
    await say(memory, channel="c1", text="said in the open")
    await memory.configure_server("g1", ServerSettings(private_channel_ids=frozenset({"c1"})))
    assert "said in the open" not in block(await context_of(memory, channel="c2"), OTHER)


async def test_threads_inherit_privacy_from_their_parent(memory: shortterm.Memory) -> None:
    await memory.configure_server("g1", ServerSettings(private_channel_ids=frozenset({"vip"})))
    await say(memory, channel="thread1", parent="vip", text="thread talk")
    assert "thread talk" not in block(await context_of(memory, channel="lobby"), OTHER)
    inside = block(await context_of(memory, channel="thread2", parent_channel_id="vip"), OTHER)
    assert "thread talk" in inside


async def test_privacy_recorded_at_capture_and_the_parent_survive_a_restart(
    db_url: str, clock: FakeClock, config: Config
) -> None:
    async with shortterm.open(store=db_url, clock=clock, config=config) as memory:
        await memory.configure_server("g1", ServerSettings(private_channel_ids=frozenset({"vip"})))
        await say(memory, channel="vip", text="vip talk")
        await say(memory, channel="thread1", parent="vip", text="thread talk")
        for key in (ScopeKey.server("g1", "vip", "p1"), ScopeKey.server("g1", "thread1", "p1")):
            await upgrade(memory, key, f"summary of {key.channel_id}")
        # the channel stops being private; what was said while it was private stays hidden
        await memory.configure_server("g1", ServerSettings())
    clock.advance(60)
    async with shortterm.open(store=db_url, clock=clock, config=config) as memory:
        vip = await memory.get(ScopeKey.server("g1", "vip", "p1"))
        assert vip is not None and vip.private and vip.messages == ()
        thread = await memory.get(ScopeKey.server("g1", "thread1", "p1"))
        assert thread is not None and thread.parent_channel_id == "vip"
        assert block(await context_of(memory, channel="lobby"), OTHER) == ""
        await memory.configure_server("g1", ServerSettings(private_channel_ids=frozenset({"v2"})))
        inside = block(await context_of(memory, channel="v2"), OTHER)
        assert "summary of vip" in inside and "summary of thread1" in inside


async def test_other_servers_private_channels_never_leak(memory: shortterm.Memory) -> None:
    await memory.configure_user("u1", UserSettings(cross_server_opt_in=True))
    await memory.configure_server("g2", ServerSettings(private_channel_ids=frozenset({"secret"})))
    await say(memory, channel="secret", server="g2", text="g2 secret")
    await say(memory, channel="later", server="g2", text="later private")
    await memory.configure_server(
        "g2", ServerSettings(private_channel_ids=frozenset({"secret", "later"}))
    )
    # g1 has a private channel too: being inside it unlocks only g1's own private memory
    await memory.configure_server("g1", ServerSettings(private_channel_ids=frozenset({"mine"})))
    for channel in ("lobby", "mine"):
        text = block(await context_of(memory, channel=channel), OTHER)
        assert "g2 secret" not in text and "later private" not in text
    await memory.configure_server(
        "g2", ServerSettings(private_channel_ids=frozenset({"secret"}), privacy_bypass=True)
    )
    assert "g2 secret" in block(await context_of(memory, channel="lobby"), OTHER)


async def test_guild_private_memory_does_not_reach_dms(memory: shortterm.Memory) -> None:
    await memory.configure_user("u1", UserSettings(cross_server_opt_in=True))
    await memory.configure_server("g1", ServerSettings(private_channel_ids=frozenset({"vip"})))
    await say(memory, channel="vip", text="vip talk")
    await say(memory, channel="open", text="open talk")
    text = block(await context_of(memory, channel="dm", server=None), OTHER)
    assert "open talk" in text and "vip talk" not in text


# -- render modes and empty entries -------------------------------------------------------


async def test_render_modes(memory: shortterm.Memory) -> None:
    await say(memory, channel="c1", text="raw line")
    await upgrade(memory, ScopeKey.server("g1", "c1", "p1"), "the distilled plan")
    text = block(await context_of(memory, channel="c2"), OTHER)
    assert text.index("the distilled plan") < text.index("raw line")
    await memory.configure_server("g1", ServerSettings(render_mode="supersede"))
    text = block(await context_of(memory, channel="c2"), OTHER)
    assert "the distilled plan" in text and "raw line" not in text
    await say(memory, channel="c3", text="no summary here")
    assert "no summary here" in block(await context_of(memory, channel="c2"), OTHER)


async def test_crude_message_count_limits_raw_lines(memory: shortterm.Memory) -> None:
    for n in range(4):
        await say(memory, channel="c1", text=f"line {n}")
    # capture replaces the list with what the bot saw; here each turn saw one exchange
    await memory.configure_server("g1", ServerSettings(crude_message_count=1))
    text = block(await context_of(memory, channel="c2"), OTHER)
    assert "hi there" in text and "line 3" not in text


async def test_entries_with_nothing_to_show_take_no_slot(
    db_url: str, clock: FakeClock, config: Config
) -> None:
    async with shortterm.open(store=db_url, clock=clock, config=config) as memory:
        await say(memory, channel="old", text="x")
        await upgrade(memory, ScopeKey.server("g1", "old", "p1"), "the old summary")
        clock.advance(60)
        for n in range(4):  # newer channels, with messages only (cache-only by design)
            await say(memory, channel=f"new{n}", text="y")
    clock.advance(60)
    async with shortterm.open(store=db_url, clock=clock, config=config) as memory:
        text = block(await context_of(memory, channel="here"), OTHER)
        assert "the old summary" in text
        assert text.count("⟦") == 3  # intro, one section, end: no empty blocks


async def test_user_scope_entries_that_only_held_others_take_no_slot(
    memory: shortterm.Memory,
) -> None:
    await memory.configure_user("u1", UserSettings(cross_server_opt_in=True))
    meta = shortterm.store.base.ScopeMeta(server_id="g2")
    bob = shortterm.Message("user", "bob only", author_id="u2", at=memory.clock())
    await memory.cache.capture(ScopeKey.user("u1", "far", "p1"), (bob,), meta, None, memory.clock())
    assert block(await context_of(memory, channel="c1"), OTHER) == ""


# -- same channel -------------------------------------------------------------------------


async def test_same_channel_summary_renders_with_or_without_tools(
    memory: shortterm.Memory,
) -> None:
    await say(memory, channel="c1", text="x")
    await upgrade(memory, ScopeKey.server("g1", "c1", "p1"), "we are planning a hike")
    for kw in ({}, {"has_tools": False}, {"provider": "novelai"}):
        ctx = await context_of(memory, channel="c1", **kw)
        assert "we are planning a hike" in block(ctx, SAME), kw
        assert ctx.items[-1].kind == SAME


async def test_same_channel_in_a_dm_uses_the_user_scope(memory: shortterm.Memory) -> None:
    await say(memory, channel="dm1", server=None, text="x")
    await upgrade(memory, ScopeKey.user("u1", "dm1", "p1"), "dm summary")
    assert "dm summary" in block(await context_of(memory, channel="dm1", server=None), SAME)


async def test_same_channel_raw_messages_are_not_repeated(memory: shortterm.Memory) -> None:
    await say(memory, channel="c1", text="only raw")
    ctx = await context_of(memory, channel="c1")
    assert ctx.items == () and ctx.nudge is None


async def test_categories_render_in_label_order(memory: shortterm.Memory) -> None:
    cats = (Category("Plans", "what is next"), Category("Mood", "how it feels"))
    await memory.configure_server("g1", ServerSettings(categories=cats))
    key = ScopeKey.server("g1", "c1", "p1")
    await memory.set_categories(key, {"mood": "cheerful", "plans": "hike", "gone": "stale"})
    text = block(await context_of(memory, channel="c1"), SAME)
    assert text.index("Plans: hike") < text.index("Mood: cheerful") and "stale" not in text
    other = block(await context_of(memory, channel="c2"), OTHER)
    assert "Plans: hike" in other and "notes written just now" in other


async def test_each_value_carries_its_own_time(memory: shortterm.Memory, clock: FakeClock) -> None:
    await say(memory, channel="c1", text="x")
    await upgrade(memory, ScopeKey.server("g1", "c1", "p1"), "old summary")
    clock.advance(3 * 3600)
    await say(memory, channel="c1", text="fresh line")
    clock.advance(300)
    other = block(await context_of(memory, channel="c2"), OTHER)
    assert "summary written 3 hours ago" in other
    assert "latest messages as of 5 minutes ago" in other
    same = block(await context_of(memory, channel="c1"), SAME)
    assert "summary written 3 hours ago" in same  # a capture does not make it look new


# -- nudge and depths ---------------------------------------------------------------------


async def test_the_nudge_repeats_until_an_upgrade(memory: shortterm.Memory) -> None:
    await memory.configure_server("g1", ServerSettings(refresh_cadence=2))
    await say(memory, channel="c1")
    assert (await context_of(memory, channel="c1")).nudge is None
    await say(memory, channel="c1")
    for _ in range(2):
        ctx = await context_of(memory, channel="c1")
        assert ctx.nudge is not None and ctx.nudge.kind == "nudge"
        assert "update_short_term_memory" in ctx.nudge.text
        await say(memory, channel="c1")
    await upgrade(memory, ScopeKey.server("g1", "c1", "p1"), "done")
    assert (await context_of(memory, channel="c1")).nudge is None


async def test_no_nudge_without_the_tool(memory: shortterm.Memory) -> None:
    await memory.configure_server("g1", ServerSettings(refresh_cadence=1))
    await say(memory, channel="c1")
    assert (await context_of(memory, channel="c1")).nudge is not None
    for kw in (
        {"has_tools": False},
        {"provider": "novelai"},
        {"user_message": "please remember this for future conversations"},
    ):
        assert (await context_of(memory, channel="c1", **kw)).nudge is None, kw
    await memory.configure_server("g1", ServerSettings(refresh_cadence=1, stm_enabled=False))
    assert (await context_of(memory, channel="c1")).nudge is None


async def test_the_nudge_counts_the_dm_scope(memory: shortterm.Memory) -> None:
    await say(memory, channel="dm1", server=None)
    assert (await context_of(memory, channel="dm1", server=None)).nudge is None
    for _ in range(4):  # the default cadence is 5
        await say(memory, channel="dm1", server=None)
    assert (await context_of(memory, channel="dm1", server=None)).nudge is not None


async def test_nudge_override_in_category_mode(memory: shortterm.Memory) -> None:
    cats = (Category("Mood", "how it feels"), Category("Plans", "what is next"))
    override = "Call {short_term_memory_tool}: {category_labels} | {category_labels} {odd}"
    await memory.configure_server(
        "g1", ServerSettings(refresh_cadence=1, categories=cats, nudge_text=override)
    )
    await say(memory, channel="c1")
    ctx = await context_of(memory, channel="c1")
    assert ctx.nudge is not None
    assert ctx.nudge.text == "Call update_short_term_memory: Mood, Plans | Mood, Plans odd"


async def test_depths_and_freshness(memory: shortterm.Memory, clock: FakeClock) -> None:
    await memory.configure_server("g1", ServerSettings(nudge_depth=4))
    await say(memory, channel="c1")
    await upgrade(memory, ScopeKey.server("g1", "c1", "p1"), "summary")
    ctx = await context_of(memory, channel="c1")
    assert (ctx.memory_depth, ctx.nudge_depth) == (2, 4)  # fresh: anchored → fresh_depth
    clock.advance(3601)
    ctx = await context_of(memory, channel="c1")
    assert ctx.memory_depth == -1  # an hour old is no longer fresh
    for configured, fresh in ((5, 2), (1, 1), (0, 0)):
        await memory.configure_server("g1", ServerSettings(content_depth=configured))
        assert (await context_of(memory, channel="c1")).memory_depth == configured
        await say(memory, channel="c2")  # fresh raw lines elsewhere make the block fresh
        assert (await context_of(memory, channel="c1")).memory_depth == fresh
        await memory.clear_channel("c2")


async def test_an_old_summary_is_not_fresh_just_because_messages_arrived(
    memory: shortterm.Memory, clock: FakeClock
) -> None:
    await say(memory, channel="c1")
    await upgrade(memory, ScopeKey.server("g1", "c1", "p1"), "summary")
    clock.advance(2 * 3600)
    await say(memory, channel="c1")  # the same channel's messages are not injected
    assert (await context_of(memory, channel="c1")).memory_depth == -1


# -- budget and injection -----------------------------------------------------------------


async def test_a_token_budget_keeps_the_newest(memory: shortterm.Memory, clock: FakeClock) -> None:
    for n in range(3):
        await say(memory, channel=f"c{n}", text=f"message {n} " + "x" * 200)
        clock.advance(60)
    await upgrade(memory, ScopeKey.server("g1", "here", "p1"), "live summary")
    turn = memory.turn(user_id="u1", channel_id="here", server_id="g1", persona_id="p1")
    full = await turn.context()
    assert all(f"message {n}" in full.items[0].text for n in range(3))
    calls: list[str] = []

    def count(text: str) -> int:
        calls.append(text)
        return len(text)

    budget = len(full.items[1].text) + 400
    small = await turn.context(max_tokens=budget, count_tokens=count)
    assert calls and sum(len(i.text) for i in small.items) <= budget
    assert "live summary" in block(small, SAME)
    assert "message 0" not in block(small, OTHER)
    nothing = await turn.context(max_tokens=0)
    assert nothing.items == ()


async def test_bad_budget_arguments_are_refused(memory: shortterm.Memory) -> None:
    turn = memory.turn(user_id="u1", channel_id="c1")
    with pytest.raises(shortterm.InvalidInput, match="max_tokens"):
        await turn.context(max_tokens=-1)
    with pytest.raises(shortterm.InvalidInput, match="count_tokens"):
        await turn.context(count_tokens="len")  # type: ignore[arg-type]


async def test_context_splices_into_a_dialogue(memory: shortterm.Memory) -> None:
    await memory.configure_server("g1", ServerSettings(refresh_cadence=1, nudge_depth=0))
    await say(memory, channel="c2", text="elsewhere")
    await say(memory, channel="c1", text="here")
    ctx = await context_of(memory, channel="c1")
    dialogue = [
        {"role": "system", "content": "You are Tomo."},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "now"},
    ]
    out = shortterm.inject(dialogue, ctx)
    assert [m["content"] for m in out][:2] == ["You are Tomo.", "u"]
    assert out[2]["content"] == block(ctx, OTHER)  # fresh: depth 2
    assert ctx.nudge is not None and out[-1]["content"] == ctx.nudge.text


async def test_lineage_survives_a_restart(db_url: str, clock: FakeClock, config: Config) -> None:
    async with shortterm.open(store=db_url, clock=clock, config=config) as memory:
        await say(memory, channel="c1", persona="p1", lineage="L1")
        await say(memory, channel="c2", persona="p2", lineage="L2")
        await upgrade(memory, ScopeKey.server("g1", "c1", "p1"), "tomo summary")
        await upgrade(memory, ScopeKey.server("g1", "c2", "p2"), "kai summary")
    async with shortterm.open(store=db_url, clock=clock, config=config) as memory:
        text = block(await context_of(memory, channel="c3", persona="p1", lineage="L1"), OTHER)
        assert "tomo summary" in text and "kai summary" not in text
        kai = block(await context_of(memory, channel="c3", persona="p2", lineage="L2"), OTHER)
        assert "kai summary" in kai and "tomo summary" not in kai
