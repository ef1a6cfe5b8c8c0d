/**
 * The discord.js example bot with no Discord application and no token: `createBot()` of
 * `discord-js-bot.ts`, unchanged, logs in to the stand-in Discord of `offline-discord.ts` on
 * loopback and answers a short scene there, through a real sidecar and any OpenAI-compatible
 * model (`shortterm fake-model` by default). The TypeScript twin of examples/discord_offline.py.
 *
 *   pip install -e '.[sidecar]'                     # at the clone's root
 *   shortterm serve &                               # http://127.0.0.1:8765
 *   shortterm fake-model --log-requests prompts.jsonl &   # http://127.0.0.1:8800/v1
 *   cd clients/typescript && npm ci && npm run build
 *   node dist/examples/discord-js-offline.js
 *
 * The scene notes a plan in #plans, then asks about it in #general: the second reply quotes
 * #plans from the bot's memory, and the last request in `prompts.jsonl` shows the memory block
 * the sidecar spliced into the prompt. Lines of your own, as arguments: `CHANNEL:AUTHOR:TEXT`
 * with CHANNEL `general`, `plans` or `dm` (the author's DM with the bot) and AUTHOR `ana` or
 * `ben`; TEXT starting with `@` mentions the bot, and `/memory` or `/refresh` uses that slash
 * command (Ana may refresh a channel, Ben may not). It takes the bot's settings from the same
 * variables (SHORTTERM_URL, OPENAI_BASE_URL, OPENAI_MODEL, ...); DISCORD_TOKEN is not needed.
 * Exit status 0: every line to the bot was answered; 1: one was not (the bot's error is
 * printed above); 2: no sidecar or no model answers.
 */

import { on, once } from "node:events";
import { pathToFileURL } from "node:url";

import { Events, type Client, type Interaction, type Message } from "discord.js";
import OpenAI from "openai";
import { ShortTermClient, ShortTermConnectionError } from "shortterm-client";

import { botSettings, createBot, type Bot } from "./discord-js-bot.js";
import {
  ANA,
  BEN,
  BOT,
  displayName,
  GENERAL_ID,
  OFFLINE_TOKEN,
  OfflineDiscord,
  PLANS_ID,
  type Person,
} from "./offline-discord.js";

export const SCENE = [
  "plans:ben:who's bringing what on Saturday?",
  "plans:ana:@note that we hike the ridge trail on Saturday at 8, Ben brings the map",
  "general:ben:anyone around this weekend?",
  "general:ana:@are we still on for the hike?",
];

const AUTHORS: Record<string, Person> = { ana: ANA, ben: BEN };
const SERVER_CHANNELS: Record<string, string> = { general: GENERAL_ID, plans: PLANS_ID };
const CHANNELS = [...Object.keys(SERVER_CHANNELS), "dm"];
const COMMANDS = ["memory", "refresh"];
const WAIT_MS = 10_000; // for the bot to receive an event: it is local, so this is generous

const USAGE = `usage: node dist/examples/discord-js-offline.js [CHANNEL:AUTHOR:TEXT ...]

Logs the example bot in to a stand-in Discord on loopback and plays the lines (without any: a
short scene). CHANNEL: general, plans or dm (the author's DM with the bot); AUTHOR: ana or ben;
TEXT: starting with @ mentions the bot, /memory or /refresh uses that command.
The bot's settings: SHORTTERM_URL (default http://127.0.0.1:8765), OPENAI_BASE_URL (default
http://127.0.0.1:8800/v1, \`shortterm fake-model\`), OPENAI_MODEL, OPENAI_API_KEY.`;

export interface Line {
  channel: string; // "general", "plans" or "dm"
  author: Person;
  text: string;
  addressed: boolean; // mentions the bot (every DM line is to it)
  command: string | null; // "memory" for "/memory"
}

/** `CHANNEL:AUTHOR:TEXT` as a line of the scene; an Error naming what is wrong. */
export function parseLine(line: string): Line {
  const [channel = "", author = "", ...rest] = line.split(":");
  const text = rest.join(":").trim();
  const person = AUTHORS[author];
  if (!CHANNELS.includes(channel) || person === undefined || text === "") {
    throw new Error(
      `${JSON.stringify(line)}: expected CHANNEL:AUTHOR:TEXT with CHANNEL one of ` +
        `${CHANNELS.join(", ")} and AUTHOR one of ${Object.keys(AUTHORS).join(", ")}`,
    );
  }
  const command = text.startsWith("/") ? text.slice(1).trim() : null;
  if (command !== null && !COMMANDS.includes(command)) {
    throw new Error(`${JSON.stringify(line)}: the bot's commands are /${COMMANDS.join(", /")}`);
  }
  const addressed = text.startsWith("@") || channel === "dm";
  return { channel, author: person, text: text.replace(/^@/, "").trim(), addressed, command };
}

/** The next `event` the client emits for which `matches` holds (within `WAIT_MS`). */
async function next<T>(client: Client, event: string, matches: (item: T) => boolean): Promise<T> {
  const signal = AbortSignal.timeout(WAIT_MS);
  try {
    // Listening starts here, before the caller makes the event happen.
    for await (const [item] of on(client, event, { signal })) {
      if (matches(item as T)) return item as T;
    }
  } catch (error) {
    if (signal.aborted) throw new Error(`the bot received no ${event} within ${WAIT_MS} ms`);
    throw error;
  }
  throw new Error(`the bot stopped before ${event}`);
}

export interface Played {
  transcript: string[]; // one `#channel name: text` line per message (a command's answer: more)
  unanswered: string[]; // the lines to the bot that got no answer
  unknownRoutes: string[]; // Discord routes the bot called that the stand-in does not serve
}

/** Logs the example bot in to an offline Discord and plays `lines` there. */
export async function play(lines: readonly string[], env: NodeJS.ProcessEnv): Promise<Played> {
  const parsed = lines.map(parseLine);
  const world = await OfflineDiscord.start();
  const bot = createBot(env, { rest: { api: world.api } });
  const played: Played = { transcript: [], unanswered: [], unknownRoutes: world.unknownRoutes };
  try {
    const ready = once(bot.discord, Events.ClientReady);
    await bot.discord.login(OFFLINE_TOKEN);
    await ready;
    await bot.idle(); // its slash commands registered
    for (const line of parsed) await playLine(world, bot, line, played);
  } finally {
    await bot.discord.destroy();
    await world.close();
  }
  return played;
}

async function playLine(world: OfflineDiscord, bot: Bot, line: Line, played: Played) {
  const inServer = line.channel !== "dm";
  const channelId = SERVER_CHANNELS[line.channel] ?? line.author.dmChannelId;
  const where = inServer ? `#${line.channel}` : `#dm-${line.author.username}`;
  const name = displayName(line.author, inServer);
  const botName = displayName(BOT, inServer);
  let id = "";
  if (line.command !== null) {
    const answered = world.answers.length;
    const seen = next<Interaction>(bot.discord, Events.InteractionCreate, (i) => i.id === id);
    id = world.command(channelId, line.author, line.command);
    await seen;
    await bot.idle(); // the bot's answer is in
    played.transcript.push(`${where} ${name} used /${line.command}`);
    const answers = world.answers.slice(answered);
    if (answers.length === 0) played.unanswered.push(`/${line.command} in ${where}`);
    for (const answer of answers) {
      const only = answer.ephemeral ? ` (only ${name} sees it)` : "";
      played.transcript.push(`${where} ${botName}${only}: ${answer.content}`);
    }
    return;
  }
  const mention = line.addressed && inServer;
  const content = mention ? `<@${BOT.id}> ${line.text}` : line.text;
  const seen = next<Message>(bot.discord, Events.MessageCreate, (m) => m.id === id);
  id = world.say(channelId, line.author, content, mention ? [BOT] : []).id;
  const received = await seen; // as the bot received it: its clean content reads "@Tomo ..."
  await bot.idle(); // the bot's turn has ended: replied and remembered, or failed
  played.transcript.push(`${where} ${name}: ${received.cleanContent}`);
  const after = BigInt(id);
  const replies = world
    .messages(channelId)
    .filter((m) => m.author.id === BOT.id && BigInt(m.id) > after);
  if (line.addressed && replies.length === 0) {
    played.unanswered.push(`${where} ${name}: ${line.text}`);
  }
  for (const reply of replies) played.transcript.push(`${where} ${botName}: ${reply.content}`);
}

/** Why the bot could not run here, or "" when the sidecar and the model both answer. */
export async function missingServices(env: NodeJS.ProcessEnv): Promise<string> {
  const settings = botSettings(env);
  const { shorttermUrl, baseURL } = settings;
  const memory = new ShortTermClient({ baseUrl: shorttermUrl, token: settings.shorttermToken });
  try {
    await memory.health();
  } catch (error) {
    if (!(error instanceof ShortTermConnectionError)) throw error;
    const start = "start `shortterm serve` (or set SHORTTERM_URL)";
    return `no sidecar answers at ${shorttermUrl}: ${start}`;
  }
  const openai = new OpenAI({ baseURL, apiKey: settings.apiKey, maxRetries: 0 });
  try {
    await openai.models.list();
  } catch (error) {
    if (!(error instanceof OpenAI.APIConnectionError)) throw error;
    const start = "start `shortterm fake-model` (or set OPENAI_BASE_URL)";
    return `no model answers at ${baseURL}: ${start}`;
  }
  return "";
}

export async function main(argv: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  if (argv.includes("--help") || argv.includes("-h")) {
    console.log(USAGE);
    return 0;
  }
  try {
    argv.forEach(parseLine);
  } catch (error) {
    console.error((error as Error).message);
    return 2;
  }
  const missing = await missingServices(env);
  if (missing) {
    console.error(missing);
    return 2;
  }
  const played = await play(argv.length > 0 ? argv : SCENE, env);
  for (const line of played.transcript) console.log(line);
  for (const route of played.unknownRoutes) {
    console.error(`the bot called ${route}, which the offline Discord does not serve`);
  }
  for (const line of played.unanswered) console.error(`no answer to ${line}`);
  return played.unanswered.length > 0 || played.unknownRoutes.length > 0 ? 1 : 0;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
}
