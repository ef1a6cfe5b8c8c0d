"""``shortterm bench``: the chat-day benchmark, floors measured in the same run."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .app import main
from .common import shown_option


def _sizes(text: str) -> list[int]:
    return [int(float(part)) for part in text.split(",") if part.strip()]


# A file option names a file, never a folder.
_file = click.Path(dir_okay=False, path_type=Path)


@main.command()
@shown_option(
    "--entries",
    default="10000,1000000",
    help="Comma-separated live-entry counts to measure operations at.",
)
@shown_option("--ops", default=20_000, help="Operations measured per size.")
@shown_option("--turns", default=200_000, help="Full chat-day turns on the embedded default.")
@shown_option(
    "--hydrate",
    default="100000,1000000",
    help="Comma-separated row counts for the hydration measurement.",
)
@shown_option(
    "--memory-entries",
    default=200_000,
    help="Entries of 10 unique messages for the bytes-per-entry measurement.",
)
@shown_option(
    "--peers/--no-peers",
    default=True,
    help="Also time the peers that are installed (pip install -e '.[bench]' in a shortterm "
    "checkout).",
)
@click.option("--quick", is_flag=True, help="Small sizes: a smoke run in seconds.")
@click.option(
    "--output",
    type=_file,
    default=None,
    help="Markdown file whose chat-day section is replaced with the results.",
)
@click.option(
    "--json", "json_path", type=_file, default=None, help="Also write every figure as JSON."
)
@click.option(
    "--plot",
    type=_file,
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
