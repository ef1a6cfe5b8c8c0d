/**
 * A stand-in Discord on loopback, for running a discord.js bot with no Discord application, no
 * token and no network: the REST routes and the gateway a bot uses to log in, receive messages
 * and slash commands, and answer them. discord.js itself runs unchanged; only its REST address
 * is this server's, and the gateway address comes from `GET /gateway/bot` as on Discord.
 * `discord-js-offline.ts` plays the example bot's scene on it; a bot's own tests can too:
 *
 *   const world = await OfflineDiscord.start();
 *   const client = new Client({ intents, rest: { api: world.api } });
 *   await client.login(OFFLINE_TOKEN);        // READY, then the server's GUILD_CREATE
 *   world.say(GENERAL_ID, ANA, `<@${BOT.id}> hi`, [BOT]);   // a MESSAGE_CREATE
 *   world.messages(GENERAL_ID);               // the channel as Discord keeps it, replies too
 *
 * The server "Hikers" has #general and #plans; the bot `tomo-bot` (nicknamed Tomo there), Ana
 * (`ana`, nicknamed Ana B., an Organiser: Manage Messages) and `ben`; each person also has a DM
 * channel with the bot. Gateway events follow the intents the bot identified with: no message
 * events without GuildMessages / DirectMessages, and without MessageContent a server message's
 * text is empty unless it mentions the bot. A route this server does not serve answers 404, as
 * Discord does an unknown one, and is listed in `unknownRoutes`.
 */

import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

import {
  GatewayDispatchEvents,
  GatewayIntentBits,
  GatewayOpcodes,
  MessageFlags,
  MessageType,
  PermissionFlagsBits,
  type APIMessage,
  type APIUser,
} from "discord.js";
import { WebSocketServer, type WebSocket } from "ws";

/** Any token logs in here; discord.js only wants one that looks like a token. */
export const OFFLINE_TOKEN = "offline.offline.offline";

export interface Person {
  id: string;
  username: string;
  globalName: string | null;
  nick: string | null; // in the server
  bot: boolean;
  permissions: bigint; // in the server's channels
  dmChannelId: string; // the DM channel between this person and the bot
}

const MEMBER =
  PermissionFlagsBits.ViewChannel |
  PermissionFlagsBits.SendMessages |
  PermissionFlagsBits.ReadMessageHistory |
  PermissionFlagsBits.UseApplicationCommands;

export const BOT: Person = {
  id: "900000000000000001",
  username: "tomo-bot",
  globalName: null,
  nick: "Tomo",
  bot: true,
  permissions: MEMBER,
  dmChannelId: "",
};
export const ANA: Person = {
  id: "111111111111111111",
  username: "ana",
  globalName: "Ana",
  nick: "Ana B.",
  bot: false,
  permissions: MEMBER | PermissionFlagsBits.ManageMessages, // an Organiser
  dmChannelId: "500000000000000005",
};
export const BEN: Person = {
  id: "222222222222222222",
  username: "ben",
  globalName: null,
  nick: null,
  bot: false,
  permissions: MEMBER,
  dmChannelId: "500000000000000006",
};
export const PEOPLE = [BOT, ANA, BEN];

export const GUILD_ID = "300000000000000003";
export const GENERAL_ID = "400000000000000004";
export const PLANS_ID = "400000000000000005";
const ORGANISERS_ID = "600000000000000006";
const JOINED = "2024-01-01T00:00:00.000Z";
const SERVER_CHANNELS: Record<string, string> = { [GENERAL_ID]: "general", [PLANS_ID]: "plans" };
const DM_CHANNELS = new Set(PEOPLE.map((p) => p.dmChannelId).filter((id) => id !== ""));

/** #general, #plans or a person's DM channel with the bot. */
export function isChannel(channelId: string): boolean {
  return channelId in SERVER_CHANNELS || DM_CHANNELS.has(channelId);
}

/** A person's name where they speak: their nickname in the server, else their own. */
export function displayName(person: Person, inServer: boolean): string {
  return (inServer ? person.nick : null) ?? person.globalName ?? person.username;
}

/** An answer to a slash command, as the bot sent it. */
export interface CommandAnswer {
  interactionId: string;
  content: string;
  ephemeral: boolean;
}

type Json = Record<string, unknown>;

function user(person: Person): APIUser {
  return {
    id: person.id,
    username: person.username,
    discriminator: "0",
    global_name: person.globalName,
    avatar: null,
    ...(person.bot ? { bot: true } : {}),
  };
}

function member(person: Person): Json {
  const roles = person.permissions & PermissionFlagsBits.ManageMessages ? [ORGANISERS_ID] : [];
  return { nick: person.nick, roles, joined_at: JOINED, deaf: false, mute: false, flags: 0 };
}

function role(id: string, name: string, position: number, permissions: bigint): Json {
  const flags = { color: 0, hoist: false, managed: false, mentionable: false, flags: 0 };
  return { id, name, position, permissions: permissions.toString(), ...flags };
}

function textChannel(id: string): Json {
  const name = SERVER_CHANNELS[id];
  const position = Object.keys(SERVER_CHANNELS).indexOf(id);
  return { id, type: 0, guild_id: GUILD_ID, name, position, permission_overwrites: [] };
}

function guildCreate(): Json {
  return {
    id: GUILD_ID,
    name: "Hikers",
    icon: null,
    owner_id: ANA.id,
    roles: [
      role(GUILD_ID, "@everyone", 0, MEMBER), // @everyone's id is the server's
      role(ORGANISERS_ID, "Organisers", 1, PermissionFlagsBits.ManageMessages),
    ],
    channels: Object.keys(SERVER_CHANNELS).map(textChannel),
    threads: [],
    members: [{ user: user(BOT), ...member(BOT) }], // the bot's own; others come with messages
    member_count: PEOPLE.length,
    joined_at: JOINED,
    large: false,
    unavailable: false,
    emojis: [],
    stickers: [],
    features: [],
    voice_states: [],
    presences: [],
    stage_instances: [],
    guild_scheduled_events: [],
    preferred_locale: "en-US",
  };
}

const DISCORD_EPOCH = 1_420_070_400_000n;

/** Discord's REST API and gateway for one bot, on a free loopback port. */
export class OfflineDiscord {
  /** What discord.js's `rest.api` option takes. */
  readonly api: string;
  /** Routes the bot called that this server does not serve ("GET /v10/..."). */
  readonly unknownRoutes: string[] = [];
  /** The slash commands the bot registered, by name: their ids. */
  readonly commands = new Map<string, string>();
  /** Answers to slash commands, oldest first. */
  readonly answers: CommandAnswer[] = [];

  readonly #http: Server;
  readonly #gateway: WebSocketServer;
  readonly #channels = new Map<string, APIMessage[]>();
  #socket: WebSocket | undefined;
  #intents = 0;
  #sequence = 0;
  #lastId = 0n;

  private constructor(http: Server) {
    this.#http = http;
    this.#gateway = new WebSocketServer({ server: http });
    this.#gateway.on("connection", (socket) => this.#connected(socket));
    const { port } = http.address() as AddressInfo;
    this.api = `http://127.0.0.1:${port}/api`;
  }

  static async start(): Promise<OfflineDiscord> {
    let world: OfflineDiscord | undefined;
    const http = createServer((request, response) => {
      void world!.#serve(request, response).catch((error: unknown) => {
        if (!response.headersSent) response.writeHead(500);
        response.end(String(error));
      });
    });
    await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve));
    world = new OfflineDiscord(http);
    return world;
  }

  /** A channel's messages, oldest first: what people said there, and the bot's replies. */
  messages(channelId: string): readonly APIMessage[] {
    return this.#channels.get(channelId) ?? [];
  }

  /**
   * `author` says `content` in a channel (#general, #plans or a DM channel): the message is
   * kept, and sent to the bot as MESSAGE_CREATE when its intents ask for it. Mention the bot
   * with `<@id>` in `content` and list it in `mentions`, as Discord does.
   */
  say(channelId: string, author: Person, content: string, mentions: Person[] = []): APIMessage {
    if (!isChannel(channelId)) throw new Error(`no channel ${channelId} in the offline Discord`);
    const message = this.#keep(channelId, author, content, mentions);
    this.#dispatchMessage(message, author, mentions);
    return message;
  }

  /** `person` uses the bot's slash command `/name` in a channel; its id. */
  command(channelId: string, person: Person, name: string): string {
    if (!isChannel(channelId)) throw new Error(`no channel ${channelId} in the offline Discord`);
    const commandId = this.commands.get(name);
    if (commandId === undefined) {
      throw new Error(`the bot registered no /${name} (it has ${[...this.commands.keys()]})`);
    }
    const id = this.#snowflake();
    const inServer = channelId in SERVER_CHANNELS;
    const where = inServer
      ? {
          guild_id: GUILD_ID,
          guild: { id: GUILD_ID, locale: "en-US", features: [] },
          guild_locale: "en-US",
          channel: textChannel(channelId),
          member: {
            user: user(person),
            ...member(person),
            permissions: person.permissions.toString(),
          },
          context: 0,
        }
      : {
          channel: { id: channelId, type: 1, recipients: [user(person)] },
          user: user(person),
          context: 1,
        };
    this.#dispatch(GatewayDispatchEvents.InteractionCreate, {
      id,
      application_id: BOT.id,
      type: 2, // an application command
      token: `interaction-token-${id}`,
      version: 1,
      data: { id: commandId, name, type: 1 }, // a slash command
      channel_id: channelId,
      locale: "en-US",
      app_permissions: BOT.permissions.toString(),
      entitlements: [],
      authorizing_integration_owners: { "0": inServer ? GUILD_ID : person.id },
      attachment_size_limit: 8_388_608,
      ...where,
    });
    return id;
  }

  async close(): Promise<void> {
    for (const client of this.#gateway.clients) client.terminate();
    await new Promise<void>((resolve) => this.#gateway.close(() => resolve()));
    this.#http.closeAllConnections();
    await new Promise<void>((resolve) => this.#http.close(() => resolve()));
  }

  // -- the gateway ------------------------------------------------------------------------------

  #connected(socket: WebSocket): void {
    this.#socket = socket;
    socket.on("close", () => {
      if (this.#socket === socket) this.#socket = undefined;
    });
    socket.on("message", (data) => this.#received(socket, JSON.parse(String(data))));
    socket.send(JSON.stringify({ op: GatewayOpcodes.Hello, d: { heartbeat_interval: 41_250 } }));
  }

  #received(socket: WebSocket, payload: { op: number; d: any }): void {
    if (payload.op === GatewayOpcodes.Heartbeat) {
      socket.send(JSON.stringify({ op: GatewayOpcodes.HeartbeatAck }));
    } else if (payload.op === GatewayOpcodes.Identify) {
      this.#intents = Number(payload.d.intents);
      this.#sequence = 0;
      const { port } = this.#http.address() as AddressInfo;
      this.#dispatch(GatewayDispatchEvents.Ready, {
        v: 10,
        user: { ...user(BOT), verified: true, mfa_enabled: false, flags: 0 },
        guilds: [{ id: GUILD_ID, unavailable: true }], // GUILD_CREATE follows
        session_id: randomUUID(),
        resume_gateway_url: `ws://127.0.0.1:${port}`,
        shard: [0, 1],
        application: { id: BOT.id, flags: 0 },
      });
      this.#dispatch(GatewayDispatchEvents.GuildCreate, guildCreate());
    } else if (payload.op === GatewayOpcodes.Resume) {
      socket.send(JSON.stringify({ op: GatewayOpcodes.InvalidSession, d: false }));
    }
    // Presence updates and member requests change nothing here.
  }

  #dispatch(event: GatewayDispatchEvents, data: unknown): void {
    if (this.#socket === undefined) throw new Error("no bot is logged in to the offline Discord");
    this.#sequence += 1;
    this.#socket.send(JSON.stringify({ op: 0, t: event, s: this.#sequence, d: data }));
  }

  #dispatchMessage(message: APIMessage, author: Person, mentions: Person[]): void {
    const inServer = message.channel_id in SERVER_CHANNELS;
    const wanted = inServer ? GatewayIntentBits.GuildMessages : GatewayIntentBits.DirectMessages;
    if (!(this.#intents & wanted)) return;
    // Without MessageContent, Discord sends the text of DMs, of the bot's own messages and of
    // messages that mention it, and blanks the rest.
    const readable =
      !inServer ||
      author.bot ||
      mentions.some((p) => p.id === BOT.id) ||
      (this.#intents & GatewayIntentBits.MessageContent) !== 0;
    const data: Json = {
      ...message,
      content: readable ? message.content : "",
      channel_type: inServer ? 0 : 1, // a text channel, or a DM
    };
    if (inServer) {
      data.guild_id = GUILD_ID;
      data.member = member(author);
      data.mentions = mentions.map((p) => ({ ...user(p), member: member(p) }));
    }
    this.#dispatch(GatewayDispatchEvents.MessageCreate, data);
  }

  // -- REST -------------------------------------------------------------------------------------

  async #serve(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const url = new URL(request.url ?? "/", this.api);
    const path = url.pathname.replace(/^\/api\/v\d+/, "");
    const route = `${request.method} ${path}`;
    let body: any = null;
    const raw = await readAll(request);
    if (raw.length > 0) body = JSON.parse(raw.toString("utf8"));
    const reply = (status: number, data?: unknown): void => {
      if (data === undefined) {
        response.writeHead(status).end();
        return;
      }
      response.writeHead(status, { "Content-Type": "application/json" });
      response.end(JSON.stringify(data));
    };
    let found: RegExpExecArray | null;
    const callback = /^POST \/interactions\/(\d+)\/[^/]+\/callback$/.exec(route);
    if (callback !== null) {
      // Interaction answers carry no Authorization header: the token in the path is the key.
      const id = callback[1]!;
      const flags = Number(body?.data?.flags ?? 0);
      const ephemeral = (flags & MessageFlags.Ephemeral) !== 0;
      this.answers.push({
        interactionId: id,
        content: String(body?.data?.content ?? ""),
        ephemeral,
      });
      if (url.searchParams.get("with_response") !== "true") return reply(204);
      return reply(200, { interaction: { id, type: 2 }, resource: { type: body?.type } });
    }
    if (!request.headers.authorization?.startsWith("Bot ")) {
      return reply(401, { message: "401: Unauthorized", code: 0 });
    }
    if (route === "GET /gateway/bot") {
      const { port } = this.#http.address() as AddressInfo;
      const limit = { total: 1000, remaining: 999, reset_after: 86_400_000, max_concurrency: 1 };
      return reply(200, { url: `ws://127.0.0.1:${port}`, shards: 1, session_start_limit: limit });
    }
    if ((found = /^PUT \/applications\/(\d+)\/commands$/.exec(route)) !== null) {
      const registered = (body as Json[]).map((command) => {
        const id = this.commands.get(String(command.name)) ?? this.#snowflake();
        this.commands.set(String(command.name), id);
        return { ...command, id, application_id: found![1], version: id, type: 1 };
      });
      return reply(200, registered);
    }
    if ((found = /^POST \/channels\/(\d+)\/typing$/.exec(route)) !== null) return reply(204);
    if ((found = /^GET \/channels\/(\d+)\/messages$/.exec(route)) !== null) {
      const limit = Number(url.searchParams.get("limit") ?? 50);
      const before = url.searchParams.get("before");
      const earlier = this.messages(found[1]!).filter(
        (m) => before === null || BigInt(m.id) < BigInt(before),
      );
      return reply(200, earlier.slice(-limit).reverse()); // newest first, as Discord answers
    }
    if ((found = /^POST \/channels\/(\d+)\/messages$/.exec(route)) !== null) {
      const channelId = found[1]!;
      if (!isChannel(channelId)) {
        return reply(404, { message: "Unknown Channel", code: 10003 });
      }
      const message = this.#keep(channelId, BOT, String(body?.content ?? ""), []);
      const reference = body?.message_reference;
      if (reference?.message_id !== undefined) {
        message.type = MessageType.Reply;
        message.message_reference = { ...reference, channel_id: channelId };
      }
      this.#dispatchMessage(message, BOT, []);
      return reply(200, message);
    }
    this.unknownRoutes.push(route);
    return reply(404, { message: `404: Not Found (the offline Discord has no ${route})`, code: 0 });
  }

  #keep(channelId: string, author: Person, content: string, mentions: Person[]): APIMessage {
    const message: APIMessage = {
      id: this.#snowflake(),
      channel_id: channelId,
      author: user(author),
      content,
      timestamp: new Date().toISOString(),
      edited_timestamp: null,
      tts: false,
      mention_everyone: false,
      mentions: mentions.map(user),
      mention_roles: [],
      attachments: [],
      embeds: [],
      pinned: false,
      type: MessageType.Default,
    };
    const kept = this.#channels.get(channelId) ?? [];
    kept.push(message);
    this.#channels.set(channelId, kept);
    return message;
  }

  /** A new, increasing snowflake for now. */
  #snowflake(): string {
    let id = (BigInt(Date.now()) - DISCORD_EPOCH) << 22n;
    if (id <= this.#lastId) id = this.#lastId + 1n;
    this.#lastId = id;
    return id.toString();
  }
}

async function readAll(request: IncomingMessage): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const part of request) parts.push(part as Buffer);
  return Buffer.concat(parts);
}
