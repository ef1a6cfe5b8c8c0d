"""Helpers for the read-path tests: talk in a channel, upgrade a scope, read blocks back."""

from __future__ import annotations

import shortterm
from shortterm import Context, Message, Reply, ScopeKey
from shortterm.store.base import DistilledWrite


async def say(
    memory: shortterm.Memory,
    *,
    channel: str,
    server: str | None = "g1",
    user: str = "u1",
    persona: str | None = "p1",
    lineage: str | None = None,
    text: str = "hello",
    reply: str = "hi there",
    others: tuple[tuple[str, str], ...] = (),
    channel_name: str | None = None,
    parent: str | None = None,
    user_name: str = "Ana",
) -> None:
    """One captured turn: ``others`` are (author id, text) messages said before the user's."""
    now = memory.clock()
    history = [Message("user", t, author_id=a, speaker=f"name-{a}", at=now) for a, t in others]
    history.append(Message("user", text, author_id=user, speaker=user_name, at=now))
    turn = memory.turn(
        user_id=user,
        channel_id=channel,
        server_id=server,
        persona_id=persona,
        persona_lineage_id=lineage,
        user_name=user_name,
        bot_name="Tomo",
        channel_name=channel_name,
        parent_channel_id=parent,
    )
    await turn.capture(history=history, replies=[Reply(reply, persona_name="Tomo")])


async def upgrade(memory: shortterm.Memory, key: ScopeKey, summary: str) -> None:
    """What a successful tool call does to one scope: write the summary, reset the counter."""
    change = DistilledWrite(summary=summary, set_summary=True)
    rows = await memory.store.write_distilled(
        [(key, None)], change, reset_counter=key, now=memory.clock()
    )
    await memory.cache.apply_rows(rows, memory.clock())


async def context_of(
    memory: shortterm.Memory,
    *,
    channel: str,
    server: str | None = "g1",
    user: str = "u1",
    persona: str | None = "p1",
    lineage: str | None = None,
    **kw: object,
) -> Context:
    turn = memory.turn(
        user_id=user,
        channel_id=channel,
        server_id=server,
        persona_id=persona,
        persona_lineage_id=lineage,
        user_name="Ana",
        bot_name="Tomo",
        **kw,
    )
    return await turn.context()


def block(ctx: Context, kind: str) -> str:
    """The text of one item kind, or "" when absent."""
    found = [i.text for i in ctx.items if i.kind == kind]
    assert len(found) <= 1
    return found[0] if found else ""
