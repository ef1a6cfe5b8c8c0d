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


@main.command()
@click.option("--host", default=None, help="Address to listen on. [default: 127.0.0.1]")
@click.option("--port", default=None, type=int, help="Port to listen on. [default: 8765]")
@click.option(
    "--store", default="sqlite:///shortterm.db", show_default=True, help="Durable tier URL."
)
@click.option("--cache", default="memory://", show_default=True, help="Hot tier URL.")
@click.option("--quickstart", is_flag=True, help="Print three curl commands to try it with.")
def serve(host: str | None, port: int | None, store: str, cache: str, quickstart: bool) -> None:
    """Run the HTTP sidecar (JSON under /v1, /healthz, /metrics, /openapi.json).

    On an address other than loopback it refuses to start without SHORTTERM_TOKEN, and with a
    token every route but /healthz needs 'Authorization: Bearer <token>'. SHORTTERM_HOST,
    SHORTTERM_PORT, SHORTTERM_MAX_BODY_BYTES, SHORTTERM_TURN_TTL_S, SHORTTERM_MAX_TURNS and
    the library's SHORTTERM_* settings are read from the environment.

    Example: SHORTTERM_TOKEN=... shortterm serve --host 0.0.0.0 --store sqlite:///bot.db
    """
    import os

    from .config import Config

    try:
        from .server.run import run
        from .server.settings import SidecarSettings

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
    help="Comma-separated live-entry counts to measure at.",
)
@click.option("--ops", default=20_000, show_default=True, help="Turns measured per size.")
@click.option(
    "--hydrate",
    default="100000",
    show_default=True,
    help="Comma-separated row counts for the hydration measurement.",
)
@click.option(
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help="Markdown file whose 'Core' section is replaced with the results.",
)
def bench(entries: str, ops: int, hydrate: str, output: str | None) -> None:
    """Measure capture, get, clears and hydration against the floor.

    Example: shortterm bench --entries 10000 --ops 5000 --output docs/benchmarks.md
    """
    from pathlib import Path

    from .bench.core import main_core, render_core
    from .bench.report import replace_section

    argv = " ".join(["shortterm bench", *sys.argv[2:]])
    results = main_core(_sizes(entries), ops, _sizes(hydrate))
    table = render_core(results, argv)
    click.echo(table)
    if output:
        replace_section(Path(output), "Core: capture, get, clears, hydration", table)


if __name__ == "__main__":  # pragma: no cover
    main()
