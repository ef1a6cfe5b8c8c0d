"""``shortterm distill``: write the summaries that are due with any OpenAI-compatible model."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import click

from .app import EXIT_UNAVAILABLE, main
from .common import memory_for, memory_options, run, shown_option

if TYPE_CHECKING:
    from ..memory.distill import DistillReport

_NOT_SHARED = (
    "note: the hot tier is in-process ({cache}), so this command sees no other process's "
    "crude messages and has nothing to distill; pass the bot's shared tier "
    "(--cache redis://… or SHORTTERM_CACHE) to distill what its conversations said"
)


@main.command()
@memory_options
@click.option("--base-url", required=True, help="The chat endpoint's /v1 URL.")
@click.option("--model", required=True, help="The model name to ask.")
@click.option(
    "--api-key",
    default=None,
    help="Sent as a bearer token [default: SHORTTERM_DISTILL_API_KEY, else none].",
)
@shown_option("--concurrency", type=click.IntRange(1, 64), default=4)
@shown_option(
    "--limit",
    type=click.IntRange(min=1),
    default=100,
    help="At most this many model calls in one run.",
)
@shown_option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0.1),
    default=60.0,
    help="Seconds to wait for one answer.",
)
@shown_option("--retries", type=click.IntRange(0, 10), default=2)
def distill(
    store: str,
    cache: str,
    base_url: str,
    model: str,
    api_key: str | None,
    concurrency: int,
    limit: int,
    timeout_s: float,
    retries: int,
) -> None:
    """Summarise every scope whose refresh is due, with any OpenAI-compatible model, for
    bots whose model does not call the memory tool. Run it from cron, or use
    ``serve --distill-base-url``.

    \b
    Example: shortterm distill --cache redis://localhost:6379/0 \\
             --base-url http://localhost:11434/v1 --model llama3.2
    """
    from ..memory.distill import distill as run_distill

    key = api_key or os.environ.get("SHORTTERM_DISTILL_API_KEY") or None

    async def go() -> DistillReport:
        async with memory_for(store, cache) as memory:
            if not memory.cache.shared:
                click.echo(_NOT_SHARED.format(cache=cache), err=True)
            return await run_distill(
                memory,
                base_url=base_url,
                model=model,
                api_key=key,
                concurrency=concurrency,
                limit=limit,
                timeout_s=timeout_s,
                retries=retries,
            )

    report = run(go())
    skipped = ", ".join(f"{n} {why}" for why, n in sorted(report.skipped.items())) or "none"
    click.echo(
        f"looked at {report.looked} scope(s): distilled {len(report.distilled)}, "
        f"skipped {sum(report.skipped.values())} ({skipped}), failed {len(report.failed)}"
    )
    for done in report.distilled:
        click.echo(f"distilled {done.kind} {done.owner_id} channel {done.channel_id}")
    if report.capped:
        click.echo("the per-run cap was reached: more may be due (run it again)")
    if report.failed:
        for scope, why in report.failed:
            click.echo(
                f"error: {scope.kind} {scope.owner_id} channel {scope.channel_id}: {why}", err=True
            )
        click.echo("error: the model failed; nothing was written for those scopes", err=True)
        sys.exit(EXIT_UNAVAILABLE)
