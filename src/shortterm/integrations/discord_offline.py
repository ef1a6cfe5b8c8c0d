"""Real discord.py objects with no Discord: try a bot's turn offline, or test one.

::

    from shortterm.integrations.discord_offline import ANA_ID, BOT_ID, GENERAL_ID, make_world

    world = make_world()                       # a bot "logged in" to one guild, "Hikers"
    general = world.channel(GENERAL_ID)        # #general (also #plans, a thread, a DM)
    message = world.message(general, ANA_ID, f"<@{BOT_ID}> hi", mentions=[BOT_ID])
    history = convert_history([message], bot_id=BOT_ID)   # what your bot would do with it

A ``commands.Bot`` is constructed but never logged in; its connection state parses a
GUILD_CREATE payload as the gateway would send it, and messages and interactions are built from
their payload dicts by discord.py's own constructors, so they behave as received ones do
(mentions, member nicknames, replies, threads, permissions). Two stand-ins: the bot's
``http.logs_from`` answers ``channel.history()`` from the messages built here, as Discord keeps
a channel's history (:meth:`World.logs_from`); and :class:`RecordingAdapter` (see
:func:`recording`): discord.py sends an interaction's answer through a webhook adapter held in a
context variable, and this one records the request instead of posting it.
``examples/discord_offline.py`` runs the example bot's turns on these objects against
``shortterm fake-model``.

The guild: ``Hikers`` (:data:`GUILD_ID`) with ``#general``, ``#plans`` and a thread
``saturday-hike`` under ``#general``; the bot ``Tomo`` (:data:`BOT_ID`), ``Ana B.``
(:data:`ANA_ID`, an Organiser), ``ben`` (:data:`BEN_ID`) and ``Cal`` (:data:`CAL_ID`, a member
the cache does not hold). Needs the discord extra: ``pip install -e '.[discord]'`` in a
shortterm checkout. The cog's ``/refresh`` and ``/memory`` on these objects: ``docs/discord.md``,
"/refresh and /memory offline".
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ..model.errors import ExtraMissing, InvalidInput

try:
    import discord
    from discord.ext import commands
    from discord.webhook.async_ import AsyncWebhookAdapter, async_context
except ImportError as exc:
    raise ExtraMissing("discord", "discord.py") from exc

__all__ = [
    "ANA_ID",
    "BEN_ID",
    "BOT_ID",
    "CAL_ID",
    "DM_ID",
    "GENERAL_ID",
    "GUILD_ID",
    "MANAGE_MESSAGES",
    "ORGANISERS_ID",
    "PLANS_ID",
    "SEND_MESSAGES",
    "T0",
    "THREAD_ID",
    "WEBHOOK_ID",
    "RecordingAdapter",
    "Sent",
    "World",
    "guild_create",
    "make_world",
    "recording",
    "webhook_author",
]

BOT_ID = 900000000000000001
ANA_ID = 111111111111111111
BEN_ID = 222222222222222222
CAL_ID = 333333333333333333
WEBHOOK_ID = 950000000000000009

GUILD_ID = 300000000000000003
GENERAL_ID = 400000000000000004
PLANS_ID = 400000000000000005
THREAD_ID = 400000000000000006
DM_ID = 500000000000000005
ORGANISERS_ID = 600000000000000006

MANAGE_MESSAGES = 1 << 13
SEND_MESSAGES = 1 << 11

T0 = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
JOINED = "2024-01-01T00:00:00+00:00"


def user(
    user_id: int, username: str, *, bot: bool = False, global_name: str | None = None
) -> dict[str, Any]:
    return {
        "id": str(user_id),
        "username": username,
        "discriminator": "0",
        "global_name": global_name,
        "avatar": None,
        "bot": bot,
    }


def member(nick: str | None = None, *, roles: Sequence[int] = ()) -> dict[str, Any]:
    return {
        "nick": nick,
        "roles": [str(r) for r in roles],
        "joined_at": JOINED,
        "deaf": False,
        "mute": False,
        "flags": 0,
    }


def role(role_id: int, name: str, position: int) -> dict[str, Any]:
    return {
        "id": str(role_id),
        "name": name,
        "permissions": "0",
        "position": position,
        "color": 0,
        "hoist": False,
        "managed": False,
        "mentionable": True,
        "flags": 0,
    }


def text_channel(channel_id: int, name: str, position: int) -> dict[str, Any]:
    return {
        "id": str(channel_id),
        "type": 0,
        "name": name,
        "position": position,
        "permission_overwrites": [],
        "nsfw": False,
        "parent_id": None,
        "guild_id": str(GUILD_ID),
    }


USERS = {
    BOT_ID: user(BOT_ID, "tomo-bot", bot=True),
    ANA_ID: user(ANA_ID, "ana", global_name="Ana"),
    BEN_ID: user(BEN_ID, "ben"),
    CAL_ID: user(CAL_ID, "cal"),
}
NICKS = {BOT_ID: "Tomo", ANA_ID: "Ana B.", BEN_ID: None, CAL_ID: "Cal"}


def guild_create() -> dict[str, Any]:
    """A GUILD_CREATE payload: two text channels, a thread under #general, a role, members."""
    return {
        "id": str(GUILD_ID),
        "name": "Hikers",
        "owner_id": str(ANA_ID),
        "roles": [role(GUILD_ID, "@everyone", 0), role(ORGANISERS_ID, "Organisers", 1)],
        "channels": [text_channel(GENERAL_ID, "general", 0), text_channel(PLANS_ID, "plans", 1)],
        "threads": [
            {
                "id": str(THREAD_ID),
                "type": 11,
                "name": "saturday-hike",
                "parent_id": str(GENERAL_ID),
                "owner_id": str(ANA_ID),
                "guild_id": str(GUILD_ID),
                "thread_metadata": {
                    "archived": False,
                    "auto_archive_duration": 1440,
                    "archive_timestamp": JOINED,
                    "locked": False,
                },
                "message_count": 1,
                "member_count": 2,
                "rate_limit_per_user": 0,
            }
        ],
        "members": [
            {
                "user": USERS[uid],
                **member(NICKS[uid], roles=[ORGANISERS_ID] if uid == ANA_ID else []),
            }
            for uid in (BOT_ID, ANA_ID, BEN_ID)  # Cal is not cached: resolved from payloads only
        ],
        "member_count": 4,
        "emojis": [],
        "stickers": [],
        "features": [],
        "unavailable": False,
    }


@dataclass
class World:
    """A bot that knows one guild (and can build DM channels)."""

    bot: commands.Bot
    messages: int = 0
    payloads: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def state(self) -> Any:
        return self.bot._connection

    @property
    def guild(self) -> discord.Guild:
        guild = self.bot.get_guild(GUILD_ID)
        if guild is None:  # only if someone removed it from the bot's cache
            raise LookupError(f"the bot no longer knows guild {GUILD_ID}")
        return guild

    def channel(self, channel_id: int) -> discord.TextChannel | discord.Thread:
        """#general, #plans or the thread, by id."""
        found = self.guild.get_channel_or_thread(channel_id)
        if not isinstance(found, discord.TextChannel | discord.Thread):
            allowed = f"GENERAL_ID, PLANS_ID or THREAD_ID ({GENERAL_ID}, {PLANS_ID}, {THREAD_ID})"
            raise InvalidInput("channel_id", channel_id, allowed)
        return found

    def dm(self, user_id: int = ANA_ID) -> discord.DMChannel:
        """The bot's DM channel with ``user_id``."""
        # A payload as the gateway sends it; discord.py's TypedDicts are stricter than Discord.
        data: Any = {
            "id": str(DM_ID),
            "type": 1,
            "recipients": [USERS[user_id]],
            "last_message_id": None,
        }
        return discord.DMChannel(me=self.state.user, state=self.state, data=data)

    def message(
        self,
        channel: discord.abc.Messageable,
        author_id: int,
        content: str,
        *,
        minutes: float = 0,
        mentions: Sequence[int] = (),
        mention_roles: Sequence[int] = (),
        attachments: Sequence[str] = (),
        embeds: Sequence[dict[str, Any]] = (),
        stickers: Sequence[str] = (),
        message_type: int = 0,
        webhook: dict[str, Any] | None = None,
        flags: int = 0,
        reply_to: discord.Message | None = None,
    ) -> discord.Message:
        """A MESSAGE_CREATE payload made into a ``discord.Message``; ``minutes`` after T0."""
        self.messages += 1
        at = T0 + timedelta(minutes=minutes)
        in_guild = isinstance(channel, discord.TextChannel | discord.Thread)
        data: dict[str, Any] = {
            "id": str(discord.utils.time_snowflake(at) + self.messages),  # unique, time-ordered
            "channel_id": str(channel.id),  # type: ignore[attr-defined]
            "author": webhook if webhook is not None else USERS[author_id],
            "content": content,
            "timestamp": at.isoformat(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [
                {**USERS[uid], **({"member": member(NICKS[uid])} if in_guild else {})}
                for uid in mentions
            ],
            "mention_roles": [str(r) for r in mention_roles],
            "attachments": [
                {
                    "id": str(700000000000000000 + i),
                    "filename": name,
                    "size": 1024,
                    "url": f"https://cdn.example/{name}",
                    "proxy_url": f"https://media.example/{name}",
                }
                for i, name in enumerate(attachments)
            ],
            "embeds": list(embeds),
            "sticker_items": [
                {"id": str(800000000000000000 + i), "name": name, "format_type": 1}
                for i, name in enumerate(stickers)
            ],
            "pinned": False,
            "type": message_type,
            "flags": flags,
        }
        if in_guild:
            data["guild_id"] = str(GUILD_ID)
            if webhook is None:
                data["member"] = member(NICKS[author_id])
        if webhook is not None:
            data["webhook_id"] = webhook["id"]
        if reply_to is not None:
            data["type"] = 19
            data["message_reference"] = {
                "type": 0,
                "message_id": str(reply_to.id),
                "channel_id": str(reply_to.channel.id),
            }
            data["referenced_message"] = self.payloads[reply_to.id]
        self.payloads[int(data["id"])] = data
        return discord.Message(state=self.state, channel=channel, data=data)  # type: ignore[arg-type]

    async def logs_from(
        self,
        channel_id: int,
        limit: int,
        before: int | None = None,
        after: int | None = None,
        around: int | None = None,
    ) -> list[dict[str, Any]]:
        """Discord's answer to ``GET /channels/{id}/messages``, which ``channel.history()``
        asks: of the messages built here in that channel, the newest ``limit`` before
        ``before``, or the oldest ``limit`` after ``after``; newest first either way, as
        Discord sends them. Installed as the bot's ``http.logs_from`` by :func:`make_world`."""
        if around is not None:
            raise InvalidInput("around", around, "None: the offline history serves before/after")
        ids = sorted(
            i for i, data in self.payloads.items() if data["channel_id"] == str(channel_id)
        )
        if before is not None:
            ids = [i for i in ids if i < int(before)]
        ids = [i for i in ids if i > int(after)][:limit] if after is not None else ids[-limit:]
        return [self.payloads[i] for i in reversed(ids)]

    def interaction(
        self,
        name: str,
        *,
        user_id: int = ANA_ID,
        channel_id: int | None = GENERAL_ID,
        permissions: int = SEND_MESSAGES,
        dm: bool = False,
        minutes: float = 60,
    ) -> discord.Interaction[commands.Bot]:
        """An INTERACTION_CREATE payload (a slash command) made into a ``discord.Interaction``;
        ``minutes`` after T0 (its snowflake, hence ``created_at``: the platform's time of the
        command, which a ``/refresh`` passes as its forget's horizon)."""
        data: dict[str, Any] = {
            "id": str(discord.utils.time_snowflake(T0 + timedelta(minutes=minutes))),
            "application_id": str(BOT_ID),
            "type": 2,
            "token": "interaction-token",
            "version": 1,
            "data": {"id": "990000000000000001", "name": name, "type": 1},
            "locale": "en-US",
            "app_permissions": "0",
            "entitlements": [],
            "authorizing_integration_owners": {"0": str(GUILD_ID)},
            "context": 1 if dm else 0,
            "attachment_size_limit": 8_388_608,
        }
        if dm:
            data["channel_id"] = str(DM_ID)
            data["channel"] = {"id": str(DM_ID), "type": 1, "recipients": [USERS[user_id]]}
            data["user"] = USERS[user_id]
        else:
            data["guild_id"] = str(GUILD_ID)
            data["guild_locale"] = "en-US"
            if channel_id is not None:
                data["channel_id"] = str(channel_id)
                data["channel"] = {**text_channel(channel_id, "general", 0)}
            data["member"] = {
                "user": USERS[user_id],
                **member(NICKS[user_id]),
                "permissions": str(permissions),
            }
        return discord.Interaction(data=data, state=self.state)  # type: ignore[arg-type]


def make_world(bot: commands.Bot | None = None) -> World:
    """A bot (a fresh one, or the one given) that is ready as if it had logged in."""
    if bot is None:
        bot = commands.Bot(
            command_prefix=commands.when_mentioned, intents=discord.Intents.default()
        )
    state = bot._connection
    me: Any = USERS[BOT_ID]
    state.user = discord.ClientUser(state=state, data=me)  # what login() sets
    state.parse_guild_create(guild_create())  # as the gateway delivers it
    world = World(bot)
    # channel.history() asks Discord over HTTP: the world answers from what it built.
    bot.http.logs_from = world.logs_from  # type: ignore[method-assign,assignment]
    return world


def webhook_author(name: str) -> dict[str, Any]:
    """The author object of a message a webhook (a persona) posted."""
    return {
        "id": str(WEBHOOK_ID),
        "username": name,
        "discriminator": "0000",
        "avatar": None,
        "bot": True,
    }


@dataclass
class Sent:
    """One request discord.py would have sent to Discord."""

    method: str
    path: str
    payload: dict[str, Any] | None

    @property
    def content(self) -> str:
        data = (self.payload or {}).get("data") or {}
        return str(data.get("content"))

    @property
    def ephemeral(self) -> bool:
        data = (self.payload or {}).get("data") or {}
        return bool(data.get("flags", 0) & 64)


class RecordingAdapter(AsyncWebhookAdapter):
    """Records the requests discord.py would send to Discord, and answers as Discord does."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.sent: list[Sent] = []

    async def request(
        self, route: Any, session: Any, *, payload: dict[str, Any] | None = None, **_: Any
    ) -> Any:
        self.sent.append(Sent(route.method, route.path, payload))
        flags = (payload or {}).get("data", {}).get("flags", 0)
        return {
            "interaction": {
                "id": str(route.webhook_id),
                "type": 2,
                "response_message_id": "990000000000000002",
                "response_message_loading": False,
                "response_message_ephemeral": bool(flags & 64),
            }
        }


@contextlib.contextmanager
def recording() -> Iterator[list[Sent]]:
    """Within it, interaction answers (``interaction.response.send_message`` and the like) are
    recorded in the yielded list instead of being posted."""
    adapter = RecordingAdapter()
    token = async_context.set(adapter)
    try:
        yield adapter.sent
    finally:
        async_context.reset(token)
