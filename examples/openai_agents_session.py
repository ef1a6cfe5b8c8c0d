"""An OpenAI Agents SDK agent whose memory is shortterm: one user, two channels of a server.

Offline, with no model service and no key, against ``shortterm fake-model`` (it echoes, quotes
what it finds in the memory blocks, and calls the memory tool when asked to note something)::

    pip install -e '.[openai-agents,sidecar]'
    shortterm fake-model --port 8800 --log-requests prompts.jsonl &
    python examples/openai_agents_session.py --base-url http://127.0.0.1:8800/v1

In #plans the user says "note that …": the agent calls ``update_short_term_memory`` (the
session's function tool) and answers; the SDK hands the session the turn, which shortterm
captures. In #general the user asks "ready?": the reply quotes #plans' summary and messages,
because the session put them at the top of the prompt (the last line of ``prompts.jsonl`` is
that request). Any OpenAI-compatible endpoint serving chat completions works the same way
(``--model``, ``--api-key``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

try:  # the extra first: without it, one line saying what to install instead of a traceback
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        Runner,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI
except ModuleNotFoundError as exc:
    print(
        f"No module named {exc.name!r} (the openai-agents extra): "
        "pip install -e '.[openai-agents]' in a shortterm checkout",
        file=sys.stderr,
    )
    sys.exit(4)  # as the shortterm command exits on a missing extra

import shortterm
from shortterm.integrations.openai_agents import ShortTermSession

SERVER, USER = "guild-1", "ana"


async def say(
    memory: shortterm.Memory, model: OpenAIChatCompletionsModel, channel: str, text: str
) -> str:
    """One message from Ana in ``channel``; a session per message, as a chat bot makes them."""
    session = ShortTermSession(
        memory,
        user_id=USER,
        channel_id=channel,
        server_id=SERVER,
        user_name="Ana",
        bot_name="Tomo",
        channel_name=channel,
    )
    agent = Agent(
        name="Tomo",
        instructions="You are Tomo, a helpful bot in a chat server.",
        model=model,
        tools=[session.tool()],
    )
    result = await Runner.run(agent, text, session=session)
    return str(result.final_output)


async def main(base_url: str, model_name: str, api_key: str, store: str) -> None:
    set_tracing_disabled(True)  # no network: nothing to upload traces to
    client = AsyncOpenAI(base_url=base_url, api_key=api_key)
    model = OpenAIChatCompletionsModel(model=model_name, openai_client=client)
    async with await shortterm.open(store=store) as memory:
        print("#plans  >", await say(memory, model, "plans", "note that we hike at 8 on Saturday"))
        print("#general>", await say(memory, model, "general", "ready?"))
        summary = (await memory.get(shortterm.ScopeKey.server(SERVER, "plans"))) or None
        print("summary of #plans:", summary.summary if summary is not None else None)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8800/v1")
    parser.add_argument("--model", default="shortterm-fake")
    parser.add_argument("--api-key", default="unused-by-local-servers")
    parser.add_argument("--store", default="memory://", help="e.g. sqlite:///bot.db")
    args = parser.parse_args()
    asyncio.run(main(args.base_url, args.model, args.api_key, args.store))
