"""The ``shortterm`` command line.

Each command is one library call, plus what it takes to show the result; rich, pydantic and
the MCP SDK are imported inside the commands that use them, so ``shortterm --help`` stays
fast. Errors become exit codes in one place, :meth:`_Group.invoke`:

====  ===========================================================
0     done
1     a confirmation was declined (nothing was changed)
2     invalid input or configuration (``InvalidInput``, ``ConfigError``, a malformed import)
3     the store or cache is unavailable (``StoreUnavailable``)
4     an optional dependency is missing (``ExtraMissing``); the message says what to install
====  ===========================================================

Commands that open memory take ``--store`` and ``--cache`` (defaults from ``SHORTTERM_STORE``
and ``SHORTTERM_CACHE``, then ``sqlite:///shortterm.db`` and ``memory://``) and read the rest
of their configuration with ``Config.from_env``. Every command is documented, with examples,
in ``docs/cli.md``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..memory.backends import DEFAULT_STORE_URL, shown_url
from ..model.errors import (
    ConfigError,
    ExtraMissing,
    InvalidInput,
    ShortTermError,
    StoreUnavailable,
)

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from ..memory.facade import Memory, _Opening
    from ..model import Entry, ScopeRow
    from ..transfer.progress import Progress, RichBar
    from ..transfer.report import ImportReport

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

EXIT_DECLINED = 1
EXIT_INVALID = 2
EXIT_UNAVAILABLE = 3
EXIT_EXTRA_MISSING = 4


class Declined(Exception):
    """The user answered no to a confirmation."""


def exit_code(exc: BaseException) -> int | None:
    """The exit code for an error a command raised; ``None`` for errors we do not map."""
    if isinstance(exc, Declined):
        return EXIT_DECLINED
    if isinstance(exc, StoreUnavailable):
        return EXIT_UNAVAILABLE
    if isinstance(exc, ExtraMissing):
        return EXIT_EXTRA_MISSING
    if isinstance(exc, InvalidInput | ConfigError):
        return EXIT_INVALID
    if isinstance(exc, ShortTermError):
        return EXIT_INVALID  # no other kind exists today; refuse rather than crash
    return None


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (ShortTermError, Declined) as exc:
            code = exit_code(exc)
            assert code is not None
            if isinstance(exc, Declined):
                click.echo("nothing was changed", err=True)
            else:
                click.echo(f"error: {exc}", err=True)
            ctx.exit(code)


@click.group(cls=_Group)
@click.version_option(package_name="shortterm")
def main() -> None:
    """Working memory for LLM chat bots.

    \b
    Example: shortterm inspect --channel 222
    """


# -- shared plumbing -------------------------------------------------------------------------


def _run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


# The environment is read here, once, for every command that opens memory: a command with
# its own --store/--cache decorator would silently ignore SHORTTERM_STORE / SHORTTERM_CACHE.
_store_option = click.option(
    "--store",
    envvar="SHORTTERM_STORE",
    default=DEFAULT_STORE_URL,
    show_default=True,
    show_envvar=True,
    help="Durable tier URL (sqlite:///…, postgresql://…, memory://).",
)
_cache_option = click.option(
    "--cache",
    envvar="SHORTTERM_CACHE",
    default="memory://",
    show_default=True,
    show_envvar=True,
    help="Hot tier URL (memory:// or redis://…).",
)


def memory_options(fn: F) -> F:
    """``--store`` and ``--cache``, defaulting to ``SHORTTERM_STORE`` / ``SHORTTERM_CACHE``."""
    return _store_option(_cache_option(fn))


def _open(store: str, cache: str, *, hydrate: bool = False) -> _Opening:
    """Memory for one command. No hydration: a command costs what it touches."""
    from ..memory.facade import open as open_memory
    from ..model.config import Config

    return open_memory(store, cache, config=Config.from_env(os.environ), hydrate=hydrate)


def _store_to_read(store: str) -> str:
    """The store a read command reads, as it names it (a SQLite file by its resolved path).

    Opening a SQLite URL creates the file, so a read command run in the wrong directory
    would make an empty store and report that nothing matches: it is refused instead."""
    from urllib.parse import urlsplit

    if "://" not in store or urlsplit(store).scheme.lower() != "sqlite":
        return shown_url(store)  # anything else is refused, by name, when opened
    from ..store.sqlite import sqlite_path

    path = Path(sqlite_path(store)).resolve()
    if not path.exists():
        raise StoreUnavailable(
            f"no store at {path} (--store {store}): the file does not exist, and reading does "
            "not create one; pass --store or set SHORTTERM_STORE to the bot's database"
        )
    return str(path)


def _out() -> Console:
    from rich.console import Console

    return Console(highlight=False)


def _err() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def _bar() -> RichBar:
    """The progress bar of export and import: on stderr, drawn only on a terminal."""
    from ..transfer.progress import RichBar

    return RichBar(_err())


@contextmanager
def _spinner(text: str) -> Iterator[None]:
    console = _err()
    if not console.is_terminal:
        yield
        return
    with console.status(text):
        yield


def _confirm(question: str, yes: bool) -> None:
    if not yes and not click.confirm(question, default=False, err=True):
        raise Declined()


def _ago(then: float | None, now: float) -> str:
    from ..prompt.reltime import relative_time

    return "—" if then is None else relative_time(then, now)


def _filter_options(fn: F) -> F:
    """The row filters shared by ``inspect`` and ``export``."""
    for option in reversed(
        [
            click.option("--server", "server_id", help="Rows of this server."),
            click.option("--channel", "channel_id", help="Rows of this channel."),
            click.option("--user", "user_id", help="This user's user scopes."),
            click.option("--persona", "persona_id", help="Only this persona."),
            click.option("--no-persona", is_flag=True, help="Only rows without a persona."),
            click.option(
                "--kind", type=click.Choice(["user", "server"]), help="Only this scope kind."
            ),
        ]
    ):
        fn = option(fn)
    return fn


def _filters(
    server_id: str | None,
    channel_id: str | None,
    user_id: str | None,
    persona_id: str | None,
    no_persona: bool,
    kind: str | None,
) -> dict[str, Any]:
    if persona_id is not None and no_persona:
        raise InvalidInput("persona", persona_id, "either --persona or --no-persona, not both")
    narrowing = persona_id is not None or no_persona or kind is not None
    if narrowing and server_id is None and channel_id is None and user_id is None:
        raise click.UsageError(
            "--persona, --no-persona and --kind narrow --server, --channel or --user"
        )
    filters: dict[str, Any] = {
        name: value
        for name, value in (
            ("server_id", server_id),
            ("channel_id", channel_id),
            ("user_id", user_id),
            ("persona_id", persona_id),
            ("kind", kind),
        )
        if value is not None
    }
    if no_persona:
        filters["persona_id"] = None
    return filters


# -- the library, tried out ------------------------------------------------------------------


@main.command()
@click.option(
    "--store", default="sqlite:///shortterm-demo.db", show_default=True, help="Durable tier URL."
)
@click.option("--cache", default="memory://", show_default=True, help="Hot tier URL.")
@click.option("--keep", is_flag=True, help="Keep the demo database instead of starting fresh.")
def demo(store: str, cache: str, keep: bool) -> None:
    """Run a scripted conversation and print what is remembered.

    The demo starts from an empty database (unless --keep), so it has its own default store
    and ignores SHORTTERM_STORE and SHORTTERM_CACHE.

    \b
    Example: shortterm demo --store sqlite:///demo.db
    """
    from .demo import run_demo

    _run(run_demo(store=store, cache=cache, fresh=not keep))


@main.command()
@click.option("--host", default=None, help="Address to listen on. [default: 127.0.0.1]")
@click.option("--port", default=None, type=int, help="Port to listen on. [default: 8765]")
@memory_options
@click.option("--quickstart", is_flag=True, help="Print three curl commands to try it with.")
def serve(host: str | None, port: int | None, store: str, cache: str, quickstart: bool) -> None:
    """Run the HTTP sidecar (JSON under /v1, /healthz, /metrics, /openapi.json).

    On an address other than loopback it refuses to start without SHORTTERM_TOKEN, and with a
    token every route but /healthz needs 'Authorization: Bearer <token>'. SHORTTERM_HOST,
    SHORTTERM_PORT, SHORTTERM_MAX_BODY_BYTES, SHORTTERM_TURN_TTL_S, SHORTTERM_MAX_TURNS and
    the library's SHORTTERM_* settings are read from the environment.

    \b
    Example: shortterm serve --quickstart --store sqlite:///bot.db
    Off loopback: SHORTTERM_TOKEN=... shortterm serve --host 0.0.0.0
    """
    import os

    from ..model.config import Config

    try:
        from ..sidecar.run import run
        from ..sidecar.settings import SidecarSettings

        settings = SidecarSettings.from_env(os.environ, host=host, port=port)
        settings.check_exposure()
        run(
            settings,
            store=store,
            cache=cache,
            config=Config.from_env(os.environ),
            quickstart=quickstart,
            echo=lambda line: click.echo(line, err=True),
        )
    except KeyboardInterrupt:  # Ctrl-C: the server already shut down gracefully
        pass
    except ShortTermError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)


def _sizes(text: str) -> list[int]:
    return [int(float(part)) for part in text.split(",") if part.strip()]


@main.command()
@click.option(
    "--entries",
    default="10000,1000000",
    show_default=True,
    help="Comma-separated live-entry counts to measure operations at.",
)
@click.option("--ops", default=20_000, show_default=True, help="Operations measured per size.")
@click.option(
    "--turns",
    default=200_000,
    show_default=True,
    help="Full chat-day turns on the embedded default.",
)
@click.option(
    "--hydrate",
    default="100000,1000000",
    show_default=True,
    help="Comma-separated row counts for the hydration measurement.",
)
@click.option(
    "--memory-entries",
    default=200_000,
    show_default=True,
    help="Entries of 10 unique messages for the bytes-per-entry measurement.",
)
@click.option(
    "--peers/--no-peers",
    default=True,
    show_default=True,
    help="Also time the peers that are installed (pip install 'shortterm[bench]').",
)
@click.option("--quick", is_flag=True, help="Small sizes: a smoke run in seconds.")
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Markdown file whose chat-day section is replaced with the results.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write every figure as JSON.",
)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="PNG of per-operation latency against live entries (needs matplotlib).",
)
def bench(
    entries: str,
    ops: int,
    turns: int,
    hydrate: str,
    memory_entries: int,
    peers: bool,
    quick: bool,
    output: Path | None,
    json_path: Path | None,
    plot: Path | None,
) -> None:
    """Run the chat-day benchmark with its floors measured in the same run.

    \b
    Example: shortterm bench --quick --output bench.md --json bench.json
    """
    from ..bench.run import BenchOptions, run_bench

    if quick:
        entries, ops, turns, hydrate, memory_entries = "1000,10000", 1000, 2000, "5000", 5000
    opts = BenchOptions(
        entries=_sizes(entries),
        ops=ops,
        hydrate=_sizes(hydrate),
        turns=turns,
        memory_entries=memory_entries,
        peers=peers,
        command=" ".join(["shortterm bench", *sys.argv[2:]]),
    )
    click.echo(run_bench(opts, output=output, json_path=json_path, plot=plot))


# -- looking ---------------------------------------------------------------------------------


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
@_filter_options
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
    server_id: str | None,
    channel_id: str | None,
    user_id: str | None,
    persona_id: str | None,
    no_persona: bool,
    kind: str | None,
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
    filters = _filters(server_id, channel_id, user_id, persona_id, no_persona, kind)
    if not filters:
        raise click.UsageError("pass --server, --channel or --user (export lists every row)")
    where = _store_to_read(store)

    async def go() -> tuple[list[ScopeRow], float, int]:
        async with _open(store, cache) as memory:
            rows = await memory.find_rows(**filters)
            return rows, memory.clock(), memory.config.summary_ttl_s

    rows, now, ttl = _run(go())
    if as_json:
        from ..transfer.rows import row_to_dict

        for row in rows[:limit]:
            _print_json(row_to_dict(row))
        if len(rows) > limit:
            click.echo(f"… and {len(rows) - limit} more (raise --limit)", err=True)
        return
    console = _out()
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
                _ago(row.updated_at, now),
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
    where = _store_to_read(store)

    async def go() -> tuple[Entry | None, float, list[str | None]]:
        async with _open(store, cache) as memory:
            entry = await memory.get(key)
            others: list[str | None] = []
            if entry is None:
                # Durable rows say which personas this scope has; each is checked live.
                for row in await memory.find_rows(**around):
                    if row.key.persona_id != persona_id and await memory.get(row.key):
                        others.append(row.key.persona_id)
            return entry, memory.clock(), others

    entry, now, others = _run(go())
    if as_json:
        _print_json(None if entry is None else _entry_to_dict(entry))
        return
    console = _out()
    title = f"{kind} {owner_id} · channel {channel_id}"
    if entry is not None and entry.channel_name:
        title += f" #{entry.channel_name}"
    title += f" · persona {_persona(persona_id)}"
    console.print(Text(title, style="bold"))
    if entry is None:
        click.echo(f"nothing is remembered for this scope right now in {where}")
        if others:
            listed = ", ".join(
                f"{p} (--persona {p})" if p is not None else "none (without --persona)"
                for p in others
            )
            click.echo(f"personas with an entry here: {listed}")
        return
    if entry.summary is not None:
        console.print(f"summary, written {_ago(entry.summary_at, now)}:", markup=False)
        console.print(Text("  " + entry.summary.replace("\n", "\n  ")))
    if entry.categories:
        console.print(f"categories, written {_ago(entry.categories_at, now)}:", markup=False)
        for slug, text in sorted(entry.categories.items()):
            console.print(Text(f"  {slug}: {text}"))
    console.print(f"turns since the last summary: {entry.turns_since_refresh}", markup=False)
    if entry.messages:
        console.print(f"recent messages ({len(entry.messages)}):", markup=False)
        for message in entry.messages:
            speaker = message.speaker or message.role
            line = Text(f"  [{_ago(message.at, now)}] ", style="dim")
            line.append(f"{speaker}: {_one_line(message.content, 200)}", style="")
            console.print(line)
    else:
        console.print("no recent messages in this hot tier", markup=False)


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


# -- forgetting ------------------------------------------------------------------------------


@main.group()
def clear() -> None:
    """Forget a channel, a user, or one server channel's shared memory (both tiers).

    Each subcommand asks for confirmation; --yes skips it. Every process on the same store
    follows the forget before its next call returns, whatever its cache.

    \b
    Example: shortterm clear channel 222 --yes
    """


def _cleared(count: int) -> None:
    click.echo(f"forgot {count} entr{'y' if count == 1 else 'ies'}")


@clear.command("channel")
@memory_options
@click.argument("channel_id")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def clear_channel(store: str, cache: str, channel_id: str, yes: bool) -> None:
    """Forget every user, persona and scope of a channel.

    \b
    Example: shortterm clear channel 222
    """
    _confirm(f"Forget everything remembered in channel {channel_id}?", yes)

    async def go() -> int:
        async with _open(store, cache) as memory:
            return await memory.clear_channel(channel_id)

    _cleared(_run(go()))


@clear.command("user")
@memory_options
@click.argument("user_id")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def clear_user(store: str, cache: str, user_id: str, yes: bool) -> None:
    """Forget a user: their user scopes, and their messages in every hot entry.

    \b
    Example: shortterm clear user 111 --yes
    """
    _confirm(f"Forget user {user_id} everywhere?", yes)

    async def go() -> int:
        async with _open(store, cache) as memory:
            return await memory.clear_user(user_id)

    _cleared(_run(go()))


@clear.command("server-channel")
@memory_options
@click.argument("server_id")
@click.argument("channel_id")
@click.option("--persona", "persona_id", default=None, help="The persona (default: none).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def clear_server_channel(
    store: str, cache: str, server_id: str, channel_id: str, persona_id: str | None, yes: bool
) -> None:
    """Forget one channel's shared memory for one persona.

    \b
    Example: shortterm clear server-channel 333 222 --persona 7
    """
    who = f"persona {persona_id}" if persona_id is not None else "no persona"
    _confirm(f"Forget the shared memory of channel {channel_id} in {server_id} ({who})?", yes)

    async def go() -> int:
        async with _open(store, cache) as memory:
            return await memory.clear_server_channel(server_id, channel_id, persona_id)

    _cleared(_run(go()))


@main.command()
@memory_options
@click.argument("user_id")
@click.argument("level", type=click.Choice(["none", "partial", "full"]))
@click.option(
    "--cross-server/--no-cross-server",
    default=None,
    help="Opt the user in to (or out of) recall across servers [default: keep the stored choice].",
)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation (asked for full only).")
def privacy(
    store: str, cache: str, user_id: str, level: str, cross_server: bool | None, yes: bool
) -> None:
    """Store a user's privacy choice; full also forgets what was kept of them.

    Every process on the same store honours the choice before its next call returns.

    \b
    Example: shortterm privacy 111 full --yes
    """
    from ..model import Privacy, UserSettings

    chosen = Privacy(level)
    if chosen is Privacy.FULL:
        _confirm(f"Forget user {user_id} and never remember them again?", yes)

    async def go() -> UserSettings:
        async with _open(store, cache) as memory:
            current = await memory.user_settings(user_id)
            opt_in = current.cross_server_opt_in if cross_server is None else cross_server
            settings = UserSettings(chosen, opt_in)
            await memory.configure_user(user_id, settings)
            return settings

    done = _run(go())
    what = " (what was kept of them is forgotten)" if done.privacy is Privacy.FULL else ""
    across = "on" if done.cross_server_opt_in else "off"
    click.echo(f"user {user_id}: privacy {done.privacy.value}, cross-server recall {across}{what}")


# -- the durable tier ------------------------------------------------------------------------


@main.command()
@memory_options
@click.option(
    "--retention-days",
    type=click.IntRange(min=0),
    default=None,
    help="Delete rows untouched for this many days [default: SHORTTERM_JANITOR_RETENTION_DAYS "
    "or 90].",
)
def janitor(store: str, cache: str, retention_days: int | None) -> None:
    """Delete durable rows nobody has touched for a long time (run it daily, from cron).

    \b
    Example: shortterm janitor --retention-days 30
    """

    async def go() -> tuple[int, int]:
        async with _open(store, cache) as memory:
            days = (
                memory.config.janitor_retention_days if retention_days is None else retention_days
            )
            with _spinner("deleting old rows"):
                return await memory.janitor(days), days

    count, days = _run(go())
    click.echo(f"deleted {count} row(s) untouched for {days} day(s)")


@main.command()
@_store_option
def migrate(store: str) -> None:
    """Apply pending schema migrations to the store (opening memory does it too).

    \b
    Example: shortterm migrate --store postgresql://bot@db/bot
    """
    from ..memory.backends import make_store

    async def go() -> list[str]:
        backend = make_store(store)
        try:
            return await backend.migrate()
        finally:
            await backend.close()

    applied = _run(go())
    click.echo(f"applied {', '.join(applied)}" if applied else "the schema is up to date")


@main.command()
@memory_options
@click.argument("destination", default="-", type=click.Path(dir_okay=False, allow_dash=True))
@_filter_options
def export(
    store: str,
    cache: str,
    destination: str,
    server_id: str | None,
    channel_id: str | None,
    user_id: str | None,
    persona_id: str | None,
    no_persona: bool,
    kind: str | None,
) -> None:
    """Write durable rows as JSON lines to DESTINATION (default: stdout).

    With no filter every row is streamed; with filters (as for inspect) only those rows. A
    file is written under a temporary name and renamed when complete. The format is in
    docs/cli.md.

    \b
    Example: shortterm export backup.jsonl --store postgresql://bot@db/bot
    """
    from ..transfer.rows import export_jsonl

    filters = _filters(server_id, channel_id, user_id, persona_id, no_persona, kind)
    target: Any = sys.stdout if destination == "-" else destination
    where = _store_to_read(store)

    async def go() -> int:
        async with _open(store, cache) as memory:
            with _bar().shown() as bar:
                return await export_jsonl(memory, target, progress=bar, **filters)

    count = _run(go())
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
        async with _open(store, cache) as memory:
            with _bar().shown() as bar:
                return await reader(memory, stream, dry_run, bar)

    for line in _run(go()).describe():
        click.echo(line)


# -- serving ---------------------------------------------------------------------------------


@main.command("mcp")
@memory_options
@click.option("--user-id", help="Fix the scope's user (else a tool argument).")
@click.option("--channel-id", help="Fix the scope's channel (else a tool argument).")
@click.option(
    "--server-id", help="Fix the scope's server (none, with --user-id and --channel-id: a DM)."
)
@click.option("--persona-id", help="Fix the scope's persona.")
@click.option("--persona-lineage-id", help="Recall only entries of this persona lineage.")
@click.option("--bot-name", default="Assistant", show_default=True, help="The bot's name.")
@click.option("--user-name", help="The user's display name.")
@click.option("--server-name", help="The server's display name.")
@click.option("--channel-name", help="The channel's display name.")
def mcp(
    store: str,
    cache: str,
    user_id: str | None,
    channel_id: str | None,
    server_id: str | None,
    persona_id: str | None,
    persona_lineage_id: str | None,
    bot_name: str,
    user_name: str | None,
    server_name: str | None,
    channel_name: str | None,
) -> None:
    """Serve memory to an MCP client over stdio (the update and read tools, a resource).

    Give --user-id and --channel-id to fix the conversation: the model then reaches no other
    memory. Parts you leave out become tool arguments. Needs: pip install 'shortterm[mcp]'.

    \b
    Example: shortterm mcp --store sqlite:///bot.db --user-id 111 --channel-id 222
    """
    from ..integrations.mcp import Scope, serve_stdio

    scope = Scope(
        user_id=user_id,
        channel_id=channel_id,
        server_id=server_id,
        persona_id=persona_id,
        persona_lineage_id=persona_lineage_id,
        bot_name=bot_name,
        user_name=user_name,
        server_name=server_name,
        channel_name=channel_name,
    )
    _run(serve_stdio(store=store, cache=cache, scope=scope))


# -- the HTTP sidecar ------------------------------------------------------------------------

# The `serve` command (the HTTP sidecar) goes here, in its own section.
