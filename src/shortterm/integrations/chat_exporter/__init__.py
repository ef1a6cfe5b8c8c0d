"""Warm a channel's memory from a DiscordChatExporter JSON export.

::

    from shortterm.integrations.chat_exporter import import_export_file

    report = await import_export_file(memory, "Hikers - general [4000].json")
    print(report.messages_kept, report.key)

From the command line: ``shortterm import --format discord FILE.json``.

What is written: the newest ``max_messages`` dialogue messages of the file (timestamps, authors,
display names and message ids preserved) become the crude messages of the channel's **server
scope** — the channel's shared memory — as if the bot had read that history on a turn now. No
user scope is written: the people in an export never asked this bot to follow them personally,
and the export says nothing about the bot's persona. A one-to-one DM has no server scope, so it
goes to the user scope of its one human participant (skipped when that user chose partial or
full privacy); group DMs are refused. Messages merge with what the scope already holds (by
message id, newest kept), summaries and categories are untouched, and the cadence counter does
not move (an import is not a bot turn). An export is the platform's history: what a clear, a
purge or a full privacy choice covered (by the export's timestamps) is left out, and the bot's
answers to a purged user's messages with them, as from a live turn.

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

The package, in reading order: :mod:`.reader` (the streaming JSON reader), :mod:`.validate`
(validators that name the JSON path at fault), :mod:`.format` (the exporter's messages and
channel), :mod:`.importer` (the import and its one capture write) and :mod:`.progress`.
"""

from __future__ import annotations

from ...transfer.report import ImportReport
from .importer import import_export_file
from .progress import ImportProgress, progress_bar
from .reader import ExportFormatError

__all__ = [
    "ExportFormatError",
    "ImportProgress",
    "ImportReport",
    "import_export_file",
    "progress_bar",
]
