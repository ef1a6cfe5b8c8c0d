"""Warm a channel's memory from a DiscordChatExporter JSON export.

::

    from .chat_exporter import import_export_file

    report = await import_export_file(memory, "Hikers - general [4000].json")
    print(report.messages_kept, report.key)

From the command line (once wired): ``shortterm import --format discord FILE.json``.

What is written: the newest ``max_messages`` dialogue messages of the file (timestamps, authors,
display names and message ids preserved) become the crude messages of the channel's **server
scope** — the channel's shared memory — as if the bot had read that history on a turn now. No
user scope is written: the people in an export never asked this bot to follow them personally,
and the export says nothing about the bot's persona. A one-to-one DM has no server scope, so it
goes to the user scope of its one human participant (skipped when that user chose partial or
full privacy); group DMs are refused. Messages merge with what the scope already holds (by
message id, newest kept), summaries and categories are untouched, and the cadence counter does
not move (an import is not a bot turn).

Which messages: ``Default`` and ``Reply`` messages and slash-command answers; system notices
(joins, pins, calls, renames, …) are skipped. Authors with full privacy are dropped. Bots are
the ``assistant`` role (pass ``bot_ids`` to make only your bot's ids assistant). Raw mention
tokens, when the export kept them, become names; attachments and stickers become short notes,
and embeds too on messages that have no text of their own (elsewhere they are mostly link
previews).

The file is read incrementally: memory stays near the size of the largest single message plus
the kept messages, whatever the size of the file. Every message is validated before anything is
written, so a malformed file writes nothing; its error names the line and column, and the JSON
path of a bad field (``messages[12].author.id``).

Crude messages live in the hot tier: with the default in-process cache they exist in the process
that imported them only (``ImportReport.process_local``). Import from the bot's own process, or
share a Redis hot tier between the importer and the bot.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import heapq
import json
import os
import re
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from ..cache.inprocess import InProcessCache
from ..memory.facade import Memory
from ..model import Message, Privacy, ScopeKey, ScopeMeta, check_id
from ..model.errors import InvalidInput, ShortTermError
from ..model.text import clean_text, truncate
from ..transfer.progress import Progress, RichBar
from ..transfer.report import ImportReport
from ._markup import clean_name, compose, embed_note, resolve_markup, sticker_note

__all__ = [
    "ExportFormatError",
    "ImportProgress",
    "ImportReport",
    "import_export_file",
    "progress_bar",
]

_CHUNK_BYTES = 1 << 16
_LOOKAHEAD = 16  # more than the longest JSON token the decoder could stop inside ("-Infinity")
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_SNOWFLAKE = re.compile(r"\d{1,20}")

# Message kinds as the exporter names them (its enum's names, or the number for kinds it does
# not name): ordinary messages, replies, and slash-command / context-menu answers.
_DIALOGUE_KINDS = frozenset(
    {"Default", "Reply", "ChatInputCommand", "ContextMenuCommand", "0", "19", "20", "23"}
)
_DM_KINDS = frozenset({"DirectTextChat", "1"})
_GROUP_DM_KINDS = frozenset({"DirectGroupTextChat", "3"})
_THREAD_KINDS = frozenset(
    {"GuildNewsThread", "GuildPublicThread", "GuildPrivateThread", "10", "11", "12"}
)


class ExportFormatError(InvalidInput):
    """The file is not a usable DiscordChatExporter JSON export; nothing was written.

    ``path`` is the JSON path at fault (``messages[12].author.id``, or ``""`` for the file as a
    whole); ``line`` and ``column`` (1-based) locate the syntax error, or the start of the
    object holding the bad field.
    """

    def __init__(
        self,
        file: str,
        path: str,
        problem: str,
        *,
        line: int | None = None,
        column: int | None = None,
        value: object = None,
    ) -> None:
        where = file if line is None else f"{file}:{line}:{column}"
        subject = f"{path}: " if path else ""
        ShortTermError.__init__(self, f"{where}: {subject}{problem}")
        self.field = path
        self.value = value
        self.allowed = problem
        self.file = file
        self.path = path
        self.line = line
        self.column = column


@dataclass(frozen=True, slots=True)
class ImportProgress:
    """How far the import is: bytes of the file read, and message objects seen so far."""

    bytes_read: int
    bytes_total: int
    messages_seen: int


def progress_bar(
    description: str = "importing", *, console: Any = None
) -> contextlib.AbstractContextManager[Callable[[ImportProgress], None]]:
    """A rich progress bar (bytes, messages, time) as a ``progress`` callback::

        with progress_bar("general.json") as progress:
            report = await import_export_file(memory, path, progress=progress)

    ``console`` is a ``rich.console.Console`` (default: standard error). The bar is the
    command line's :class:`~shortterm.transfer.progress.RichBar`, drawn even off a terminal.
    """
    return _drawn(RichBar(console, only_on_terminal=False), description)


@contextlib.contextmanager
def _drawn(bar: RichBar, description: str) -> Iterator[Callable[[ImportProgress], None]]:
    advance = _as_snapshots(bar, description)

    def update(step: ImportProgress) -> None:
        advance(step)
        bar.note(f"{step.messages_seen} messages")

    with bar.shown():
        yield update


def _as_snapshots(progress: Progress, description: str) -> Callable[[ImportProgress], None]:
    """A :class:`Progress` fed from snapshots: the reader knows bytes read so far, a
    ``Progress`` wants increments."""
    done = -1

    def update(step: ImportProgress) -> None:
        nonlocal done
        if done < 0:
            progress.start(description, step.bytes_total or None, unit="bytes")
            done = 0
        progress.advance(step.bytes_read - done)
        done = step.bytes_read

    return update


# -- reading ---------------------------------------------------------------------------------


class _Text:
    """A UTF-8 file decoded chunk by chunk, with absolute positions kept for error messages.

    ``buf[pos:]`` is what is still to be parsed; everything before ``base`` (absolute
    character offset of ``buf[0]``) was consumed and dropped.
    """

    def __init__(self, fh: BinaryIO, name: str, total: int) -> None:
        self.fh = fh
        self.name = name
        self.total = total
        self.decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self.buf = ""
        self.pos = 0
        self.base = 0
        self.base_line = 1  # the line of buf[0]
        self.base_line_start = 0  # absolute offset where that line starts
        self.bytes_read = 0
        self.eof = False
        self.started = False

    def more(self) -> bool:
        """Read at least one more chunk (doubling with the size of a value in progress)."""
        if self.eof:
            return False
        want = max(_CHUNK_BYTES, len(self.buf) - self.pos)
        data = self.fh.read(want)
        self.bytes_read += len(data)
        try:
            text = self.decoder.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            offset = self.bytes_read - len(data) + exc.start
            raise ExportFormatError(
                self.name, "", f"not UTF-8 text (byte {offset} cannot be decoded)"
            ) from None
        if not self.started:
            self.started = True
            text = text.removeprefix("\ufeff")
        if not data:
            self.eof = True
        self.buf += text
        return True

    def compact(self) -> None:
        if self.pos < _CHUNK_BYTES:
            return
        dropped = self.buf[: self.pos]
        newlines = dropped.count("\n")
        if newlines:
            self.base_line += newlines
            self.base_line_start = self.base + dropped.rindex("\n") + 1
        self.base += self.pos
        self.buf = self.buf[self.pos :]
        self.pos = 0

    def location(self, index: int) -> tuple[int, int]:
        """Line and column (1-based) of ``buf[index]``."""
        newlines = self.buf.count("\n", 0, index)
        line = self.base_line + newlines
        if newlines:
            start = self.base + self.buf.rindex("\n", 0, index) + 1
        else:
            start = self.base_line_start
        return line, self.base + index - start + 1

    def error(self, index: int, path: str, problem: str) -> ExportFormatError:
        line, column = self.location(index)
        return ExportFormatError(self.name, path, problem, line=line, column=column)

    def skip_space(self) -> None:
        while True:
            end = _WHITESPACE.match(self.buf, self.pos)
            assert end is not None  # the pattern matches the empty string
            self.pos = end.end()
            if self.pos < len(self.buf) or not self.more():
                return

    def peek(self, path: str) -> str:
        self.skip_space()
        if self.pos >= len(self.buf):
            raise self.error(self.pos, path, "the file ends too early (truncated?)")
        return self.buf[self.pos]

    def expect(self, char: str, path: str, what: str) -> None:
        found = self.peek(path)
        if found != char:
            raise self.error(self.pos, path, f"expected {what}, found {found!r}")
        self.pos += 1

    def value(self, path: str) -> tuple[Any, int]:
        """Decode the next JSON value; returns it and the index where it started."""
        self.peek(path)
        decoder = _DECODER
        while True:
            start = self.pos
            try:
                value, end = decoder.raw_decode(self.buf, start)
            except json.JSONDecodeError as exc:
                # The value may just go on in the next chunk: the decoder then stops within a
                # few characters of the end (a cut literal, escape or delimiter) or at the
                # start of a string it could not close. Anything else is a real error, and
                # reading on to the end of a big file would only cost memory.
                cut = exc.pos >= len(self.buf) - _LOOKAHEAD or exc.msg.startswith("Unterminated")
                if cut and self.more():
                    continue
                problem = "the file ends too early (truncated?)"
                if exc.pos < len(self.buf):
                    problem = f"not valid JSON ({exc.msg})"
                raise self.error(exc.pos, path, problem) from None
            # A number could go on in the next chunk: only a value followed by more text
            # (or by the end of the file) is known to be whole.
            if end >= len(self.buf) and self.more():
                continue
            self.pos = end
            return value, start


_DECODER = json.JSONDecoder()


# -- validation ------------------------------------------------------------------------------


class _Malformed(Exception):
    """A field of one decoded value is wrong; the caller adds the position."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(path, problem)
        self.path = path
        self.problem = problem


def _describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _field(obj: Mapping[str, Any], name: str, path: str) -> Any:
    if name not in obj:
        raise _Malformed(f"{path}.{name}", "missing")
    return obj[name]


def _object(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise _Malformed(path, f"expected an object, found {_describe(value)}")
    return value


def _array(value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Malformed(path, f"expected an array, found {_describe(value)}")
    return value


def _text(value: Any, path: str, *, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise _Malformed(path, f"expected a string, found {_describe(value)}")
    return value


def _snowflake(value: Any, path: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        value = str(value)
    if not isinstance(value, str) or not _SNOWFLAKE.fullmatch(value):
        raise _Malformed(
            path, f"expected a Discord id (a string of digits), found {_describe(value)}"
        )
    return value


def _timestamp(value: Any, path: str) -> float:
    if not isinstance(value, str):
        raise _Malformed(path, f"expected an ISO 8601 date and time, found {_describe(value)}")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise _Malformed(
            path, f"expected an ISO 8601 date and time, found {value[:40]!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # the exporter always writes an offset
    at = moment.timestamp()
    if not 0 <= at < 1e11:
        raise _Malformed(path, f"the date {value[:40]!r} is out of range")
    return at


def _bool(value: Any, path: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _Malformed(path, f"expected true or false, found {_describe(value)}")
    return value


@dataclass(frozen=True, slots=True)
class _Author:
    id: str
    speaker: str | None
    bot: bool


def _author(value: Any, path: str) -> _Author:
    obj = _object(value, path)
    author_id = _snowflake(_field(obj, "id", path), f"{path}.id")
    name = _text(_field(obj, "name", path), f"{path}.name", optional=False)
    nickname = _text(obj.get("nickname"), f"{path}.nickname")
    is_bot = _bool(obj.get("isBot"), f"{path}.isBot")
    speaker = clean_name(nickname or name or "") or None
    return _Author(author_id, speaker, is_bot)


@dataclass(frozen=True, slots=True)
class _Parsed:
    """One dialogue message of the export, converted and capped."""

    at: float
    order: int  # the message id as a number: ties in time are broken by id
    message_id: str
    author: _Author
    content: str


def _attachments(value: Any, path: str) -> list[str]:
    names = []
    for i, item in enumerate(_array(value, path)):
        obj = _object(item, f"{path}[{i}]")
        name = _text(obj.get("fileName"), f"{path}[{i}].fileName")
        names.append(name or "file")
    return names


def _body(obj: Mapping[str, Any], path: str, users: Mapping[str, str]) -> str:
    """The text of a message (or of a forwarded one), with its notes."""
    content = _text(obj.get("content"), f"{path}.content") or ""
    content = resolve_markup(clean_text(content), users=users, channels={}, roles={})
    attachments = _attachments(obj.get("attachments"), f"{path}.attachments")
    notes = []
    for i, item in enumerate(_array(obj.get("stickers"), f"{path}.stickers")):
        sticker = _object(item, f"{path}.stickers[{i}]")
        notes.append(sticker_note(_text(sticker.get("name"), f"{path}.stickers[{i}].name") or ""))
    embeds = _array(obj.get("embeds"), f"{path}.embeds")
    for i, item in enumerate(embeds):
        embed = _object(item, f"{path}.embeds[{i}]")
        title = _text(embed.get("title"), f"{path}.embeds[{i}].title")
        description = _text(embed.get("description"), f"{path}.embeds[{i}].description")
        if not content.strip():  # beside text, an embed is mostly a link's preview
            note = embed_note(title, description)
            if note is not None:
                notes.append(note)
    return compose(content, notes, attachments)


def _mentions(value: Any, path: str) -> dict[str, str]:
    users = {}
    for i, item in enumerate(_array(value, path)):
        mentioned = _author(item, f"{path}[{i}]")
        if mentioned.speaker is not None:
            users[mentioned.id] = mentioned.speaker
    return users


def _message(value: Any, index: int, max_chars: int) -> _Parsed | str:
    """A dialogue message, or why it is skipped (``"system"`` or ``"empty"``)."""
    path = f"messages[{index}]"
    obj = _object(value, path)
    message_id = _snowflake(_field(obj, "id", path), f"{path}.id")
    kind = obj.get("type", "Default")
    if not isinstance(kind, str | int) or isinstance(kind, bool):
        raise _Malformed(f"{path}.type", f"expected a message type name, found {_describe(kind)}")
    at = _timestamp(_field(obj, "timestamp", path), f"{path}.timestamp")
    author = _author(_field(obj, "author", path), f"{path}.author")
    users = _mentions(obj.get("mentions"), f"{path}.mentions")
    text = _body(obj, path, users)
    forwarded = obj.get("forwardedMessage")
    if forwarded is not None:
        inner = f"{path}.forwardedMessage"
        fwd = _body(_object(forwarded, inner), inner, users)
        if fwd:
            text = f"{text}\n[forwarded message] {fwd}" if text else f"[forwarded message] {fwd}"
    if str(kind) not in _DIALOGUE_KINDS:
        return "system"
    if not text.strip():
        return "empty"
    return _Parsed(at, int(message_id), message_id, author, truncate(text, max_chars))


@dataclass(frozen=True, slots=True)
class _Channel:
    server_id: str | None
    server_name: str | None
    channel_id: str
    channel_name: str | None
    parent_channel_id: str | None
    group_dm: bool


def _channel(header: Mapping[str, Any]) -> _Channel:
    channel = _object(header["channel"], "channel")
    channel_id = _snowflake(_field(channel, "id", "channel"), "channel.id")
    kind = channel.get("type")
    if kind is not None and not isinstance(kind, str | int):
        raise _Malformed("channel.type", f"expected a channel type name, found {_describe(kind)}")
    kind = None if kind is None else str(kind)
    name = _text(channel.get("name"), "channel.name")
    server_id: str | None = None
    server_name = None
    if header.get("guild") is not None:
        guild = _object(header["guild"], "guild")
        server_id = _snowflake(_field(guild, "id", "guild"), "guild.id")
        server_name = _text(guild.get("name"), "guild.name")
    # The exporter files DMs under a made-up guild with id 0 ("Direct Messages").
    if (server_id is not None and int(server_id) == 0) or kind in _DM_KINDS | _GROUP_DM_KINDS:
        server_id = server_name = None
    parent = None
    if server_id is not None and kind in _THREAD_KINDS and channel.get("categoryId") is not None:
        # For a thread, the exporter's "category" is the thread's parent channel.
        parent = _snowflake(channel["categoryId"], "channel.categoryId")
    return _Channel(
        server_id=server_id,
        server_name=None if server_name is None else clean_name(server_name) or None,
        channel_id=channel_id,
        channel_name=None if name is None else clean_name(name) or None,
        parent_channel_id=parent,
        group_dm=kind in _GROUP_DM_KINDS,
    )


# -- the import ------------------------------------------------------------------------------


@dataclass
class _Tally:
    seen: int = 0
    system: int = 0
    empty: int = 0
    private: int = 0


class _Newest:
    """The newest ``limit`` messages seen, in any arrival order (exports can be newest-first)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.heap: list[tuple[float, int, _Parsed]] = []

    def add(self, parsed: _Parsed) -> None:
        item = (parsed.at, parsed.order, parsed)
        if len(self.heap) < self.limit:
            heapq.heappush(self.heap, item)
        elif item[:2] > self.heap[0][:2]:
            heapq.heapreplace(self.heap, item)

    def oldest_first(self) -> Iterator[_Parsed]:
        return (p for _, _, p in sorted(self.heap, key=lambda i: i[:2]))


def _messages(reader: _Text, tally: _Tally, max_chars: int) -> Iterator[_Parsed | str]:
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
            parsed = _message(value, index, max_chars)
        except _Malformed as bad:
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
    """Warm one channel's memory from a DiscordChatExporter JSON export (see the module doc).

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
    reader = _Text(fh, name, total)
    tally = _Tally()
    newest = _Newest(config.max_messages)
    header: dict[str, Any] = {}
    header_at: dict[str, tuple[int, int]] = {}
    humans: set[str] = set()
    private: dict[str, bool] = {}
    seen_messages = False

    told = _as_snapshots(progress, file) if isinstance(progress, Progress) else progress

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
                        if reader.bytes_read - read_before >= _CHUNK_BYTES:
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
                        if not _is_bot(author, bots) and len(humans) < 3:
                            humans.add(author.id)
                        if author.id not in private:
                            settings = await memory.user_settings(author.id)
                            private[author.id] = settings.privacy is Privacy.FULL
                        if private[author.id]:
                            tally.private += 1
                            continue
                        newest.add(item)
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
        where = _channel(header)
    except _Malformed as bad:
        line, column = header_at.get(bad.path.split(".")[0], (None, None))
        raise ExportFormatError(name, bad.path, bad.problem, line=line, column=column) from None

    return await _write(
        memory,
        where,
        newest,
        tally,
        file=file,
        humans=humans,
        bots=bots,
        persona_id=persona_id,
        lineage=persona_lineage_id,
        dry_run=dry_run,
    )


async def _write(
    memory: Memory,
    where: _Channel,
    newest: _Newest,
    tally: _Tally,
    *,
    file: str,
    humans: set[str],
    bots: frozenset[str] | None,
    persona_id: str | None,
    lineage: str | None,
    dry_run: bool,
) -> ImportReport:
    name = Path(file).name

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
            first_at=imported[0].at if imported else None,
            last_at=imported[-1].at if imported else None,
            process_local=isinstance(memory.cache, InProcessCache),
            dry_run=dry_run,
            reason=reason,
        )

    messages = [
        Message(
            "assistant" if _is_bot(p.author, bots) else "user",
            p.content,
            author_id=p.author.id,
            speaker=p.author.speaker,
            at=p.at,
            message_id=p.message_id,
        )
        for p in newest.oldest_first()
    ]
    private = False
    if where.server_id is not None:
        key = ScopeKey.server(where.server_id, where.channel_id, persona_id)
        settings = await memory.server_settings(where.server_id)
        private = settings.is_private(where.channel_id, where.parent_channel_id)
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
        if (await memory.user_settings(user_id)).privacy is not Privacy.NONE:
            return report(None, 0, [], "the DM's user keeps no personal memory (privacy)")
        key = ScopeKey.user(user_id, where.channel_id, persona_id)
    if not messages:
        return report(None, 0, [], "no dialogue messages to import")

    # Merge with what the scope holds (a live turn may have captured newer messages).
    fence = await memory.begin_write()
    existing = await memory.get(key)
    held = existing.messages if existing is not None else ()
    ids = {m.message_id for m in held if m.message_id is not None}
    new = [m for m in messages if m.message_id not in ids]
    keep = sorted([*held, *new], key=_when)[-memory.config.max_messages :]
    fresh = {id(m) for m in new}
    taken = [m for m in keep if id(m) in fresh]
    if dry_run:
        return report(key, len(keep), taken, None)

    meta = ScopeMeta(
        server_id=where.server_id,
        server_name=where.server_name,
        channel_name=where.channel_name,
        parent_channel_id=where.parent_channel_id,
        private=private,
        persona_lineage_id=lineage,
    )
    now = memory.clock()
    # The same one write as a turn's capture (the durable row, awaited, then the hot tier's
    # messages), fenced where the merge above began.
    if not await memory.write_capture(
        [(key, tuple(keep))], meta, increment=None, fence=fence, now=now
    ):
        return report(None, 0, [], "the channel was cleared while importing")
    return report(key, len(keep), taken, None)


def _is_bot(author: _Author, bots: frozenset[str] | None) -> bool:
    return author.id in bots if bots is not None else author.bot


def _when(m: Message) -> tuple[float, int]:
    order = int(m.message_id) if m.message_id is not None and m.message_id.isdigit() else 0
    return (m.at if m.at is not None else 0.0, order)
