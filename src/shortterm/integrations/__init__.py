"""Platform integrations.

Each submodule is imported on its own and never by ``import shortterm``:

- :mod:`shortterm.integrations.discord`: discord.py helpers (message conversion, turn
  arguments, a cog with ``/refresh`` and ``/memory``); needs ``pip install -e '.[discord]'``
  in a shortterm checkout.
- :mod:`shortterm.integrations.discord_offline`: real discord.py objects built with no Discord
  connection (a guild, messages, interactions), to try or test a bot offline; same extra.
- :mod:`shortterm.integrations.openai_agents`: ``ShortTermSession``, an OpenAI Agents SDK
  ``Session`` and its memory tool; needs ``pip install -e '.[openai-agents]'`` in a shortterm
  checkout.
- :mod:`shortterm.integrations.chat_exporter`: warm a channel's memory from a DiscordChatExporter
  JSON file; plain Python, no extra needed.
- :mod:`shortterm.integrations.langchain`: ``ShortTermChatHistory`` (a LangChain chat message
  history) and the memory tool as a LangChain tool; needs ``pip install -e '.[langchain]'`` in
  a shortterm checkout.
"""
