"""Trying the library out and serving it: ``demo``, ``serve`` (the HTTP sidecar), ``mcp``."""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

import click

from ..model.errors import InvalidInput
from .app import main
from .common import memory_options, run, shown_option

if TYPE_CHECKING:
    from ..memory.distill import DistillSchedule


@main.command()
@shown_option("--store", default="sqlite:///shortterm-demo.db", help="Durable tier URL.")
@shown_option("--cache", default="memory://", help="Hot tier URL.")
@click.option("--keep", is_flag=True, help="Keep the demo database instead of starting fresh.")
def demo(store: str, cache: str, keep: bool) -> None:
    """Run a scripted conversation and print what is remembered.

    The demo starts from an empty database (unless --keep), so it has its own default store
    and ignores SHORTTERM_STORE and SHORTTERM_CACHE.

    \b
    Example: shortterm demo --store sqlite:///demo.db
    """
    from .demo import run_demo

    run(run_demo(store=store, cache=cache, fresh=not keep))


@main.command()
@click.option("--host", default=None, help="Address to listen on. [default: 127.0.0.1]")
@click.option("--port", default=None, type=int, help="Port to listen on. [default: 8765]")
@memory_options
@click.option("--quickstart", is_flag=True, help="Print three curl commands to try it with.")
@click.option(
    "--message-ids",
    type=click.Choice(["discord", "slack"], case_sensitive=False),
    envvar="SHORTTERM_MESSAGE_IDS",
    show_envvar=True,
    default=None,
    help="The platform whose message ids tell when a message was written (Discord snowflakes, "
    "Slack ts): a history message without `at` is then placed by its `message_id` against a "
    "forget's horizon. Without it, such a message is taken as written before any forget. "
    "[default: none]",
)
@click.option(
    "--distill-base-url",
    default=None,
    help="Distill due scopes in the background "
    "with the OpenAI-compatible model at this /v1 URL (needs --distill-model).",
)
@click.option("--distill-model", default=None, help="The model the distiller asks.")
@click.option(
    "--distill-api-key",
    default=None,
    help="The distiller's bearer token [default: SHORTTERM_DISTILL_API_KEY].",
)
@shown_option(
    "--distill-interval",
    type=click.FloatRange(min=0.1),
    default=300.0,
    help="Seconds between two distill runs.",
)
def serve(
    host: str | None,
    port: int | None,
    store: str,
    cache: str,
    quickstart: bool,
    message_ids: str | None,
    distill_base_url: str | None,
    distill_model: str | None,
    distill_api_key: str | None,
    distill_interval: float,
) -> None:
    """Run the HTTP sidecar (JSON under /v1, /healthz, /readyz, /metrics, /openapi.json).

    On an address other than loopback it refuses to start without SHORTTERM_TOKEN, and with a
    token every route but /healthz and /readyz needs 'Authorization: Bearer <token>'.
    SHORTTERM_HOST, SHORTTERM_PORT, SHORTTERM_MAX_BODY_BYTES, SHORTTERM_TURN_TTL_S,
    SHORTTERM_MAX_TURNS and the library's SHORTTERM_* settings are read from the environment.
    On Discord or Slack, pass --message-ids so a history message sent without `at` is placed
    by its id when a forget's horizon is checked.

    \b
    Example: shortterm serve --quickstart --store sqlite:///bot.db
    Off loopback: SHORTTERM_TOKEN=... shortterm serve --host 0.0.0.0
    """

    from ..model.config import Config
    from ..sidecar.settings import SidecarSettings

    # Errors reach the group's handler: 2 bad settings or a port in use, 3 the store or the
    # cache unavailable, 4 the sidecar extra missing (the web stack is imported here).
    settings = SidecarSettings.from_env(os.environ, host=host, port=port)
    settings.check_exposure()
    config = Config.from_env(os.environ)
    if message_ids is not None:  # the flag over the environment's SHORTTERM_MESSAGE_IDS
        config = config.replace(message_ids=message_ids.lower())
    distiller = _distiller(distill_base_url, distill_model, distill_api_key, distill_interval)
    from ..sidecar.run import run

    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: the server already shut down
        run(
            settings,
            store=store,
            cache=cache,
            config=config,
            quickstart=quickstart,
            echo=lambda line: click.echo(line, err=True),
            distiller=distiller,
        )


def _distiller(
    base_url: str | None, model: str | None, api_key: str | None, interval_s: float
) -> DistillSchedule | None:
    if base_url is None and model is None:
        return None
    if base_url is None or model is None:
        raise InvalidInput(
            "--distill-base-url/--distill-model", base_url or model, "both of them, or neither"
        )
    from ..memory.distill import DistillSchedule

    key = api_key or os.environ.get("SHORTTERM_DISTILL_API_KEY") or None
    return DistillSchedule(base_url=base_url, model=model, api_key=key, interval_s=interval_s)


@main.command("mcp")
@memory_options
@click.option("--user-id", help="Fix the scope's user (else a tool argument).")
@click.option("--channel-id", help="Fix the scope's channel (else a tool argument).")
@click.option(
    "--server-id", help="Fix the scope's server (none, with --user-id and --channel-id: a DM)."
)
@click.option("--persona-id", help="Fix the scope's persona.")
@click.option("--persona-lineage-id", help="Recall only entries of this persona lineage.")
@shown_option("--bot-name", default="Assistant", help="The bot's name.")
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
    memory. Parts you leave out become tool arguments. Needs: pip install -e '.[mcp]' in a
    shortterm checkout.

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
    run(serve_stdio(store=store, cache=cache, scope=scope))
