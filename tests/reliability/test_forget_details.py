"""The rest of "forget means forget": purged bytes on disk, the settings row, a private
channel's past, and a commit whose outcome is unknown."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import psycopg

import shortterm
from shortterm import (
    Message,
    Privacy,
    Reply,
    ScopeKey,
    ServerSettings,
    StoreUnavailable,
    UserSettings,
)
from shortterm.tool import texts
from tests.reliability.conftest import through
from tests.reliability.proxy import Proxy
from tests.support import FakeClock, with_query

G, P = "g1", "p1"
CONFIG = shortterm.Config(sweep_interval_s=0)


def _turn(memory: shortterm.Memory, user: str, channel: str, **kw: object) -> shortterm.Turn:
    return memory.turn(user_id=user, channel_id=channel, persona_id=P, **kw)  # type: ignore[arg-type]


async def _say(memory: shortterm.Memory, user: str, channel: str, text: str, **kw: object) -> None:
    await _turn(memory, user, channel, **kw).capture(
        history=[Message("user", text, author_id=user)], replies=[Reply("noted")]
    )


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


# -- purged bytes ------------------------------------------------------------------------


async def test_purged_bytes_are_gone_from_the_db_wal_and_shm_when_the_call_returns(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "live"
    folder.mkdir()
    store = f"sqlite:///{folder / 'bot.db'}"
    async with shortterm.open(store=store, config=CONFIG) as memory:
        # A DM summary of the user to purge, and a channel whose summary is cleared.
        await _say(memory, "purge-me-4242", "dm-1", "my words 4242")
        dm = _turn(memory, "purge-me-4242", "dm-1")
        assert (await dm.call_tool(texts.TOOL_NAME, {"summary": "dm-summary-4242"})).ok
        await _say(memory, "ana", "plans", "plans words", server_id=G)
        plans = _turn(memory, "ana", "plans", server_id=G)
        assert (await plans.call_tool(texts.TOOL_NAME, {"summary": "plans-summary-5151"})).ok
        await _say(memory, "ana", "general", "kept words", server_id=G)
        general = _turn(memory, "ana", "general", server_id=G)
        assert (await general.call_tool(texts.TOOL_NAME, {"summary": "kept-summary-1111"})).ok
        before = _files(folder)
        assert any(b"dm-summary-4242" in data for data in before.values())  # the probe sees

        await memory.clear_user("purge-me-4242")
        await memory.clear_channel("plans")
        # Read while the process still has the database open: no checkpoint of our own.
        after = _files(folder)
    for secret in (b"purge-me-4242", b"dm-summary-4242", b"plans-summary-5151"):
        holding = [name for name, data in after.items() if secret in data]
        assert holding == [], f"{secret!r} still in {holding}"
    assert b"kept-summary-1111" in b"".join(after.values())


# -- the settings row ------------------------------------------------------------------


async def _settings_rows(memory: shortterm.Memory, user: str) -> list[object]:
    found = await memory.store.user_settings_since(0.0)
    return [found[user]] if user in found else []


async def test_a_purge_deletes_the_settings_row_but_a_full_choice_survives(store_url: str) -> None:
    async with shortterm.open(store=store_url, config=CONFIG) as memory:
        await memory.configure_user("opted", UserSettings(Privacy.NONE, cross_server_opt_in=True))
        await _say(memory, "opted", "c1", "hello", server_id=G)
        await memory.clear_user("opted")
        assert await _settings_rows(memory, "opted") == []
        assert await memory.user_settings("opted") == UserSettings()

        await memory.configure_user("private-person", UserSettings(Privacy.FULL))
        await memory.clear_user("private-person")
        assert await _settings_rows(memory, "private-person") == [UserSettings(Privacy.FULL)]
    async with shortterm.open(store=store_url, config=CONFIG) as again:
        assert (await again.user_settings("private-person")).privacy is Privacy.FULL
        await _say(again, "private-person", "c1", "never kept", server_id=G)
        assert await again.get(ScopeKey.user("private-person", "c1", P)) is None


# -- a private channel's past ------------------------------------------------------------


async def test_what_was_written_while_private_stays_hidden_once_public(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'p.db'}"
    async with shortterm.open(store=store, config=CONFIG) as memory:
        await memory.configure_server(G, ServerSettings(private_channel_ids=frozenset({"sec"})))
        await _say(memory, "ana", "sec", "private words 77", server_id=G)
        secret = _turn(memory, "ana", "sec", server_id=G)
        assert (await secret.call_tool(texts.TOOL_NAME, {"summary": "private-summary-77"})).ok
        await memory.configure_server(G, ServerSettings())  # public from now on
        await _say(memory, "ana", "sec", "a benign public line", server_id=G)
        elsewhere = await _turn(memory, "ana", "general", server_id=G).context()
        shown = "\n".join(i.text for i in elsewhere.items)
        assert "private-summary-77" not in shown and "private words 77" not in shown
    db = sqlite3.connect(tmp_path / "p.db")
    flags = db.execute("SELECT private FROM scopes WHERE channel_id = 'sec'").fetchall()
    db.close()
    assert flags and all(f == (1,) for f in flags)  # sticky on disk
    async with shortterm.open(store=store, config=CONFIG) as restarted:
        elsewhere = await _turn(restarted, "ana", "general", server_id=G).context()
        assert "private-summary-77" not in "\n".join(i.text for i in elsewhere.items)


async def test_a_stale_write_cannot_make_a_private_entry_public(tmp_path: Path) -> None:
    """A process that still believes the channel public writes a public flag: it stays
    private, in both tiers."""
    store = f"sqlite:///{tmp_path / 'stale.db'}"
    async with (
        shortterm.open(store=store, config=CONFIG) as admin,
        shortterm.open(store=store, config=CONFIG) as bot,
    ):
        await admin.configure_server(G, ServerSettings(private_channel_ids=frozenset({"sec"})))
        await _say(admin, "ana", "sec", "said in private", server_id=G)
        await admin.configure_server(G, ServerSettings())
        await _say(bot, "ana", "sec", "later, public", server_id=G)
        entry = await bot.get(ScopeKey.server(G, "sec", P))
        assert entry is not None and entry.private


# -- an ambiguous commit -----------------------------------------------------------------


async def test_a_commit_lost_in_flight_says_so_and_the_scope_reads_through(
    pg_url: str, schema: str, pg_proxy: Proxy
) -> None:
    clock = FakeClock()
    store = with_query(through(pg_url, pg_proxy), schema=schema) + (
        "&operation_timeout_s=2&pool_timeout_s=2&pool_reconnect_timeout_s=0.5"
        "&pool_min_size=1&pool_max_size=1"  # one connection: its statements are prepared
        # A heartbeat late on a loaded machine must not make the call below read the journal.
        "&listen_timeout_s=30"
    )
    async with shortterm.open(store=store, config=CONFIG, clock=clock) as memory:
        await _say(memory, "ana", "c1", "hello", server_id=G)
        key = ScopeKey.server(G, "c1", P)
        assert await memory.get(key) is not None
        turn = _turn(memory, "ana", "c1", server_id=G)
        assert (await turn.call_tool(texts.TOOL_NAME, {"summary": "first"})).ok
        # Our own edit's NOTIFY comes back to our listener: wait for it and follow it now, so
        # that the call below starts with nothing to read (else that read is what the cut
        # loses, and the call fails before it writes).
        for _ in range(250):
            if memory.store.journal_moved():
                break
            await asyncio.sleep(0.02)
        await memory.journal.catch_up()
        assert await memory.get(key) is not None
        # The write is sent whole (its statement is prepared), executed and committed; only
        # the answer is lost.
        pg_proxy.cut("replies")
        result = await _turn(memory, "ana", "c1", server_id=G).call_tool(
            texts.TOOL_NAME, {"summary": "maybe-saved"}
        )
        pg_proxy.restore()
        assert result == shortterm.ToolResult(False, texts.STORE_UNSURE)
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            cur = await conn.execute(
                f'SELECT summary FROM "{schema}".scopes WHERE kind = %s AND channel_id = %s',
                ("server", "c1"),
            )
            stored = [r[0] for r in await cur.fetchall()]
        # Whatever the server did, the next read agrees with it.
        entry = None
        for _attempt in range(20):
            try:
                entry = await memory.get(key)
                break
            except StoreUnavailable:
                clock.advance(0)  # the pool is reconnecting
                await asyncio.sleep(0.2)
        assert stored == ["maybe-saved"]
        assert entry is not None and entry.summary == "maybe-saved"
        assert [m.content for m in entry.messages] == ["hello", "noted"]  # messages kept
