// The client against a hostile local server (node:http in this process): answers too large or
// inflating, success bodies of the wrong shape, a proxy's 404 page, 503s with Retry-After,
// silence, a refused connection. Needs no sidecar.

import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createServer as createTcpServer } from "node:net";
import { after, before, beforeEach, describe, it } from "node:test";
import { createGzip } from "node:zlib";

import {
  ShortTermAbortError,
  ShortTermClient,
  ShortTermConnectionError,
  ShortTermError,
  ShortTermResponseShapeError,
  ShortTermResponseTooLargeError,
  ShortTermTimeoutError,
  TurnNotFoundError,
  retryDelayMs,
} from "../src/index.js";

type Handler = (request: IncomingMessage, response: ServerResponse) => void;

const MiB = 1024 * 1024;
const ENTRY = {
  key: { kind: "server", owner_id: "g", channel_id: "c", persona_id: null },
  messages: [],
  summary: "ok",
  categories: {},
};

let server: Server;
let baseUrl = "";
let handle: Handler = () => {};
let seen: { method: string; url: string }[] = [];

before(async () => {
  server = createServer((request, response) => {
    seen.push({ method: request.method ?? "", url: request.url ?? "" });
    request.resume();
    request.on("end", () => handle(request, response));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  assert.ok(address !== null && typeof address === "object");
  baseUrl = `http://127.0.0.1:${address.port}`;
  // Load fetch's machinery now, so the memory figures below measure answers, not its loading.
  handle = json(200, { status: "ok", degraded: false });
  await client().health();
});
after(() => {
  server.closeAllConnections();
  server.close();
});
beforeEach(() => {
  seen = [];
});

function json(status: number, body: unknown, headers: Record<string, string> = {}): Handler {
  return (_request, response) => {
    response.writeHead(status, { "Content-Type": "application/json", ...headers });
    response.end(typeof body === "string" ? body : JSON.stringify(body));
  };
}

/** How much `streamed` sent before the client hung up (or all of it). */
let streamedBytes = 0;

/** `total` bytes of JSON-looking text, streamed in 64 KiB chunks as the client reads them. */
function streamed(total: number, headers: Record<string, string> = {}): Handler {
  return (_request, response) => {
    streamedBytes = 0;
    response.writeHead(200, { "Content-Type": "application/json", ...headers });
    const chunk = Buffer.alloc(64 * 1024, 0x20);
    let sent = 0;
    const pump = (): void => {
      while (sent < total) {
        sent += chunk.length;
        streamedBytes = sent;
        if (!response.write(chunk)) {
          response.once("drain", pump);
          return;
        }
      }
      response.end();
    };
    response.on("close", () => {
      sent = total; // the client hung up: stop
    });
    pump();
  };
}

/** gzip of `total` bytes of spaces (about 1,000 to 1), made a MiB at a time. */
async function gzipBomb(total: number): Promise<Buffer> {
  const gzip = createGzip({ level: 9 });
  const parts: Buffer[] = [];
  gzip.on("data", (part: Buffer) => parts.push(part));
  const done = new Promise((resolve) => gzip.on("end", resolve));
  const block = Buffer.alloc(MiB, 0x20);
  for (let written = 0; written < total; written += MiB) {
    if (!gzip.write(block)) await new Promise((resolve) => gzip.once("drain", resolve));
  }
  gzip.end();
  await done;
  return Buffer.concat(parts);
}

function client(options: Partial<ConstructorParameters<typeof ShortTermClient>[0]> = {}) {
  return new ShortTermClient({ baseUrl, timeoutMs: 10_000, ...options });
}

const rss = (): number => process.memoryUsage().rss;
const mib = (bytes: number): string => `${(bytes / MiB).toFixed(1)} MiB`;

describe("an answer larger than the limit", () => {
  it("is cut off while it streams in (200 MB body, 8 MiB limit)", async () => {
    handle = streamed(200 * 1000 * 1000);
    const start = rss();
    await assert.rejects(client().health(), (error: unknown) => {
      assert.ok(error instanceof ShortTermResponseTooLargeError);
      assert.equal(error.limitBytes, 8 * MiB);
      assert.equal(error.status, 200);
      return true;
    });
    const grown = rss() - start;
    console.log(`# 200 MB body: ${mib(streamedBytes)} sent before the client hung up`);
    console.log(`# 200 MB body: RSS grew ${mib(grown)}`);
    assert.ok(streamedBytes < 64 * MiB, `${mib(streamedBytes)} sent`);
    assert.ok(grown < 96 * MiB, `RSS grew ${mib(grown)}`);
  });

  it("is refused from its Content-Length before the body is read", async () => {
    handle = json(200, " ".repeat(2048), { "Content-Length": "2048" });
    await assert.rejects(client({ maxResponseBytes: 1024 }).health(), (error: unknown) => {
      assert.ok(error instanceof ShortTermResponseTooLargeError);
      assert.equal(error.limitBytes, 1024);
      return true;
    });
  });

  it("counts the inflated bytes of a gzip bomb and stops early (300 KB -> 300 MB)", async () => {
    const bomb = await gzipBomb(300 * 1000 * 1000);
    console.log(`# gzip bomb: ${bomb.length} bytes on the wire`);
    handle = (_request, response) => {
      response.writeHead(200, { "Content-Type": "application/json", "Content-Encoding": "gzip" });
      response.end(bomb);
    };
    const start = rss();
    await assert.rejects(client().health(), ShortTermResponseTooLargeError);
    const grown = rss() - start;
    console.log(`# gzip bomb: RSS grew ${mib(grown)}`);
    assert.ok(grown < 96 * MiB, `RSS grew ${mib(grown)}`);
  });

  it("is accepted up to the limit, and the limit is configurable", async () => {
    handle = json(200, { status: "ok", degraded: false, padding: "x".repeat(100_000) });
    assert.equal((await client().health()).status, "ok");
    await assert.rejects(
      client({ maxResponseBytes: 50_000 }).health(),
      ShortTermResponseTooLargeError,
    );
  });

  it("applies to error answers too", async () => {
    handle = (_request, response) => {
      response.writeHead(500, { "Content-Type": "text/html" });
      response.end("x".repeat(4096));
    };
    await assert.rejects(
      client({ maxResponseBytes: 1024 }).health(),
      ShortTermResponseTooLargeError,
    );
  });
});

describe("a success answer of the wrong shape", () => {
  const turn = { user_id: "1", channel_id: "2" };

  for (const [what, body] of [
    ["[]", "[]"],
    ["null", "null"],
    ["an empty body", ""],
    ["an object without a turn id", "{}"],
    ["not JSON", "<html>hello</html>"],
  ] as const) {
    it(`is a typed error, not a started turn: ${what}`, async () => {
      handle = json(201, body);
      await assert.rejects(client().startTurn(turn), (error: unknown) => {
        assert.ok(error instanceof ShortTermResponseShapeError, String(error));
        assert.equal(error.status, 201);
        assert.match(error.message, /POST \/v1\/turns: 201 expected .*a started turn/);
        return true;
      });
    });
  }

  it("misses the spliced messages it asked for", async () => {
    const answer = {
      turn_id: "t",
      expires_in_s: 60,
      context: { items: [] },
      tools: [],
      maintenance_due: false,
    };
    handle = json(201, answer);
    assert.equal((await client().startTurn(turn)).turn_id, "t");
    const withMessages = { ...turn, messages: [{ role: "user", content: "hi" }] };
    await assert.rejects(client().startTurn(withMessages), ShortTermResponseShapeError);
  });

  it("is checked on every kind of answer", async () => {
    const memory = client();
    const calls: [string, () => Promise<unknown>][] = [
      ["callTool", () => memory.callTool("t", "update_short_term_memory", {})],
      ["listServers", () => memory.listServers()],
      ["listServerEntries", () => memory.listServerEntries("g")],
      ["listUserEntries", () => memory.listUserEntries("u")],
      ["getServerEntry", () => memory.getServerEntry("g", "c")],
      ["getUserEntry", () => memory.getUserEntry("u", "c")],
      ["setServerSummary", () => memory.setServerSummary("g", "c", "s")],
      ["setUserSummary", () => memory.setUserSummary("u", "c", "s")],
      ["setServerCategories", () => memory.setServerCategories("g", "c", {})],
      ["setUserCategories", () => memory.setUserCategories("u", "c", {})],
      ["getServerSettings", () => memory.getServerSettings("g")],
      ["putServerSettings", () => memory.putServerSettings("g", {})],
      ["getUserSettings", () => memory.getUserSettings("u")],
      ["putUserSettings", () => memory.putUserSettings("u", {})],
      ["clearChannel", () => memory.clearChannel("c")],
      ["clearUser", () => memory.clearUser("u")],
      ["clearServerChannel", () => memory.clearServerChannel("g", "c")],
      ["runJanitor", () => memory.runJanitor()],
      ["sweep", () => memory.sweep()],
      ["health", () => memory.health()],
    ];
    for (const body of ["[]", "null", "", '"text"']) {
      handle = json(200, body);
      for (const [name, call] of calls) {
        await assert.rejects(call(), ShortTermResponseShapeError, `${name} accepted ${body}`);
      }
    }
    handle = json(200, { entry: { ...ENTRY, messages: "none" } });
    await assert.rejects(memory.setUserCategories("u", "c", {}), ShortTermResponseShapeError);
    handle = json(200, { entry: ENTRY });
    assert.equal((await memory.setUserCategories("u", "c", {})).entry?.summary, "ok");
  });
});

describe("an error answer that is not the sidecar's", () => {
  it("is a TurnNotFoundError on a turn route, even as a proxy's HTML 404", async () => {
    handle = (_request, response) => {
      response.writeHead(404, { "Content-Type": "text/html" });
      response.end("<html><body>404 Not Found</body></html>");
    };
    const memory = client();
    await assert.rejects(memory.callTool("t-1", "update_short_term_memory", {}), (error) => {
      assert.ok(error instanceof TurnNotFoundError);
      assert.equal(error.turnId, "t-1");
      assert.equal(error.code, "http_404");
      assert.match(error.detail, /404 Not Found/);
      return true;
    });
    await assert.rejects(memory.capture("t-2", {}), TurnNotFoundError);
    // Off a turn route it is an HTTP error, and an entry read does not take it for "nothing".
    await assert.rejects(memory.getServerEntry("g", "c"), (error: unknown) => {
      assert.ok(error instanceof ShortTermError && !(error instanceof TurnNotFoundError));
      assert.equal(error.status, 404);
      return true;
    });
  });

  it("keeps its status and text as a ShortTermError", async () => {
    handle = (_request, response) => {
      response.writeHead(502, "Bad Gateway", { "Content-Type": "text/plain" });
      response.end("upstream went away");
    };
    await assert.rejects(client().health(), (error: unknown) => {
      assert.ok(error instanceof ShortTermError);
      assert.equal(error.status, 502);
      assert.equal(error.code, "http_502");
      assert.equal(error.detail, "upstream went away");
      return true;
    });
  });
});

describe("503 and 429", () => {
  /** Answers `status` with `headers` `failures` times, then `success`. */
  function failing(failures: number, status: number, headers: Record<string, string>) {
    let left = failures;
    return (success: Handler): Handler =>
      (request, response) => {
        if (left-- > 0)
          json(status, { code: "store_unavailable", detail: "later" }, headers)(request, response);
        else success(request, response);
      };
  }

  it("are retried after Retry-After on a read, then it succeeds", async () => {
    handle = failing(1, 503, { "Retry-After": "1" })(json(200, { status: "ok", degraded: true }));
    const started = Date.now();
    assert.deepEqual(await client().health(), { status: "ok", degraded: true });
    const waited = Date.now() - started;
    assert.equal(seen.length, 2);
    assert.ok(waited >= 900, `retried after ${waited} ms, before the Retry-After second`);
  });

  it("are retried on an edit and a deletion (429, no Retry-After: a short backoff)", async () => {
    handle = failing(2, 429, {})(json(200, { entry: ENTRY }));
    assert.equal((await client().setUserCategories("u", "c", { a: "b" })).entry?.summary, "ok");
    assert.deepEqual(
      seen.map((s) => s.method),
      ["PUT", "PUT", "PUT"],
    );
    seen = [];
    handle = failing(1, 503, { "Retry-After": "0" })(json(200, { deleted: 2 }));
    assert.equal((await client().clearChannel("c")).deleted, 2);
    assert.equal(seen.length, 2);
  });

  it("give up after maxAttempts with the last answer", async () => {
    handle = json(503, { code: "store_unavailable", detail: "down" }, { "Retry-After": "0" });
    await assert.rejects(client().health(), (error: unknown) => {
      assert.ok(error instanceof ShortTermError);
      assert.equal(error.status, 503);
      assert.equal(error.code, "store_unavailable");
      return true;
    });
    assert.equal(seen.length, 3);
    seen = [];
    await assert.rejects(client({ maxAttempts: 1 }).health(), ShortTermError);
    assert.equal(seen.length, 1);
  });

  it("are never retried on a turn start, a tool call or a capture", async () => {
    handle = json(503, { code: "store_unavailable", detail: "down" }, { "Retry-After": "0" });
    const memory = client();
    await assert.rejects(memory.startTurn({ user_id: "1", channel_id: "2" }), ShortTermError);
    await assert.rejects(memory.callTool("t", "update_short_term_memory", {}), ShortTermError);
    await assert.rejects(memory.capture("t", {}), ShortTermError);
    assert.deepEqual(
      seen.map((s) => s.method),
      ["POST", "POST", "POST"],
    );
  });

  it("wait at most maxRetryDelayMs, whatever Retry-After asks", async () => {
    handle = failing(1, 503, { "Retry-After": "3600" })(
      json(200, { status: "ok", degraded: false }),
    );
    const started = Date.now();
    await client({ maxRetryDelayMs: 50 }).health();
    assert.ok(Date.now() - started < 5000);
    assert.equal(seen.length, 2);
  });

  it("read Retry-After as seconds or an HTTP date, capped", () => {
    assert.equal(retryDelayMs("2", 1, 5000), 2000);
    assert.equal(retryDelayMs("120", 1, 5000), 5000);
    assert.equal(retryDelayMs(null, 1, 5000), 250);
    assert.equal(retryDelayMs(null, 3, 5000), 1000);
    assert.equal(retryDelayMs("soon", 2, 5000), 500);
    const inTwo = new Date(Date.now() + 2000).toUTCString();
    const delay = retryDelayMs(inTwo, 1, 5000);
    assert.ok(delay > 0 && delay <= 2000, String(delay));
    assert.equal(retryDelayMs(new Date(0).toUTCString(), 1, 5000), 0);
  });
});

describe("a caller's signal", () => {
  it("aborts a call the server never answers", async () => {
    handle = () => {}; // silence
    const controller = new AbortController();
    const pending = client().getServerSettings("g", { signal: controller.signal });
    setTimeout(() => controller.abort(new Error("user left")), 50);
    await assert.rejects(pending, (error: unknown) => {
      assert.ok(error instanceof ShortTermAbortError);
      assert.equal((error.cause as Error).message, "user left");
      return true;
    });
  });

  it("aborts the wait before a retry", async () => {
    handle = json(503, { code: "store_unavailable", detail: "down" }, { "Retry-After": "30" });
    const started = Date.now();
    const signal = AbortSignal.timeout(100);
    await assert.rejects(
      client({ maxRetryDelayMs: 30_000 }).health({ signal }),
      ShortTermAbortError,
    );
    assert.ok(Date.now() - started < 10_000);
    assert.equal(seen.length, 1);
  });

  it("aborts a body that is still streaming in", async () => {
    handle = (_request, response) => {
      response.writeHead(200, { "Content-Type": "application/json" });
      response.write('{"status": "ok", '); // and nothing more
    };
    const controller = new AbortController();
    const pending = client().health({ signal: controller.signal });
    setTimeout(() => controller.abort(), 100);
    await assert.rejects(pending, ShortTermAbortError);
  });

  it("is taken by every method", async () => {
    const memory = client();
    const signal = AbortSignal.abort();
    const options = { signal };
    const calls: Promise<unknown>[] = [
      memory.startTurn({ user_id: "1", channel_id: "2" }, options),
      memory.callTool("t", "n", {}, options),
      memory.capture("t", {}, options),
      memory.listServers({}, options),
      memory.listServerEntries("g", {}, options),
      memory.listUserEntries("u", {}, options),
      memory.getServerEntry("g", "c", undefined, options),
      memory.getUserEntry("u", "c", undefined, options),
      memory.setServerSummary("g", "c", null, undefined, options),
      memory.setUserSummary("u", "c", null, undefined, options),
      memory.setServerCategories("g", "c", {}, undefined, options),
      memory.setUserCategories("u", "c", {}, undefined, options),
      memory.getServerSettings("g", options),
      memory.putServerSettings("g", {}, options),
      memory.getUserSettings("u", options),
      memory.putUserSettings("u", {}, options),
      memory.clearChannel("c", options),
      memory.clearUser("u", options),
      memory.clearServerChannel("g", "c", undefined, options),
      memory.runJanitor(undefined, options),
      memory.sweep(options),
      memory.health(options),
      memory.metrics(options),
    ];
    for (const call of calls) await assert.rejects(call, ShortTermAbortError);
    assert.equal(seen.length, 0); // nothing was sent
  });
});

describe("the connection", () => {
  it("times out", async () => {
    handle = () => {};
    const started = Date.now();
    await assert.rejects(client({ timeoutMs: 150 }).health(), ShortTermTimeoutError);
    assert.ok(Date.now() - started < 5000);
  });

  it("reports a refused connection", async () => {
    const closed = await new Promise<number>((resolve) => {
      const probe = createTcpServer();
      probe.listen(0, "127.0.0.1", () => {
        const address = probe.address();
        probe.close(() => resolve(typeof address === "object" && address ? address.port : 1));
      });
    });
    const nowhere = new ShortTermClient({ baseUrl: `http://127.0.0.1:${closed}` });
    await assert.rejects(nowhere.health(), ShortTermConnectionError);
  });

  it("reports an answer cut off mid-body", async () => {
    handle = (_request, response) => {
      response.writeHead(200, { "Content-Type": "application/json", "Content-Length": "100" });
      response.write('{"status": ');
      setTimeout(() => response.destroy(), 20);
    };
    await assert.rejects(client().health(), ShortTermConnectionError);
  });

  it("refuses bad options at once", () => {
    assert.throws(() => new ShortTermClient({ baseUrl: "127.0.0.1:8765" }), TypeError);
    assert.throws(() => client({ timeoutMs: 0 }), TypeError);
    assert.throws(() => client({ maxResponseBytes: 1.5 }), TypeError);
    assert.throws(() => client({ maxAttempts: 0 }), TypeError);
    assert.throws(() => client({ maxRetryDelayMs: -1 }), TypeError);
  });
});
