"""Privacy audits of the bytes at rest: after ``clear_user`` no store holds a row keyed by that
user or a message they wrote; full-privacy users never reach any store; private-channel and
cross-server rules hold after restarts and across processes."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

import shortterm
from shortterm import Config, Message, Privacy, Reply, ScopeKey, UserSettings
from shortterm.store.sqlite import SQLiteStore
from shortterm.tool import texts
from tests.reliability.audit import (
    Found,
    holding,
    postgres_rows,
    redis_keyspace,
    sqlite_bytes,
    sqlite_rows,
)
from tests.support import (
    FakeClock,
    clear_redis_prefix,
    drop_postgres_schema,
    service_url,
    with_query,
)

G, P = "g-audit", "p1"
PURGED, PURGED_TEXT = "purge-me-5151", "secret-words-5151"
KEEPER, KEEPER_TEXT = "keeper-7777", "keeper-words-7777"
KEPT_SUMMARY = "kept-summary-1111"


@dataclass
class Deployment:
    """One backend pair, and how to read back everything it keeps."""

    store: str
    cache: str
    sqlite_dir: Path | None = None  # messages are cache-only: they never reach SQLite
    pg: tuple[str, str] | None = None  # admin url, schema
    redis: tuple[str, str] | None = None  # url, prefix

    async def everything(self) -> Found:
        found: Found = []
        if self.sqlite_dir is not None:
            store = SQLiteStore(self.sqlite_dir / "audit.db")
            store.checkpoint()  # fold the WAL in, so the audit also reads freed pages
            await store.close()
            found += sqlite_rows(self.sqlite_dir / "audit.db")
            found += sqlite_bytes(self.sqlite_dir)
        if self.pg is not None:
            found += await postgres_rows(*self.pg)
        if self.redis is not None:
            found += await redis_keyspace(*self.redis)
        return found


@pytest.fixture(params=["sqlite+inprocess", "postgres+redis"])
async def deployment(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Deployment]:
    if request.param == "sqlite+inprocess":
        folder = tmp_path / "db"
        yield Deployment(f"sqlite:///{folder / 'audit.db'}", "memory://", sqlite_dir=folder)
        return
    pg_url = service_url("SHORTTERM_TEST_POSTGRES_URL", "PostgreSQL")
    redis_url = service_url("SHORTTERM_TEST_REDIS_URL", "Redis")
    tag = uuid.uuid4().hex[:16]
    schema, prefix = f"t_{tag}", f"stm-test:{tag}:"
    yield Deployment(
        with_query(pg_url, schema=schema),
        with_query(redis_url, prefix=quote(prefix)),
        pg=(pg_url, schema),
        redis=(redis_url, prefix),
    )
    await drop_postgres_schema(pg_url, schema)
    await clear_redis_prefix(redis_url, prefix)


def config() -> Config:
    return Config(sweep_interval_s=0)


async def _turn(
    memory: shortterm.Memory,
    user: str,
    channel: str,
    history: list[Message],
    *,
    server: str | None = G,
    privacy: Privacy = Privacy.NONE,
) -> shortterm.Turn:
    turn = memory.turn(
        user_id=user, channel_id=channel, server_id=server, persona_id=P, privacy=privacy,
        user_name=f"name of {user}", channel_name=f"chan-{channel}",
    )  # fmt: skip
    await turn.capture(history=history, replies=[Reply(f"bot answers in {channel}")])
    return turn


def _said(user: str, text: str, privacy: Privacy = Privacy.NONE) -> Message:
    return Message("user", text, author_id=user, speaker=f"name of {user}", privacy=privacy)


async def test_a_purged_user_leaves_no_row_and_no_word_in_any_store(
    deployment: Deployment, clock: FakeClock
) -> None:
    async with shortterm.open(
        store=deployment.store, cache=deployment.cache, clock=clock, config=config()
    ) as memory:
        for channel in ("c1", "c2"):  # the user's own turns, a keeper speaking too
            turn = await _turn(
                memory,
                PURGED,
                channel,
                [_said(KEEPER, KEEPER_TEXT), _said(PURGED, f"{PURGED_TEXT} in {channel}")],
            )
            result = await turn.call_tool(texts.TOOL_NAME, {"summary": KEPT_SUMMARY})
            assert result.ok  # a model summary: kept in the server scope, by design
        # The purged user as a participant of someone else's turn, and in a DM.
        await _turn(memory, KEEPER, "c3", [_said(PURGED, PURGED_TEXT), _said(KEEPER, KEEPER_TEXT)])
        await _turn(memory, PURGED, "dm-1", [_said(PURGED, PURGED_TEXT)], server=None)
        before = await deployment.everything()
        assert holding(before, PURGED)  # the audit does see what is there
        if deployment.redis is not None:
            assert holding(before, PURGED_TEXT)

        await memory.clear_user(PURGED)
        for channel in ("c1", "c2", "dm-1"):
            assert await memory.get(ScopeKey.user(PURGED, channel, P)) is None
    after = await deployment.everything()
    assert holding(after, PURGED, PURGED_TEXT) == []
    assert holding(after, KEPT_SUMMARY)  # what may stay is still seen by the audit
    if deployment.redis is not None:
        assert holding(after, KEEPER_TEXT)  # the keeper's messages stay in the shared tier


async def test_full_privacy_users_never_reach_any_store(
    deployment: Deployment, clock: FakeClock
) -> None:
    hidden_by_turn, hidden_by_message, hidden_by_setting = (
        "full-a-3131",
        "full-b-3232",
        "full-c-3333",
    )
    words = {u: f"words of {u}" for u in (hidden_by_turn, hidden_by_message, hidden_by_setting)}
    async with shortterm.open(
        store=deployment.store, cache=deployment.cache, clock=clock, config=config()
    ) as memory:
        await memory.configure_user(hidden_by_setting, UserSettings(privacy=Privacy.FULL))
        # As triggerers: with privacy passed for the turn, and with the stored choice.
        for user, privacy in ((hidden_by_turn, Privacy.FULL), (hidden_by_setting, Privacy.NONE)):
            turn = await _turn(memory, user, "c1", [_said(user, words[user])], privacy=privacy)
            result = await turn.call_tool(texts.TOOL_NAME, {"summary": words[user]})
            assert not result.ok
            await turn.context()
        # As participants of someone else's turn, in a guild and in a DM.
        history = [
            _said(hidden_by_message, words[hidden_by_message], Privacy.FULL),
            _said(hidden_by_setting, words[hidden_by_setting]),
            _said(hidden_by_turn, words[hidden_by_turn], Privacy.FULL),
            _said(KEEPER, KEEPER_TEXT),
        ]
        await _turn(memory, KEEPER, "c2", history)
        await _turn(memory, KEEPER, "dm-2", history, server=None)
        entry = await memory.get(ScopeKey.server(G, "c2", P))
        assert entry is not None and [m.author_id for m in entry.messages] == [KEEPER, None]
        stats = memory.stats()
        assert stats["captures_skipped"] == 2
    found = await deployment.everything()
    assert holding(found, *words.values()) == []
    assert holding(found, hidden_by_turn, hidden_by_message) == []
    # The one trace kept on purpose: the stored choice itself, so that it stays in force.
    places = holding(found, hidden_by_setting)
    assert set(places) <= {"user_settings", "audit.db", "audit.db-wal"}, places
    assert "user_settings" in places
    assert holding(found, KEEPER)
    if deployment.redis is not None:
        assert holding(found, KEEPER_TEXT)
