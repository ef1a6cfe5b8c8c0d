"""What the commands share: running a coroutine, opening memory, consoles, row filters.

rich and the library's heavier modules are imported inside the helpers, so importing the
command line stays cheap.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..memory.backends import DEFAULT_STORE_URL
from ..model.errors import InvalidInput, StoreUnavailable
from ..model.urls import checked_url, shown_url
from .app import Declined

if TYPE_CHECKING:
    from rich.console import Console

    from ..memory.opening import Opening
    from ..transfer.progress import RichBar

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

# An option whose default --help shows.
shown_option = functools.partial(click.option, show_default=True)


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


# The environment is read here, once, for every command that opens memory: a command with
# its own --store/--cache decorator would silently ignore SHORTTERM_STORE / SHORTTERM_CACHE.
store_option = click.option(
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
    help="Hot tier URL (memory://, redis://…, redis+cluster://… or redis+sentinel://…).",
)


def memory_options(fn: F) -> F:
    """``--store`` and ``--cache``, defaulting to ``SHORTTERM_STORE`` / ``SHORTTERM_CACHE``."""
    return store_option(_cache_option(fn))


def memory_for(store: str, cache: str, *, hydrate: bool = False) -> Opening:
    """Memory for one command. No hydration: a command costs what it touches."""
    from ..memory import open as open_memory
    from ..model.config import Config

    return open_memory(store, cache, config=Config.from_env(os.environ), hydrate=hydrate)


def store_to_read(store: str) -> str:
    """The store a read command reads, as it names it (a SQLite file by its resolved path).

    Opening a SQLite URL creates the file, so a read command run in the wrong directory
    would make an empty store and report that nothing matches: it is refused instead."""
    if "://" not in store or checked_url(store, "store").scheme.lower() != "sqlite":
        return shown_url(store)  # anything else is refused, by name, when opened
    from ..store.sqlite import sqlite_path

    path = Path(sqlite_path(store)).resolve()
    if not path.exists():
        raise StoreUnavailable(
            f"no store at {path} (--store {store}): the file does not exist, and reading does "
            "not create one; pass --store or set SHORTTERM_STORE to the bot's database"
        )
    return str(path)


def stdout_console() -> Console:
    from rich.console import Console

    return Console(highlight=False)


def stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def transfer_bar() -> RichBar:
    """The progress bar of export and import: on stderr, drawn only on a terminal."""
    from ..transfer.progress import RichBar

    return RichBar(stderr_console())


@contextmanager
def spinner(text: str) -> Iterator[None]:
    console = stderr_console()
    if not console.is_terminal:
        yield
        return
    with console.status(text):
        yield


def confirm(question: str, yes: bool) -> None:
    if not yes and not click.confirm(question, default=False, err=True):
        raise Declined()


def ago(then: float | None, now: float) -> str:
    from ..prompt.reltime import relative_time

    return "—" if then is None else relative_time(then, now)


def filter_options(fn: Callable[..., None]) -> Callable[..., None]:
    """The row filters shared by ``inspect`` and ``export``, checked and handed to the
    command as one ``filters`` argument (the keyword arguments of ``Memory.find_rows``)."""

    @functools.wraps(fn)
    def with_filters(
        *args: Any,
        server_id: str | None,
        channel_id: str | None,
        user_id: str | None,
        persona_id: str | None,
        no_persona: bool,
        kind: str | None,
        **kwargs: Any,
    ) -> None:
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
        fn(*args, filters=filters, **kwargs)

    wrapped: Callable[..., None] = with_filters
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
        wrapped = option(wrapped)
    return wrapped
