"""A forget of someone the distiller quoted, landing while the model thinks, wins: the write
carries the user target of every author it showed the model (and a DM's owner's), and a
PARTIAL choice is a durable fence row (docs/tool.md, "The distiller"; docs/design.md,
"Forgetting").

Each case runs the distiller against a model that answers only when the test lets it, does the
forget while the call is held, then releases it: the summary quoting the forgotten user must
reach neither tier, nor another channel's context. Real SQLite, PostgreSQL and Redis."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path
from urllib.parse import quote

import pytest

import shortterm
from shortterm import (
    Message,
    Privacy,
    Reply,
    ScopeKey,
    ServerSettings,
    UserSettings,
    fake_model,
)
from shortterm.memory import distill as distiller
from shortterm.model import ScopeMeta
from shortterm.model.fence import WriteFence, user_target
from shortterm.model.rows import DistilledWrite
from tests.support import (
    T0,
    StoreFactory,
    clear_redis_prefix,
    drop_postgres_schema,
    service_url,
    with_query,
)

ROUNDS = 6  # per case and backend pair
OVERTAKEN = "a forget overtook it"
DM_CADENCE = ServerSettings().refresh_cadence  # a DM has no server: the default cadence


@pytest.fixture(params=["sqlite+inprocess", "postgres+inprocess", "postgres+redis"])
async def pair(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    """(store, cache) URLs of one backend pair, on a fresh schema and prefix of their own."""
    if request.param == "sqlite+inprocess":
        yield f"sqlite:///{tmp_path / 'race.db'}", "memory://"
        return
    pg_url = service_url("SHORTTERM_TEST_POSTGRES_URL", "PostgreSQL")
    redis_url = prefix = ""
    cache = "memory://"
    if request.param == "postgres+redis":
        redis_url = service_url("SHORTTERM_TEST_REDIS_URL", "Redis")
        prefix = f"stm-test:{uuid.uuid4().hex[:16]}:"
        cache = with_query(redis_url, prefix=quote(prefix))
    schema = f"t_{uuid.uuid4().hex[:16]}"
    try:
        yield with_query(pg_url, schema=schema), cache
    finally:
        await drop_postgres_schema(pg_url, schema)
        if prefix:
            await clear_redis_prefix(redis_url, prefix)


@pytest.fixture
async def mem(pair: tuple[str, str]) -> AsyncIterator[shortterm.Memory]:
    store, cache = pair
    config = shortterm.Config(sweep_interval_s=0)
    async with shortterm.open(store, cache, config=config) as memory:
        await memory.configure_server("s1", ServerSettings(refresh_cadence=1))
        yield memory


class HeldModel:
    """A model whose answer waits until the test releases it; the answer quotes the messages
    (the fake model's distill answer) behind a mark only this call's summary holds."""

    def __init__(self, mark: str) -> None:
        self.mark = mark
        self.asked = asyncio.Event()
        self.released = asyncio.Event()
        self.calls = 0

    async def post(self, messages: list[dict[str, str]]) -> str:
        self.calls += 1
        self.asked.set()
        await self.released.wait()
        answer = fake_model.complete({"model": "m", "messages": messages})
        return f"{self.mark} {answer['choices'][0]['message']['content']}"


async def _distill_while(
    memory: shortterm.Memory, mark: str, forget: Callable[[], Awaitable[object]]
) -> distiller.DistillReport:
    """One distill run whose model call is held while ``forget`` runs."""
    model = HeldModel(mark)
    run = asyncio.create_task(distiller.run(memory, model.post))
    try:
        await asyncio.wait_for(model.asked.wait(), 10)
        await forget()
    finally:
        model.released.set()
    report = await asyncio.wait_for(run, 30)
    assert model.calls == 1, report
    return report


async def _guild_scope(memory: shortterm.Memory, tag: str) -> tuple[ScopeKey, str, str]:
    """A due server scope holding the words of author ``a<tag>`` (and of ``b<tag>``, whose
    turn it is); returns its key, that author and the author's words."""
    channel, author, speaker = f"c{tag}", f"a{tag}", f"b{tag}"
    secret = f"secret-{tag} lives at 9 Elm"
    t = memory.turn(user_id=speaker, channel_id=channel, server_id="s1")
    history = [
        Message("user", secret, author_id=author),
        Message("user", f"lunch at noon {tag}", author_id=speaker),
    ]
    await t.capture(history=history, replies=[Reply("noted")])
    return ScopeKey.server("s1", channel, None), author, secret


async def _dm_scope(memory: shortterm.Memory, tag: str) -> tuple[ScopeKey, str, str]:
    """A due DM scope of owner ``d<tag>``; returns its key, the owner and their words."""
    channel, owner = f"dm{tag}", f"d{tag}"
    secret = f"secret-{tag} my door code is 4471"
    history: list[Message] = []
    for i in range(DM_CADENCE):
        t = memory.turn(user_id=owner, channel_id=channel)
        history.append(Message("user", secret if i == 0 else f"and then {i}", author_id=owner))
        await t.capture(history=history, replies=[Reply("ok")])
    return ScopeKey.user(owner, channel, None), owner, secret


async def _elsewhere(memory: shortterm.Memory, user: str) -> str:
    """What another channel of the server recalls, for ``user``'s turn there."""
    ctx = await memory.turn(user_id=user, channel_id="elsewhere", server_id="s1").context()
    return "\n".join(item.text for item in ctx.items)


async def _assert_not_written(
    memory: shortterm.Memory,
    report: distiller.DistillReport,
    key: ScopeKey,
    reader: str,
    words: tuple[str, ...],
    what: str,
) -> None:
    """Every place the summary could show, each checked (a failure names all of them)."""
    wrong: list[str] = []
    if report.distilled or report.skipped.get(OVERTAKEN) != 1:
        wrong.append(f"the run reports {report}")
    entry = await memory.get(key)
    if entry is not None and entry.summary is not None:
        wrong.append(f"memory.get shows {entry.summary!r}")
    cached = await memory.cache.get(key, memory.clock())
    if cached is not None and cached.summary is not None:
        wrong.append(f"the hot tier holds {cached.summary!r}")
    row = await memory.store.load(key)
    if row is not None and row.summary is not None:
        wrong.append(f"the store holds {row.summary!r}")
    recalled = await _elsewhere(memory, reader)
    wrong += [f"another channel recalls {w!r}" for w in words if w in recalled]
    assert not wrong, f"{what}: " + "; ".join(wrong)


async def _done_with(memory: shortterm.Memory, key: ScopeKey) -> None:
    """Clear the round's channel, so the next run has only its own scope due."""
    await memory.clear_channel(key.channel_id)


async def test_a_purge_of_a_shown_author_wins(mem: shortterm.Memory) -> None:
    for n in range(ROUNDS):
        tag = f"p{n}{uuid.uuid4().hex[:6]}"
        key, author, secret = await _guild_scope(mem, tag)
        mark = f"DISTILLED-{tag}"
        report = await _distill_while(mem, mark, partial(mem.clear_user, author))
        await _assert_not_written(mem, report, key, f"r{tag}", (mark, secret), f"round {n}")
        await _done_with(mem, key)


async def test_a_full_choice_of_a_shown_author_wins(mem: shortterm.Memory) -> None:
    full = UserSettings(privacy=Privacy.FULL)
    for n in range(ROUNDS):
        tag = f"f{n}{uuid.uuid4().hex[:6]}"
        key, author, secret = await _guild_scope(mem, tag)
        mark = f"DISTILLED-{tag}"
        report = await _distill_while(mem, mark, partial(mem.configure_user, author, full))
        await _assert_not_written(mem, report, key, f"r{tag}", (mark, secret), f"round {n}")
        await _done_with(mem, key)


async def test_a_partial_choice_of_a_dm_owner_wins(mem: shortterm.Memory) -> None:
    partial_choice = UserSettings(privacy=Privacy.PARTIAL, cross_server_opt_in=True)
    for n in range(ROUNDS):
        tag = f"d{n}{uuid.uuid4().hex[:6]}"
        key, owner, secret = await _dm_scope(mem, tag)
        mark = f"DISTILLED-{tag}"
        report = await _distill_while(mem, mark, partial(mem.configure_user, owner, partial_choice))
        # The owner's own turn elsewhere is where their DM could be recalled.
        await _assert_not_written(mem, report, key, owner, (mark, secret), f"round {n}")
        await _done_with(mem, key)


async def test_a_forget_of_someone_not_shown_lets_it_land(mem: shortterm.Memory) -> None:
    """The control: the same races with a user the model was not shown, and the summary
    lands in both tiers and is recalled elsewhere (so the checks above can see it)."""
    opted_in = UserSettings(cross_server_opt_in=True)
    partial_choice = UserSettings(privacy=Privacy.PARTIAL)
    for n in range(ROUNDS):
        tag = f"c{n}{uuid.uuid4().hex[:6]}"
        # A guild scope, while a user it does not quote is purged.
        key, _author, secret = await _guild_scope(mem, tag)
        mark = f"DISTILLED-{tag}"
        report = await _distill_while(mem, mark, partial(mem.clear_user, f"z{tag}"))
        assert report.distilled == [key], report
        entry = await mem.get(key)
        assert entry is not None and entry.summary is not None and mark in entry.summary
        assert secret in entry.summary
        row = await mem.store.load(key)
        assert row is not None and row.summary == entry.summary
        assert mark in await _elsewhere(mem, f"r{tag}")
        await _done_with(mem, key)

        # A DM, while an unrelated user chooses PARTIAL.
        dm_key, owner, dm_secret = await _dm_scope(mem, tag)
        await mem.configure_user(owner, opted_in)
        dm_mark = f"DISTILLED-DM-{tag}"
        report = await _distill_while(
            mem,
            dm_mark,
            partial(mem.configure_user, f"n{tag}", partial_choice),
        )
        assert report.distilled == [dm_key], report
        dm_entry = await mem.get(dm_key)
        assert dm_entry is not None and dm_entry.summary is not None
        assert dm_mark in dm_entry.summary and dm_secret in dm_entry.summary
        dm_row = await mem.store.load(dm_key)
        assert dm_row is not None and dm_row.summary == dm_entry.summary
        assert dm_mark in await _elsewhere(mem, owner)  # opted in: their DM is recalled
        await _done_with(mem, dm_key)


# -- the durable tier alone: the reference store, SQLite and PostgreSQL -----------------------


async def test_every_store_refuses_a_write_whose_extra_target_was_forgotten(
    store_factory: StoreFactory,
) -> None:
    store = await store_factory()
    key = ScopeKey.server("s1", "c1", None)
    meta = ScopeMeta(server_id="s1")
    change = DistilledWrite(summary="notes", set_summary=True)
    fence = WriteFence(await store.journal_head()).covering([user_target("ua"), user_target("ub")])
    await store.forget_user("ua", keep=None, now=T0)
    written = await store.write_distilled(
        [(key, meta)], change, reset_counter=key, now=T0, fence=fence
    )
    assert written == [] and await store.load(key) is None
    # Every fenced write honours them, not only the distilled one.
    assert await store.touch([(key, meta)], increment=key, now=T0, fence=fence) == []
    assert await store.load(key) is None
    # Nothing forgotten among its targets since it began: it lands.
    fence = WriteFence(await store.journal_head()).covering([user_target("ub")])
    await store.forget_user("uz", keep=None, now=T0 + 1)
    rows = await store.write_distilled(
        [(key, meta)], change, reset_counter=key, now=T0 + 1, fence=fence
    )
    assert [r.key for r in rows] == [key]
    touched = await store.touch([(key, meta)], increment=key, now=T0 + 2, fence=fence)
    assert [r.turns_since_refresh for r in touched] == [1]


async def test_every_store_fences_a_partial_choice(store_factory: StoreFactory) -> None:
    store = await store_factory()
    dm = ScopeKey.user("ud", "dm1", None)
    change = DistilledWrite(summary="notes", set_summary=True)
    fence = WriteFence(await store.journal_head())
    await store.save_user_settings("ud", UserSettings(privacy=Privacy.PARTIAL), now=T0)
    written = await store.write_distilled(
        [(dm, ScopeMeta())], change, reset_counter=dm, now=T0, fence=fence
    )
    assert written == [] and await store.load(dm) is None
    # A NONE choice (an opt-in) narrows nothing: a write in flight lands.
    fence = WriteFence(await store.journal_head())
    await store.save_user_settings("ud", UserSettings(cross_server_opt_in=True), now=T0 + 1)
    rows = await store.write_distilled(
        [(dm, ScopeMeta())], change, reset_counter=dm, now=T0 + 1, fence=fence
    )
    assert [r.key for r in rows] == [dm]
