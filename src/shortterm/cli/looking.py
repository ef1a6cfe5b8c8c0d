"""Looking without changing anything: ``inspect`` (durable rows) and ``show`` (one scope).

Cells are printed as plain text, never as rich markup: they hold what users wrote.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import click

from .app import main
from .common import (
    ago,
    filter_options,
    memory_for,
    memory_options,
    run,
    stdout_console,
    store_to_read,
)

if TYPE_CHECKING:
    from rich.table import Table

    from ..model import Entry, ScopeRow


def _persona(persona_id: str | None) -> str:
    return "—" if persona_id is None else persona_id


def _one_line(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _fitted_table(
    headers: list[str], cells: list[list[str]], *, flexible: int, width: int | None
) -> tuple[Table, int]:
    """A table and the width it takes. With a ``width`` (a terminal) it fits: every column as
    wide as its content (at most 30), and the ``flexible`` one cut with an ellipsis to the
    room left. With ``None`` (a pipe or a file) nothing is cut. Cells are plain text, never
    markup: they hold what users wrote."""
    from rich import box
    from rich.cells import cell_len
    from rich.table import Table
    from rich.text import Text

    flat = [[" ".join(c.split()) for c in row] for row in cells]
    widths = [
        max([cell_len(h), *(cell_len(row[i]) for row in flat)]) for i, h in enumerate(headers)
    ]
    if width is not None:
        fixed = [min(w, 30) for i, w in enumerate(widths) if i != flexible]
        room = width - sum(fixed) - 3 * (len(headers) - 1)  # three spaces between columns
        widths = [
            min(w, 30) if i != flexible else max(10, min(w, room)) for i, w in enumerate(widths)
        ]
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for header, w in zip(headers, widths, strict=True):
        table.add_column(header, no_wrap=True, overflow="ellipsis", max_width=w, min_width=w)
    for row in flat:
        table.add_row(
            *(
                Text(c if width is None else _one_line(c, w))
                for c, w in zip(row, widths, strict=True)
            )
        )
    return table, sum(widths) + 3 * (len(headers) - 1)


def _print_json(obj: Any) -> None:
    import json

    click.echo(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))


@main.command()
@memory_options
@filter_options
@click.option(
    "--limit",
    default=200,
    show_default=True,
    type=click.IntRange(min=1),
    help="Show at most this many rows.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON object per row (the export format)."
)
def inspect(
    store: str,
    cache: str,
    filters: dict[str, Any],
    limit: int,
    as_json: bool,
) -> None:
    """List the durable rows of a server, channel or user as a table.

    Pass at least one of --server, --channel or --user: each is one indexed query. --server
    alone lists the server's shared (server-scope) rows; add --channel or --user for user
    scopes. Values are shown as stored; "(expired)" marks one past its TTL. On a terminal
    the table fits its width; piped, nothing is cut. --json prints one object per row.

    \b
    Example: shortterm inspect --server 333 --channel 222 --persona 7
    """
    if not filters:
        raise click.UsageError("pass --server, --channel or --user (export lists every row)")
    where = store_to_read(store)

    async def go() -> tuple[list[ScopeRow], float, int]:
        async with memory_for(store, cache) as memory:
            rows = await memory.find_rows(**filters)
            return rows, memory.clock(), memory.config.summary_ttl_s

    rows, now, ttl = run(go())
    if as_json:
        from ..transfer.rows import row_to_dict

        for row in rows[:limit]:
            _print_json(row_to_dict(row))
        if len(rows) > limit:
            click.echo(f"… and {len(rows) - limit} more (raise --limit)", err=True)
        return
    console = stdout_console()
    if not rows:
        click.echo(f"no rows match in {where}")
        return
    cells = []
    for row in rows[:limit]:
        key, meta = row.key, row.meta
        channel = key.channel_id + (f" #{meta.channel_name}" if meta.channel_name else "")
        summary = " ".join(row.summary.split()) if row.summary else "—"
        if row.summary_at is not None and row.summary_at + ttl <= now:
            summary += " (expired)"
        slugs = ", ".join(sorted(row.categories)) or "—"
        if row.categories and (row.categories_at or 0) + ttl <= now:
            slugs += " (expired)"
        cells.append(
            [
                key.kind,
                key.owner_id,
                channel,
                _persona(key.persona_id),
                summary,
                slugs,
                str(row.turns_since_refresh),
                ago(row.updated_at, now),
            ]
        )
    table, needed = _fitted_table(
        ["kind", "owner", "channel", "persona", "summary", "categories", "turns", "written"],
        cells,
        flexible=4,
        width=console.width if console.is_terminal else None,
    )
    if not console.is_terminal:  # a pipe or a file: as wide as the rows, nothing cut
        from rich.console import Console

        console = Console(highlight=False, width=needed)
    console.print(table)
    if len(rows) > limit:
        console.print(f"… and {len(rows) - limit} more (raise --limit)", markup=False)


# Crude messages never reach the store: with this command's own in-process cache, a bot's
# messages are invisible to it, and "nothing" alone would read as "forgotten".
WHERE_MESSAGES_ARE = (
    "recent messages live only in the hot tier of the process that captured them: a running "
    "bot's or sidecar's in-process cache (the sidecar shows them at GET "
    "/v1/{servers|users}/{id}/channels/{channel}/entry and in its inspector, /ui/), or the "
    "bots' Redis (pass --cache redis://… or set SHORTTERM_CACHE to read it from here)"
)


@main.command()
@memory_options
@click.argument("kind", type=click.Choice(["user", "server"]))
@click.argument("owner_id")
@click.argument("channel_id")
@click.option("--persona", "persona_id", default=None, help="The persona (default: none).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: the entry, or null.")
def show(
    store: str,
    cache: str,
    kind: str,
    owner_id: str,
    channel_id: str,
    persona_id: str | None,
    as_json: bool,
) -> None:
    """Show what one scope remembers now: summary, categories and recent messages.

    KIND is user (OWNER_ID is a user id) or server (OWNER_ID is a server id). Recent messages
    live in the hot tier: a shared cache (--cache redis://…) shows what the bots see. When
    nothing is remembered for the persona asked, the personas that have an entry in that
    scope are listed.

    \b
    Example: shortterm show server 333 222 --persona 7
    """
    from rich.text import Text

    from ..model import ScopeKey

    if kind == "user":
        key = ScopeKey.user(owner_id, channel_id, persona_id)
        around: dict[str, Any] = {"kind": "user", "user_id": owner_id, "channel_id": channel_id}
    else:
        key = ScopeKey.server(owner_id, channel_id, persona_id)
        around = {"kind": "server", "server_id": owner_id, "channel_id": channel_id}
    where = store_to_read(store)

    async def go() -> tuple[Entry | None, float, list[str | None]]:
        async with memory_for(store, cache) as memory:
            entry = await memory.get(key)
            others: list[str | None] = []
            if entry is None:
                # Durable rows say which personas this scope has; each is checked live.
                for row in await memory.find_rows(**around):
                    if row.key.persona_id != persona_id and await memory.get(row.key):
                        others.append(row.key.persona_id)
            return entry, memory.clock(), others

    entry, now, others = run(go())
    if as_json:
        _print_json(None if entry is None else _entry_to_dict(entry))
        return
    console = stdout_console()
    title = f"{kind} {owner_id} · channel {channel_id}"
    if entry is not None and entry.channel_name:
        title += f" #{entry.channel_name}"
    title += f" · persona {_persona(persona_id)}"
    console.print(Text(title, style="bold"))
    private_tier = urlsplit(cache).scheme.lower() == "memory"
    if entry is None:
        click.echo(f"nothing is remembered for this scope right now in {where}")
        if others:
            listed = ", ".join(
                f"{p} (--persona {p})" if p is not None else "none (without --persona)"
                for p in others
            )
            click.echo(f"personas with an entry here: {listed}")
        if private_tier:
            click.echo(WHERE_MESSAGES_ARE)
        return
    if entry.summary is not None:
        console.print(f"summary, written {ago(entry.summary_at, now)}:", markup=False)
        console.print(Text("  " + entry.summary.replace("\n", "\n  ")))
    if entry.categories:
        console.print(f"categories, written {ago(entry.categories_at, now)}:", markup=False)
        for slug, text in sorted(entry.categories.items()):
            console.print(Text(f"  {slug}: {text}"))
    console.print(f"turns since the last summary: {entry.turns_since_refresh}", markup=False)
    if entry.messages:
        console.print(f"recent messages ({len(entry.messages)}):", markup=False)
        for message in entry.messages:
            speaker = message.speaker or message.role
            line = Text(f"  [{ago(message.at, now)}] ", style="dim")
            line.append(f"{speaker}: {_one_line(message.content, 200)}", style="")
            console.print(line)
    else:
        console.print("no recent messages in this hot tier", markup=False)
        if private_tier:
            click.echo(WHERE_MESSAGES_ARE)


def _entry_to_dict(entry: Entry) -> dict[str, Any]:
    key = entry.key
    return {
        "key": {
            "kind": key.kind,
            "owner_id": key.owner_id,
            "channel_id": key.channel_id,
            "persona_id": key.persona_id,
        },
        "server_id": entry.server_id,
        "server_name": entry.server_name,
        "channel_name": entry.channel_name,
        "summary": entry.summary,
        "summary_at": entry.summary_at,
        "categories": dict(sorted(entry.categories.items())),
        "categories_at": entry.categories_at,
        "turns_since_refresh": entry.turns_since_refresh,
        "messages": [
            {
                "role": m.role,
                "content": m.content,
                "author_id": m.author_id,
                "speaker": m.speaker,
                "at": m.at,
                "message_id": m.message_id,
            }
            for m in entry.messages
        ],
    }
