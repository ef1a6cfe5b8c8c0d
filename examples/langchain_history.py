"""One bot turn with LangChain: ``ShortTermChatHistory`` for the conversation and the memory
tool bound to ``ChatOpenAI``.

Offline, with no model service and no key, against ``shortterm fake-model`` (it echoes, quotes
what it finds in the memory blocks, and calls the memory tool when asked to note something)::

    pip install -e '.[langchain,sidecar]' langchain-openai
    shortterm fake-model --log-requests prompts.jsonl &     # http://127.0.0.1:8800/v1
    python examples/langchain_history.py --base-url http://127.0.0.1:8800/v1 \\
        --store sqlite:///bot.db --channel-id plans \\
        "note that we hike the ridge trail on Saturday at 8"
    python examples/langchain_history.py --base-url http://127.0.0.1:8800/v1 \\
        --store sqlite:///bot.db --channel-id general "ready?"

The first turn's model calls ``update_short_term_memory`` and the summary is written to
``bot.db``; the second turn, in another channel of the same server, gets it back in the
``SystemMessage`` the history starts with, and the fake model's answer quotes it. Any
OpenAI-compatible endpoint works the same (``--model``, ``--api-key``).

Raw messages live only in the hot tier, and each run of this script is a new process: with the
default in-process cache only the summaries survive from one run to the next. Pass a shared
cache (``--cache redis://127.0.0.1:6379/0``) to recall another channel's recent messages too.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence

# The extra first: without it, one line saying what to install instead of a traceback.
# langchain-openai is no part of it (any LangChain chat model fits); this example uses it.
try:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
    from langchain_openai import ChatOpenAI
except ModuleNotFoundError as exc:
    print(
        f"No module named {exc.name!r} (the langchain extra, and langchain-openai): "
        "pip install -e '.[langchain]' langchain-openai in a shortterm checkout",
        file=sys.stderr,
    )
    sys.exit(4)  # as the shortterm command exits on a missing extra
from pydantic import SecretStr

import shortterm
from shortterm.integrations.langchain import ShortTermChatHistory

SYSTEM = "You are {bot}, a friendly member of this chat. Answer briefly."


async def answer(
    history: ShortTermChatHistory, model: BaseChatModel, text: str, *, max_rounds: int = 4
) -> str:
    """Generate the reply to ``text``, running the model's memory tool calls, and capture the
    finished turn in ``history``; returns the reply."""
    question = HumanMessage(text)
    system = SystemMessage(SYSTEM.format(bot=history.turn.bot_name))
    messages = [system, *await history.aget_messages(), question]
    reply = AIMessage("")
    for _ in range(max_rounds):
        tools = {tool.name: tool for tool in history.tools()}  # none once memory was updated
        reply = await (model.bind_tools(list(tools.values())) if tools else model).ainvoke(messages)
        if not reply.tool_calls:
            break
        messages.append(reply)
        for call in reply.tool_calls:
            tool = tools.get(call["name"])
            if tool is not None:
                messages.append(await tool.ainvoke(call))
    await history.aadd_messages([question, reply])
    return reply.text


async def main(
    *,
    base_url: str,
    user_message: str,
    model: str = "shortterm-fake",
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
    chat = ChatOpenAI(base_url=base_url, api_key=SecretStr(api_key), model=model)
    async with shortterm.open(store=store, cache=cache) as memory:
        history = ShortTermChatHistory(
            memory,
            user_id=user_id,
            channel_id=channel_id,
            server_id=server_id,
            user_name=user_name,
            bot_name=bot_name,
            user_message=user_message,  # for the long-term-intent gate of the tool
            provider="openai",
        )
        return await answer(history, chat, user_message)


def cli(argv: Sequence[str] | None = None) -> int:
    # The docstring's first paragraph, whole: its first line alone stops mid-sentence.
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("message", help="what the user says")
    parser.add_argument("--base-url", required=True, help="an OpenAI-compatible /v1 URL")
    parser.add_argument("--model", default="shortterm-fake")
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
