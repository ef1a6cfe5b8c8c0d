"""discord.py helpers: messages in, turn arguments, and a cog with ``/refresh`` and ``/memory``.

::

    from .discord import MemoryCog, convert_history, turn_kwargs

    history = convert_history([*earlier, message], bot_id=bot.user.id)
    turn = memory.turn(**turn_kwargs(message, provider="openai"))
    ...
    await bot.add_cog(MemoryCog(memory))

Needs ``pip install -e '.[discord]'`` in a shortterm checkout (discord.py ≥ 2.4). py-cord and
nextcord install a package of the same name: never install one of them beside discord.py.

What a message becomes (:func:`convert_message`): the bot's own messages (and those it posts
through the webhooks in ``assistant_ids``) are ``assistant``, everyone else's ``user``, with
the author's id, display name, the message id and its creation time. Mentions of users,
channels and roles become names; custom emoji ``:name:``; attachments, stickers, voice
messages, polls and the bot-made ("rich") embeds a short bracketed note. Link previews are
skipped (the link is in the text already), and so are system messages (joins, pins, boosts)
and messages left with no text at all.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from ..model.errors import ExtraMissing, StoreUnavailable
from ..model.horizons import HORIZON_AHEAD_S

try:
    import discord
    from discord import app_commands
    from discord.ext import commands
except ImportError as exc:
    raise ExtraMissing("discord", "discord.py") from exc

from ..memory.facade import Memory
from ..model import Entry, Message, ScopeKey
from ..model.text import strip_controls, truncate
from ..prompt.reltime import relative_time
from ..tool.slug import slug_map
from ._markup import clean_name, compose, embed_note, resolve_markup, sticker_note

__all__ = [
    "MAX_DISCORD_CHARS",
    "MemoryCog",
    "convert_history",
    "convert_message",
    "format_memory",
    "message_text",
    "turn_kwargs",
]

log = logging.getLogger("shortterm.discord")

MAX_DISCORD_CHARS = 2000  # the most a message (and an interaction answer) may hold

_USER_REF = re.compile(r"<@!?(\d+)>")
_ROLE_REF = re.compile(r"<@&(\d+)>")
_CHANNEL_REF = re.compile(r"<#(\d+)>")


# -- messages in ------------------------------------------------------------------------------


def _names(message: discord.Message, text: str) -> dict[str, Mapping[str, str]]:
    """Names for every user, role and channel ``text`` refers to."""
    guild = message.guild
    users = {str(u.id): u.display_name for u in message.mentions}
    roles = {str(r.id): r.name for r in message.role_mentions}
    channels: dict[str, str] = {}
    if "<" not in text:
        return {"users": users, "roles": roles, "channels": channels}
    for raw in _USER_REF.findall(text):
        if raw in users:
            continue
        member: discord.abc.User | None = None
        if guild is not None:
            member = guild.get_member(int(raw))
        elif isinstance(message.channel, discord.DMChannel):
            for person in (message.channel.recipient, message.channel.me):
                if person is not None and person.id == int(raw):
                    member = person
        if member is not None:
            users[raw] = member.display_name
    if guild is not None:
        for raw in _ROLE_REF.findall(text):
            role = guild.get_role(int(raw))
            if raw not in roles and role is not None:
                roles[raw] = role.name
        for raw in _CHANNEL_REF.findall(text):
            channel = guild.get_channel_or_thread(int(raw))
            if channel is not None:
                channels[raw] = channel.name
    return {"users": users, "roles": roles, "channels": channels}


def _resolved(message: discord.Message, text: str) -> str:
    names = _names(message, text)
    return resolve_markup(
        text, users=names["users"], channels=names["channels"], roles=names["roles"]
    )


def message_text(message: discord.Message) -> str:
    """What ``message`` says, as a model should read it: references resolved to names, then
    a line of notes for attachments, stickers, polls, rich embeds and forwarded messages.
    Empty for system messages and messages with nothing to say."""
    if message.is_system():
        return ""
    lines = [_resolved(message, message.content)]
    notes: list[str] = []
    attachments = [a.filename for a in message.attachments]
    if message.flags.voice:
        attachments = []
        notes.append("[voice message]")
    # Forwarded messages arrived in discord.py 2.5; older versions simply have none.
    for snapshot in getattr(message, "message_snapshots", ()):
        forwarded = compose(
            _resolved(message, snapshot.content), [], [a.filename for a in snapshot.attachments]
        )
        if forwarded:
            lines.append(f"[forwarded message] {forwarded}")
    notes.extend(sticker_note(s.name) for s in message.stickers)
    if message.poll is not None:
        notes.append(f"[poll: {clean_name(message.poll.question) or 'untitled'}]")
    for embed in message.embeds:
        if embed.type == "rich":
            note = embed_note(embed.title, embed.description)
            if note is not None:
                notes.append(note)
    return compose("\n".join(line for line in lines if line.strip()), notes, attachments)


def convert_message(
    message: discord.Message, *, bot_id: int, assistant_ids: Collection[int] = ()
) -> Message | None:
    """One Discord message as a :class:`shortterm.Message`, or ``None`` when it has nothing
    to keep (a system message, or no text, attachment or note at all).

    ``bot_id`` is the bot's user id (``bot.user.id``): its messages are the ``assistant``
    role. ``assistant_ids`` adds the ids of webhooks the bot speaks through (personas).
    """
    content = message_text(message)
    if not content.strip():
        return None
    author = message.author
    # A webhook's message is authored by the webhook itself (its id, the name it posted as).
    mine = author.id == bot_id or author.id in assistant_ids
    return Message(
        "assistant" if mine else "user",
        content,
        author_id=str(author.id),
        speaker=clean_name(author.display_name) or None,
        at=message.created_at.timestamp(),
        message_id=str(message.id),
    )


def convert_history(
    messages: Iterable[discord.Message],
    *,
    bot_id: int,
    assistant_ids: Collection[int] = (),
    after: int | None = None,
) -> list[Message]:
    """Messages oldest first (``channel.history()`` yields newest first; either order works),
    converted with :func:`convert_message`; those with nothing to keep are left out.

    ``after``: a message id or snowflake; only later messages are kept. A ``/refresh`` or a
    purge needs none: a capture leaves out what a forget covers, placed by each message's
    ``at`` (its creation time), in every process and after a restart.
    """
    ordered = sorted(messages, key=lambda m: m.id)
    out = []
    for m in ordered:
        if after is not None and m.id <= after:
            continue
        converted = convert_message(m, bot_id=bot_id, assistant_ids=assistant_ids)
        if converted is not None:
            out.append(converted)
    return out


def turn_kwargs(message: discord.Message, **overrides: Any) -> dict[str, Any]:
    """Keyword arguments for ``memory.turn(...)`` from the message that triggered the turn.

    Sets ``user_id``, ``channel_id``, ``server_id`` (``None`` in a DM), ``parent_channel_id``
    (a thread's parent channel), ``server_name``, ``channel_name``, ``user_name`` (the
    author's display name), ``bot_name`` (the bot's display name here) and ``user_message``
    (the text, for the long-term-intent gate). ``overrides`` are added last, e.g.
    ``persona_id="7", provider="openai"``.
    """
    channel = message.channel
    guild = message.guild
    kwargs: dict[str, Any] = {
        "user_id": str(message.author.id),
        "channel_id": str(channel.id),
        "server_id": None if guild is None else str(guild.id),
        "user_name": clean_name(message.author.display_name) or None,
        "user_message": message_text(message),
    }
    if guild is not None:
        kwargs["server_name"] = clean_name(guild.name) or None
        name = getattr(channel, "name", None)
        if isinstance(name, str):
            kwargs["channel_name"] = clean_name(name) or None
    if isinstance(channel, discord.Thread):
        kwargs["parent_channel_id"] = str(channel.parent_id)
    me: discord.abc.User | None = None
    if guild is not None:
        me = guild.me
    elif isinstance(channel, discord.DMChannel):
        me = channel.me
    if me is not None and clean_name(me.display_name):
        kwargs["bot_name"] = clean_name(me.display_name)
    kwargs.update(overrides)
    return kwargs


# -- the /memory view ----------------------------------------------------------------------

_MAX_SECTION_CHARS = 700  # the summary, and the notes together
_MAX_LINE_CHARS = 200  # one recent message


def _one_line(text: str, max_chars: int) -> str:
    text = " ".join(strip_controls(text, keep_newlines=False).split())
    if len(text) > max_chars:
        text = truncate(text, max_chars - 1) + "…"
    return text


def _safe(text: str) -> str:
    """Recalled text shown as text: no formatting, no pings."""
    return discord.utils.escape_mentions(discord.utils.escape_markdown(text))


def _quoted(text: str, max_chars: int) -> list[str]:
    lines = [" ".join(line.split()) for line in strip_controls(text).split("\n")]
    body = "\n".join(line for line in lines if line)
    if len(body) > max_chars:
        body = truncate(body, max_chars - 1) + "…"
    return [f"> {_safe(line)}" for line in body.split("\n")]


def _written(at: float | None, now: float) -> str:
    return "" if at is None else f" · written {relative_time(at, now)}"


def format_memory(
    entry: Entry | None,
    *,
    now: float,
    where: str,
    labels: Mapping[str, str] | None = None,
    bot_name: str = "me",
    max_chars: int = MAX_DISCORD_CHARS,
) -> str:
    """What ``entry`` holds, as one Discord message of at most ``max_chars``: the summary and
    the category notes with their ages, then as many of the newest messages as fit (oldest
    first). ``labels`` maps category slugs to the server's labels."""
    title = f"**What I remember of {_safe(where)}**"
    if entry is None or entry.is_empty:
        return truncate(f"{title}\nNothing yet.", max_chars)
    parts = [title]
    if entry.summary:
        parts.append(f"**Summary**{_written(entry.summary_at, now)}")
        parts.extend(_quoted(entry.summary, _MAX_SECTION_CHARS))
    if entry.categories:
        parts.append(f"**Notes**{_written(entry.categories_at, now)}")
        shown = "\n".join(
            f"{(labels or {}).get(slug, slug)}: {' '.join(value.split())}"
            for slug, value in entry.categories.items()
        )
        parts.extend(_quoted(shown, _MAX_SECTION_CHARS))
    head = "\n".join(parts)
    if not entry.messages:
        return truncate(head, max_chars)
    lines: list[str] = []
    budget = max_chars - len(head) - 60  # the section title and the "not shown" line
    for m in reversed(entry.messages):
        speaker = m.speaker or (bot_name if m.role == "assistant" else "someone")
        when = "" if m.at is None else f"`{relative_time(m.at, now)}` "
        line = f"> {when}**{_safe(_one_line(speaker, 60))}**: "
        line += _safe(_one_line(m.content, _MAX_LINE_CHARS))
        if len(line) + 1 > budget:
            break
        budget -= len(line) + 1
        lines.append(line)
    lines.reverse()
    hidden = len(entry.messages) - len(lines)
    out = [head, f"**Recent messages** ({len(entry.messages)}, oldest first)", *lines]
    if hidden:
        out.append(f"*… {hidden} older not shown*")
    return truncate("\n".join(out), max_chars)


# -- the cog --------------------------------------------------------------------------------

REFRESH_REFUSED = "You need the Manage Messages permission here to clear my memory of it."


class MemoryCog(commands.Cog):
    """``/refresh`` and ``/memory`` for one memory (and one persona's view of it).

    ``/refresh`` forgets this channel's short-term memory: every user, persona and scope of
    the channel, and (from the time Discord ran the command) every message of the channel's
    history written before it, which no later capture in any process takes again. In a
    server it needs Manage Messages (the command is also hidden from members without it by
    default); in a DM the one person there may always use it.
    ``/memory`` shows, only to whoever asks, what the persona remembers of this channel.
    Both answer ephemerally.
    """

    def __init__(
        self, memory: Memory, *, persona_id: str | None = None, bot_name: str = "me"
    ) -> None:
        self.memory = memory
        self.persona_id = persona_id
        self.bot_name = bot_name
        # channel id -> the /refresh interaction's id, for the deprecated history_after.
        self._refreshed: dict[int, int] = {}

    def history_after(self, channel_id: int) -> int | None:
        """Deprecated: the snowflake of this channel's last ``/refresh`` in this process.

        Not needed any more: ``/refresh`` records its moment with the forget, and every
        capture, in every process and after a restart, leaves out the channel's messages
        written up to it. Kept for one release.
        """
        warnings.warn(
            "MemoryCog.history_after is deprecated and will be removed: /refresh now records "
            "the moment it covers, and every capture leaves out the messages written up to it, "
            "in every process and after a restart; pass the channel's history as it is",
            DeprecationWarning,
            stacklevel=2,
        )
        return self._refreshed.get(channel_id)

    def platform_time(self, interaction: discord.Interaction[Any]) -> float:
        """When Discord ran ``interaction`` (its snowflake's time), the moment a forget it
        asks for covers: the channel's messages are placed on the same clock. Held to at
        most ``HORIZON_AHEAD_S`` past the memory's clock, the most a forget accepts: a host
        clock running behind Discord's would otherwise make the command fail."""
        at = interaction.created_at.timestamp()
        latest = self.memory.clock() + HORIZON_AHEAD_S
        if at > latest:
            log.warning(
                "this host's clock is %.0f s behind Discord's: a forget covers the messages "
                "up to %.0f s before the command (set the clock, e.g. with NTP)",
                at - latest + HORIZON_AHEAD_S,
                at - latest,
            )
            return latest
        return at

    @app_commands.command(name="refresh", description="Forget what I remember of this channel")
    @app_commands.default_permissions(manage_messages=True)
    async def refresh_command(self, interaction: discord.Interaction[Any]) -> None:
        channel_id = interaction.channel_id
        if channel_id is None:
            await interaction.response.send_message("Use this in a channel.", ephemeral=True)
            return
        if interaction.guild_id is not None and not interaction.permissions.manage_messages:
            await interaction.response.send_message(REFRESH_REFUSED, ephemeral=True)
            return
        try:
            # Discord keeps the channel's messages and the bot passes them to every capture:
            # the forget records the command's moment, and nothing written up to it returns.
            at = self.platform_time(interaction)
            cleared = await self.memory.clear_channel(str(channel_id), at=at)
        except StoreUnavailable:
            log.warning("shortterm /refresh failed: the durable tier is unavailable")
            await interaction.response.send_message(
                "I could not clear my memory of this channel just now; please try again.",
                ephemeral=True,
            )
            return
        self._refreshed[channel_id] = interaction.id
        done = "Done: I forgot this channel's recent conversation"
        await interaction.response.send_message(
            f"{done} ({cleared} {'entry' if cleared == 1 else 'entries'})."
            if cleared
            else "Done: there was nothing to forget here.",
            ephemeral=True,
        )

    @app_commands.command(name="memory", description="Show what I remember of this channel")
    async def memory_command(self, interaction: discord.Interaction[Any]) -> None:
        channel_id = interaction.channel_id
        if channel_id is None:
            await interaction.response.send_message("Use this in a channel.", ephemeral=True)
            return
        key, labels = await self._view_key(interaction, channel_id)
        entry = await self.memory.get(key)
        channel = interaction.channel
        name = getattr(channel, "name", None)
        where = f"#{clean_name(name)}" if isinstance(name, str) and name else "this conversation"
        text = format_memory(
            entry, now=self.memory.clock(), where=where, labels=labels, bot_name=self.bot_name
        )
        await interaction.response.send_message(
            text, ephemeral=True, allowed_mentions=discord.AllowedMentions.none()
        )

    async def _view_key(
        self, interaction: discord.Interaction[Any], channel_id: int
    ) -> tuple[ScopeKey, dict[str, str]]:
        """The live scope of this channel: the server scope in a server, the user's own in
        a DM, and the category labels of the server."""
        if interaction.guild_id is None:
            return ScopeKey.user(str(interaction.user.id), str(channel_id), self.persona_id), {}
        server_id = str(interaction.guild_id)
        settings = await self.memory.server_settings(server_id)
        key = ScopeKey.server(server_id, str(channel_id), self.persona_id)
        return key, slug_map(settings.categories)
