"""A Discord bot with working memory: discord.py, shortterm and any OpenAI-compatible model.

From the clone (shortterm is not on PyPI yet)::

    pip install -e '.[discord,openai]'
    export DISCORD_TOKEN=...                          # Developer Portal → your app → Bot
    export BOT_MODEL=gpt-4o-mini                      # a model the server below knows
    export OPENAI_API_KEY=...                         # OpenAI needs one; local servers don't
    export OPENAI_BASE_URL=http://127.0.0.1:8080/v1   # optional: llama.cpp, Ollama (:11434/v1), ...
    python examples/discord_bot.py

With no model service, point it at ``shortterm fake-model`` (``pip install -e '.[sidecar]'``;
it echoes, quotes what it finds in the memory blocks and calls the memory tool when asked to
note something)::

    shortterm fake-model --log-requests prompts.jsonl &
    export OPENAI_BASE_URL=http://127.0.0.1:8800/v1 BOT_MODEL=shortterm-fake   # no key needed
    python examples/discord_bot.py

With no Discord either, ``examples/discord_offline.py`` runs this bot's :func:`respond` on
offline discord.py objects (``shortterm.integrations.discord_offline``)::

    python examples/discord_offline.py --base-url http://127.0.0.1:8800/v1

Optional: ``SHORTTERM_STORE`` (default ``sqlite:///shortterm.db``), ``SHORTTERM_CACHE``
(default ``memory://``), ``BOT_HISTORY`` (how many earlier channel messages the model sees,
default 20) and every ``SHORTTERM_*`` setting of ``shortterm.Config``.

The bot answers when it is mentioned, replied to, or written to in a DM. Each answer is one
turn (see :func:`respond`): history → ``memory.turn(...)`` → ``turn.context()`` →
``shortterm.inject(...)`` → the model, with ``update_short_term_memory`` offered as a tool →
the reply → ``turn.capture(...)``. ``/refresh`` and ``/memory`` come from
``shortterm.integrations.discord.MemoryCog``. The walk-through is ``docs/discord.md``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

try:  # the extras first: without them, one line saying what to install instead of a traceback
    import discord
    from discord.ext import commands
    from openai import APIError, AsyncOpenAI
except ModuleNotFoundError as exc:
    print(
        f"No module named {exc.name!r} (the discord and openai extras): "
        "pip install -e '.[discord,openai]' in a shortterm checkout",
        file=sys.stderr,
    )
    sys.exit(4)  # as the shortterm command exits on a missing extra

import shortterm
from shortterm.integrations.discord import (
    MAX_DISCORD_CHARS,
    MemoryCog,
    convert_history,
    turn_kwargs,
)

log = logging.getLogger("discord_bot")

Messages = list[dict[str, Any]]
Send = Callable[[str], Awaitable[object]]

SYSTEM = (
    "You are {bot}, a friendly member of a Discord chat ({where}). Several people may be "
    "talking; each of their messages starts with their name. Answer briefly, in plain text."
)


def dialogue(system: str, history: Sequence[shortterm.Message]) -> Messages:
    """The chat-completions messages: the system prompt, then the channel's messages. Other
    people's lines carry their names (several people talk here); the bot's own do not, so
    the model does not learn to prefix its answers."""
    messages: Messages = [{"role": "system", "content": system}]
    for m in history:
        if m.role == "assistant" or m.speaker is None:
            messages.append({"role": m.role, "content": m.content})
        else:
            messages.append({"role": "user", "content": f"{m.speaker}: {m.content}"})
    return messages


async def tool_loop(
    llm: AsyncOpenAI,
    turn: shortterm.Turn,
    messages: Messages,
    *,
    model: str,
    max_rounds: int = 4,
) -> str:
    """Ask the model until it answers in text, running its memory tool calls on the way."""
    for _ in range(max_rounds):
        tools = turn.tools("openai")  # [] once the memory was updated this turn
        request: dict[str, Any] = {"model": model, "messages": messages}
        if tools:
            request["tools"] = tools
        response = await llm.chat.completions.create(**request)
        message = response.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            if call.type != "function":
                continue
            # An unknown tool name comes back as ok=False with a message for the model.
            result = await turn.call_tool(call.function.name, call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result.message})
    return ""


def split_message(text: str, limit: int = MAX_DISCORD_CHARS) -> list[str]:
    """Pieces of at most ``limit`` characters, cut at a line break or space where possible."""
    pieces = []
    rest = text.strip()
    while len(rest) > limit:
        cut = rest.rfind("\n", 0, limit)
        if cut < limit // 2:
            cut = rest.rfind(" ", 0, limit)
        if cut < limit // 2:
            cut = limit
        pieces.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    if rest:
        pieces.append(rest)
    return pieces


async def respond(
    memory: shortterm.Memory,
    llm: AsyncOpenAI,
    message: discord.Message,
    earlier: Sequence[discord.Message],
    *,
    bot_id: int,
    model: str,
    send: Send,
) -> str | None:
    """One turn for ``message``; returns the reply, or ``None`` when the model had none.

    ``earlier`` is the channel's recent history before ``message`` (any order), as Discord
    keeps it: after a ``/refresh`` or a purge the capture leaves out what the forget covered.
    ``send`` delivers one piece of the reply. Nothing is captured unless every piece was
    delivered.
    """
    # 1. What the channel said, as shortterm messages (names resolved, oldest first).
    history = convert_history([*earlier, message], bot_id=bot_id)
    # 2. The turn: who, where, and the text the long-term-intent gate reads.
    turn = memory.turn(**turn_kwargs(message, provider="openai"))
    # 3. What memory adds: other channels' memory, this channel's summary, maybe a nudge.
    ctx = await turn.context()
    where = "a direct message" if turn.is_dm else f"#{turn.channel_name or 'a channel'}"
    system = SYSTEM.format(bot=turn.bot_name, where=where)
    # 4. Spliced into the dialogue at the depths the server configured.
    messages = shortterm.inject(dialogue(system, history), ctx)
    # 5. The model, with the memory tool while it is offered.
    reply = await tool_loop(llm, turn, messages, model=model)
    if not reply.strip():
        return None
    # 6. Delivered first: only what reached the channel is remembered as said.
    for piece in split_message(reply):
        await send(piece)
    # 7. Captured: the history the model saw plus the reply.
    await turn.capture(history=history, replies=[shortterm.Reply(reply)])
    return reply


class MemoryBot(commands.Bot):
    """Answers mentions, replies and DMs; ``/refresh`` and ``/memory`` for everyone's memory."""

    def __init__(
        self, memory: shortterm.Memory, llm: AsyncOpenAI, *, model: str, history_limit: int = 20
    ) -> None:
        intents = discord.Intents.default()
        intents.message_content = True  # privileged: switch it on in the Developer Portal too
        super().__init__(
            command_prefix=commands.when_mentioned,
            intents=intents,
            # The model's text is posted as is: it must never ping @everyone or a role.
            allowed_mentions=discord.AllowedMentions(everyone=False, roles=False, users=True),
        )
        self.memory = memory
        self.llm = llm
        self.model = model
        self.history_limit = history_limit
        self.memory_cog = MemoryCog(memory)

    async def setup_hook(self) -> None:
        await self.add_cog(self.memory_cog)
        await self.tree.sync()  # registers /refresh and /memory (global commands)

    def addressed(self, message: discord.Message) -> bool:
        """Whether ``message`` is for the bot: a DM, a mention, or a reply to the bot."""
        me = self.user
        if me is None or message.author.bot:
            return False
        if message.guild is None or me in message.mentions:
            return True
        ref = message.reference
        resolved = ref.resolved if ref is not None else None
        return isinstance(resolved, discord.Message) and resolved.author.id == me.id

    async def on_message(self, message: discord.Message) -> None:
        if self.user is None or not self.addressed(message):
            return
        earlier = [
            m async for m in message.channel.history(limit=self.history_limit, before=message)
        ]
        first = True

        async def send(piece: str) -> None:
            nonlocal first
            if first:
                await message.reply(piece, mention_author=False)
                first = False
            else:
                await message.channel.send(piece)

        async with message.channel.typing():
            try:
                await respond(
                    self.memory,
                    self.llm,
                    message,
                    earlier,
                    bot_id=self.user.id,
                    model=self.model,
                    send=send,
                )
            except APIError as exc:
                log.warning("the model failed: %s", type(exc).__name__)
                await message.reply("I could not reach my model just now.", mention_author=False)


def _required(name: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        sys.exit(f"{name} is not set (see the top of {__file__})")
    return value


async def main() -> None:
    token = _required("DISCORD_TOKEN")
    model = _required("BOT_MODEL")
    base_url = os.environ.get("OPENAI_BASE_URL") or None  # None: OpenAI itself
    api_key = os.environ.get("OPENAI_API_KEY") or ("not-needed" if base_url else None)
    history_limit = int(os.environ.get("BOT_HISTORY", "20"))
    async with (
        shortterm.open(
            store=os.environ.get("SHORTTERM_STORE", "sqlite:///shortterm.db"),
            cache=os.environ.get("SHORTTERM_CACHE", "memory://"),
            config=shortterm.Config.from_env(os.environ),
        ) as memory,
        AsyncOpenAI(base_url=base_url, api_key=api_key) as llm,
    ):
        bot = MemoryBot(memory, llm, model=model, history_limit=history_limit)
        async with bot:
            await bot.start(token)


if __name__ == "__main__":
    discord.utils.setup_logging()
    asyncio.run(main())
