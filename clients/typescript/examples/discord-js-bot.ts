/**
 * A discord.js bot with working memory from the shortterm sidecar and any OpenAI-compatible
 * model, through the official `openai` client: the TypeScript twin of examples/discord_bot.py.
 * The whole turn:
 *
 *   start a turn with the prompt → the sidecar splices the memory in and offers the tool →
 *   the model (it may call `update_short_term_memory`; the sidecar runs it) → reply → capture.
 *
 * `/refresh` forgets the channel (Manage Messages in a server; anyone in a DM) and `/memory`
 * shows, only to whoever asks, what the bot remembers of it.
 *
 * Try it with no Discord application and no token: `discord-js-offline.ts` (next to this file)
 * logs this bot in to a stand-in Discord on loopback and plays a short scene, against a real
 * sidecar and `shortterm fake-model`. From a clone (`shortterm-client` is not on the npm
 * registry yet):
 *
 *   pip install -e '.[sidecar]'    # at the clone's root: the sidecar, and the fake model
 *   shortterm serve &              # http://127.0.0.1:8765, no token on loopback
 *   shortterm fake-model &         # an offline model on http://127.0.0.1:8800/v1
 *   cd clients/typescript && npm ci && npm run build
 *   node dist/examples/discord-js-offline.js
 *   DISCORD_TOKEN=... node dist/examples/discord-js-bot.js    # the same bot, on Discord
 *
 * In your bot's own project instead, copy this file and install what it imports. Tested with
 * these versions (clients/typescript/package.json's devDependencies; CI installs them fresh,
 * with the packed client, into a new project and compiles this file):
 *
 *   npm install /path/to/clone/dist/shortterm-client-0.1.0.tgz openai@7.60.0 discord.js@14.28.1
 *   npm install --save-dev typescript@7.0.2 @types/node@26.6.11
 *
 * (`make dist` at the clone's root writes the tarball.) discord.js's type declarations need
 * `@types/node`. The project must be an ES module (`npm pkg set type=module`); its
 * tsconfig.json's `compilerOptions`: `"module": "nodenext", "target": "es2022", "strict": true,
 * "skipLibCheck": true` (with @types/node 26, a declaration file under discord.js names an
 * import those types no longer have; @types/node 20 to 25 need no skipLibCheck). openai 7
 * asks for Node 22 or newer (npm warns on Node 20; this bot and its offline runner pass their
 * tests on Node 20.20). The offline runner also needs `ws@8.23.1` (and `@types/ws@8.18.2`).
 *
 * With a real model: OPENAI_BASE_URL (default http://127.0.0.1:8800/v1, the fake model; for
 * OpenAI itself https://api.openai.com/v1), OPENAI_API_KEY (needed by OpenAI only; a dummy
 * by default), OPENAI_MODEL (default shortterm-fake). Also SHORTTERM_URL (default
 * http://127.0.0.1:8765), SHORTTERM_TOKEN (when the sidecar has one), BOT_HISTORY (earlier
 * channel messages the model sees, default 20).
 *
 * It answers when mentioned, replied to, or in a DM. The Discord glue (`turnInput`,
 * `createBot`) is thin; the turn (`runTurn`) and the commands (`memoryText`, `refreshText`)
 * take plain values, so they run without Discord too.
 */

import { pathToFileURL } from "node:url";

import {
  Client,
  escapeMarkdown,
  Events,
  GatewayIntentBits,
  MessageFlags,
  Partials,
  PermissionFlagsBits,
  SlashCommandBuilder,
  type ChatInputCommandInteraction,
  type ClientOptions,
  type Guild,
  type Message,
  type User,
} from "discord.js";
import OpenAI from "openai";
import type {
  ChatCompletionMessageParam,
  ChatCompletionMessageToolCall,
  ChatCompletionTool,
} from "openai/resources/index";
import {
  ShortTermClient,
  TurnNotFoundError,
  type EntryOut,
  type MessageIn,
} from "shortterm-client";

/** `shortterm fake-model`'s default address: the bot runs offline out of the box. */
export const LOCAL_MODEL_URL = "http://127.0.0.1:8800/v1";
export const LOCAL_MODEL = "shortterm-fake";
export const MAX_DISCORD_CHARS = 2000; // the most a message (and a command's answer) may hold

const SYSTEM =
  "You are {bot}, a friendly member of a Discord chat ({where}). Several people may be " +
  "talking; each of their messages starts with their name. Answer briefly, in plain text.";

/** One earlier message of the channel. */
export interface Said {
  authorId: string;
  speaker: string;
  content: string;
  fromBot: boolean;
}

/** What one turn needs to know, without Discord. */
export interface TurnInput {
  userId: string;
  userName: string;
  channelId: string;
  channelName: string | null;
  serverId: string | null; // null: a DM
  serverName: string | null;
  content: string; // the message that triggered the turn
  history: Said[]; // oldest first, before the triggering message
}

export interface TurnOptions {
  model: string;
  botName: string;
  maxRounds?: number;
  /** Delivers one piece of the reply; nothing is remembered unless every piece went out. */
  send?: (piece: string) => Promise<unknown>;
}

/** Pieces of at most `limit` characters, cut at a line break or a space where possible. */
export function splitMessage(text: string, limit = MAX_DISCORD_CHARS): string[] {
  const pieces: string[] = [];
  let rest = text.trim();
  while (rest.length > limit) {
    let cut = rest.lastIndexOf("\n", limit);
    if (cut < limit / 2) cut = rest.lastIndexOf(" ", limit);
    if (cut < limit / 2) cut = limit;
    pieces.push(rest.slice(0, cut).trimEnd());
    rest = rest.slice(cut).trimStart();
  }
  if (rest) pieces.push(rest);
  return pieces;
}

/**
 * A tool call's name and arguments. openai 5 and later type a call as a function call or a
 * custom tool's call; only function tools are offered here, so another kind is passed on as
 * it is and the sidecar answers it as an unknown tool (`ok: false`, a message for the model),
 * which still gives every call the answer the API requires.
 */
export function nameAndArguments(call: ChatCompletionMessageToolCall): [string, string] {
  return call.type === "function"
    ? [call.function.name, call.function.arguments]
    : [call.custom.name, call.custom.input];
}

/** Start a turn, let the model answer (running its tool calls), deliver, capture; the reply. */
export async function runTurn(
  memory: ShortTermClient,
  openai: OpenAI,
  input: TurnInput,
  options: TurnOptions,
): Promise<string> {
  const where =
    input.serverId === null ? "a direct message" : `#${input.channelName ?? "a channel"}`;
  // Other people's lines carry their names; the bot's own do not, so the model does not learn
  // to prefix its answers.
  const prompt: ChatCompletionMessageParam[] = [
    { role: "system", content: SYSTEM.replace("{bot}", options.botName).replace("{where}", where) },
    ...input.history.map((m): ChatCompletionMessageParam =>
      m.fromBot
        ? { role: "assistant", content: m.content }
        : { role: "user", content: `${m.speaker}: ${m.content}` },
    ),
    { role: "user", content: `${input.userName}: ${input.content}` },
  ];
  const turn = await memory.startTurn<ChatCompletionMessageParam, ChatCompletionTool>({
    user_id: input.userId,
    channel_id: input.channelId,
    server_id: input.serverId,
    server_name: input.serverName,
    channel_name: input.channelName,
    user_name: input.userName,
    user_message: input.content,
    bot_name: options.botName,
    provider: "openai",
    messages: prompt,
    messages_format: "openai",
  });
  // The prompt with the memory spliced in, and the tool (empty when not offered).
  const messages = turn.messages ?? prompt;
  let tools = turn.tools;
  let reply = "";
  for (let round = 0; round < (options.maxRounds ?? 4); round++) {
    const completion = await openai.chat.completions.create({
      model: options.model,
      messages,
      ...(tools.length > 0 ? { tools } : {}),
    });
    const answer = completion.choices[0]?.message;
    if (answer === undefined) break;
    const calls = answer.tool_calls ?? [];
    if (calls.length === 0) {
      reply = answer.content ?? "";
      break;
    }
    messages.push(answer);
    for (const call of calls) {
      // An unknown tool name comes back as ok: false with a message for the model.
      const [name, args] = nameAndArguments(call);
      const result = await memory.callTool(turn.turn_id, name, args);
      messages.push({ role: "tool", tool_call_id: call.id, content: result.message });
      if (result.ok) tools = []; // one update per turn
    }
  }
  if (!reply.trim()) return "";
  // Delivered first: only what reached the channel is remembered as said.
  for (const piece of splitMessage(reply)) await options.send?.(piece);
  const history: MessageIn[] = [
    ...input.history.map((m): MessageIn => ({
      role: m.fromBot ? "assistant" : "user",
      content: m.content,
      author_id: m.fromBot ? null : m.authorId,
      speaker: m.speaker,
    })),
    { role: "user", content: input.content, author_id: input.userId, speaker: input.userName },
  ];
  try {
    await memory.capture(turn.turn_id, {
      history,
      replies: [{ text: reply, persona_name: options.botName }],
    });
  } catch (error) {
    // A generation longer than the turn's life: the reply went out, unremembered.
    if (!(error instanceof TurnNotFoundError)) throw error;
    console.warn(`not remembered: ${error.detail}`);
  }
  return reply;
}

// -- /memory and /refresh -----------------------------------------------------------------------

/** Where a command was used, without Discord. */
export interface Place {
  userId: string;
  channelId: string;
  channelName: string | null;
  serverId: string | null; // null: a DM
}

/** `"Mood & vibe"` → `"mood_vibe"`: the sidecar's category slugs, for showing their labels. */
export function slugify(label: string): string {
  const ascii = label.normalize("NFKD").replace(/\p{M}/gu, "").toLowerCase();
  let slug = ascii.replace(/[^a-z0-9]+/g, "_").replace(/^_+|_+$/g, "");
  if (/^\d/.test(slug)) slug = `c_${slug}`;
  slug = slug.slice(0, 48).replace(/_+$/, "");
  return slug || "field";
}

function ago(at: number | null, now: number): string {
  if (at === null) return "";
  const age = now - at;
  const units: [number, string][] = [
    [7 * 86400, ""],
    [86400, "day"],
    [3600, "hour"],
    [60, "minute"],
  ];
  for (const [size, name] of units) {
    if (age < size) continue;
    if (name === "") return "over a week ago";
    const n = Math.floor(age / size);
    return `${n} ${name}${n === 1 ? "" : "s"} ago`;
  }
  return "just now";
}

/** Recalled text shown as text: no formatting, no pings (the answer allows no mentions too). */
const safe = (text: string): string => escapeMarkdown(text).replace(/@/g, "@\u200b");
const oneLine = (text: string, max: number): string => {
  const line = text.split(/\s+/).join(" ").trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
};
/** A block quote of `text`, its line breaks kept, at most `max` characters. */
function quoted(text: string, max: number): string[] {
  const lines = text.split("\n").map((line) => line.split(/\s+/).join(" ").trim());
  let body = lines.filter((line) => line !== "").join("\n");
  if (body.length > max) body = `${body.slice(0, max - 1)}…`;
  return body === "" ? [] : body.split("\n").map((line) => `> ${safe(line)}`);
}

/** What `entry` holds as one Discord message: summary, notes, then the newest messages. */
export function formatMemory(
  entry: EntryOut | null,
  options: { now: number; where: string; labels?: Record<string, string>; botName?: string },
): string {
  const title = `**What I remember of ${safe(options.where)}**`;
  const empty =
    entry === null ||
    (!entry.summary && Object.keys(entry.categories).length === 0 && entry.messages.length === 0);
  if (entry === null || empty) return `${title}\nNothing yet.`;
  const parts = [title];
  if (entry.summary) {
    parts.push(`**Summary** · written ${ago(entry.summary_at, options.now)}`);
    parts.push(...quoted(entry.summary, 700));
  }
  const notes = Object.entries(entry.categories);
  if (notes.length > 0) {
    parts.push(`**Notes** · written ${ago(entry.categories_at, options.now)}`);
    for (const [slug, value] of notes) {
      parts.push(...quoted(`${options.labels?.[slug] ?? slug}: ${value}`, 300));
    }
  }
  const lines: string[] = [];
  let budget = MAX_DISCORD_CHARS - parts.join("\n").length - 60;
  for (const m of [...entry.messages].reverse()) {
    const speaker = m.speaker ?? (m.role === "assistant" ? (options.botName ?? "me") : "someone");
    const when = m.at === null ? "" : `\`${ago(m.at, options.now)}\` `;
    const line = `> ${when}**${safe(oneLine(speaker, 60))}**: ${safe(oneLine(m.content, 200))}`;
    if (line.length + 1 > budget) break;
    budget -= line.length + 1;
    lines.unshift(line);
  }
  if (entry.messages.length > 0) {
    parts.push(`**Recent messages** (${entry.messages.length}, oldest first)`, ...lines);
    const hidden = entry.messages.length - lines.length;
    if (hidden > 0) parts.push(`*… ${hidden} older not shown*`);
  }
  return parts.join("\n").slice(0, MAX_DISCORD_CHARS);
}

/** `/memory`: the channel's shared entry in a server, the user's own in a DM. */
export async function memoryText(
  memory: ShortTermClient,
  place: Place,
  botName = "me",
): Promise<string> {
  const filter = { channelId: place.channelId };
  let labels: Record<string, string> = {};
  let listed;
  if (place.serverId === null) {
    listed = await memory.listUserEntries(place.userId, filter);
  } else {
    listed = await memory.listServerEntries(place.serverId, filter);
    const settings = await memory.getServerSettings(place.serverId);
    labels = Object.fromEntries(
      (settings.categories ?? []).map((c) => [slugify(c.label), c.label]),
    );
  }
  const entry = listed.entries.find((e) => e.key.persona_id === null) ?? null;
  const where = place.channelName ? `#${place.channelName}` : "this conversation";
  // Ages from the memory's clock (`now`), whatever this machine's says.
  return formatMemory(entry, { now: listed.now, where, labels, botName });
}

/** `/refresh`: forget the channel (every user, persona and scope of it). */
export async function refreshText(memory: ShortTermClient, channelId: string): Promise<string> {
  const { deleted } = await memory.clearChannel(channelId);
  if (deleted === 0) return "Done: there was nothing to forget here.";
  const entries = deleted === 1 ? "entry" : "entries";
  return `Done: I forgot this channel's recent conversation (${deleted} ${entries}).`;
}

export const REFRESH_REFUSED =
  "You need the Manage Messages permission here to clear my memory of it.";

// -- Discord ------------------------------------------------------------------------------------

function speakerOf(message: Message): string {
  return message.member?.displayName ?? message.author.displayName ?? message.author.username;
}

/**
 * A discord.js message, and the channel's messages before it, as a turn's input. `after` is
 * the snowflake of the channel's last `/refresh`: what it forgot stays forgotten.
 */
export async function turnInput(message: Message, limit = 20, after?: string): Promise<TurnInput> {
  const earlier = await message.channel.messages.fetch({ limit, before: message.id });
  const history = [...earlier.values()]
    .reverse()
    .filter((m) => m.content.trim() !== "")
    .filter((m) => after === undefined || BigInt(m.id) > BigInt(after))
    .map((m) => ({
      authorId: m.author.id,
      speaker: speakerOf(m),
      content: m.cleanContent,
      fromBot: m.author.id === message.client.user.id,
    }));
  const channelName = "name" in message.channel ? (message.channel.name ?? null) : null;
  return {
    userId: message.author.id,
    userName: speakerOf(message),
    channelId: message.channelId,
    channelName,
    serverId: message.guildId,
    serverName: message.guild?.name ?? null,
    content: message.cleanContent,
    history,
  };
}

const COMMANDS = [
  new SlashCommandBuilder()
    .setName("refresh")
    .setDescription("Forget what I remember of this channel")
    .setDefaultMemberPermissions(PermissionFlagsBits.ManageMessages),
  new SlashCommandBuilder()
    .setName("memory")
    .setDescription("Show what I remember of this channel"),
];

/** The bot's name where it speaks: its nickname in a server, else its own. */
function botNameIn(guild: Guild | null, user: User): string {
  return guild?.members.me?.displayName ?? user.displayName;
}

async function command(
  memory: ShortTermClient,
  interaction: ChatInputCommandInteraction,
  refreshed: Map<string, string>,
): Promise<void> {
  const answer = (content: string) =>
    interaction.reply({ content, flags: MessageFlags.Ephemeral, allowedMentions: { parse: [] } });
  const channelName =
    interaction.channel !== null && "name" in interaction.channel
      ? (interaction.channel.name ?? null)
      : null;
  const place: Place = {
    userId: interaction.user.id,
    channelId: interaction.channelId,
    channelName,
    serverId: interaction.guildId,
  };
  if (interaction.commandName === "memory") {
    const botName = botNameIn(interaction.guild, interaction.client.user);
    await answer(await memoryText(memory, place, botName));
  } else if (interaction.commandName === "refresh") {
    const allowed =
      interaction.guildId === null ||
      interaction.memberPermissions?.has(PermissionFlagsBits.ManageMessages) === true;
    if (!allowed) {
      await answer(REFRESH_REFUSED);
      return;
    }
    const text = await refreshText(memory, interaction.channelId);
    refreshed.set(interaction.channelId, interaction.id);
    await answer(text);
  }
}

/** The bot's settings from the environment; every one but DISCORD_TOKEN has a local default. */
export function botSettings(env: NodeJS.ProcessEnv) {
  return {
    shorttermUrl: env.SHORTTERM_URL || "http://127.0.0.1:8765",
    shorttermToken: env.SHORTTERM_TOKEN || undefined,
    baseURL: env.OPENAI_BASE_URL || LOCAL_MODEL_URL,
    // A local server needs no key; the openai client wants one all the same.
    apiKey: env.OPENAI_API_KEY || "not-needed",
    model: env.OPENAI_MODEL || LOCAL_MODEL,
    historyLimit: historyLimit(env.BOT_HISTORY),
  };
}

function historyLimit(raw: string | undefined): number {
  const value = Number(raw || "20");
  if (!Number.isInteger(value) || value < 1 || value > 100) {
    throw new Error(
      `BOT_HISTORY must be a whole number from 1 to 100 (what Discord returns at once), not ${raw}`,
    );
  }
  return value;
}

export interface Bot {
  /** Not logged in yet: `bot.discord.login(token)`. */
  discord: Client;
  /** Settles once no turn, command or start-up step is running (a clean stop waits for it). */
  idle(): Promise<void>;
}

/**
 * The bot: a discord.js client with its handlers, not logged in. `discordOptions` are added to
 * the client's (the offline runner points `rest.api` at its stand-in Discord).
 */
export function createBot(
  env: NodeJS.ProcessEnv = process.env,
  discordOptions: Partial<ClientOptions> = {},
): Bot {
  const settings = botSettings(env);
  const memory = new ShortTermClient({
    baseUrl: settings.shorttermUrl,
    token: settings.shorttermToken,
  });
  const openai = new OpenAI({ baseURL: settings.baseURL, apiKey: settings.apiKey });
  const { model, historyLimit } = settings;
  const refreshed = new Map<string, string>(); // channel id -> the last /refresh's snowflake
  const discord = new Client({
    intents: [
      GatewayIntentBits.Guilds,
      GatewayIntentBits.GuildMessages,
      GatewayIntentBits.DirectMessages,
      GatewayIntentBits.MessageContent, // privileged: switch it on in the Developer Portal too
    ],
    partials: [Partials.Channel], // DMs arrive on channels the bot has not cached
    // The model's text is posted as is: it must never ping @everyone or a role.
    allowedMentions: { parse: ["users"], repliedUser: false },
    ...discordOptions,
  });
  // Handlers run concurrently; each is kept here until it ends, for `idle`.
  const running = new Set<Promise<void>>();
  const track = (work: () => Promise<void>): void => {
    const done = work().catch((error: unknown) => console.error("handler failed:", error));
    running.add(done);
    void done.finally(() => running.delete(done));
  };

  discord.once(Events.ClientReady, (ready) =>
    track(async () => {
      await ready.application.commands.set(COMMANDS.map((c) => c.toJSON())); // global commands
      console.log(`logged in as ${ready.user.tag}; /refresh and /memory registered`);
    }),
  );
  discord.on(Events.InteractionCreate, (interaction) => {
    if (!interaction.isChatInputCommand()) return;
    track(async () => {
      try {
        await command(memory, interaction, refreshed);
      } catch (error) {
        console.error(`/${interaction.commandName} failed:`, error);
        if (!interaction.replied) {
          await interaction
            .reply({
              content: "I could not do that just now; please try again.",
              flags: MessageFlags.Ephemeral,
            })
            .catch(() => undefined); // the interaction may have expired meanwhile
        }
      }
    });
  });
  discord.on(Events.MessageCreate, (message) => {
    const me = discord.user;
    if (me === null || message.author.bot) return;
    const addressed =
      message.guildId === null ||
      message.mentions.users.has(me.id) ||
      message.mentions.repliedUser?.id === me.id;
    if (!addressed) return;
    track(async () => {
      let first = true;
      const send = async (piece: string): Promise<unknown> => {
        if (!first) return message.channel.isSendable() ? message.channel.send(piece) : undefined;
        first = false;
        return message.reply(piece);
      };
      try {
        if (message.channel.isSendable()) await message.channel.sendTyping();
        const input = await turnInput(message, historyLimit, refreshed.get(message.channelId));
        const botName = botNameIn(message.guild, me);
        await runTurn(memory, openai, input, { model, botName, send });
      } catch (error) {
        console.error("turn failed:", error);
        if (error instanceof OpenAI.APIError) {
          await message.reply("I could not reach my model just now.").catch(() => undefined);
        }
      }
    });
  });
  const idle = async (): Promise<void> => {
    while (running.size > 0) await Promise.allSettled([...running]);
  };
  return { discord, idle };
}

export async function main(env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const bot = createBot(env);
  // Stopped (Ctrl-C, a deploy): finish the turns in flight, so their replies are remembered.
  const stop = (): void =>
    void bot
      .idle()
      .then(() => bot.discord.destroy())
      .finally(() => process.exit(0));
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
  await bot.discord.login(env.DISCORD_TOKEN);
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  if (!process.env.DISCORD_TOKEN) {
    console.error(
      "DISCORD_TOKEN is not set (see the top of this file); to try the bot without Discord: " +
        "node dist/examples/discord-js-offline.js",
    );
    process.exit(2);
  }
  main().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
