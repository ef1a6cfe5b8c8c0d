"""The turn rules (shortterm.memory.rules) as properties: pure, no tier, no I/O.

They are the privacy contract in code: what a turn writes, what it may see, when it may use
the tool. Each property holds over every snapshot Hypothesis draws.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shortterm import Message, Privacy, Reply, ServerSettings, UserSettings
from shortterm.memory import rules
from shortterm.memory.engine.known_settings import KnownSettings
from shortterm.memory.engine.renders import RenderCache
from shortterm.memory.turn.recall import _Recall
from shortterm.memory.turn_args import TurnArgs
from shortterm.model import Entry, ScopeKey, ScopeMeta, ScopeRow
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


# -- a user's stored choice, and the surfaces' own writes ----------------------------------


@given(PRIVACY, st.booleans())
def test_a_choice_keeps_personal_memory_only_without_privacy_and_full_forgets(
    level: Privacy, opted_in: bool
) -> None:
    choice = UserSettings(level, opted_in)
    assert rules.keeps_personal(choice) == (level is Privacy.NONE)
    assert rules.is_forgotten(choice) == (level is Privacy.FULL)
    assert rules.kept_on_clear(choice) == (choice if level is Privacy.FULL else None)
    assert rules.kept_on_clear(None) is None
    server_row = ScopeRow(ScopeKey.server("g1", "c"), ScopeMeta(server_id="g1"))
    user_row = ScopeRow(ScopeKey.user("u1", "c"), ScopeMeta())
    assert rules.importable(server_row, choice)  # a server's memory is no one user's
    assert rules.importable(user_row, choice) == rules.keeps_personal(choice)


@given(snapshots())
def test_recall_reads_the_live_scope_where_the_turn_writes_it(snap: rules.Snapshot) -> None:
    scopes, live = rules.scopes_written(snap, snap.args.persona_id)
    if snap.privacy is not Privacy.FULL:  # full privacy writes nothing, but reads a guild's
        assert rules.reads_live(snap) == (live in scopes)
    args = snap.args
    private = args.server_id is not None and snap.settings.is_private(
        args.channel_id, args.parent_channel_id
    )
    assert rules.here_private(snap) == private
    assert rules.scope_meta(rules.meta_parts(snap, None)).private == private


@given(
    snapshots(),
    IDS,
    st.sampled_from(["user", "server"]),
    st.none() | st.sampled_from(["g1", "g2"]),
    st.booleans(),
    st.none() | st.sampled_from(["l1", "l2"]),
    st.builds(
        ServerSettings,
        private_channel_ids=st.sets(IDS).map(frozenset),
        privacy_bypass=st.booleans(),
    ),
)
def test_recall_shows_another_channels_entry_unless_hidden_as_private(
    snap: rules.Snapshot,
    channel: str,
    kind: str,
    server: str | None,
    private: bool,
    lineage: str | None,
    other: ServerSettings,
) -> None:
    args = snap.args
    if kind == "server":
        if args.server_id is None:
            return  # recall reads no server's shared entries in a DM
        server = args.server_id  # and in a guild, only its own server's
    owner = server if kind == "server" else args.user_id
    entry = Entry(
        key=ScopeKey(kind, owner, channel),  # type: ignore[arg-type]
        server_id=server,
        private=private,
        persona_lineage_id=lineage,
    )

    def settings_of(server_id: str | None) -> ServerSettings:
        return snap.settings if server_id == args.server_id else other

    known = KnownSettings()
    for server_id in ("g1", "g2"):
        known.put_server(server_id, settings_of(server_id))
    here_private = rules.here_private(snap)
    shown = _Recall(snap, known, RenderCache()).visible(entry)
    hidden = rules.hidden_as_private(
        entry,
        settings_of(rules.server_of(entry)),
        here_server=args.server_id,
        here_private=here_private,
    )
    if channel == args.channel_id:
        assert not shown  # the channel's own memory is the live scope, not a recollection
    elif args.persona_lineage_id is not None and lineage != args.persona_lineage_id:
        assert not shown
    else:
        assert shown == (not hidden)


@given(
    st.none() | st.sampled_from(["g1"]),
    st.booleans(),
    st.integers(0, 3),
    PRIVACY,
    IDS,
    st.builds(
        ServerSettings,
        stm_enabled=st.booleans(),
        refresh_cadence=st.integers(1, 3),
        private_channel_ids=st.sets(IDS).map(frozenset),
        privacy_bypass=st.booleans(),
    ),
)
def test_the_distiller_sends_only_what_recall_would_show_where_it_may(
    server: str | None,
    private: bool,
    turns: int,
    level: Privacy,
    channel: str,
    settings: ServerSettings,
) -> None:
    key = ScopeKey.server(server, channel) if server else ScopeKey.user("u1", channel)
    if server is None:
        private, settings = False, ServerSettings()  # a DM: no private channels, the defaults
    entry = Entry(key=key, server_id=server, private=private, turns_since_refresh=turns)
    reason = rules.distill_refusal(entry, settings, UserSettings(level))
    hidden = rules.hidden_as_private(entry, settings, here_server=None, here_private=False)
    if not settings.stm_enabled:
        assert reason == "short-term memory is off on the server"
    elif turns < settings.refresh_cadence:
        assert reason == "not due"
    elif server is None and level is not Privacy.NONE:
        assert reason == "the user keeps nothing personal"
    elif hidden:
        assert reason == "private channel"
    else:
        assert reason is None
    meta = rules.meta_of(entry)
    assert (meta.server_id, meta.private) == (server, entry.private)
    assert meta is rules.meta_of(entry)  # interned: every distill of the scope shares it


@given(
    st.sampled_from(["server", "user"]),
    IDS,
    st.none() | IDS,
    st.none() | IDS,
    st.sampled_from([(), ("g1",), ("a", "b", "c")]),
)
def test_an_import_writes_one_scope_recorded_private_as_its_channel_is_now(
    kind: str,
    channel: str,
    parent: str | None,
    lineage: str | None,
    private_ids: tuple[str, ...],
) -> None:
    key = ScopeKey.server("g1", channel) if kind == "server" else ScopeKey.user("u1", channel)
    settings = ServerSettings(private_channel_ids=frozenset(private_ids))
    said = [Message("user", "hi", author_id="u1", at=NOW)]
    plan = rules.import_plan(
        key,
        said,
        settings if kind == "server" else None,
        server_name="guild",
        channel_name="chan",
        parent_channel_id=parent,
        lineage=lineage,
    )
    assert plan.scopes == [(key, tuple(said))] and plan.increment is None
    meta = plan.meta
    assert meta.server_id == (key.owner_id if kind == "server" else None)
    assert meta.private == (kind == "server" and settings.is_private(channel, parent))
    assert (meta.parent_channel_id, meta.persona_lineage_id) == (parent, lineage)


pop_messages = st.lists(
    st.builds(
        Message,
        role=st.sampled_from(["user", "assistant"]),
        content=st.sampled_from(["hi", "ok", "a plan"]),
        author_id=st.none() | st.sampled_from(["u1", "u2"]),
        at=st.just(NOW),
    ),
    max_size=6,
)


@given(snapshots(), pop_messages, pop_messages)
def test_a_pop_removes_only_the_users_newest_message_and_its_copy(
    snap: rules.Snapshot, stored: list[Message], personal: list[Message]
) -> None:
    args = snap.args
    live_key = rules.live_scope(snap, args.persona_id)
    live = Entry(key=live_key, messages=tuple(stored))
    at = rules.popped_index(live, args.user_id)
    if at is None:
        assert live_key.kind == "server" or not stored
        return
    popped = stored[at]
    if live_key.kind == "server":
        # Theirs: a message they wrote, or the bot's answer to their last message before it.
        asker = next(m for m in reversed(stored[: at + 1]) if m.role == "user")
        assert asker.author_id == args.user_id
    else:
        assert at == len(stored) - 1  # in their own scope, every message is theirs
    own_key = ScopeKey._unchecked("user", args.user_id, args.channel_id, args.persona_id)
    own = None if own_key == live_key else Entry(key=own_key, messages=tuple(personal))
    plan = rules.pop_plan(snap, live, at, own)
    assert plan.increment is None
    assert plan.meta == rules.scope_meta(rules.meta_parts(snap, args.persona_lineage_id))
    written = dict(plan.scopes)
    assert written[live_key] == (*stored[:at], *stored[at + 1 :])
    if own is not None and popped in personal:
        there = max(i for i, m in enumerate(personal) if m == popped)
        assert written[own_key] == (*personal[:there], *personal[there + 1 :])
    else:
        assert set(written) == {live_key}
