// A capture the sidecar kept degraded (its durable tier failed: `Shortterm-Degraded: store`)
// says so to the bot that made it, not only in /healthz. The sidecar is real; the failure of
// its durable tier is not something a test can cause from here, so the header is added to the
// real answer on its way back, exactly as the sidecar sends it when the store fails.

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { ShortTermClient, type CaptureIn } from "../src/index.js";
import { missingSidecar, startSidecar, type Sidecar } from "./sidecar.js";

const unique = `ts-dg-${process.pid}-${Date.now()}`;
const CAPTURE: CaptureIn = {
  history: [{ role: "user", content: "hello", author_id: `${unique}-ana`, at: Date.now() / 1000 }],
  replies: [{ text: "hi" }],
};

describe("a degraded capture", { skip: missingSidecar() || false }, () => {
  let sidecar: Sidecar;
  before(async () => {
    sidecar = await startSidecar();
  });
  after(async () => {
    await sidecar?.close();
  });

  const start = async (memory: ShortTermClient): Promise<string> =>
    (
      await memory.startTurn({
        user_id: `${unique}-ana`,
        channel_id: `${unique}-c`,
        server_id: `${unique}-g`,
        user_message: "hello",
      })
    ).turn_id;

  it("is reported by capture()", async () => {
    const degraded = new ShortTermClient({
      baseUrl: sidecar.url,
      token: sidecar.token,
      fetch: async (input, init) => {
        const answer = await fetch(input, init);
        if (!String(input).endsWith("/capture")) return answer;
        const headers = new Headers(answer.headers);
        headers.set("Shortterm-Degraded", "store");
        return new Response(answer.body, { status: answer.status, headers });
      },
    });
    assert.deepEqual(await degraded.capture(await start(degraded), CAPTURE), { degraded: "store" });
  });

  it("is null when nothing failed", async () => {
    const memory = new ShortTermClient({ baseUrl: sidecar.url, token: sidecar.token });
    assert.deepEqual(await memory.capture(await start(memory), CAPTURE), { degraded: null });
  });
});
