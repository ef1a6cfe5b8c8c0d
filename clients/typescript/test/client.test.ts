// The client against a real sidecar on loopback. The Python test suite starts it (with a
// token) and passes SHORTTERM_TEST_URL and SHORTTERM_TEST_TOKEN.

import assert from "node:assert/strict";
import { createServer, type Server } from "node:net";
import { after, before, describe, it } from "node:test";

import {
  ShortTermClient,
  ShortTermConnectionError,
  ShortTermError,
  ShortTermTimeoutError,
  TurnNotFoundError,
  type CaptureIn,
} from "../src/index.js";

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run these tests through the Python suite`);
  return value;
}

const baseUrl = required("SHORTTERM_TEST_URL");
const token = required("SHORTTERM_TEST_TOKEN");
const memory = new ShortTermClient({ baseUrl, token, timeoutMs: 5000 });
const unique = `ts-${process.pid}-${Date.now()}`;
const server = `${unique}-guild`;

const CAPTURE: CaptureIn = {
  history: [{ role: "user", content: "Hike on Saturday?", author_id: "111", speaker: "Ana" }],
  replies: [{ text: "Yes! Ridge trail, 8am.", persona_name: "Tomo" }],
};

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
    assert.equal((general.tools[0] as { type: string }).type, "function");
  });

  it("renders anthropic messages and tools", async () => {
    const turn = await memory.startTurn({
      user_id: "111",
      channel_id: "general",
      server_id: server,
      messages: [{ role: "user", content: "hi" }],
      messages_format: "anthropic",
    });
    assert.ok("input_schema" in turn.tools[0]!);
    assert.equal(turn.messages?.at(-1)?.content, "hi");
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

  it("tell a missing token apart", async () => {
    const anonymous = new ShortTermClient({ baseUrl });
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
  });

  it("say that an unknown turn id is not found", async () => {
    await assert.rejects(
      memory.callTool("no-such-turn", "update_short_term_memory", {}),
      TurnNotFoundError,
    );
  });

  describe("of the connection", () => {
    let silent: Server;
    let silentUrl = "";
    before(async () => {
      silent = createServer(() => {}); // accepts, never answers
      await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
      const address = silent.address();
      assert.ok(address !== null && typeof address === "object");
      silentUrl = `http://127.0.0.1:${address.port}`;
    });
    after(() => {
      silent.close();
    });

    it("time out", async () => {
      const slow = new ShortTermClient({ baseUrl: silentUrl, timeoutMs: 150 });
      const started = Date.now();
      await assert.rejects(slow.health(), ShortTermTimeoutError);
      assert.ok(Date.now() - started < 3000);
    });

    it("report a refused connection", async () => {
      const closed = await new Promise<number>((resolve) => {
        const probe = createServer();
        probe.listen(0, "127.0.0.1", () => {
          const address = probe.address();
          probe.close(() => resolve(typeof address === "object" && address ? address.port : 1));
        });
      });
      const nowhere = new ShortTermClient({ baseUrl: `http://127.0.0.1:${closed}` });
      await assert.rejects(nowhere.health(), ShortTermConnectionError);
    });
  });

  it("refuse bad options at once", () => {
    assert.throws(() => new ShortTermClient({ baseUrl: "127.0.0.1:8765" }), TypeError);
    assert.throws(() => new ShortTermClient({ baseUrl, timeoutMs: 0 }), TypeError);
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

  it("percent-encode ids in paths", async () => {
    const odd = `${unique} #?&%`;
    await memory.setUserSummary(odd, odd, "odd ids");
    assert.equal((await memory.getUserEntry(odd, odd))?.key.owner_id, odd);
    assert.ok((await memory.clearUser(odd)).deleted >= 1);
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
