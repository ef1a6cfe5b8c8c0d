"""A forget that returned is never undone by a buffered capture (write-behind, SQLite).

Each round, in one process, runs three captures (one answered by two personas) by the round's
own user in the round's own channel while one forget runs: ``clear_channel``, ``clear_user``,
``configure_user(FULL)`` or ``clear_server_channel``. Every store and hot-tier call pauses at
random before and after its work (``Jitter``), the window is 1 ms and two captures fill the
turn bound, so flushes (timer, bound, the forget's own) interleave with the captures and the
forget differently every round. Once all is settled and memory closed (its last flush), a
round whose captures all began before its forget must have left nothing the forget covers:
no durable row (read with sqlite3) and no message in the hot tier.

``test_the_race_finds_an_unfenced_flush`` runs the same rounds with a flush that skips the
fence check and shows they find resurrected rows.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import shortterm
from shortterm import Message, Privacy, Reply, ScopeKey, UserSettings
from shortterm.store.base import BufferedTouch
from shortterm.store.sqlite import SQLiteStore
from tests.fence_support import Jitter, Seen, with_token

ROUNDS = 400
G = "g1"
FORGETS = ("channel", "user", "full", "server_channel")
CONFIG = shortterm.Config(sweep_interval_s=0, write_behind_ms=1, write_behind_turns=2)


async def _round(
    memory: shortterm.Memory, seen: Seen, i: int, rng: random.Random
) -> tuple[str, set[str], bool]:
    """One race; returns its forget, the tokens that began before it, and whether every
    capture of the round began before it."""
    channel, user, forget = f"c{i}", f"u{i}", FORGETS[i % len(FORGETS)]
    seen.began_before_clear.clear()
    seen.clearing = False

    async def capture(token: str, personas: tuple[str, ...]) -> None:
        await asyncio.sleep(rng.random() * 0.003)
        turn = memory.turn(user_id=user, channel_id=channel, server_id=G, persona_id="p1")
        await with_token(
            token,
            lambda: turn.capture(
                history=[Message("user", f"{token} said", author_id=user)],
                replies=[Reply(f"{token} reply", persona_id=p) for p in personas],
            ),
        )

    async def run_forget() -> None:
        await asyncio.sleep(rng.random() * 0.006)
        seen.clearing = True
        if forget == "channel":
            await memory.clear_channel(channel)
        elif forget == "user":
            await memory.clear_user(user)
        elif forget == "full":
            await memory.configure_user(user, UserSettings(privacy=Privacy.FULL))
        else:
            await memory.clear_server_channel(G, channel, "p1")

    tokens = (f"a{i}x", f"b{i}x", f"d{i}x")
    await asyncio.gather(
        capture(tokens[0], ("p1",)),
        capture(tokens[1], ("p1", "p2")),
        capture(tokens[2], ("p2",)),
        run_forget(),
    )
    doomed = set(seen.began_before_clear)
    return forget, doomed, doomed == set(tokens)


def _covered_rows(db: Path, i: int, forget: str) -> list[tuple[Any, ...]]:
    """The durable rows round ``i``'s forget covers that exist now."""
    where = {
        "channel": ("channel_id = ?", (f"c{i}",)),
        "user": ("kind = 'user' AND owner_id = ?", (f"u{i}",)),
        "full": ("kind = 'user' AND owner_id = ?", (f"u{i}",)),
        "server_channel": (
            "kind = 'server' AND owner_id = ? AND channel_id = ? AND persona_id = 'p1'",
            (G, f"c{i}"),
        ),
    }[forget]
    conn = sqlite3.connect(db)
    try:
        return conn.execute(
            f"SELECT kind, owner_id, channel_id FROM scopes WHERE {where[0]}", where[1]
        ).fetchall()
    finally:
        conn.close()


async def _hot_leaks(memory: shortterm.Memory, i: int, forget: str, doomed: set[str]) -> bool:
    """Whether a message the forget covers is still in the hot tier."""
    for persona in ("p1", "p2"):
        for key in (ScopeKey.server(G, f"c{i}", persona), ScopeKey.user(f"u{i}", f"c{i}", persona)):
            entry = await memory.get(key)
            if entry is None:
                continue
            if forget == "channel" or (
                forget == "server_channel" and key.kind == "server" and persona == "p1"
            ):
                texts = [m.content for m in entry.messages]
            elif forget in ("user", "full"):
                # The user's own messages everywhere, and their personal entries whole.
                texts = [
                    m.content
                    for m in entry.messages
                    if m.author_id == f"u{i}" or key.kind == "user"
                ]
            else:
                continue
            if any(t in text for t in doomed for text in texts):
                return True
    return False


async def _race(db: Path, rounds: int, seed: int) -> tuple[int, int, int]:
    """Returns (rounds checked, rounds with a covered row left, rounds with a hot leak)."""
    rng = random.Random(seed)
    checked, row_bad, hot_bad = 0, 0, 0
    results: list[tuple[int, str, bool]] = []
    async with shortterm.open(store=f"sqlite:///{db}", config=CONFIG) as memory:
        assert memory.write_behind is not None
        memory.store = Jitter(memory.store, rng)  # type: ignore[assignment]
        memory.cache = Jitter(memory.cache, rng)  # type: ignore[assignment]
        seen = Seen()
        seen.watch(memory)
        for i in range(rounds):
            forget, doomed, all_before = await _round(memory, seen, i, rng)
            if await _hot_leaks(memory, i, forget, doomed):
                hot_bad += 1
            results.append((i, forget, all_before))
        await asyncio.sleep(0.01)  # let the last timer flush run, then close flushes the rest
    for i, forget, all_before in results:
        if not all_before:
            continue  # a capture that began after the forget may write new rows
        checked += 1
        if _covered_rows(db, i, forget):
            row_bad += 1
    return checked, row_bad, hot_bad


async def test_a_forget_is_never_undone_by_a_buffered_capture(tmp_path: Path) -> None:
    checked, row_bad, hot_bad = await _race(tmp_path / "wb.db", ROUNDS, seed=2024)
    print(
        f"\nwrite-behind: {ROUNDS} rounds, {checked} with every capture begun before its "
        f"forget; {row_bad} with a covered row left, {hot_bad} with a covered message left"
    )
    assert checked > ROUNDS // 4
    assert row_bad == 0 and hot_bad == 0


@contextmanager
def _unfenced_flush() -> Iterator[None]:
    """A deliberate break: the flush writes every touch, as if none were covered."""
    original = SQLiteStore.touch_batch

    async def unfenced(self: SQLiteStore, touches: list[BufferedTouch]) -> Any:
        never = [t._replace(fence=t.fence.__class__(2**62, t.fence.triggerer)) for t in touches]
        return await original(self, never)

    SQLiteStore.touch_batch = unfenced  # type: ignore[method-assign]
    try:
        yield
    finally:
        SQLiteStore.touch_batch = original  # type: ignore[method-assign]


async def test_the_race_finds_an_unfenced_flush(tmp_path: Path) -> None:
    with _unfenced_flush():
        checked, row_bad, _hot = await _race(tmp_path / "broken.db", 200, seed=7)
    print(f"\nunfenced flush: {row_bad} of {checked} checked rounds left a covered row")
    assert row_bad > 0
