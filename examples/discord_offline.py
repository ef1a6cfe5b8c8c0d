"""The Discord example bot's turns with no Discord and no model service: offline objects in, a
fake model out.

::

    pip install -e '.[discord,openai,sidecar]'       # from the clone: not on PyPI yet
    shortterm fake-model --log-requests prompts.jsonl &
    python examples/discord_offline.py --base-url http://127.0.0.1:8800/v1

Each line of the conversation is a real ``discord.Message`` built by
``shortterm.integrations.discord_offline`` (a guild "Hikers" with #general and #plans; Ana, Ben
and the bot Tomo). Every message that mentions the bot goes through ``respond()`` of
``examples/discord_bot.py`` exactly as the live bot runs it: history → turn → context → model
(with the memory tool) → reply → capture. The default conversation notes a plan in #plans, then
asks about it in #general: the second reply quotes #plans from memory, and the last request in
``prompts.jsonl`` shows the memory block shortterm spliced into the prompt.

Give your own lines as ``CHANNEL:AUTHOR:TEXT`` (channel ``general`` or ``plans``, author
``ana`` or ``ben``); a line starting with ``@`` is addressed to the bot. Any OpenAI-compatible
server works in place of the fake model (``--model``, ``--api-key``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

try:  # the extras first: without them, one line saying what to install instead of a traceback
    import discord
    from openai import APIConnectionError, AsyncOpenAI
except ModuleNotFoundError as exc:
    print(
        f"No module named {exc.name!r} (the discord and openai extras): "
        "pip install -e '.[discord,openai]' in a shortterm checkout",
        file=sys.stderr,
    )
    sys.exit(4)  # as the shortterm command exits on a missing extra

import shortterm
from shortterm.integrations.discord_offline import (
    ANA_ID,
    BEN_ID,
    BOT_ID,
    GENERAL_ID,
    PLANS_ID,
    make_world,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import discord_bot  # the example bot next to this file

CHANNELS = {"general": GENERAL_ID, "plans": PLANS_ID}
AUTHORS = {"ana": ANA_ID, "ben": BEN_ID}

CONVERSATION = (
    "plans:ben:who's bringing what on Saturday?",
    "plans:ana:@note that we hike the ridge trail on Saturday at 8, Ben brings the map",
    "general:ben:anyone around this weekend?",
    "general:ana:@are we still on for the hike?",
)


def parse_line(line: str) -> tuple[int, int, str, bool]:
    """``CHANNEL:AUTHOR:TEXT`` → (channel id, author id, text, addressed to the bot)."""
    channel, author, text = [*line.split(":", 2), "", ""][:3]
    if channel not in CHANNELS or author not in AUTHORS or not text.strip():
        raise SystemExit(
            f"{line!r}: expected CHANNEL:AUTHOR:TEXT with CHANNEL in {sorted(CHANNELS)} and "
            f"AUTHOR in {sorted(AUTHORS)}"
        )
    addressed = text.startswith("@")
    return CHANNELS[channel], AUTHORS[author], text.removeprefix("@").strip(), addressed


async def converse(
    memory: shortterm.Memory, llm: AsyncOpenAI, lines: Sequence[str], *, model: str
) -> list[str]:
    """Post ``lines`` in the offline guild; the bot answers the ones addressed to it. Returns
    the transcript, one ``#channel name: text`` line per message."""
    world = make_world()
    history: dict[int, list[discord.Message]] = {}
    transcript: list[str] = []
    for minute, line in enumerate(lines):
        channel_id, author_id, text, addressed = parse_line(line)
        channel = world.channel(channel_id)
        if addressed:
            text = f"<@{BOT_ID}> {text}"
        mentions = [BOT_ID] if addressed else []
        message = world.message(channel, author_id, text, minutes=minute, mentions=mentions)
        transcript.append(f"#{channel.name} {message.author.display_name}: {message.clean_content}")
        earlier = history.setdefault(channel_id, [])
        reply = await answer(memory, llm, message, earlier, model=model) if addressed else None
        earlier.append(message)
        if reply:
            said = world.message(channel, BOT_ID, reply, minutes=minute + 0.5)
            earlier.append(said)
            transcript.append(f"#{channel.name} {said.author.display_name}: {reply}")
    return transcript


async def answer(
    memory: shortterm.Memory,
    llm: AsyncOpenAI,
    message: discord.Message,
    earlier: Sequence[discord.Message],
    *,
    model: str,
) -> str | None:
    """The example bot's turn for ``message``; its reply, delivered to a list, not Discord."""
    delivered: list[str] = []

    async def send(piece: str) -> None:
        delivered.append(piece)

    await discord_bot.respond(memory, llm, message, earlier, bot_id=BOT_ID, model=model, send=send)
    return "\n".join(delivered) or None


async def main(argv: Sequence[str] | None = None) -> list[str]:
    # The docstring's first paragraph, whole: its first line alone stops mid-sentence.
    parser = argparse.ArgumentParser(
        description=" ".join(__doc__.split("\n\n")[0].split()),
        epilog="Start `shortterm fake-model` first (any OpenAI-compatible server works). The "
        "cog's /refresh and /memory on these objects: docs/discord.md.",
    )
    parser.add_argument(
        "lines",
        nargs="*",
        help="CHANNEL:AUTHOR:TEXT, CHANNEL general or plans, AUTHOR ana or ben, TEXT starting "
        "with @ to address the bot (default: a short scene)",
    )
    parser.add_argument(
        "--base-url", default="http://127.0.0.1:8800/v1", help="the model server (%(default)s)"
    )
    parser.add_argument("--model", default="shortterm-fake", help="its model (%(default)s)")
    parser.add_argument("--api-key", default="not-needed", help="its key, if it wants one")
    parser.add_argument(
        "--store", default="memory://", help="shortterm's store (%(default)s: nothing is kept)"
    )
    args = parser.parse_args(argv)
    async with (
        shortterm.open(store=args.store) as memory,
        AsyncOpenAI(base_url=args.base_url, api_key=args.api_key) as llm,
    ):
        try:
            transcript = await converse(memory, llm, args.lines or CONVERSATION, model=args.model)
        except APIConnectionError:
            sys.exit(f"no model answers at {args.base_url}: start `shortterm fake-model` first")
    for line in transcript:
        print(line)
    return transcript


if __name__ == "__main__":
    asyncio.run(main())
