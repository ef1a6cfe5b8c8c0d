"""``shortterm fake-model``: a scripted OpenAI-compatible model for trying things offline."""

from __future__ import annotations

import contextlib
from pathlib import Path

import click

from .app import main
from .common import shown_option


@main.command("fake-model")
@shown_option("--host", default="127.0.0.1", help="Address to listen on.")
@shown_option("--port", default=8800, type=int, help="Port to listen on (0: a free one).")
@click.option(
    "--log-requests",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Append each request and its answer to this file, one JSON object a line.",
)
def fake_model(host: str, port: int, log_requests: Path | None) -> None:
    """Serve a fake OpenAI-compatible model (/v1/chat/completions, /v1/models) for offline tries.

    It answers deterministically from the request: it echoes the user's last message and
    quotes what it finds in shortterm's memory blocks, and calls update_short_term_memory when
    that tool is offered and the user asks to note something ("note that ...", "keep in mind
    ...") or the nudge asks for a fresh summary. Any model name and API key are accepted;
    stream: true is served too. Needs the [sidecar] extra (from a clone:
    pip install -e '.[sidecar]').

    \b
    Example: shortterm fake-model --log-requests prompts.jsonl
    Then:    python examples/openai_tool_loop.py --base-url http://127.0.0.1:8800/v1 \\
                 --model shortterm-fake "note that we hike at 8"

    examples/ is in a clone and in the sdist, not in the wheel:
    https://github.com/shortterm/shortterm/tree/main/examples
    """
    from ..fake_model import run

    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: uvicorn already stopped serving
        run(
            host=host,
            port=port,
            log_path=log_requests,
            echo=lambda line: click.echo(line, err=True),
        )
