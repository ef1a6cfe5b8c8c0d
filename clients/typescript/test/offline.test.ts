// The stand-in Discord (examples/offline-discord.ts) and the example bot logged in to it: what
// the Python suite's end-to-end run of the offline scene does not reach. A long reply goes out
// as a Discord reply and then plain messages; a /refresh keeps what came before it out of the
// next turn's prompt; a failed turn goes unanswered and the runner says so; the gateway follows
// the intents a bot asks for. The turns need a sidecar (see sidecar.ts) and use a scripted
// OpenAI-compatible model in this file.

import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer, type Server } from "node:http";
import { after, before, describe, it } from "node:test";

import { Client, Events, GatewayIntentBits, type Message } from "discord.js";

import { createBot, type Bot } from "../examples/discord-js-bot.js";
import { play } from "../examples/discord-js-offline.js";
import {
  ANA,
  BEN,
  BOT,
  GENERAL_ID,
  OFFLINE_TOKEN,
  OfflineDiscord,
  PLANS_ID,
} from "../examples/offline-discord.js";
import { ShortTermClient } from "../src/index.js";
import { missingSidecar, startSidecar, type Sidecar } from "./sidecar.js";

const LONG = `${"All set for Saturday. ".repeat(100)}\n${"Bring water. ".repeat(20)}`.trim();

/** A chat-completions server answering `LONG`; keeps what it was sent. */
async function longModel(): Promise<{ url: string; requests: any[]; server: Server }> {
  const requests: any[] = [];
  const server = createServer((request, response) => {
    let body = "";
    request.on("data", (part: Buffer) => (body += part.toString("utf8")));
    request.on("end", () => {
      requests.push(JSON.parse(body));
      const message = { role: "assistant", content: LONG };
      response.writeHead(200, { "Content-Type": "application/json" });
      response.end(
        JSON.stringify({
          id: `chatcmpl-${requests.length}`,
          object: "chat.completion",
          created: 0,
          model: "scripted",
          choices: [{ index: 0, message, finish_reason: "stop" }],
        }),
      );
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const address = server.address();
  assert.ok(address !== null && typeof address === "object");
  return { url: `http://127.0.0.1:${address.port}/v1`, requests, server };
}

/** Logs `bot` in to `world`; settles once its commands are registered. */
async function logIn(bot: Bot): Promise<void> {
  const ready = once(bot.discord, Events.ClientReady);
  await bot.discord.login(OFFLINE_TOKEN);
  await ready;
  await bot.idle();
}

/** `world.say`, settled: the bot received the message and its turn (if any) ended. */
async function say(world: OfflineDiscord, bot: Bot, ...args: Parameters<OfflineDiscord["say"]>) {
  const received = once(bot.discord, Events.MessageCreate);
  const said = world.say(...args);
  const [message] = (await received) as [Message];
  assert.equal(message.id, said.id);
  await bot.idle();
  return said;
}

describe("the example bot on the offline Discord", { skip: missingSidecar() || false }, () => {
  let sidecar: Sidecar;
  let model: Awaited<ReturnType<typeof longModel>>;
  let world: OfflineDiscord;
  let bot: Bot;
  before(async () => {
    sidecar = await startSidecar();
    model = await longModel();
    // The offline server's ids are fixed: start from nothing on a sidecar that may be shared.
    const memory = new ShortTermClient({ baseUrl: sidecar.url, token: sidecar.token });
    for (const channel of [GENERAL_ID, PLANS_ID]) await memory.clearChannel(channel);
    world = await OfflineDiscord.start();
    const env = {
      SHORTTERM_URL: sidecar.url,
      SHORTTERM_TOKEN: sidecar.token,
      OPENAI_BASE_URL: model.url,
    };
    bot = createBot(env, { rest: { api: world.api } });
    await logIn(bot);
  });
  after(async () => {
    await bot?.discord.destroy();
    await world?.close();
    model?.server.close();
    await sidecar?.close();
  });

  it("sends a long reply as a Discord reply, then the rest as messages", async () => {
    const said = await say(world, bot, GENERAL_ID, ANA, `<@${BOT.id}> plans?`, [BOT]);
    const replies = world.messages(GENERAL_ID).filter((m) => m.author.id === BOT.id);
    assert.equal(replies.length, 2); // 2,460 characters: over Discord's 2,000
    assert.ok(replies.every((m) => m.content.length <= 2000));
    const words = (text: string) => text.split(/\s+/).join(" ");
    assert.equal(words(replies.map((m) => m.content).join(" ")), words(LONG));
    assert.deepEqual(
      replies.map((m) => m.message_reference?.message_id ?? null),
      [said.id, ...replies.slice(1).map(() => null)],
    );
    const request = model.requests.at(-1);
    assert.match(request.messages[0].content, /You are Tomo\b.*\(#general\)/);
    assert.equal(request.messages.at(-1).content, "Ana B.: @Tomo plans?");
    assert.deepEqual(world.unknownRoutes, []);
  });

  it("keeps what a /refresh forgot out of the next turn's prompt", async () => {
    await say(world, bot, PLANS_ID, BEN, "the secret route is via the quarry");
    const seen = once(bot.discord, Events.InteractionCreate);
    world.command(PLANS_ID, ANA, "refresh");
    await seen;
    await bot.idle();
    assert.match(world.answers.at(-1)!.content, /^Done: /);
    await say(world, bot, PLANS_ID, BEN, "morning all");
    await say(world, bot, PLANS_ID, ANA, `<@${BOT.id}> what's the plan?`, [BOT]);
    const prompt = JSON.stringify(model.requests.at(-1).messages);
    assert.ok(!prompt.includes("quarry"), "a message from before /refresh is in the prompt");
    assert.match(prompt, /ben: morning all/);
  });
});

describe("the offline Discord", () => {
  it("leaves a turn that failed unanswered, and the runner says so", async (t) => {
    const logged = t.mock.method(console, "error", () => undefined);
    const env = { SHORTTERM_URL: "http://127.0.0.1:9", OPENAI_BASE_URL: "http://127.0.0.1:9/v1" };
    const played = await play(["general:ana:@hello?"], env);
    assert.deepEqual(played.transcript, ["#general Ana B.: @Tomo hello?"]);
    assert.deepEqual(played.unanswered, ["#general Ana B.: hello?"]);
    assert.deepEqual(played.unknownRoutes, []);
    assert.ok(logged.mock.calls.some((call) => call.arguments[0] === "turn failed:"));
  });

  it("sends message events and text as the bot's intents allow", async () => {
    const world = await OfflineDiscord.start();
    // No MessageContent, no DirectMessages.
    const intents = [GatewayIntentBits.Guilds, GatewayIntentBits.GuildMessages];
    const client = new Client({ intents, rest: { api: world.api } });
    const received: Message[] = [];
    client.on(Events.MessageCreate, (message) => void received.push(message));
    try {
      const ready = once(client, Events.ClientReady);
      await client.login(OFFLINE_TOKEN);
      await ready;
      world.say(ANA.dmChannelId, ANA, "a DM"); // not sent: no DirectMessages intent
      world.say(GENERAL_ID, BEN, "not to the bot");
      const last = world.say(GENERAL_ID, ANA, `<@${BOT.id}> to the bot`, [BOT]);
      while (received.at(-1)?.id !== last.id) await once(client, Events.MessageCreate);
      assert.deepEqual(
        received.map((m) => [m.channelId, m.content]),
        [
          [GENERAL_ID, ""], // Discord blanks it without MessageContent
          [GENERAL_ID, `<@${BOT.id}> to the bot`],
        ],
      );
      assert.equal(received[0]!.member?.displayName, "ben");
      assert.equal(received[1]!.member?.displayName, "Ana B.");
      assert.equal(world.messages(ANA.dmChannelId).length, 1); // kept all the same
      assert.throws(() => world.say("1", ANA, "hi"), /no channel 1/);
      assert.throws(() => world.command(GENERAL_ID, ANA, "memory"), /registered no \/memory/);
    } finally {
      await client.destroy();
      await world.close();
    }
  });
});
