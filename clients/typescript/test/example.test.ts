// The discord.js example without Discord: its turn, /memory and /refresh against a real sidecar
// (see sidecar.ts) and a scripted OpenAI-compatible model: SHORTTERM_TEST_MODEL_URL when set
// (the Python suite's), else a node:http one in this file. The model first calls
// update_short_term_memory, then answers.

import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import { after, before, describe, it } from "node:test";

import OpenAI from "openai";

import {
  botSettings,
  formatMemory,
  LOCAL_MODEL,
  LOCAL_MODEL_URL,
  memoryText,
  refreshText,
  runTurn,
  slugify,
  splitMessage,
  type TurnInput,
} from "../examples/discord-js-bot.js";
import { ShortTermClient } from "../src/index.js";
import { missingSidecar, startSidecar, type Sidecar } from "./sidecar.js";

const SUMMARY = "Ana and Tomo planned a Saturday hike on the ridge trail, leaving at 8.";
const REPLY = "Saturday at 8, see you there!";

/** A chat-completions server that answers a tool call, then `REPLY`; keeps what it was sent. */
async function scriptedModel(): Promise<{ url: string; requests: any[]; server: Server }> {
  const requests: any[] = [];
  const server = createServer((request, response) => {
    let body = "";
    request.on("data", (part: Buffer) => (body += part.toString("utf8")));
    request.on("end", () => {
      requests.push(JSON.parse(body));
      const message =
        requests.length === 1
          ? {
              role: "assistant",
              content: null,
              tool_calls: [
                {
                  id: "call_1",
                  type: "function",
                  function: {
                    name: "update_short_term_memory",
                    arguments: JSON.stringify({ summary: SUMMARY }),
                  },
                },
              ],
            }
          : { role: "assistant", content: REPLY };
      const answer = {
        id: `chatcmpl-${requests.length}`,
        object: "chat.completion",
        created: 0,
        model: "scripted",
        choices: [{ index: 0, message, finish_reason: message.content ? "stop" : "tool_calls" }],
      };
      response.writeHead(200, { "Content-Type": "application/json" });
      response.end(JSON.stringify(answer));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  assert.ok(address !== null && typeof address === "object");
  return { url: `http://127.0.0.1:${address.port}/v1`, requests, server };
}

describe("the discord.js example", { skip: missingSidecar() || false }, () => {
  let sidecar: Sidecar;
  let memory: ShortTermClient;
  let model: Awaited<ReturnType<typeof scriptedModel>> | undefined;
  let openai: OpenAI;
  before(async () => {
    sidecar = await startSidecar();
    memory = new ShortTermClient({ baseUrl: sidecar.url, token: sidecar.token });
    const given = process.env.SHORTTERM_TEST_MODEL_URL;
    if (!given) model = await scriptedModel();
    openai = new OpenAI({ baseURL: given || model!.url, apiKey: "unused" });
  });
  after(async () => {
    model?.server.close();
    await sidecar?.close();
  });

  it("runs a whole turn, then shows it with /memory and forgets it with /refresh", async () => {
    const server = `example-${process.pid}-${Date.now()}`;
    const input: TurnInput = {
      userId: "111",
      userName: "Ana",
      channelId: `${server}-222`,
      channelName: "plans",
      serverId: server,
      serverName: "Hikers",
      content: "so, Saturday hike on the ridge trail at 8?",
      history: [{ authorId: "112", speaker: "Ben", content: "I can drive.", fromBot: false }],
    };
    const sent: string[] = [];
    const send = async (piece: string) => sent.push(piece);
    const reply = await runTurn(memory, openai, input, {
      model: "scripted",
      botName: "Tomo",
      send,
    });
    assert.equal(reply, REPLY);
    assert.deepEqual(sent, [REPLY]);
    const entry = await memory.getServerEntry(server, input.channelId);
    assert.equal(entry?.summary, SUMMARY);
    assert.deepEqual(
      entry?.messages.map((m) => [m.speaker, m.content]),
      [
        ["Ben", "I can drive."],
        ["Ana", "so, Saturday hike on the ridge trail at 8?"],
        ["Tomo", REPLY],
      ],
    );
    if (model !== undefined) {
      const [first, second] = model.requests;
      assert.deepEqual(
        first.tools.map((t: any) => t.function.name),
        ["update_short_term_memory"],
      );
      assert.equal(
        first.messages.at(-1).content,
        "Ana: so, Saturday hike on the ridge trail at 8?",
      );
      assert.match(first.messages[0].content, /\(#plans\)/);
      assert.equal(second.tools, undefined); // one update per turn: no longer offered
      assert.equal(second.messages.at(-1).role, "tool");
    }

    const place = {
      userId: "111",
      channelId: input.channelId,
      channelName: "plans",
      serverId: server,
    };
    const shown = await memoryText(memory, place, "Tomo");
    assert.match(shown, /^\*\*What I remember of #plans\*\*/);
    assert.match(shown, /\*\*Summary\*\* · written just now\n> Ana and Tomo planned/);
    assert.match(shown, /\*\*Recent messages\*\* \(3, oldest first\)/);
    assert.match(shown, /\*\*Tomo\*\*: Saturday at 8, see you there!/);

    // Two entries: the channel's shared one, and Ana's own.
    const refreshed = await refreshText(memory, input.channelId);
    assert.match(refreshed, /^Done: I forgot .* \(2 entries\)\.$/);
    assert.equal(await memory.getServerEntry(server, input.channelId), null);
    assert.match(await memoryText(memory, place), /\nNothing yet\.$/);
    assert.equal(
      await refreshText(memory, input.channelId),
      "Done: there was nothing to forget here.",
    );
  });

  it("shows a DM's own entry, and a server's category labels, with /memory", async () => {
    const user = `example-dm-${process.pid}-${Date.now()}`;
    await memory.setUserCategories(user, "dm", { mood_vibe: "Cheerful." });
    const dm = { userId: user, channelId: "dm", channelName: null, serverId: null };
    assert.match(
      await memoryText(memory, dm),
      /of this conversation[\s\S]*> mood\\_vibe: Cheerful\./,
    );
    await memory.clearUser(user);

    const server = `${user}-guild`;
    const categories = [{ label: "Mood & vibe", description: "How the channel feels." }];
    await memory.putServerSettings(server, { categories });
    await memory.setServerCategories(server, "general", { mood_vibe: "Sunny." });
    const place = { userId: user, channelId: "general", channelName: "general", serverId: server };
    assert.match(await memoryText(memory, place), /\n> Mood & vibe: Sunny\.$/);
    await memory.clearServerChannel(server, "general");
  });
});

describe("the example without a sidecar", () => {
  it("defaults to the local fake model, with no API key needed", () => {
    const settings = botSettings({ DISCORD_TOKEN: "x" });
    assert.equal(settings.baseURL, LOCAL_MODEL_URL);
    assert.equal(settings.model, LOCAL_MODEL);
    assert.equal(settings.apiKey, "not-needed");
    assert.equal(settings.shorttermUrl, "http://127.0.0.1:8765");
    assert.equal(settings.historyLimit, 20);
    assert.throws(() => botSettings({ BOT_HISTORY: "many" }), /BOT_HISTORY/);
    const openai = { OPENAI_BASE_URL: "https://api.openai.com/v1", OPENAI_API_KEY: "sk-1" };
    assert.equal(botSettings(openai).apiKey, "sk-1");
  });

  it("splits a long reply at line breaks or spaces, within Discord's limit", () => {
    const long = `${"word ".repeat(500)}\n${"x".repeat(2500)}`;
    const pieces = splitMessage(long);
    assert.ok(pieces.every((p) => p.length <= 2000 && p.length > 0));
    assert.equal(pieces.join("").replace(/\s/g, ""), long.replace(/\s/g, ""));
    assert.deepEqual(splitMessage("  short  "), ["short"]);
  });

  it("formats an entry safely: labels, no pings, no markdown", () => {
    assert.equal(slugify("Mood & vibe"), "mood_vibe");
    assert.equal(slugify("Ánimo"), "animo");
    assert.equal(slugify("2nd act"), "c_2nd_act");
    const entry = {
      key: { kind: "server" as const, owner_id: "g", channel_id: "c", persona_id: null },
      messages: [
        {
          role: "user" as const,
          content: "@everyone **bold**",
          author_id: "1",
          speaker: "Ana",
          at: 940,
          message_id: null,
          privacy: "none" as const,
        },
      ],
      summary: null,
      categories: { mood_vibe: "Sunny" },
      turns_since_refresh: 0,
      messages_at: 940,
      summary_at: null,
      categories_at: 400,
      updated_at: 940,
      server_id: "g",
      server_name: null,
      channel_name: null,
      parent_channel_id: null,
      private: false,
      persona_lineage_id: null,
    };
    const text = formatMemory(entry, {
      now: 1000,
      where: "#general",
      labels: { mood_vibe: "Mood & vibe" },
    });
    assert.match(text, /\*\*Notes\*\* · written 10 minutes ago\n> Mood & vibe: Sunny/);
    const summarized = { ...entry, summary: "Line one.\n\n  Line   two.", summary_at: 1000 };
    const shown = formatMemory(summarized, { now: 1000, where: "#general" });
    assert.match(shown, /\*\*Summary\*\* · written just now\n> Line one\.\n> Line two\.\n/);
    assert.match(text, /> `1 minute ago` \*\*Ana\*\*: @\u200beveryone \\\*\\\*bold\\\*\\\*/);
    assert.equal(
      formatMemory(null, { now: 0, where: "#x" }),
      "**What I remember of #x**\nNothing yet.",
    );
  });
});
