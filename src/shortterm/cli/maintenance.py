"""Keeping the durable tier in shape: ``janitor`` (old rows) and ``migrate`` (the schema)."""

from __future__ import annotations

import click

from .app import main
from .common import memory_for, memory_options, run, spinner, store_option


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
        async with memory_for(store, cache) as memory:
            days = (
                memory.config.janitor_retention_days if retention_days is None else retention_days
            )
            with spinner("deleting old rows"):
                return await memory.janitor(days), days

    count, days = run(go())
    click.echo(f"deleted {count} row(s) untouched for {days} day(s)")


@main.command()
@store_option
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

    applied = run(go())
    click.echo(f"applied {', '.join(applied)}" if applied else "the schema is up to date")
