"""``shortterm bench``: the chat-day benchmark, floors measured in the same run."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .app import main


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
