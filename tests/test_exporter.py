"""Importing DiscordChatExporter JSON exports: what lands, what is refused, and how big files go.

The files are written here in the exporter's JSON shape (indented, header first, then the
``messages`` array), so line numbers in error messages can be checked against the text.
"""

from __future__ import annotations

import asyncio
import io
import json
import sqlite3
import tempfile
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shortterm
from shortterm.integrations.chat_exporter import (
    ExportFormatError,
    ImportProgress,
    import_export_file,
)
from shortterm.integrations.chat_exporter import reader as exporter
from tests.support import FakeClock, clear_redis_prefix, service_url, with_query

GUILD = "300000000000000003"
CHANNEL = "400000000000000004"
OTHER = "400000000000000005"
ANA, BEN, BOT = "111111111111111111", "222222222222222222", "900000000000000001"
START = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
NOW = (START + timedelta(hours=3)).timestamp()

AUTHORS = {
    ANA: {"id": ANA, "name": "ana", "discriminator": "0000", "nickname": "Ana B.", "isBot": False},
    BEN: {"id": BEN, "name": "ben", "discriminator": "0000", "nickname": "ben", "isBot": False},
    BOT: {"id": BOT, "name": "tomo", "discriminator": "0000", "nickname": "Tomo", "isBot": True},
}


def message(
    n: int,
    author: str,
    content: str,
    *,
    kind: str = "Default",
    attachments: Iterable[str] = (),
    embeds: Iterable[dict[str, Any]] = (),
    stickers: Iterable[str] = (),
    mentions: Iterable[str] = (),
) -> dict[str, Any]:
    """One message as the exporter writes it; ``n`` minutes after START."""
    return {
        "id": str(1235168840908800000 + n),
        "type": kind,
        "timestamp": (START + timedelta(minutes=n)).isoformat(timespec="milliseconds"),
        "timestampEdited": None,
        "callEndedTimestamp": None,
        "isPinned": False,
        "content": content,
        "author": {**AUTHORS[author], "color": None, "roles": [], "avatarUrl": "https://cdn/a.png"},
        "attachments": [
            {"id": str(7000 + i), "url": f"https://cdn/{f}", "fileName": f, "fileSizeBytes": 10}
            for i, f in enumerate(attachments)
        ],
        "embeds": list(embeds),
        "stickers": [{"id": "1", "name": s, "format": "Png", "sourceUrl": "x"} for s in stickers],
        "reactions": [],
        "mentions": [{**AUTHORS[a], "roles": []} for a in mentions],
        "inlineEmojis": [],
    }


def export(
    messages: list[dict[str, Any]],
    *,
    guild: dict[str, Any] | None = None,
    channel: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "guild": guild or {"id": GUILD, "name": "Hikers", "iconUrl": "https://cdn/g.png"},
        "channel": channel
        or {
            "id": CHANNEL,
            "type": "GuildTextChat",
            "categoryId": "390000000000000001",
            "category": "Outdoors",
            "name": "general",
            "topic": None,
        },
        "dateRange": {"after": None, "before": None},
        "exportedAt": (START + timedelta(hours=2)).isoformat(),
        "messages": messages,
        "messageCount": len(messages),
    }


def write(tmp_path: Path, data: Any, name: str = "export.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
    return path


def line_of(path: Path, needle: str) -> int:
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if needle in line:
            return number
    raise AssertionError(needle)


def message_line(path: Path, index: int) -> int:
    """The line where ``messages[index]`` starts (an indented ``{`` of its own)."""
    starts = [
        number
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if line == "    {"
    ]
    return starts[index]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "stm.db"


@pytest.fixture
async def memory(db: Path) -> AsyncIterator[shortterm.Memory]:
    async with shortterm.open(store=f"sqlite:///{db}", clock=FakeClock(NOW)) as opened:
        yield opened


SERVER_KEY = shortterm.ScopeKey.server(GUILD, CHANNEL)


def rows(db: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(db) as conn:
        found = conn.execute("SELECT kind, owner_id, channel_id FROM scopes").fetchall()
    conn.close()
    return sorted(found)


# -- what lands -----------------------------------------------------------------------------


async def test_the_newest_messages_land_in_the_server_scope(
    memory: shortterm.Memory, tmp_path: Path, db: Path
) -> None:
    chat = [message(i, ANA if i % 2 else BEN, f"line {i}") for i in range(14)]
    chat.append(message(14, BOT, "Saturday at 8 then!"))
    path = write(tmp_path, export(chat))
    report = await import_export_file(memory, path)

    entry = await memory.get(SERVER_KEY)
    assert entry is not None
    assert len(entry.messages) == 10  # max_messages
    assert [m.content for m in entry.messages] == [f"line {i}" for i in range(5, 14)] + [
        "Saturday at 8 then!"
    ]
    last = entry.messages[-1]
    assert (last.role, last.speaker, last.author_id) == ("assistant", "Tomo", BOT)
    assert entry.messages[0].speaker == "Ana B."
    assert entry.messages[0].at == (START + timedelta(minutes=5)).timestamp()
    assert entry.messages[0].message_id == str(1235168840908800005)
    assert entry.channel_name == "general"
    assert entry.server_name == "Hikers"
    assert entry.parent_channel_id is None  # a category is not a parent channel
    assert entry.turns_since_refresh == 0  # an import is not a bot turn
    assert entry.summary is None

    assert report.key == SERVER_KEY
    assert (report.messages_seen, report.messages_kept, report.imported) == (15, 10, 10)
    assert report.first_at == (START + timedelta(minutes=5)).timestamp()
    assert report.last_at == (START + timedelta(minutes=14)).timestamp()
    assert report.process_local
    assert report.reason is None
    # The server scope only: nobody's personal memory is written by an import.
    await memory.flush()  # the captured rows are buffered (write-behind)
    assert rows(db) == [("server", GUILD, CHANNEL)]


async def test_system_notices_and_empty_messages_are_skipped(
    memory: shortterm.Memory, tmp_path: Path
) -> None:
    chat = [
        message(0, ANA, "Joined the server.", kind="GuildMemberJoin"),
        message(1, BEN, "Pinned a message.", kind="ChannelPinnedMessage"),
        message(2, ANA, "Started a thread.", kind="ThreadCreated"),
        message(3, ANA, "Started a call.", kind="Call"),
        message(4, ANA, "hello", kind="Reply"),
        message(5, BEN, "   "),
        message(6, BOT, "Here you go", kind="20"),  # a slash command's answer, by number
        message(7, BEN, "Boosted the server.", kind="8"),
    ]
    report = await import_export_file(memory, write(tmp_path, export(chat)))
    entry = await memory.get(SERVER_KEY)
    assert entry is not None
    assert [m.content for m in entry.messages] == ["hello", "Here you go"]
    assert (report.skipped_system, report.skipped_empty) == (5, 1)


async def test_attachments_stickers_embeds_and_raw_mentions(
    memory: shortterm.Memory, tmp_path: Path
) -> None:
    chat = [
        message(0, ANA, "", attachments=["ridge.png"]),
        message(
            1, BEN, "look https://maps.example", embeds=[{"title": "Maps", "description": "x"}]
        ),
        message(2, BOT, "", embeds=[{"title": "Weather", "description": "Sunny"}]),
        message(3, ANA, "", stickers=["wave"]),
        message(
            4, ANA, f"<@{BEN}> and <@!{BOT}>, ok? <:yes:123> <#{CHANNEL}>", mentions=[BEN, BOT]
        ),
    ]
    await import_export_file(memory, write(tmp_path, export(chat)))
    entry = await memory.get(SERVER_KEY)
    assert entry is not None
    assert [m.content for m in entry.messages] == [
        "[attachment: ridge.png]",
        "look https://maps.example",  # beside text, an embed is a link preview
        "[embed: Weather — Sunny]",
        "[sticker: wave]",
        "@ben and @Tomo, ok? :yes: #unknown-channel",
    ]


async def test_a_newest_first_export_keeps_the_same_messages(
    memory: shortterm.Memory, tmp_path: Path
) -> None:
    chat = [message(i, ANA, f"line {i}") for i in range(20)]
    await import_export_file(memory, write(tmp_path, export(chat[::-1])))
    entry = await memory.get(SERVER_KEY)
    assert entry is not None
    assert [m.content for m in entry.messages] == [f"line {i}" for i in range(10, 20)]


async def test_bot_ids_decide_who_is_the_assistant(
    memory: shortterm.Memory, tmp_path: Path
) -> None:
    chat = [message(0, BOT, "I am Tomo"), message(1, ANA, "hi")]
    await import_export_file(memory, write(tmp_path, export(chat)), bot_ids=[ANA])
    entry = await memory.get(SERVER_KEY)
    assert entry is not None
    assert [m.role for m in entry.messages] == ["user", "assistant"]


async def test_an_import_merges_with_what_the_scope_already_holds(
    memory: shortterm.Memory, tmp_path: Path
) -> None:
    turn = memory.turn(user_id=ANA, channel_id=CHANNEL, server_id=GUILD)
    live = shortterm.Message("user", "live and newer", author_id=ANA, speaker="Ana B.", at=NOW - 60)
    await turn.capture(history=[live], replies=[shortterm.Reply("yes?")])
    await memory.set_summary(SERVER_KEY, "Planning a hike.")
    chat = [message(i, BEN, f"old {i}") for i in range(3)]
    report = await import_export_file(memory, write(tmp_path, export(chat)))
    entry = await memory.get(SERVER_KEY)
    assert entry is not None
    assert [m.content for m in entry.messages] == [
        "old 0",
        "old 1",
        "old 2",
        "live and newer",
        "yes?",
    ]
    assert entry.summary == "Planning a hike."
    assert (report.imported, report.messages_kept) == (3, 5)
    # Importing the same file again adds nothing.
    again = await import_export_file(memory, write(tmp_path, export(chat)))
    assert again.imported == 0


async def test_the_imported_channel_is_recalled_from_another_channel(
    memory: shortterm.Memory, tmp_path: Path
) -> None:
    chat = [message(0, ANA, "pack water and a rain jacket"), message(1, BOT, "noted")]
    await import_export_file(memory, write(tmp_path, export(chat)))
    turn = memory.turn(user_id=BEN, channel_id=OTHER, server_id=GUILD, bot_name="Tomo")
    ctx = await turn.context()
    [block] = [item for item in ctx.items if item.kind == "other_channels"]
    assert "#general in this server" in block.text
    assert "│ Ana B.: pack water and a rain jacket" in block.text
    assert "2 hours ago" in block.text  # the messages' own time, not the import's


async def test_a_thread_remembers_its_parent_and_private_channels_stay_private(
    memory: shortterm.Memory, tmp_path: Path
) -> None:
    parent = "400000000000000009"
    await memory.configure_server(GUILD, shortterm.ServerSettings(private_channel_ids={parent}))
    channel = {
        "id": CHANNEL,
        "type": "GuildPublicThread",
        "categoryId": parent,
        "category": "staff",
        "name": "saturday-hike",
    }
    await import_export_file(
        memory, write(tmp_path, export([message(0, ANA, "hi")], channel=channel))
    )
    entry = await memory.get(SERVER_KEY)
    assert entry is not None
    assert entry.parent_channel_id == parent
    assert entry.private


async def test_full_privacy_authors_are_left_out(memory: shortterm.Memory, tmp_path: Path) -> None:
    await memory.configure_user(BEN, shortterm.UserSettings(privacy=shortterm.Privacy.FULL))
    chat = [message(0, ANA, "hi"), message(1, BEN, "my secret"), message(2, ANA, "bye")]
    report = await import_export_file(memory, write(tmp_path, export(chat)))
    entry = await memory.get(SERVER_KEY)
    assert entry is not None
    assert [m.content for m in entry.messages] == ["hi", "bye"]
    assert report.skipped_private == 1


async def test_a_persona_gets_its_own_scope(memory: shortterm.Memory, tmp_path: Path) -> None:
    path = write(tmp_path, export([message(0, ANA, "hi")]))
    report = await import_export_file(memory, path, persona_id="7", persona_lineage_id="10001")
    assert report.key == shortterm.ScopeKey.server(GUILD, CHANNEL, "7")
    entry = await memory.get(report.key)
    assert entry is not None
    assert entry.persona_lineage_id == "10001"
    assert await memory.get(SERVER_KEY) is None


async def test_a_dry_run_reads_everything_and_writes_nothing(
    memory: shortterm.Memory, tmp_path: Path, db: Path
) -> None:
    report = await import_export_file(
        memory, write(tmp_path, export([message(0, ANA, "hi")])), dry_run=True
    )
    assert report.dry_run
    assert (report.key, report.imported) == (SERVER_KEY, 1)
    assert await memory.get(SERVER_KEY) is None
    assert rows(db) == []


async def test_progress_is_reported_up_to_the_whole_file(
    memory: shortterm.Memory, tmp_path: Path
) -> None:
    chat = [message(i, ANA, "x" * 500) for i in range(600)]  # ~600 KB: several chunks
    path = write(tmp_path, export(chat))
    seen: list[ImportProgress] = []
    await import_export_file(memory, path, progress=seen.append)
    assert len(seen) > 2
    assert [p.bytes_read for p in seen] == sorted(p.bytes_read for p in seen)
    assert seen[-1] == ImportProgress(path.stat().st_size, path.stat().st_size, 600)


# -- after a clear or a purge -----------------------------------------------------------------


def minute(n: float) -> float:
    return (START + timedelta(minutes=n)).timestamp()


@pytest.mark.parametrize("where", ["same process", "other process", "restart"])
async def test_an_import_after_a_clear_brings_back_none_of_what_it_covered(
    where: str, db: Path, tmp_path: Path
) -> None:
    """An export still holds what a clear forgot; the import leaves it out, in the process
    that cleared, in another one already running, and in one started after the clear."""
    chat = [message(i, ANA if i % 2 else BEN, f"line {i}") for i in range(8)]
    path = write(tmp_path, export(chat))
    store = f"sqlite:///{db}"
    async with (
        shortterm.open(store=store, clock=FakeClock(NOW)) as clearing,
        shortterm.open(store=store, clock=FakeClock(NOW)) as other,
    ):
        await clearing.clear_channel(CHANNEL, at=minute(4.5))
        if where != "restart":
            report = await import_export_file(clearing if where == "same process" else other, path)
            entry = await (clearing if where == "same process" else other).get(SERVER_KEY)
    if where == "restart":
        async with shortterm.open(store=store, clock=FakeClock(NOW)) as restarted:
            report = await import_export_file(restarted, path)
            entry = await restarted.get(SERVER_KEY)
    assert entry is not None
    assert [m.content for m in entry.messages] == ["line 5", "line 6", "line 7"]
    assert (report.imported, report.messages_kept, report.skipped_forgotten) == (3, 3, 5)
    assert report.first_at == minute(5)
    assert "5 covered by a forget" in report.describe()[0]


async def test_an_import_after_a_purge_leaves_out_her_words_and_the_answers_to_them(
    memory: shortterm.Memory, tmp_path: Path
) -> None:
    chat = [
        message(0, ANA, "hello"),
        message(1, BOT, "hi Ana"),
        message(2, BEN, "my door code is 4411"),
        message(3, BOT, "noted: 4411"),  # answers Ben, and retells him
        message(4, ANA, "hike on Saturday?"),
        message(5, BOT, "Saturday at 8"),
        message(7, BEN, "I am back"),  # after the purge: new
        message(8, BOT, "welcome back"),
    ]
    await memory.clear_user(BEN, at=minute(6))
    report = await import_export_file(memory, write(tmp_path, export(chat)))
    entry = await memory.get(SERVER_KEY)
    assert entry is not None
    assert [m.content for m in entry.messages] == [
        "hello",
        "hi Ana",
        "hike on Saturday?",
        "Saturday at 8",
        "I am back",
        "welcome back",
    ]
    assert (report.imported, report.skipped_forgotten) == (6, 2)


async def test_the_answer_to_a_purged_message_just_older_than_the_import_stays_out(
    memory: shortterm.Memory, tmp_path: Path
) -> None:
    """The newest ten messages begin with the bot's answer to Ben's message, the eleventh:
    it answers him (and retells him), though his message is not among those imported."""
    chat = [message(0, BEN, "my door code is 4411"), message(1, BOT, "noted: 4411")]
    chat += [message(i, ANA, f"line {i}") for i in range(2, 11)]
    await memory.clear_user(BEN, at=minute(1.5))
    await import_export_file(memory, write(tmp_path, export(list(reversed(chat)))))
    entry = await memory.get(SERVER_KEY)
    assert entry is not None
    assert [m.content for m in entry.messages] == [f"line {i}" for i in range(2, 11)]


async def test_a_full_choice_takes_the_answers_to_what_she_said_before_it(
    memory: shortterm.Memory, tmp_path: Path
) -> None:
    chat = [
        message(0, ANA, "hello"),
        message(1, BOT, "hi Ana"),
        message(2, BEN, "my door code is 4411"),
        message(3, BOT, "noted: 4411"),
        message(4, ANA, "hike on Saturday?"),
        message(5, BOT, "Saturday at 8"),
    ]
    full = shortterm.UserSettings(privacy=shortterm.Privacy.FULL)
    await memory.configure_user(BEN, full, at=minute(6))
    report = await import_export_file(memory, write(tmp_path, export(chat)))
    entry = await memory.get(SERVER_KEY)
    assert entry is not None
    assert [m.content for m in entry.messages] == [
        "hello",
        "hi Ana",
        "hike on Saturday?",
        "Saturday at 8",
    ]
    assert report.skipped_private == 1


async def test_an_import_that_a_clear_covers_whole_writes_nothing(
    memory: shortterm.Memory, tmp_path: Path, db: Path
) -> None:
    await memory.clear_channel(CHANNEL, at=minute(10))
    chat = [message(0, ANA, "hi"), message(1, BOT, "hello")]
    report = await import_export_file(memory, write(tmp_path, export(chat)))
    assert report.key is None
    assert report.skipped_forgotten == 2
    assert report.reason == "a clear or a purge covers every message of the file"
    assert await memory.get(SERVER_KEY) is None
    assert rows(db) == []


# -- DMs ------------------------------------------------------------------------------------


DM_CHANNEL = {"id": "500000000000000005", "type": "DirectTextChat", "name": "ana"}
DM_GUILD = {"id": "0", "name": "Direct Messages", "iconUrl": "https://cdn/0.png"}


async def test_a_dm_goes_to_its_user_scope(
    memory: shortterm.Memory, tmp_path: Path, db: Path
) -> None:
    chat = [message(0, ANA, "hi"), message(1, BOT, "hello Ana")]
    path = write(tmp_path, export(chat, guild=DM_GUILD, channel=DM_CHANNEL))
    report = await import_export_file(memory, path)
    key = shortterm.ScopeKey.user(ANA, "500000000000000005")
    assert report.key == key
    assert report.server_id is None
    entry = await memory.get(key)
    assert entry is not None
    assert [m.content for m in entry.messages] == ["hi", "hello Ana"]
    assert entry.server_id is None
    await memory.flush()  # the captured rows are buffered (write-behind)
    assert rows(db) == [("user", ANA, "500000000000000005")]


async def test_a_dm_without_a_guild_object(memory: shortterm.Memory, tmp_path: Path) -> None:
    data = export([message(0, ANA, "hi")], channel=DM_CHANNEL)
    del data["guild"]
    report = await import_export_file(memory, write(tmp_path, data))
    assert report.key == shortterm.ScopeKey.user(ANA, "500000000000000005")


async def test_group_dms_and_dms_between_people_are_refused(
    memory: shortterm.Memory, tmp_path: Path, db: Path
) -> None:
    group = {**DM_CHANNEL, "type": "DirectGroupTextChat"}
    with pytest.raises(ExportFormatError, match="group DM"):
        await import_export_file(
            memory, write(tmp_path, export([message(0, ANA, "hi")], guild=DM_GUILD, channel=group))
        )
    people = export(
        [message(0, ANA, "hi"), message(1, BEN, "yo")], guild=DM_GUILD, channel=DM_CHANNEL
    )
    with pytest.raises(ExportFormatError, match="DM between people"):
        await import_export_file(memory, write(tmp_path, people))
    assert rows(db) == []


async def test_a_dm_of_a_partial_privacy_user_is_not_kept(
    memory: shortterm.Memory, tmp_path: Path, db: Path
) -> None:
    await memory.configure_user(ANA, shortterm.UserSettings(privacy=shortterm.Privacy.PARTIAL))
    path = write(tmp_path, export([message(0, ANA, "hi")], guild=DM_GUILD, channel=DM_CHANNEL))
    report = await import_export_file(memory, path)
    assert report.key is None
    assert report.reason is not None
    assert "privacy" in report.reason
    assert rows(db) == []


# -- what is refused ------------------------------------------------------------------------


async def refused(memory: shortterm.Memory, path: Path) -> ExportFormatError:
    with pytest.raises(ExportFormatError) as caught:
        await import_export_file(memory, path)
    assert await memory.get(SERVER_KEY) is None  # nothing half-written
    return caught.value


async def test_malformed_json_names_line_and_column(
    memory: shortterm.Memory, tmp_path: Path, db: Path
) -> None:
    text = json.dumps(export([message(0, ANA, "one"), message(1, BEN, "two")]), indent=2)
    broken = text.replace('"content": "two",', '"content": "two"', 1)  # a comma missing
    path = tmp_path / "broken.json"
    path.write_text(broken, encoding="utf-8")
    error = await refused(memory, path)
    expected_line = line_of(path, '"content": "two"') + 1  # the next property is unexpected
    assert error.line == expected_line
    assert error.column == 7
    assert error.path == "messages[1]"
    assert str(error).startswith(f"broken.json:{expected_line}:7: messages[1]: not valid JSON")
    assert "delimiter" in str(error)
    assert rows(db) == []


async def test_a_truncated_file_is_refused(memory: shortterm.Memory, tmp_path: Path) -> None:
    text = json.dumps(export([message(i, ANA, f"m{i}") for i in range(5)]), indent=2)
    path = tmp_path / "cut.json"
    path.write_text(text[: len(text) // 2], encoding="utf-8")
    error = await refused(memory, path)
    assert "ends too early" in str(error)


@pytest.mark.parametrize(
    ("change", "path", "problem"),
    [
        (lambda m: m["author"].pop("id"), "messages[2].author.id", "missing"),
        (lambda m: m.pop("timestamp"), "messages[2].timestamp", "missing"),
        (lambda m: m.pop("author"), "messages[2].author", "missing"),
        (lambda m: m.update(id=None), "messages[2].id", "expected a Discord id"),
        (lambda m: m.update(timestamp=1714557600), "messages[2].timestamp", "found a number"),
        (lambda m: m.update(timestamp="yesterday"), "messages[2].timestamp", "'yesterday'"),
        (lambda m: m.update(content=["hi"]), "messages[2].content", "found an array"),
        (lambda m: m["author"].update(isBot="no"), "messages[2].author.isBot", "true or false"),
        (lambda m: m["author"].update(name=7), "messages[2].author.name", "found a number"),
        (lambda m: m.update(attachments={}), "messages[2].attachments", "expected an array"),
        (
            lambda m: m.update(attachments=[{"fileName": 3}]),
            "messages[2].attachments[0].fileName",
            "expected a string",
        ),
        (lambda m: m.update(embeds=["x"]), "messages[2].embeds[0]", "expected an object"),
    ],
)
async def test_a_bad_field_is_named_by_its_json_path(
    memory: shortterm.Memory, tmp_path: Path, change: Any, path: str, problem: str
) -> None:
    chat = [message(i, ANA, f"m{i}") for i in range(4)]
    change(chat[2])
    file = write(tmp_path, export(chat))
    error = await refused(memory, file)
    assert error.path == path
    assert problem in str(error)
    # The position is where the message object holding the field starts.
    assert error.line == message_line(file, 2)
    assert error.column == 5


async def test_a_message_that_is_not_an_object(memory: shortterm.Memory, tmp_path: Path) -> None:
    data = export([message(0, ANA, "ok"), "hello"])  # type: ignore[list-item]
    error = await refused(memory, write(tmp_path, data))
    assert error.path == "messages[1]"
    assert "expected an object, found a string" in str(error)


@pytest.mark.parametrize(
    ("header", "path"),
    [
        ({"channel": {"id": 12.5, "name": "x"}}, "channel.id"),
        ({"channel": {"name": "no id"}}, "channel.id"),
        ({"channel": "general"}, "channel"),
        ({"guild": {"id": "abc", "name": "x"}}, "guild.id"),
        ({"guild": ["x"]}, "guild"),
    ],
)
async def test_a_bad_header_is_named(
    memory: shortterm.Memory, tmp_path: Path, header: dict[str, Any], path: str
) -> None:
    data = {**export([message(0, ANA, "ok")]), **header}
    file = write(tmp_path, data)
    error = await refused(memory, file)
    assert error.path == path
    assert error.line == line_of(file, f'"{path.split(".")[0]}":')


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "the file is empty"),
        ("[]", "expected a JSON object"),
        ('{"guild": {}}', "messages: missing"),
        ('{"messages": []}', "channel: missing"),
        ('{"channel": {"id": "1"}, "messages": {}}', "expected an array"),
        ('{"channel": {"id": "1"}, "messages": []} trailing', "unexpected text after"),
        ('{"channel": {"id": "1"}, "messages": [], "messages": []}', "appears twice"),
        ('{"channel": {"id": "1"} "messages": []}', "expected ',' or '}'"),
    ],
)
async def test_not_an_export(
    memory: shortterm.Memory, tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "odd.json"
    path.write_text(text, encoding="utf-8")
    error = await refused(memory, path)
    assert problem in str(error)


async def test_not_utf8_is_refused(memory: shortterm.Memory, tmp_path: Path) -> None:
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"channel": {"id": "1", "name": "caf\xe9"}, "messages": []}')
    error = await refused(memory, path)
    assert "not UTF-8" in str(error)
    assert "byte 36" in str(error)  # counted from 0, as offsets are


async def test_an_unreadable_path(memory: shortterm.Memory, tmp_path: Path) -> None:
    with pytest.raises(shortterm.InvalidInput, match="readable export file"):
        await import_export_file(memory, tmp_path / "missing.json")


async def test_an_empty_export_writes_nothing(memory: shortterm.Memory, tmp_path: Path) -> None:
    report = await import_export_file(memory, write(tmp_path, export([])))
    assert report.key is None
    assert report.reason == "no dialogue messages to import"


# -- size -----------------------------------------------------------------------------------


async def test_huge_content_is_cut_to_the_message_cap(
    memory: shortterm.Memory, tmp_path: Path
) -> None:
    chat = [message(0, ANA, "é" * 3_000_000), message(1, BEN, "after")]  # one 6 MB value
    await import_export_file(memory, write(tmp_path, export(chat)))
    entry = await memory.get(SERVER_KEY)
    assert entry is not None
    assert len(entry.messages[0].content) == memory.config.max_message_chars
    assert entry.messages[1].content == "after"


def _big_export(path: Path, size_bytes: int, *, broken_at: int | None = None) -> int:
    """Write an export of about ``size_bytes`` message by message; returns how many."""
    head = json.dumps(export([]), indent=2)
    before, after = head.split('"messages": []')
    count = 0
    written = 0
    with path.open("w", encoding="utf-8") as fh:
        fh.write(before + '"messages": [\n')
        while written < size_bytes:
            body = json.dumps(
                message(count, ANA if count % 3 else BOT, f"{count} " + "word " * 80), indent=2
            )
            if count == broken_at:
                body = body.replace('"type": "Default",', '"type": "Default"')
            chunk = ("," if count else "") + "\n" + body
            fh.write(chunk)
            written += len(chunk)
            count += 1
        fh.write("\n]" + after)
    return count


async def test_a_50_mb_export_streams_in_bounded_memory(
    memory: shortterm.Memory, tmp_path: Path
) -> None:
    path = tmp_path / "big.json"
    count = _big_export(path, 50 * 1024 * 1024)
    size = path.stat().st_size
    tracemalloc.start()
    try:
        report = await import_export_file(memory, path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.messages_seen == count
    assert report.imported == 10
    entry = await memory.get(SERVER_KEY)
    assert entry is not None
    assert entry.messages[-1].content.startswith(f"{count - 1} word")
    assert peak < 4 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB for a {size / 2**20:.0f} MiB file"


async def test_an_error_deep_in_a_big_file_has_the_right_line(
    memory: shortterm.Memory, tmp_path: Path
) -> None:
    path = tmp_path / "deep.json"
    _big_export(path, 3 * 1024 * 1024, broken_at=2500)
    error = await refused(memory, path)
    message_id = 1235168840908800000 + 2500
    assert error.line == line_of(path, f'"id": "{message_id}"') + 2  # after "type" lacks a comma
    assert error.path == "messages[2500]"


async def test_an_early_error_in_a_big_file_does_not_read_it_all(
    memory: shortterm.Memory, tmp_path: Path
) -> None:
    path = tmp_path / "early.json"
    _big_export(path, 8 * 1024 * 1024, broken_at=20)
    tracemalloc.start()
    try:
        with pytest.raises(ExportFormatError, match=r"messages\[20\]: not valid JSON"):
            await import_export_file(memory, path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024  # the error was reported without reading the rest in


_CONTENT = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)) | st.sampled_from('"\\\n\t{}[],:'),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(
    contents=st.lists(_CONTENT, min_size=1, max_size=12),
    chunk=st.integers(1, 64),
    ascii_only=st.booleans(),
    indent=st.sampled_from([None, 0, 2]),
)
def test_any_chunking_reads_the_same_messages(
    contents: list[str], chunk: int, ascii_only: bool, indent: int | None
) -> None:
    chat = [message(i, ANA, text) for i, text in enumerate(contents)]
    chat[0]["fileSizeBytes"] = 123456789  # a number that chunks may cut
    chat[0]["isPinned"] = True
    body = json.dumps(export(chat), indent=indent, ensure_ascii=ascii_only)

    async def imported(chunk_bytes: int, path: Path) -> list[str]:
        with mock.patch.object(exporter, "_CHUNK_BYTES", chunk_bytes):
            async with shortterm.open(store="memory://") as memory:
                await import_export_file(memory, path)
                entry = await memory.get(SERVER_KEY)
        return [] if entry is None else [m.content for m in entry.messages]

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "export.json"
        path.write_text(body, encoding="utf-8")
        assert asyncio.run(imported(chunk, path)) == asyncio.run(imported(1 << 16, path))


# -- a shared hot tier ----------------------------------------------------------------------


async def test_through_redis_the_bot_process_sees_the_import(tmp_path: Path) -> None:
    redis_url = service_url("SHORTTERM_TEST_REDIS_URL", "Redis")
    prefix = f"stm-test:{uuid.uuid4().hex[:16]}:"
    cache = with_query(redis_url, prefix=quote(prefix))
    store = f"sqlite:///{tmp_path / 'shared.db'}"
    try:
        async with shortterm.open(store=store, cache=cache) as importer:
            report = await import_export_file(
                importer, write(tmp_path, export([message(0, ANA, "from the export")]))
            )
            assert not report.process_local
        async with shortterm.open(store=store, cache=cache) as bot:  # another process, later
            entry = await bot.get(SERVER_KEY)
            assert entry is not None
            assert [m.content for m in entry.messages] == ["from the export"]
    finally:
        await clear_redis_prefix(redis_url, prefix)


async def test_the_rich_progress_bar_shows_bytes_and_messages(
    memory: shortterm.Memory, tmp_path: Path
) -> None:
    from rich.console import Console

    from shortterm.integrations.chat_exporter import progress_bar

    path = write(tmp_path, export([message(i, ANA, "x" * 500) for i in range(300)]))
    console = Console(file=io.StringIO(), width=120, force_terminal=False)
    with progress_bar("export.json", console=console) as progress:
        report = await import_export_file(memory, path, progress=progress)
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert report.messages_seen == 300
    assert "export.json" in shown
    assert "300 messages" in shown


def test_the_cli_imports_a_discord_export_and_refuses_a_broken_one(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from shortterm.cli import main

    authors = list(AUTHORS)
    good = write(
        tmp_path, export([message(i, authors[i % len(authors)], f"hi {i}") for i in range(5)])
    )
    store = f"sqlite:///{tmp_path / 'cli.db'}"
    result = CliRunner().invoke(
        main, ["import", str(good), "--format", "discord", "--store", store]
    )
    assert result.exit_code == 0, result.output
    assert "imported 5 message(s) into #general" in result.output
    assert "gone when it exits" in result.output  # the in-process tier warning

    broken = write(tmp_path, {"guild": {"id": GUILD}, "messages": "nope"}, name="bad.json")
    result = CliRunner().invoke(
        main, ["import", str(broken), "--format", "discord", "--store", store]
    )
    assert result.exit_code == 2, result.output
    assert "bad.json" in result.output
