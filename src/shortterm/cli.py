"""The ``shortterm`` command line. Each command is one library call; heavy imports stay lazy."""

from __future__ import annotations

import asyncio
import sys

import click

from .errors import ShortTermError


@click.group()
@click.version_option(package_name="shortterm")
def main() -> None:
    """Working memory for LLM chat bots."""


@main.command()
@click.option(
    "--store", default="sqlite:///shortterm-demo.db", show_default=True, help="Durable tier URL."
)
@click.option("--cache", default="memory://", show_default=True, help="Hot tier URL.")
@click.option("--keep", is_flag=True, help="Keep the demo database instead of starting fresh.")
def demo(store: str, cache: str, keep: bool) -> None:
    """Run a scripted conversation and print what is remembered.

    Example: shortterm demo --store sqlite:///demo.db
    """
    from .demo import run_demo

    try:
        asyncio.run(run_demo(store=store, cache=cache, fresh=not keep))
    except ShortTermError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":  # pragma: no cover
    main()
