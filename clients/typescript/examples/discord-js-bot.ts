/**
 * A discord.js bot with working memory from the shortterm sidecar and any OpenAI-compatible
 * model, through the official `openai` client. The whole turn:
 *
 *   start a turn with the prompt → the sidecar splices the memory in and offers the tool →
 *   the model (it may call `update_short_term_memory`; the sidecar runs it) → reply → capture.
 *
 * Run it (the sidecar first: `shortterm serve`):
 *
 *   npm install shortterm-client discord.js openai
 *   DISCORD_TOKEN=... OPENAI_API_KEY=... OPENAI_BASE_URL=https://api.openai.com/v1 \
 *   OPENAI_MODEL=gpt-4o-mini SHORTTERM_URL=http://127.0.0.1:8765 node discord-js-bot.js
 *
 * It answers when mentioned, or in a DM. The Discord glue (`turnInput`, `main`) is thin; the
 * turn itself (`runTurn`) takes plain values, so it runs without Discord too.
 */

import { pathToFileURL } from "node:url";

import { Client, Events, GatewayIntentBits, Partials, type Message } from "discord.js";
import OpenAI from "openai";
import type { ChatCompletionMessageParam, ChatCompletionTool } from "openai/resources/index";
import { ShortTermClient, TurnNotFoundError, type MessageIn } from "shortterm-client";

const SYSTEM = "You are {bot}, a friendly member of this chat. Answer briefly.";
const HISTORY = 10; // earlier channel messages the model sees (and the memory keeps)

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
}

/** Start a turn, let the model answer (running its tool calls), capture; returns the reply. */
export async function runTurn(
  memory: ShortTermClient,
  openai: OpenAI,
  input: TurnInput,
  options: TurnOptions,
): Promise<string> {
  const prompt: ChatCompletionMessageParam[] = [
    { role: "system", content: SYSTEM.replace("{bot}", options.botName) },
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
      const result = await memory.callTool(
        turn.turn_id,
        call.function.name,
        call.function.arguments,
      );
      messages.push({ role: "tool", tool_call_id: call.id, content: result.message });
      if (result.ok) tools = []; // one update per turn
    }
  }
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
      replies: reply ? [{ text: reply, persona_name: options.botName }] : [],
    });
  } catch (error) {
    // A generation longer than the turn's life: the reply still goes out, unremembered.
    if (!(error instanceof TurnNotFoundError)) throw error;
    console.warn(`not remembered: ${error.detail}`);
  }
  return reply;
}

// -- Discord ------------------------------------------------------------------------------------

function speakerOf(message: Message): string {
  return message.member?.displayName ?? message.author.displayName ?? message.author.username;
}

/** A discord.js message, and the channel's messages before it, as a turn's input. */
export async function turnInput(message: Message): Promise<TurnInput> {
  const earlier = await message.channel.messages.fetch({ limit: HISTORY, before: message.id });
  const history = [...earlier.values()]
    .reverse()
    .filter((m) => m.content.trim() !== "")
    .map((m) => ({
      authorId: m.author.id,
      speaker: speakerOf(m),
      content: m.content,
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

export async function main(env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const memory = new ShortTermClient({
    baseUrl: env.SHORTTERM_URL ?? "http://127.0.0.1:8765",
    token: env.SHORTTERM_TOKEN,
  });
  const openai = new OpenAI({ baseURL: env.OPENAI_BASE_URL, apiKey: env.OPENAI_API_KEY });
  const model = env.OPENAI_MODEL ?? "gpt-4o-mini";
  const discord = new Client({
    intents: [
      GatewayIntentBits.Guilds,
      GatewayIntentBits.GuildMessages,
      GatewayIntentBits.DirectMessages,
      GatewayIntentBits.MessageContent,
    ],
    partials: [Partials.Channel], // DMs arrive on channels the bot has not cached
  });
  discord.on(Events.MessageCreate, async (message) => {
    if (message.author.bot) return;
    const me = discord.user;
    if (me === null || (message.guildId !== null && !message.mentions.has(me))) return;
    try {
      await message.channel.sendTyping();
      const input = await turnInput(message);
      const reply = await runTurn(memory, openai, input, { model, botName: me.displayName });
      if (reply) await message.reply(reply.slice(0, 2000));
    } catch (error) {
      console.error("turn failed:", error);
    }
  });
  await discord.login(env.DISCORD_TOKEN);
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
