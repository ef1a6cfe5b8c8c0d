// The client against a real sidecar on loopback: SHORTTERM_TEST_URL / SHORTTERM_TEST_TOKEN (the
// Python suite's, with a token; `npm test`'s, without), else one this file starts (sidecar.ts).

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import type { ChatCompletionTool } from "openai/resources/index";

import {
  ShortTermAbortError,
  ShortTermClient,
  ShortTermError,
  TurnNotFoundError,
  type CaptureIn,
  type MessagesFormat,
  type ToolsFormat,
  type TurnStart,
} from "../src/index.js";
import {
  findShortterm,
  missingSidecar,
  spawnSidecar,
  startSidecar,
  type Sidecar,
} from "./sidecar.js";

const unique = `ts-${process.pid}-${Date.now()}`;
const TOKEN = "ts-client-own-token-0123456789";
const server = `${unique}-guild`;

const SCHEMA_KEYS = ["additionalProperties", "description", "properties", "required", "type"];
const keys = (value: object): string[] => Object.keys(value).sort();

// The hand-written tool shapes cover exactly the formats of the OpenAPI document.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const formatsCovered: Same<ToolsFormat, NonNullable<TurnStart["tools_format"]>> &
  Same<MessagesFormat, NonNullable<TurnStart["messages_format"]>> = true;
void formatsCovered;

const CAPTURE: CaptureIn = {
  history: [{ role: "user", content: "Hike on Saturday?", author_id: "111", speaker: "Ana" }],
  replies: [{ text: "Yes! Ridge trail, 8am.", persona_name: "Tomo" }],
};

describe("against a real sidecar", { skip: missingSidecar() || false }, () => {
  let sidecar: Sidecar;
  let memory: ShortTermClient;
  before(async () => {
    sidecar = await startSidecar();
    memory = new ShortTermClient({ baseUrl: sidecar.url, token: sidecar.token, timeoutMs: 5000 });
  });
  after(async () => {
    await sidecar?.close();
  });

  describe("a turn", () => {
    it("starts, splices the memory into the prompt, calls the tool once and captures", async () => {
      const plans = await memory.startTurn({
        user_id: "111",
        channel_id: "plans",
        server_id: server,
      });
      assert.equal(typeof plans.turn_id, "string");
      assert.equal(plans.messages, undefined); // no messages asked, none answered
      const first = await memory.callTool(plans.turn_id, "update_short_term_memory", {
        summary: "Hike planned: Saturday, ridge trail, 8am.",
      });
      assert.deepEqual(first, { ok: true, message: first.message });
      const second = await memory.callTool(
        plans.turn_id,
        "update_short_term_memory",
        '{"summary": "x"}',
      );
      assert.equal(second.ok, false); // one update per turn; a refusal is not an error
      await memory.capture(plans.turn_id, CAPTURE);
      await assert.rejects(memory.capture(plans.turn_id, CAPTURE), (error: unknown) => {
        assert.ok(error instanceof TurnNotFoundError);
        assert.equal(error.status, 404);
        assert.equal(error.code, "not_found");
        assert.equal(error.turnId, plans.turn_id);
        assert.match(error.message, /start a new turn/);
        return true;
      });

      const prompt = [
        { role: "system", content: "You are Tomo." },
        { role: "user", content: "Ana: ready for Saturday?" },
      ];
      const general = await memory.startTurn({
        user_id: "111",
        channel_id: "general",
        server_id: server,
        bot_name: "Tomo",
        messages: prompt,
      });
      const items = general.context.items;
      assert.equal(items.length, 1);
      assert.match(items[0]!.text, /Ridge trail, 8am/);
      assert.deepEqual(general.messages, [
        prompt[0],
        { role: "user", content: items[0]!.text },
        prompt[1],
      ]);
      assert.equal(general.tools[0]!.function.name, "update_short_term_memory"); // no cast
    });

    it("renders anthropic messages and tools", async () => {
      const turn = await memory.startTurn({
        user_id: "111",
        channel_id: "general",
        server_id: server,
        messages: [{ role: "user", content: "hi" }],
        messages_format: "anthropic",
      });
      assert.equal(turn.tools[0]!.input_schema.type, "object"); // typed by messages_format
      assert.equal(turn.messages?.at(-1)?.content, "hi");
    });

    it("gives each tools_format's tool the shape its type declares", async () => {
      const shapes = `${unique}-shapes`; // a server of its own, so summary mode
      const start = <F extends ToolsFormat>(tools_format: F) =>
        memory.startTurn({ user_id: "1", channel_id: "c", server_id: shapes, tools_format });
      // Each line type-checks without type arguments; the keys pin the hand-written types
      // (src/tools.ts) to what the sidecar renders.
      const openai = (await start("openai")).tools[0]!;
      const chatTool: ChatCompletionTool = openai; // fits the openai package as it is
      assert.deepEqual(keys(chatTool.function), ["description", "name", "parameters", "strict"]);
      assert.deepEqual(keys(openai.function.parameters), SCHEMA_KEYS);
      const responses = (await start("openai-responses")).tools[0]!;
      assert.deepEqual(keys(responses), ["description", "name", "parameters", "strict", "type"]);
      const anthropic = (await start("anthropic")).tools[0]!;
      assert.deepEqual(keys(anthropic), ["description", "input_schema", "name"]);
      assert.deepEqual(keys(anthropic.input_schema), SCHEMA_KEYS);
      const gemini = (await start("gemini")).tools[0]!;
      assert.deepEqual(keys(gemini), ["description", "name", "parameters"]);
      assert.equal(gemini.parameters.type, "OBJECT");
      assert.equal(gemini.parameters.properties.summary!.type, "STRING");
      const mcp = (await start("mcp")).tools[0]!;
      assert.deepEqual(keys(mcp), ["description", "inputSchema", "name"]);
      assert.deepEqual(mcp.inputSchema.properties.summary, {
        type: "string",
        description: mcp.inputSchema.properties.summary!.description,
      });
    });
  });

  describe("errors", () => {
    it("surface the sidecar's error body, naming the field", async () => {
      const bad = {
        user_id: "111",
        channel_id: "c",
        messages: [{ role: "user", content: "a" }, { role: "robot" }],
      };
      await assert.rejects(memory.startTurn(bad), (error: unknown) => {
        assert.ok(error instanceof ShortTermError && !(error instanceof TurnNotFoundError));
        assert.equal(error.status, 422);
        assert.equal(error.code, "invalid_input");
        assert.equal(error.field, "messages[1].role");
        assert.match(error.message, /POST \/v1\/turns: 422 invalid_input \(messages\[1\]\.role\)/);
        return true;
      });
    });

    it("tell a missing token apart", async (t) => {
      // This sidecar has a token (the Python suite's), or one of this test's own gets one.
      if (sidecar.token === undefined && findShortterm() === undefined) {
        t.skip("the sidecar has no token, and no `shortterm` on PATH to start one with a token");
        return;
      }
      const guarded = sidecar.token !== undefined ? sidecar : await spawnSidecar(TOKEN);
      try {
        const anonymous = new ShortTermClient({ baseUrl: guarded.url });
        await assert.rejects(
          anonymous.startTurn({ user_id: "1", channel_id: "2" }),
          (error: unknown) => {
            assert.ok(error instanceof ShortTermError);
            assert.equal(error.status, 401);
            assert.equal(error.code, "unauthorized");
            return true;
          },
        );
        assert.deepEqual(await anonymous.health(), { status: "ok", degraded: false });
        const holder = new ShortTermClient({ baseUrl: guarded.url, token: guarded.token });
        assert.equal((await holder.getUserSettings("1")).privacy, "none");
      } finally {
        if (guarded !== sidecar) await guarded.close();
      }
    });

    it("say that an unknown turn id is not found", async () => {
      await assert.rejects(
        memory.callTool("no-such-turn", "update_short_term_memory", {}),
        TurnNotFoundError,
      );
    });

    it("stop a call whose signal is already aborted, sending nothing", async () => {
      const channel = `${unique}-aborted`;
      const signal = AbortSignal.abort(new Error("the user left"));
      await assert.rejects(
        memory.setServerSummary(server, channel, "never sent", undefined, { signal }),
        (error: unknown) => {
          assert.ok(error instanceof ShortTermAbortError);
          assert.equal((error.cause as Error).message, "the user left");
          return true;
        },
      );
      const live = new AbortController().signal; // a signal that never fires changes nothing
      assert.equal(await memory.getServerEntry(server, channel, undefined, { signal: live }), null);
    });
  });

  describe("entries, settings and forgetting", () => {
    it("read, edit and clear what is remembered", async () => {
      const channel = `${unique}-edit`;
      assert.equal(await memory.getServerEntry(server, channel), null);
      const edited = await memory.setServerSummary(server, channel, "Notes for this channel.");
      assert.equal(edited.entry?.summary, "Notes for this channel.");
      const entry = await memory.getServerEntry(server, channel);
      assert.equal(entry?.key.channel_id, channel);
      const listed = await memory.listServerEntries(server, { channelId: channel });
      assert.deepEqual(
        listed.entries.map((e) => e.summary),
        ["Notes for this channel."],
      );
      const settings = await memory.putServerSettings(server, { refresh_cadence: 3 });
      assert.equal(settings.refresh_cadence, 3);
      assert.equal((await memory.getServerSettings(server)).refresh_cadence, 3);
      assert.equal((await memory.getUserSettings(`${unique}-user`)).privacy, "none");
      const servers = await memory.listServers({ limit: 1000 });
      assert.ok(servers.servers.some((s) => s.server_id === server));
      assert.ok((await memory.clearChannel(channel)).deleted >= 1);
      assert.equal(await memory.getServerEntry(server, channel), null);
    });

    it("replace a user's and a channel's category values", async () => {
      const user = `${unique}-categories`;
      const channel = `${unique}-dm`;
      const set = await memory.setUserCategories(user, channel, {
        plans: "Hike on Saturday, 8am.",
        mood: "  ",
      });
      assert.deepEqual(set.entry?.categories, { plans: "Hike on Saturday, 8am." }); // blank dropped
      assert.equal(set.entry?.key.kind, "user");
      const read = await memory.getUserEntry(user, channel);
      assert.deepEqual(read?.categories, { plans: "Hike on Saturday, 8am." });
      const listed = await memory.listUserEntries(user, { channelId: channel });
      assert.deepEqual(
        listed.entries.map((e) => e.categories),
        [{ plans: "Hike on Saturday, 8am." }],
      );
      const replaced = await memory.setUserCategories(user, channel, { food: "Tacos." });
      assert.deepEqual(replaced.entry?.categories, { food: "Tacos." }); // every value replaced

      const shared = await memory.setServerCategories(server, channel, { plans: "Picnic." });
      assert.deepEqual(shared.entry?.categories, { plans: "Picnic." });
      assert.equal((await memory.clearServerChannel(server, channel)).deleted, 1);
      assert.equal(await memory.getServerEntry(server, channel), null);
      assert.ok((await memory.clearUser(user)).deleted >= 1);
      assert.equal(await memory.getUserEntry(user, channel), null);
    });

    it("percent-encode ids in paths", async () => {
      const odd = `${unique} #?&%`;
      await memory.setUserSummary(odd, odd, "odd ids");
      assert.equal((await memory.getUserEntry(odd, odd))?.key.owner_id, odd);
      assert.ok((await memory.clearUser(odd)).deleted >= 1);
    });
  });

  describe("service routes", () => {
    it("run the janitor and the sweep, and read health and metrics", async () => {
      assert.equal(typeof (await memory.runJanitor(3650)).deleted, "number");
      assert.equal(typeof (await memory.sweep()).deleted, "number");
      assert.equal((await memory.health()).status, "ok");
      assert.match(await memory.metrics(), /^# HELP /m);
    });
  });

  describe("lone surrogates", () => {
    // JSON.stringify writes a lone surrogate as its \\udXXX escape; the sidecar answers U+FFFD.
    it("in a prompt come back as U+FFFD, spliced", async () => {
      const turn = await memory.startTurn({
        user_id: "111",
        channel_id: `${unique}-surrogates`,
        server_id: server,
        user_name: "A\ud800na",
        messages: [
          { role: "system", content: "You are \udfffTomo." },
          { role: "user", content: [{ type: "text", text: "hi \udc00" }], name: "A\udbffna" },
        ],
      });
      const messages = turn.messages ?? [];
      assert.deepEqual(messages[0], { role: "system", content: "You are \ufffdTomo." });
      assert.deepEqual(messages.at(-1), {
        role: "user",
        content: [{ type: "text", text: "hi \ufffd" }],
        name: "A\ufffdna",
      });
      await memory.capture(turn.turn_id, {
        history: [{ role: "user", content: "Saturday \ud83d?", author_id: "111", speaker: "Ana" }],
        replies: [{ text: "Yes \ude00", persona_name: "To\ud800mo" }],
      });
      const entry = await memory.getServerEntry(server, `${unique}-surrogates`);
      assert.deepEqual(
        entry?.messages.map((m) => [m.content, m.speaker]),
        [
          ["Saturday \ufffd?", "Ana"],
          ["Yes \ufffd", "To\ufffdmo"],
        ],
      );
    });

    it("in an id are refused, in a body or in a URL", async () => {
      await assert.rejects(
        memory.startTurn({ user_id: "1\ud800", channel_id: "2" }),
        (error: unknown) => {
          assert.ok(error instanceof ShortTermError);
          assert.equal(error.status, 422);
          assert.equal(error.field, "user_id");
          assert.match(error.message, /no lone surrogates/);
          return true;
        },
      );
      for (const [channel, persona, field] of [
        ["c\udc00", undefined, "path"],
        ["c", "p\udc00", "query"],
      ] as const) {
        await assert.rejects(memory.getServerEntry(server, channel, persona), (error: unknown) => {
          assert.ok(error instanceof ShortTermError);
          assert.equal(error.status, 422);
          assert.equal(error.field, field);
          return true;
        });
      }
    });
  });
});
