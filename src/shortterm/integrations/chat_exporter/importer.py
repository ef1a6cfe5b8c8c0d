"""The Discord import: stream the export, keep the newest messages, write them once."""

from __future__ import annotations

import asyncio
import heapq
import os
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ...cache.inprocess import InProcessCache
from ...memory import rules
from ...memory.facade import Memory
from ...model import Message, ScopeKey, ServerSettings, check_id
from ...model.errors import InvalidInput
from ...transfer.progress import Progress
from ...transfer.report import ImportReport
from .format import Channel, Parsed, is_bot, parse_channel, parse_message
from .progress import ImportProgress, as_snapshots
from .reader import ExportFormatError, JsonStream
from .validate import Malformed

__all__ = ["import_export_file"]

# How often, in bytes read, progress is reported and the event loop is let in.
_PROGRESS_BYTES = 1 << 16


@dataclass
class _Tally:
    seen: int = 0
    system: int = 0
    empty: int = 0
    private: int = 0


class _Newest:
    """The newest ``limit`` messages seen, in any arrival order (exports can be newest-first),
    and the newest person's message older than all of them (:attr:`lead`)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.heap: list[tuple[float, int, Parsed, bool]] = []
        self._lead: tuple[float, int, Parsed, bool] | None = None

    def add(self, parsed: Parsed, *, person: bool) -> None:
        item = (parsed.at, parsed.order, parsed, person)
        if len(self.heap) < self.limit:
            heapq.heappush(self.heap, item)
            return
        if item[:2] > self.heap[0][:2]:
            item = heapq.heapreplace(self.heap, item)  # the one that leaves the window
        if item[3] and (self._lead is None or item[:2] > self._lead[:2]):
            self._lead = item

    @property
    def lead(self) -> Parsed | None:
        """The message the bot's first answers in the window answer (theirs lies outside it):
        a forget that covers it covers them too."""
        return None if self._lead is None else self._lead[2]

    def oldest_first(self) -> Iterator[Parsed]:
        return (p for _, _, p, _ in sorted(self.heap, key=lambda i: i[:2]))


def _messages(reader: JsonStream, tally: _Tally, max_chars: int) -> Iterator[Parsed | str]:
    """Stream the ``messages`` array: each element parsed, or the reason it is skipped."""
    reader.expect("[", "messages", "an array '['")
    if reader.peek("messages") == "]":
        reader.pos += 1
        return
    index = 0
    while True:
        value, start = reader.value(f"messages[{index}]")
        tally.seen += 1
        try:
            parsed = parse_message(value, index, max_chars)
        except Malformed as bad:
            line, column = reader.location(start)
            raise ExportFormatError(
                reader.name, bad.path, bad.problem, line=line, column=column
            ) from None
        yield parsed
        index += 1
        separator = reader.peek(f"messages[{index}]")
        reader.pos += 1
        if separator == "]":
            return
        if separator != ",":
            raise reader.error(
                reader.pos - 1, f"messages[{index}]", f"expected ',' or ']', found {separator!r}"
            )
        reader.compact()


def _open(file: str) -> tuple[BinaryIO, int]:
    # Plain blocking reads of a local file, one chunk at a time with the event loop yielded
    # to in between: a thread hop per chunk would cost more than the read.
    try:
        fh = open(file, "rb")  # noqa: SIM115 - the caller closes it
    except OSError as exc:
        raise InvalidInput("path", file, f"a readable export file ({exc.strerror})") from None
    return fh, os.fstat(fh.fileno()).st_size


async def import_export_file(
    memory: Memory,
    path: str | os.PathLike[str],
    *,
    progress: Progress | Callable[[ImportProgress], None] | None = None,
    persona_id: str | None = None,
    persona_lineage_id: str | None = None,
    bot_ids: Collection[str] | None = None,
    dry_run: bool = False,
) -> ImportReport:
    """Warm one channel's memory from a DiscordChatExporter JSON export (see the package doc).

    ``progress`` is told as the file is read: a :class:`Progress` (one phase, in bytes), or a
    function called with each :class:`ImportProgress`; ``persona_id`` / ``persona_lineage_id`` name
    the persona whose memory of the channel this becomes; ``bot_ids`` are the author ids that
    count as the bot (default: every bot author). ``dry_run`` reads and checks the whole file
    and reports what would be written, writing nothing.

    Raises :class:`ExportFormatError` (an ``InvalidInput``) for a file that is not a usable
    export; then nothing was written.
    """
    file = os.fspath(path)
    persona_id = None if persona_id is None else check_id("persona_id", persona_id)
    if persona_lineage_id is not None:
        check_id("persona_lineage_id", persona_lineage_id)
    bots = None if bot_ids is None else frozenset(check_id("bot_ids", b) for b in bot_ids)
    config = memory.config
    fh, total = _open(file)
    name = Path(file).name
    reader = JsonStream(fh, name, total)
    tally = _Tally()
    newest = _Newest(config.max_messages)
    header: dict[str, Any] = {}
    header_at: dict[str, tuple[int, int]] = {}
    humans: set[str] = set()
    private: dict[str, bool] = {}  # author id -> chose full privacy
    seen_messages = False

    told = as_snapshots(progress, file) if isinstance(progress, Progress) else progress

    def report_progress() -> None:
        if told is not None:
            told(ImportProgress(min(reader.bytes_read, total), total, tally.seen))

    try:
        if total == 0:
            raise ExportFormatError(name, "", "the file is empty")
        reader.expect("{", "", "a JSON object '{' (a DiscordChatExporter JSON export)")
        if reader.peek("") == "}":
            reader.pos += 1
        else:
            while True:
                if reader.peek("") != '"':
                    raise reader.error(reader.pos, "", "expected a property name in quotes")
                key, _ = reader.value("")
                reader.expect(":", key, "':'")
                if key == "messages":
                    if seen_messages:
                        raise reader.error(reader.pos, "messages", "appears twice")
                    seen_messages = True
                    read_before = reader.bytes_read
                    for item in _messages(reader, tally, config.max_message_chars):
                        if reader.bytes_read - read_before >= _PROGRESS_BYTES:
                            read_before = reader.bytes_read
                            report_progress()
                            await asyncio.sleep(0)  # a long file does not starve the loop
                        if isinstance(item, str):
                            if item == "system":
                                tally.system += 1
                            else:
                                tally.empty += 1
                            continue
                        author = item.author
                        person = not is_bot(author, bots)
                        if person and len(humans) < 3:
                            humans.add(author.id)
                        if author.id not in private:
                            settings = await memory.user_settings(author.id)
                            private[author.id] = rules.is_forgotten(settings)
                        if private[author.id]:
                            tally.private += 1
                        # Kept until the forgets are applied (then left out): the bot's
                        # answers to her go with what she said before her choice.
                        newest.add(item, person=person)
                else:
                    value, start = reader.value(key)
                    if key in ("guild", "channel"):  # the rest of the header is not needed
                        header[key] = value
                        header_at[key] = reader.location(start)
                separator = reader.peek("")
                reader.pos += 1
                if separator == "}":
                    break
                if separator != ",":
                    raise reader.error(
                        reader.pos - 1, "", f"expected ',' or '}}', found {separator!r}"
                    )
        reader.skip_space()
        if reader.pos < len(reader.buf):
            raise reader.error(reader.pos, "", "unexpected text after the export's closing '}'")
    finally:
        fh.close()
    report_progress()

    if not seen_messages:
        raise ExportFormatError(name, "messages", "missing (is this a JSON export?)")
    if "channel" not in header:
        raise ExportFormatError(name, "channel", "missing (is this a JSON export?)")
    try:
        where = parse_channel(header)
    except Malformed as bad:
        line, column = header_at.get(bad.path.split(".")[0], (None, None))
        raise ExportFormatError(name, bad.path, bad.problem, line=line, column=column) from None

    return await _write(
        memory,
        where,
        newest,
        tally,
        file=file,
        humans=humans,
        private={a for a, full in private.items() if full},
        bots=bots,
        persona_id=persona_id,
        lineage=persona_lineage_id,
        dry_run=dry_run,
    )


async def _write(
    memory: Memory,
    where: Channel,
    newest: _Newest,
    tally: _Tally,
    *,
    file: str,
    humans: set[str],
    private: set[str],
    bots: frozenset[str] | None,
    persona_id: str | None,
    lineage: str | None,
    dry_run: bool,
) -> ImportReport:
    name = Path(file).name

    forgotten = 0  # covered by a clear or a purge

    def report(
        key: ScopeKey | None, kept: int, imported: list[Message], reason: str | None
    ) -> ImportReport:
        return ImportReport(
            format="discord",
            file=file,
            key=key,
            server_id=where.server_id,
            channel_id=where.channel_id,
            channel_name=where.channel_name,
            messages_seen=tally.seen,
            messages_kept=kept,
            imported=len(imported),
            skipped_system=tally.system,
            skipped_empty=tally.empty,
            skipped_private=tally.private,
            skipped_forgotten=forgotten,
            first_at=imported[0].at if imported else None,
            last_at=imported[-1].at if imported else None,
            process_local=isinstance(memory.cache, InProcessCache),
            dry_run=dry_run,
            reason=reason,
        )

    def message(p: Parsed) -> Message:
        return Message(
            "assistant" if is_bot(p.author, bots) else "user",
            p.content,
            author_id=p.author.id,
            speaker=p.author.speaker,
            at=p.at,  # the export's time: a forget's horizon places it
            message_id=p.message_id,
        )

    messages = [message(p) for p in newest.oldest_first()]
    settings: ServerSettings | None = None  # a DM has no server's settings
    if where.server_id is not None:
        key = ScopeKey.server(where.server_id, where.channel_id, persona_id)
        settings = await memory.server_settings(where.server_id)
    else:
        if where.group_dm:
            raise ExportFormatError(
                name, "channel.type", "a group DM: there is no one user whose memory it would be"
            )
        if len(humans) > 1:
            raise ExportFormatError(
                name, "messages", "a DM between people: there is no bot conversation to import"
            )
        if not humans:
            return report(None, 0, [], "no messages by a person in this DM")
        [user_id] = humans
        if not rules.keeps_personal(await memory.user_settings(user_id)):
            return report(None, 0, [], "the DM's user keeps no personal memory (privacy)")
        key = ScopeKey.user(user_id, where.channel_id, persona_id)
    if not any(m.author_id not in private for m in messages):
        return report(None, 0, [], "no dialogue messages to import")

    # Merge with what the scope holds (a live turn may have captured newer messages).
    fence = await memory.begin_write()
    # The export is the platform's history: what a clear or a purge covered (the journal is
    # followed to the fence) stays out, before it takes a place among the newest. The write
    # would drop it too, but the report would count it, and an answer to a purged message
    # just older than the window would look like nobody's there.
    lead = None if newest.lead is None else message(newest.lead)
    messages, forgotten = _outside_forgets(memory, key, messages, lead)
    messages = [m for m in messages if m.author_id not in private]
    if not messages:
        reason = "a clear or a purge covers every message of the file"
        return report(None, 0, [], reason if forgotten else "no dialogue messages to import")
    existing = await memory.get(key)
    held = existing.messages if existing is not None else ()
    ids = {m.message_id for m in held if m.message_id is not None}
    new = [m for m in messages if m.message_id not in ids]
    keep = sorted([*held, *new], key=_when)[-memory.config.max_messages :]
    fresh = {id(m) for m in new}
    taken = [m for m in keep if id(m) in fresh]
    if dry_run:
        return report(key, len(keep), taken, None)

    plan = rules.import_plan(
        key,
        keep,
        settings,
        server_name=where.server_name,
        channel_name=where.channel_name,
        parent_channel_id=where.parent_channel_id,
        lineage=lineage,
    )
    # The same one write as a turn's capture (the durable row, awaited, then the hot tier's
    # messages), fenced where the merge above began.
    if not await memory.write(plan, fence=fence):
        return report(None, 0, [], "the channel was cleared while importing")
    return report(key, len(keep), taken, None)


def _outside_forgets(
    memory: Memory, key: ScopeKey, messages: list[Message], lead: Message | None
) -> tuple[list[Message], int]:
    """``messages`` without what a forget's horizon covers, and how many went. ``lead``, the
    person's message just before them, places the bot's first answers (it is not kept)."""
    window = messages if lead is None else [lead, *messages]
    kept, dropped = rules.outside_horizons(
        window,
        channel_id=key.channel_id,
        triggerer=key.owner_id if key.kind == "user" else None,
        horizons=memory.journal.horizons,
        ids=memory.config.message_ids,
    )
    if lead is None:
        return list(kept), dropped
    if kept and kept[0] is lead:
        return list(kept[1:]), dropped
    return list(kept), dropped - 1


def _when(m: Message) -> tuple[float, int]:
    order = int(m.message_id) if m.message_id is not None and m.message_id.isdigit() else 0
    return (m.at if m.at is not None else 0.0, order)
