"""Moving memory in and out: ``export`` (durable rows as JSON lines) and ``import``.

Every import format returns the one :class:`~shortterm.transfer.report.ImportReport` and
reports to the one :class:`~shortterm.transfer.progress.Progress`, drawn here as a bar.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import click

from .app import main
from .common import (
    filter_options,
    memory_for,
    memory_options,
    run,
    store_to_read,
    transfer_bar,
)

if TYPE_CHECKING:
    from ..memory.facade import Memory
    from ..transfer.progress import Progress
    from ..transfer.report import ImportReport


@main.command()
@memory_options
@click.argument("destination", default="-", type=click.Path(dir_okay=False, allow_dash=True))
@filter_options
def export(
    store: str,
    cache: str,
    destination: str,
    filters: dict[str, Any],
) -> None:
    """Write durable rows as JSON lines to DESTINATION (default: stdout).

    With no filter every row is streamed; with filters (as for inspect) only those rows. A
    file is written under a temporary name and renamed when complete. The format is in
    docs/cli.md.

    \b
    Example: shortterm export backup.jsonl --store postgresql://bot@db/bot
    """
    from ..transfer.rows import export_jsonl

    target: Any = sys.stdout if destination == "-" else destination
    where = store_to_read(store)

    async def go() -> int:
        async with memory_for(store, cache) as memory:
            with transfer_bar().shown() as bar:
                return await export_jsonl(memory, target, progress=bar, **filters)

    count = run(go())
    click.echo(f"exported {count} row(s) from {where}", err=True)


def _import_jsonl(
    memory: Memory, source: Any, dry_run: bool, progress: Progress
) -> Coroutine[Any, Any, ImportReport]:
    from ..transfer.rows import import_jsonl

    return import_jsonl(memory, source, dry_run=dry_run, progress=progress)


async def _import_discord(
    memory: Memory, source: Any, dry_run: bool, progress: Progress
) -> ImportReport:
    from ..integrations.chat_exporter import import_export_file

    if not isinstance(source, str):
        raise click.UsageError("a DiscordChatExporter import reads a file, not standard input")
    return await import_export_file(memory, source, progress=progress, dry_run=dry_run)


# Import formats by name: each reads SOURCE (a path, or stdin's binary stream) into memory,
# with `dry_run` writing nothing, and returns what it did (an ImportReport). Others register here.
Importer = Callable[["Memory", Any, bool, "Progress"], Coroutine[Any, Any, "ImportReport"]]
IMPORT_FORMATS: dict[str, Importer] = {"jsonl": _import_jsonl, "discord": _import_discord}


@main.command("import")
@memory_options
@click.argument("source", type=click.Path(dir_okay=False, allow_dash=True))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(sorted(IMPORT_FORMATS)),
    default="jsonl",
    show_default=True,
    help="What SOURCE holds.",
)
@click.option("--dry-run", is_flag=True, help="Check every line; write nothing.")
def import_(store: str, cache: str, source: str, fmt: str, dry_run: bool) -> None:
    """Import durable rows from SOURCE (a file, or - for stdin).

    Every line is checked first: a file with any bad line is refused whole (exit 2), naming
    each line and field at fault. A valid file is then written in batches; a row replaces
    the stored row with the same key, so an import that stopped on a store failure completes
    when run again.

    \b
    Example: shortterm import backup.jsonl --store sqlite:///restored.db
    """
    reader = IMPORT_FORMATS[fmt]
    stream: Any = sys.stdin.buffer if source == "-" else source

    async def go() -> ImportReport:
        async with memory_for(store, cache) as memory:
            with transfer_bar().shown() as bar:
                return await reader(memory, stream, dry_run, bar)

    for line in run(go()).describe():
        click.echo(line)
