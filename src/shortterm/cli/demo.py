"""``shortterm demo``: a scripted day of chat through the library, then a restart.

Two servers, three channels, a DM and two personas. Everything goes through the public API,
so what it prints is what a bot would see.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from urllib.parse import urlsplit

from rich.console import Console
from rich.table import Table

from .. import open as open_memory
from ..memory.facade import Memory
from ..memory.turn import Turn
from ..model import Entry, Message, Reply, ScopeKey

ANA, BEN = "1001", "1002"
GUILD_A, GUILD_B = "5001", "5002"
GENERAL, PLANS, LOUNGE, DM = "7001", "7002", "7101", "7900"
TOMO, KAI = "1", "2"
NAMES = {ANA: "Ana", BEN: "Ben", TOMO: "Tomo", KAI: "Kai"}
# A persona keeps its lineage across servers; recall only shows memories of the same lineage.
LINEAGE = {TOMO: "tomo", KAI: "kai"}


class _Clock:
    """Demo time: starts at a fixed moment and moves forward a minute per call to advance."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


SCRIPT: list[tuple[str, str | None, str, str, str, str]] = [
    # (user, server, channel, persona, user says, persona replies)
    (
        ANA,
        GUILD_A,
        GENERAL,
        TOMO,
        "Morning! Are we still doing the hike on Saturday?",
        "Morning Ana! Yes, Saturday it is. Ben suggested the ridge trail.",
    ),
    (
        BEN,
        GUILD_A,
        GENERAL,
        TOMO,
        "Ridge trail, 8am at the north car park.",
        "Noted: ridge trail, 8am, north car park.",
    ),
    (
        ANA,
        GUILD_A,
        PLANS,
        TOMO,
        "Can you list what to pack for Saturday?",
        "Water, rain jacket, snacks, and sturdy boots.",
    ),
    (
        ANA,
        GUILD_A,
        GENERAL,
        KAI,
        "Kai, what's a good trail snack?",
        "Trail mix with dark chocolate keeps well.",
    ),
    (
        ANA,
        GUILD_B,
        LOUNGE,
        TOMO,
        "Different server, same Ana. I'm learning Portuguese!",
        "Que legal! Let's practise a little every day.",
    ),
    (
        ANA,
        None,
        DM,
        TOMO,
        "Just between us: I'm nervous about the hike.",
        "That's normal. Go at your own pace; the group will wait.",
    ),
]


def _history(user: str, text: str, at: float) -> list[Message]:
    return [Message("user", text, author_id=user, speaker=NAMES[user], at=at)]


def _table(title: str, entries: list[tuple[ScopeKey, Entry | None]]) -> Table:
    table = Table(title=title, show_lines=True)
    for column in ("scope", "owner", "channel", "persona", "messages", "summary"):
        table.add_column(column, overflow="fold")
    for key, entry in entries:
        if entry is None:
            continue
        last = entry.messages[-1] if entry.messages else None
        shown = f"{len(entry.messages)}" + (f' · last: "{last.content[:40]}"' if last else "")
        table.add_row(
            key.kind,
            key.owner_id,
            key.channel_id,
            NAMES.get(key.persona_id or "", "-"),
            shown,
            entry.summary or "-",
        )
    return table


def _all_keys() -> list[ScopeKey]:
    keys = []
    for channel, persona in itertools.product((GENERAL, PLANS, LOUNGE, DM), (TOMO, KAI)):
        for user in (ANA, BEN):
            keys.append(ScopeKey.user(user, channel, persona))
        for guild in (GUILD_A, GUILD_B):
            keys.append(ScopeKey.server(guild, channel, persona))
    return keys


def _turn(
    memory: Memory, user: str, server: str | None, channel: str, persona: str, says: str
) -> Turn:
    """A turn of the demo's cast: names and persona lineages come from the tables above."""
    return memory.turn(
        user_id=user,
        channel_id=channel,
        server_id=server,
        persona_id=persona,
        persona_lineage_id=LINEAGE[persona],
        user_message=says,
        user_name=NAMES[user],
        bot_name=NAMES[persona],
    )


def _ana_asks_tomo(memory: Memory, channel: str, says: str) -> Turn:
    """The scripted follow-ups: Ana talking to Tomo in the first server."""
    return _turn(memory, ANA, GUILD_A, channel, TOMO, says)


async def _snapshot(memory: Memory) -> list[tuple[ScopeKey, Entry | None]]:
    return [(key, await memory.get(key)) for key in _all_keys()]


def _remove_database(store: str) -> None:
    parts = urlsplit(store)
    if parts.scheme == "sqlite":
        for suffix in ("", "-wal", "-shm"):
            Path(f"{parts.path[1:]}{suffix}").unlink(missing_ok=True)


async def run_demo(
    *, store: str, cache: str, fresh: bool = True, console: Console | None = None
) -> None:
    out = console or Console()
    if fresh:
        _remove_database(store)
    clock = _Clock()

    out.rule("[bold]shortterm demo[/] — one morning of chat")
    async with open_memory(store=store, cache=cache, clock=clock) as memory:
        for user, server, channel, persona, says, replies in SCRIPT:
            turn = _turn(memory, user, server, channel, persona, says)
            await turn.capture(
                history=_history(user, says, clock()),
                replies=[Reply(replies, persona_id=persona, persona_name=NAMES[persona])],
            )
            where = "DM" if server is None else f"server {server}"
            out.print(f"[dim]{where} #{channel}[/] {NAMES[user]}: {says}")
            out.print(f"[dim]{where} #{channel}[/] [cyan]{NAMES[persona]}[/]: {replies}")
            clock.advance(60)

        # The model distils #general into a summary through its tool (the upgrade path).
        summary = "Hike on Saturday: ridge trail, 8am, north car park. Ana and Ben are going."
        upgrade = _ana_asks_tomo(memory, GENERAL, "Can you keep track of the plan?")
        offered = [t["function"]["name"] for t in upgrade.tools("openai")]
        result = await upgrade.call_tool("update_short_term_memory", {"summary": summary})
        again = await upgrade.call_tool("update_short_term_memory", {"summary": "twice?"})
        out.print(f"\ntools offered: {offered}")
        out.print(f"[green]summary upgrade[/] for #{GENERAL} (Tomo): ok={result.ok} — {summary}")
        out.print(f"a second upgrade in the same turn: ok={again.ok} — {again.message}\n")

        # What Tomo is shown when Ana talks to it in #plans: #general's memory, as quoted data.
        elsewhere = _ana_asks_tomo(memory, PLANS, "what did we settle?")
        ctx = await elsewhere.context()
        out.rule(f"context for Ana's next turn in #{PLANS}", style="dim")
        for item in ctx.items:
            out.print(item.text, markup=False, highlight=False)
        out.print(_table("Remembered before the restart", await _snapshot(memory)))
        stats = memory.stats()
        out.print(f"hot tier: {stats['entries']} entries, ~{stats['bytes']:,} bytes\n")

    clock.advance(600)
    out.rule("[bold]restart[/] — the process comes back 10 minutes later")
    async with open_memory(store=store, cache=cache, clock=clock) as memory:
        stats = memory.stats()
        out.print(
            f"hydrated {stats['hydrated_rows']} row(s) with a live summary in "
            f"{stats['hydration_s'] * 1000:.1f} ms; crude messages were cache-only by design."
        )
        out.print(_table("Remembered after the restart", await _snapshot(memory)))
        turn = _ana_asks_tomo(memory, GENERAL, "What time was it again?")
        await turn.capture(
            history=_history(ANA, "What time was it again?", clock()),
            replies=[Reply("8am at the north car park.", persona_id=TOMO, persona_name="Tomo")],
        )
        entry = await memory.get(ScopeKey.server(GUILD_A, GENERAL, TOMO))
        assert entry is not None
        out.print(
            f"\nafter one more turn in #{GENERAL}: {len(entry.messages)} new message(s), "
            f"summary kept: {entry.summary!r}, turns since refresh: {entry.turns_since_refresh}"
        )
        ctx = await turn.context()
        out.rule(f"context for the next turn in #{GENERAL} (same channel)", style="dim")
        for item in ctx.items:
            out.print(item.text, markup=False, highlight=False)
