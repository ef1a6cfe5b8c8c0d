// The discord.js example's turn against a real sidecar and a scripted OpenAI-compatible model
// (the Python suite starts both: SHORTTERM_TEST_URL, SHORTTERM_TEST_TOKEN and
// SHORTTERM_TEST_MODEL_URL).
// The model first calls update_short_term_memory, then answers.

import assert from "node:assert/strict";
import { it } from "node:test";

import OpenAI from "openai";

import { runTurn, type TurnInput } from "../examples/discord-js-bot.js";
import { ShortTermClient } from "../src/index.js";

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run these tests through the Python suite`);
  return value;
}

it("runs a whole turn: splice, tool call through the sidecar, reply, capture", async () => {
  const memory = new ShortTermClient({
    baseUrl: required("SHORTTERM_TEST_URL"),
    token: required("SHORTTERM_TEST_TOKEN"),
  });
  const openai = new OpenAI({ baseURL: required("SHORTTERM_TEST_MODEL_URL"), apiKey: "unused" });
  const server = `example-${process.pid}`;
  const input: TurnInput = {
    userId: "111",
    userName: "Ana",
    channelId: "222",
    channelName: "plans",
    serverId: server,
    serverName: "Hikers",
    content: "so, Saturday hike on the ridge trail at 8?",
    history: [{ authorId: "112", speaker: "Ben", content: "I can drive.", fromBot: false }],
  };
  const reply = await runTurn(memory, openai, input, { model: "scripted", botName: "Tomo" });
  assert.equal(reply, "Saturday at 8, see you there!");
  const entry = await memory.getServerEntry(server, "222");
  assert.equal(
    entry?.summary,
    "Ana and Tomo planned a Saturday hike on the ridge trail, leaving at 8.",
  );
  assert.deepEqual(
    entry?.messages.map((m) => [m.speaker, m.content]),
    [
      ["Ben", "I can drive."],
      ["Ana", "so, Saturday hike on the ridge trail at 8?"],
      ["Tomo", "Saturday at 8, see you there!"],
    ],
  );
});
