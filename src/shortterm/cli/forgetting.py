"""Forgetting, and the choices that make memory forget: ``clear …`` and ``privacy``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import click

from .app import main
from .common import confirm, memory_for, memory_options, run

if TYPE_CHECKING:
    from ..memory.facade import Memory


@main.group()
def clear() -> None:
    """Forget a channel, a user, or one server channel's shared memory (both tiers).

    Each subcommand asks for confirmation; --yes skips it. Every process on the same store
    follows the forget before its next call returns, whatever its cache.

    \b
    Example: shortterm clear channel 222 --yes
    """


def _forget(
    store: str, cache: str, question: str, yes: bool, how: Callable[[Memory], Awaitable[int]]
) -> None:
    """Every ``clear`` command: ask, forget ``how`` it says, and tell how many entries went."""
    confirm(question, yes)

    async def go() -> int:
        async with memory_for(store, cache) as memory:
            return await how(memory)

    count = run(go())
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
    _forget(
        store,
        cache,
        f"Forget everything remembered in channel {channel_id}?",
        yes,
        lambda memory: memory.clear_channel(channel_id),
    )


@clear.command("user")
@memory_options
@click.argument("user_id")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def clear_user(store: str, cache: str, user_id: str, yes: bool) -> None:
    """Forget a user: their user scopes, and their messages in every hot entry.

    \b
    Example: shortterm clear user 111 --yes
    """
    _forget(
        store,
        cache,
        f"Forget user {user_id} everywhere?",
        yes,
        lambda memory: memory.clear_user(user_id),
    )


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
    _forget(
        store,
        cache,
        f"Forget the shared memory of channel {channel_id} in {server_id} ({who})?",
        yes,
        lambda memory: memory.clear_server_channel(server_id, channel_id, persona_id),
    )


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
    from ..memory import rules
    from ..model import Privacy, UserSettings

    chosen = Privacy(level)
    if rules.is_forgotten(UserSettings(chosen)):
        confirm(f"Forget user {user_id} and never remember them again?", yes)

    async def go() -> UserSettings:
        async with memory_for(store, cache) as memory:
            current = await memory.user_settings(user_id)
            opt_in = current.cross_server_opt_in if cross_server is None else cross_server
            settings = UserSettings(chosen, opt_in)
            await memory.configure_user(user_id, settings)
            return settings

    done = run(go())
    if rules.is_forgotten(done):
        # Nothing of them is remembered, so nothing is recalled anywhere: the stored opt-in
        # is kept for a later level, but "recall on" would be false now.
        click.echo(
            f"user {user_id}: privacy full, nothing of them is remembered or recalled "
            "(what was kept of them is forgotten)"
        )
        return
    across = "on" if done.cross_server_opt_in else "off"
    click.echo(f"user {user_id}: privacy {done.privacy.value}, cross-server recall {across}")
