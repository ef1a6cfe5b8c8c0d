"""The turn rules (shortterm.memory.rules) as properties: pure, no tier, no I/O.

They are the privacy contract in code: what a turn writes, what it may see, when it may use
the tool. Each property holds over every snapshot Hypothesis draws.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shortterm import Message, Privacy, Reply, ServerSettings, UserSettings
from shortterm.memory import rules
from shortterm.memory.turn_args import TurnArgs
from shortterm.model import Entry, ScopeKey
from shortterm.model.config import Config
from shortterm.tool import texts

IDS = st.sampled_from(["a", "b", "c"])
PRIVACY = st.sampled_from(list(Privacy))
CONFIG = Config()
NOW = 1_000_000.0


@st.composite
def snapshots(draw: st.DrawFn) -> rules.Snapshot:
    args = TurnArgs(
        user_id=draw(st.sampled_from(["u1", "u2"])),
        channel_id=draw(IDS),
        server_id=draw(st.none() | st.sampled_from(["g1", "g2"])),
        persona_id=draw(st.none() | IDS),
        parent_channel_id=draw(st.none() | IDS),
        user_message=draw(st.sampled_from(["", "hello", "please remember this forever"])),
        provider=draw(st.none() | st.sampled_from(["openai", "plain"])),
        has_tools=draw(st.booleans()),
        privacy=draw(PRIVACY),
    )
    settings = ServerSettings(
        stm_enabled=draw(st.booleans()),
        private_channel_ids=frozenset(draw(st.sets(IDS))),
        privacy_bypass=draw(st.booleans()),
    )
    if args.server_id is None:
        settings = ServerSettings()  # a DM has the defaults
    stored = draw(st.none() | PRIVACY.map(lambda p: UserSettings(privacy=p)))
    privacy = rules.effective_privacy(args.privacy, stored)
    config = Config(tool_less_providers=("plain",))
    return rules.Snapshot(args, settings, privacy, config)


messages = st.builds(
    Message,
    role=st.sampled_from(["user", "assistant"]),
    content=st.sampled_from(["hi", "  ", "", "a plan", "x" * 50]),
    author_id=st.none() | st.sampled_from(["u1", "u2", "u3"]),
    privacy=PRIVACY,
)
replies = st.lists(
    st.builds(
        Reply,
        text=st.sampled_from(["ok", " ", "sure"]),
        persona_id=st.none() | IDS,
    ),
    max_size=3,
)


def _plan(
    snap: rules.Snapshot,
    history: list[Message],
    said: list[Reply],
    *,
    stopped: bool = False,
    full: frozenset[str] = frozenset(),
    upgraded: bool = False,
) -> list[rules.CapturePlan]:
    return rules.plan_capture(
        snap, history, said, stopped=stopped, full_users=full, upgraded=upgraded, now=NOW
    )


def _written(plan: list[rules.CapturePlan]) -> list[ScopeKey]:
    return [key for write in plan for key, _ in write.scopes]


@given(snapshots(), st.lists(messages, max_size=8), replies)
def test_full_privacy_writes_nothing(
    snap: rules.Snapshot, history: list[Message], said: list[Reply]
) -> None:
    full = snap._replace(privacy=Privacy.FULL)
    assert _plan(full, history, said) == []
    assert rules.scopes_written(full, snap.args.persona_id)[0] == []
    assert rules.refusal(full, long_term_intent=lambda: False, upgraded=False, in_flight=False)


@given(snapshots(), st.lists(messages, max_size=8), replies)
def test_a_dm_never_writes_a_server_scope(
    snap: rules.Snapshot, history: list[Message], said: list[Reply]
) -> None:
    if snap.args.server_id is None:
        assert all(key.kind == "user" for key in _written(_plan(snap, history, said)))


@given(snapshots(), st.lists(messages, max_size=8), replies)
def test_a_restricted_user_has_no_personal_scope(
    snap: rules.Snapshot, history: list[Message], said: list[Reply]
) -> None:
    if snap.privacy is not Privacy.NONE:
        assert all(key.kind == "server" for key in _written(_plan(snap, history, said)))
        assert not rules.reads_personal(snap, opted_in=True)


@given(snapshots(), st.lists(messages, max_size=8), replies)
def test_a_capture_writes_the_turns_channel_and_keeps_no_full_privacy_author(
    snap: rules.Snapshot, history: list[Message], said: list[Reply]
) -> None:
    plan = _plan(snap, history, said, full=frozenset({"u3"}))
    for write in plan:
        for key, kept in write.scopes:
            assert key.channel_id == snap.args.channel_id
            assert key.kind == "server" or key.owner_id == snap.args.user_id
            assert len(kept) <= snap.config.max_messages
            for m in kept:
                assert m.author_id != "u3" and m.privacy is not Privacy.FULL
                assert m.content.strip() and m.at is not None
                if key.kind == "user" and m.role == "user":
                    # Other people's messages never follow a user to another server.
                    assert m.author_id in (None, snap.args.user_id)


@given(snapshots(), st.lists(messages, max_size=8), replies, st.booleans())
def test_nothing_is_written_for_a_stopped_turn_or_without_a_reply(
    snap: rules.Snapshot, history: list[Message], said: list[Reply], stopped: bool
) -> None:
    if stopped or not any(r.text.strip() for r in said):
        assert _plan(snap, history, said, stopped=stopped) == []


@given(snapshots(), st.lists(messages, max_size=8), replies, st.booleans())
def test_the_counter_steps_only_on_tool_capable_turns_not_upgraded(
    snap: rules.Snapshot, history: list[Message], said: list[Reply], upgraded: bool
) -> None:
    for write in _plan(snap, history, said, upgraded=upgraded):
        if upgraded or not rules.tool_possible(snap):
            assert write.increment is None
        else:
            assert write.increment in [key for key, _ in write.scopes]


@given(snapshots())
def test_an_upgrade_writes_what_a_capture_writes(snap: rules.Snapshot) -> None:
    scopes, live = rules.scopes_written(snap, snap.args.persona_id)
    plan = _plan(snap, [], [Reply("ok")])
    assert _written(plan) == scopes
    assert (live.kind == "server") == (snap.args.server_id is not None)
    assert live == rules.live_scope(snap, snap.args.persona_id)


@given(snapshots(), st.booleans(), st.booleans(), st.booleans())
def test_the_refusal_order_and_what_the_tool_needs(
    snap: rules.Snapshot, intent: bool, upgraded: bool, in_flight: bool
) -> None:
    reason = rules.refusal(
        snap, long_term_intent=lambda: intent, upgraded=upgraded, in_flight=in_flight
    )
    if not rules.tool_possible(snap):
        assert reason in (texts.PROVIDER, texts.NO_TOOLS, texts.DISABLED)
    elif snap.privacy is Privacy.FULL or (
        snap.privacy is Privacy.PARTIAL and snap.args.server_id is None
    ):
        assert reason == texts.PRIVACY
    elif intent:
        assert reason == texts.LONG_TERM
    elif upgraded:
        assert reason == texts.ALREADY
    elif in_flight:
        assert reason == texts.IN_FLIGHT
    else:
        assert reason is None
    if reason is None:
        # The tool is only ever offered where the upgrade has a scope to write.
        assert rules.scopes_written(snap, snap.args.persona_id)[0]


def _entry(kind: str, owner: str, channel: str, server: str | None, private: bool) -> Entry:
    return Entry(
        key=ScopeKey(kind, owner, channel),  # type: ignore[arg-type]
        server_id=server,
        private=private,
        messages=(
            Message("user", "mine", author_id="u1", at=NOW),
            Message("user", "theirs", author_id="u2", at=NOW),
            Message("assistant", "bot", at=NOW),
        ),
    )


@given(
    snapshots(),
    IDS,
    st.sampled_from(["g1", "g2"]),
    st.booleans(),
    st.builds(
        ServerSettings,
        private_channel_ids=st.sets(IDS).map(frozenset),
        privacy_bypass=st.booleans(),
    ),
)
def test_private_channels_show_only_inside_their_own_server(
    snap: rules.Snapshot, channel: str, server: str, private: bool, owner: ServerSettings
) -> None:
    entry = _entry("server", server, channel, server, private)
    args = snap.args
    here_private = args.server_id is not None and snap.settings.is_private(
        args.channel_id, args.parent_channel_id
    )
    hidden = rules.hidden_as_private(
        entry, owner, here_server=args.server_id, here_private=here_private
    )
    is_private = private or owner.is_private(channel)
    if owner.privacy_bypass or not is_private:
        assert not hidden
    elif server != args.server_id or not here_private:
        assert hidden  # another server's private channel never leaks, nor into a public one
    else:
        assert not hidden


@given(snapshots(), st.booleans(), st.lists(st.none() | st.sampled_from(["g1", "g2"])))
def test_personal_memory_crosses_servers_only_with_the_opt_in(
    snap: rules.Snapshot, opted_in: bool, servers: list[str | None]
) -> None:
    here = snap.args.server_id
    if not rules.reads_personal(snap, opted_in):
        return
    assert snap.privacy is Privacy.NONE
    entries = [_entry("user", snap.args.user_id, "c", server, False) for server in servers]
    recalled = rules.recalled_personal(snap, opted_in, entries)
    assert all(e in entries for e in recalled)
    for e in entries:
        if here is not None:
            assert opted_in  # a guild shows personal memory only with the opt-in
            assert (e in recalled) == (e.server_id != here)
        elif not opted_in:
            assert (e in recalled) == (e.server_id is None)  # a DM without it: other DMs only


@given(snapshots(), st.sampled_from(["user", "server"]), st.sets(st.sampled_from(["u2", "u3"])))
def test_recall_shows_no_full_privacy_author_and_no_third_party_in_personal_memory(
    snap: rules.Snapshot, kind: str, hidden: set[str]
) -> None:
    entry = _entry(kind, "u1" if kind == "user" else "g1", "c", "g1", False)
    shown = rules.shown_messages(entry, "u1", hidden)
    authors = {m.author_id for m in shown}
    assert not authors & hidden
    if kind == "user":
        assert authors <= {"u1", None}
    elif not hidden:
        assert len(shown) == 3
