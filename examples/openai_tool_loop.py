"""One bot turn with shortterm and the official ``openai`` client: context → tools → model →
tool call → capture.

Works against any OpenAI-compatible endpoint. From the clone (shortterm is not on PyPI yet)::

    pip install -e '.[openai]'
    python examples/openai_tool_loop.py --base-url http://127.0.0.1:8000/v1 --model my-model \\
        --store sqlite:///bot.db "what did we decide about the hike?"

Offline, with no model service and no key, against ``shortterm fake-model`` (it echoes, quotes
what it finds in the memory blocks, and calls the memory tool when asked to note something)::

    pip install -e '.[openai,sidecar]'
    shortterm fake-model --log-requests prompts.jsonl &     # http://127.0.0.1:8800/v1
    python examples/openai_tool_loop.py --base-url http://127.0.0.1:8800/v1 \\
        --model shortterm-fake --store sqlite:///bot.db --channel-id plans \\
        "note that we hike the ridge trail on Saturday at 8"
    python examples/openai_tool_loop.py --base-url http://127.0.0.1:8800/v1 \\
        --model shortterm-fake --store sqlite:///bot.db --channel-id general "ready?"

The second reply quotes the #plans summary from memory, and the last line of
``prompts.jsonl`` is the request the model received, memory block included. (``--api-key``
defaults to a dummy value: local servers ignore it.)

The model sees the channel's working memory, may call ``update_short_term_memory`` (at most
once per turn: shortterm stops offering it after a successful update), and its final answer
is captured, so the next turn remembers this one.

``--user-id`` / ``--channel-id`` / ``--server-id`` pick the conversation: the same user in
another channel of the same server is recalled there. Raw messages live only in the hot tier,
and each run of this script is a new process: with the default in-process cache only the
summaries (durable, in ``--store``) survive from one run to the next. To see another
channel's raw messages recalled across runs, share a cache, as bots do::

    python examples/openai_tool_loop.py ... --cache redis://127.0.0.1:6379/0 \\
        --channel-id plans "pack list for Saturday?"
    python examples/openai_tool_loop.py ... --cache redis://127.0.0.1:6379/0 \\
        --channel-id general "ready?"          # the prompt quotes what #plans said
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from typing import Any

try:  # the extra first: without it, one line saying what to install instead of a traceback
    from openai import AsyncOpenAI
except ModuleNotFoundError as exc:
    print(
        f"No module named {exc.name!r} (the openai extra): "
        "pip install -e '.[openai]' in a shortterm checkout",
        file=sys.stderr,
    )
    sys.exit(4)  # as the shortterm command exits on a missing extra

import shortterm

Messages = list[dict[str, Any]]

SYSTEM = "You are {bot}, a friendly member of this chat. Answer briefly."


async def assemble_prompt(turn: shortterm.Turn, dialogue: Sequence[shortterm.Message]) -> Messages:
    """The messages the model sees for this turn: the system prompt, the dialogue, and the
    rendered working memory spliced in at the depths the server configured."""
    system: Messages = [{"role": "system", "content": SYSTEM.format(bot=turn.bot_name)}]
    return shortterm.inject(system + openai_messages(dialogue), await turn.context())


def openai_messages(dialogue: Sequence[shortterm.Message]) -> Messages:
    return [
        {
            "role": m.role,
            "content": m.content if m.speaker is None else f"{m.speaker}: {m.content}",
        }
        for m in dialogue
    ]


async def run_turn(
    client: AsyncOpenAI,
    turn: shortterm.Turn,
    dialogue: Sequence[shortterm.Message],
    *,
    model: str,
    max_rounds: int = 4,
) -> str:
    """Generate the reply, running the model's tool calls; returns the reply text."""
    messages = await assemble_prompt(turn, dialogue)
    for _ in range(max_rounds):
        tools = turn.tools("openai")  # [] once the memory was updated this turn
        request: dict[str, Any] = {"model": model, "messages": messages}
        if tools:
            request["tools"] = tools
        response = await client.chat.completions.create(**request)
        message = response.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            if call.type != "function":
                continue
            result = await turn.call_tool(call.function.name, call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result.message})
    return ""


async def main(
    *,
    base_url: str,
    model: str,
    user_message: str,
    store: str = "sqlite:///shortterm.db",
    cache: str = "memory://",
    api_key: str = "not-needed",
    user_id: str = "111",
    user_name: str = "Ana",
    channel_id: str = "222",
    server_id: str | None = "333",
    bot_name: str = "Tomo",
) -> str:
    """Run one turn end to end and return the bot's reply."""
    async with (
        shortterm.open(store=store, cache=cache) as memory,
        AsyncOpenAI(base_url=base_url, api_key=api_key) as client,
    ):
        turn = memory.turn(
            user_id=user_id,
            channel_id=channel_id,
            server_id=server_id,
            user_message=user_message,
            user_name=user_name,
            bot_name=bot_name,
            provider="openai",
        )
        dialogue = [shortterm.Message("user", user_message, author_id=user_id, speaker=user_name)]
        reply = await run_turn(client, turn, dialogue, model=model)
        await turn.capture(history=dialogue, replies=[shortterm.Reply(reply)] if reply else [])
        return reply


def cli(argv: Sequence[str] | None = None) -> int:
    # The docstring's first paragraph, whole: its first line alone stops mid-sentence.
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("message", help="what the user says")
    parser.add_argument("--base-url", required=True, help="an OpenAI-compatible /v1 URL")
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key", default="not-needed")
    parser.add_argument(
        "--store", default=os.environ.get("SHORTTERM_STORE", "sqlite:///shortterm.db")
    )
    parser.add_argument("--cache", default=os.environ.get("SHORTTERM_CACHE", "memory://"))
    parser.add_argument("--user-id", default="111")
    parser.add_argument("--user-name", default="Ana")
    parser.add_argument("--channel-id", default="222")
    parser.add_argument("--server-id", default="333", help="an empty string for a DM")
    parser.add_argument("--bot-name", default="Tomo")
    args = parser.parse_args(argv)
    reply = asyncio.run(
        main(
            base_url=args.base_url,
            model=args.model,
            user_message=args.message,
            store=args.store,
            cache=args.cache,
            api_key=args.api_key,
            user_id=args.user_id,
            user_name=args.user_name,
            channel_id=args.channel_id,
            server_id=args.server_id or None,
            bot_name=args.bot_name,
        )
    )
    print(reply)
    return 0


if __name__ == "__main__":
    sys.exit(cli())
