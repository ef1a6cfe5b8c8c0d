// Forget horizons through the client, against a real sidecar: after `clearChannel`, `clearUser`
// or a `full` privacy choice with the platform's time of the command (`at`), the next turn
// passes the platform's history again (the platform keeps it) and none of what the forget
// covered is captured, while everything written after it is.

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { ShortTermClient, ShortTermError, epochSeconds, type MessageIn } from "../src/index.js";
import { missingSidecar, startSidecar, type Sidecar } from "./sidecar.js";

const unique = `ts-hz-${process.pid}-${Date.now()}`;
const server = `${unique}-guild`;
/** A user of this run only: a purge from an earlier run on the same sidecar never covers it. */
const user = (name: string): string => `${unique}-${name}`;

/**
 * A channel as the platform keeps it: every message with the time the platform gives it. The
 * bot passes its newest ten to every capture, as a bot built from the docs does.
 */
class Platform {
  readonly said: MessageIn[] = [];
  // Platform times a few minutes back, one second apart: the sidecar's clock is ahead of all.
  #now = Math.floor(Date.now() / 1000) - 240;

  constructor(
    readonly memory: ShortTermClient,
    readonly channel: string,
  ) {}

  /** The platform's clock, one second on at each call. */
  tick(): number {
    this.#now += 1;
    return this.#now;
  }

  say(who: string, content: string): void {
    const author = user(who);
    this.said.push({ role: "user", content, author_id: author, speaker: who, at: this.tick() });
  }

  /** A turn by `who`: the capture carries the platform's recent history, then the reply. */
  async turn(who: string, reply: string): Promise<void> {
    const ids = { user_id: user(who), channel_id: this.channel, server_id: server };
    const turn = await this.memory.startTurn(ids);
    await this.memory.capture(turn.turn_id, {
      history: this.said.slice(-10),
      replies: [{ text: reply, persona_name: "Tomo" }],
    });
    this.said.push({ role: "assistant", content: reply, speaker: "Tomo", at: this.tick() });
  }

  async shared(): Promise<string[]> {
    const entry = await this.memory.getServerEntry(server, this.channel);
    return entry === null ? [] : entry.messages.map((m) => m.content);
  }

  async personal(who: string): Promise<string[]> {
    const entry = await this.memory.getUserEntry(user(who), this.channel);
    return entry === null ? [] : entry.messages.map((m) => m.content);
  }
}

describe("forget horizons", { skip: missingSidecar() || false }, () => {
  let sidecar: Sidecar;
  let memory: ShortTermClient;
  before(async () => {
    sidecar = await startSidecar();
    memory = new ShortTermClient({ baseUrl: sidecar.url, token: sidecar.token, timeoutMs: 5000 });
  });
  after(async () => {
    await sidecar?.close();
  });

  it("clearChannel with at: the platform's history does not bring the channel back", async () => {
    const platform = new Platform(memory, `${unique}-clear`);
    platform.say("ana", "old secret");
    await platform.turn("ana", "old answer");
    assert.deepEqual(await platform.shared(), ["old secret", "old answer"]);
    const command = platform.tick(); // the /forget interaction's time on the platform
    platform.say("ana", "sent while the command travelled");
    await memory.clearChannel(platform.channel, { at: new Date(command * 1000) });
    platform.say("ben", "new question");
    await platform.turn("ben", "new answer");
    assert.deepEqual(await platform.shared(), [
      "sent while the command travelled",
      "new question",
      "new answer",
    ]);
    assert.deepEqual(await platform.personal("ana"), []);
    platform.say("ana", "later");
    await platform.turn("ana", "later answer");
    const kept = await platform.shared();
    assert.ok(!kept.includes("old secret") && !kept.includes("old answer"), String(kept));
    assert.deepEqual(kept.slice(-2), ["later", "later answer"]);
  });

  it("clearUser with at: her words and the bot's answers to her stay out", async () => {
    const platform = new Platform(memory, `${unique}-purge`);
    platform.say("dana", "my address is 12 Elm St");
    await platform.turn("dana", "noted, 12 Elm St");
    platform.say("ana", "hello");
    await platform.turn("ana", "hi Ana");
    assert.equal((await memory.clearUser(user("dana"), { at: platform.tick() })).deleted > 0, true);
    platform.say("ben", "what did dana say?");
    await platform.turn("ben", "nothing I keep");
    assert.deepEqual(await platform.shared(), [
      "hello",
      "hi Ana", // the answer to another user stays
      "what did dana say?",
      "nothing I keep",
    ]);
    assert.deepEqual(await platform.personal("dana"), []);
    // She may speak again: what she writes after the purge is new.
    platform.say("dana", "I am back");
    await platform.turn("dana", "welcome back");
    assert.deepEqual((await platform.shared()).slice(-2), ["I am back", "welcome back"]);
    assert.deepEqual(await platform.personal("dana"), ["I am back", "welcome back"]);
  });

  it("putUserSettings full with at: the past stays out after the choice is lifted", async () => {
    const platform = new Platform(memory, `${unique}-full`);
    platform.say("erin", "before the choice");
    await platform.turn("erin", "answered before");
    const chosen = await memory.putUserSettings(
      user("erin"),
      { privacy: "full" },
      { at: platform.tick() },
    );
    assert.equal(chosen.privacy, "full");
    await memory.putUserSettings(user("erin"), { privacy: "none" });
    platform.say("erin", "after the choice");
    await platform.turn("erin", "answered after");
    assert.deepEqual(await platform.shared(), ["after the choice", "answered after"]);
  });

  it("refuses an at far ahead of the sidecar's clock with a 422 naming it", async () => {
    const ahead = Date.now() / 1000 + 3600;
    for (const call of [
      () => memory.clearChannel(`${unique}-ahead`, { at: ahead }),
      () => memory.clearUser(`${unique}-ahead`, { at: new Date(ahead * 1000) }),
      () => memory.putUserSettings(`${unique}-ahead`, { privacy: "full" }, { at: ahead }),
    ]) {
      await assert.rejects(call(), (error: unknown) => {
        assert.ok(error instanceof ShortTermError, String(error));
        assert.equal(error.status, 422);
        assert.equal(error.code, "invalid_input");
        assert.equal(error.field, "at");
        assert.match(error.detail, /ahead of this memory's clock \(at most 300 s\)/);
        return true;
      });
    }
  });

  it("refuses milliseconds and non-times before sending anything", async () => {
    let sent = 0;
    const counting = new ShortTermClient({
      baseUrl: sidecar.url,
      token: sidecar.token,
      fetch: (input, init) => {
        sent += 1;
        return fetch(input, init);
      },
    });
    await assert.rejects(counting.clearChannel("c", { at: Date.now() }), /milliseconds\?/);
    await assert.rejects(counting.clearUser("u", { at: Number.NaN }), TypeError);
    await assert.rejects(counting.clearUser("u", { at: new Date("not a date") }), TypeError);
    assert.equal(sent, 0);
    assert.equal(epochSeconds(new Date(1_767_225_600_500)), 1_767_225_600.5);
    assert.equal(epochSeconds(1_767_225_600.5), 1_767_225_600.5);
  });
});
