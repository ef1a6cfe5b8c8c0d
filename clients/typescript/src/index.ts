/**
 * A client for the shortterm HTTP sidecar (`shortterm serve`): working memory for chat bots.
 *
 * ```ts
 * import { ShortTermClient } from "shortterm-client";
 *
 * const memory = new ShortTermClient({ baseUrl: "http://127.0.0.1:8765" });
 * const turn = await memory.startTurn({
 *   user_id: "111", channel_id: "222", server_id: "333",
 *   messages: [{ role: "system", content: "You are Tomo." }, { role: "user", content: "hi" }],
 * });
 * // send turn.messages and turn.tools to the model; on a tool call:
 * await memory.callTool(turn.turn_id, name, args);
 * await memory.capture(turn.turn_id, { history, replies });
 * ```
 *
 * Only `fetch` and web streams are needed (Node 20 or newer). Every failure is a
 * {@link ShortTermClientError}: the sidecar's error body is kept on {@link ShortTermError}, a
 * turn that expired or was already captured is a {@link TurnNotFoundError}, and an answer that
 * is not the sidecar's (too large, not JSON, the wrong shape) is a {@link ShortTermResponseError}.
 * Reads, edits and deletions (GET, PUT, DELETE) are retried on 503 and 429, after the
 * `Retry-After` the sidecar sends; turn starts, tool calls and captures (POST) never are.
 */

import type {
  CaptureIn,
  DeletedOut,
  EntriesOut,
  EntryOut,
  EntryResult,
  HealthOut,
  Problem,
  ProblemField,
  ServerSettingsModel,
  ServersOut,
  ToolResultOut,
  TurnOut,
  TurnStart,
  UserSettingsModel,
} from "./openapi.js";
import type { MessagesFormat, ToolSpec, ToolSpecs, ToolsFormat, ToolsFormatOf } from "./tools.js";

export type * from "./openapi.js";
export type * from "./tools.js";

/** A provider message in whatever shape `messages_format` says. */
export type ProviderMessage = { [key: string]: unknown };
/** A tool definition in whatever shape `tools_format` says (the loosest; see {@link ToolSpec}). */
export type ProviderTool = { [key: string]: unknown };

/**
 * A turn start. `M` is your provider library's message type (e.g. the `openai` package's
 * `ChatCompletionMessageParam`), so its messages go in, and come back spliced, as they are.
 * `TF` and `MF` keep the formats asked for, so the answer's `tools` has their shape.
 */
export interface TurnRequest<
  M = ProviderMessage,
  TF extends ToolsFormat | null = ToolsFormat | null,
  MF extends MessagesFormat = MessagesFormat,
> extends Omit<TurnStart, "messages" | "tools_format" | "messages_format"> {
  messages?: readonly M[] | null;
  tools_format?: TF | null;
  messages_format?: MF;
}

/** A started turn: `messages` (only when the request had some) and `tools` typed as asked. */
export interface StartedTurn<M = ProviderMessage, T = ToolSpec> extends Omit<
  TurnOut,
  "messages" | "tools"
> {
  messages?: M[];
  tools: T[];
}

export const DEFAULT_TIMEOUT_MS = 10_000;
export const DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024;
export const DEFAULT_MAX_ATTEMPTS = 3;
export const DEFAULT_MAX_RETRY_DELAY_MS = 5_000;

export interface ClientOptions {
  /** Where the sidecar listens, e.g. `http://127.0.0.1:8765`. */
  baseUrl: string;
  /** `SHORTTERM_TOKEN`, sent as `Authorization: Bearer ...`: only when the sidecar has one. */
  token?: string | undefined;
  /** Abort one attempt after this long (default 10,000 ms). */
  timeoutMs?: number;
  /**
   * The largest answer accepted, in bytes after decompression (default 8 MiB). A larger one
   * is cut off while it streams in: a {@link ShortTermResponseTooLargeError}.
   */
  maxResponseBytes?: number;
  /** Attempts of a GET, PUT or DELETE answered 503 or 429 (default 3; 1 turns retries off). */
  maxAttempts?: number;
  /** The longest wait between attempts (default 5,000 ms); a longer Retry-After is cut to it. */
  maxRetryDelayMs?: number;
  /** Another `fetch` (a test double, a proxy-aware one); the global one by default. */
  fetch?: typeof fetch;
}

/** What every method takes last. */
export interface CallOptions {
  /** Ends the call (and any wait before a retry) with a {@link ShortTermAbortError}. */
  signal?: AbortSignal | undefined;
}

/** What a forget takes last: `clearChannel`, `clearUser` and `putUserSettings`. */
export interface ForgetOptions extends CallOptions {
  /**
   * The platform's time of the command (a `/forget` interaction's creation time): epoch
   * seconds, or a `Date`. Every message written up to it is left out of later captures, however
   * often a turn passes the platform's history again. Omitted: the sidecar's clock when the
   * request arrives. More than 300 s ahead of that clock is a 422 {@link ShortTermError}.
   */
  at?: number | Date | undefined;
}

/**
 * Epoch seconds, as the sidecar's times are: a `Date`, or a number already in seconds. A
 * number of milliseconds (`Date.now()`, discord.js's `createdTimestamp`) is refused with a
 * `TypeError` rather than sent as a time thirty thousand years ahead.
 */
export function epochSeconds(value: number | Date): number {
  const seconds = value instanceof Date ? value.getTime() / 1000 : value;
  if (typeof seconds !== "number" || !Number.isFinite(seconds) || seconds < 0) {
    throw new TypeError(`shortterm: a time must be a Date or epoch seconds, not ${String(value)}`);
  }
  if (seconds >= 1e11) {
    throw new TypeError(
      `shortterm: ${seconds} is not epoch seconds (milliseconds? divide by 1000, or pass a Date)`,
    );
  }
  return seconds;
}

/** A forget's query: its horizon, checked here so a wrong unit fails before it is sent. */
function forgetQuery(at: number | Date | undefined): Query {
  return { at: at === undefined ? undefined : epochSeconds(at) };
}

// -- errors -------------------------------------------------------------------------------------

/** Every failure of this client is one of these. */
export class ShortTermClientError extends Error {
  override name = "ShortTermClientError";
  readonly method: string;
  readonly path: string;

  constructor(method: string, path: string, message: string, options?: { cause?: unknown }) {
    super(`${method} ${path}: ${message}`, options);
    this.method = method;
    this.path = path;
  }
}

/** The sidecar answered with an error: `status`, and its body's `code`, `detail`, `field`. */
export class ShortTermError extends ShortTermClientError {
  override name = "ShortTermError";
  readonly status: number;
  readonly code: string;
  readonly detail: string;
  readonly field: string | null;
  readonly errors: ProblemField[];

  constructor(method: string, path: string, status: number, problem: Problem) {
    const where = problem.field ? ` (${problem.field})` : "";
    super(method, path, `${status} ${problem.code}${where}: ${problem.detail}`);
    this.status = status;
    this.code = problem.code;
    this.detail = problem.detail;
    this.field = problem.field ?? null;
    this.errors = problem.errors ?? [];
  }
}

/** The turn id is unknown, expired, evicted or already captured: start a new turn. */
export class TurnNotFoundError extends ShortTermError {
  override name = "TurnNotFoundError";
  readonly turnId: string;

  constructor(turnId: string, method: string, path: string, problem: Problem) {
    super(method, path, 404, problem);
    this.turnId = turnId;
  }
}

/** No answer within `timeoutMs`. */
export class ShortTermTimeoutError extends ShortTermClientError {
  override name = "ShortTermTimeoutError";
  readonly timeoutMs: number;

  constructor(method: string, path: string, timeoutMs: number) {
    super(method, path, `no answer from the sidecar within ${timeoutMs} ms`);
    this.timeoutMs = timeoutMs;
  }
}

/** The caller's `signal` aborted the call; `cause` is the signal's reason. */
export class ShortTermAbortError extends ShortTermClientError {
  override name = "ShortTermAbortError";

  constructor(method: string, path: string, reason: unknown) {
    super(method, path, "aborted by the caller's signal", { cause: reason });
  }
}

/** The sidecar could not be reached: refused, reset, DNS, or the connection broke mid-answer. */
export class ShortTermConnectionError extends ShortTermClientError {
  override name = "ShortTermConnectionError";
}

/** Something answered, but not as the sidecar does: see the two subclasses. */
export class ShortTermResponseError extends ShortTermClientError {
  override name = "ShortTermResponseError";
  readonly status: number;

  constructor(method: string, path: string, status: number, message: string) {
    super(method, path, `${status} ${message}`);
    this.status = status;
  }
}

/** The answer was larger than `maxResponseBytes` (counted after decompression); it was cut off. */
export class ShortTermResponseTooLargeError extends ShortTermResponseError {
  override name = "ShortTermResponseTooLargeError";
  readonly limitBytes: number;

  constructor(method: string, path: string, status: number, limitBytes: number) {
    super(method, path, status, `answer larger than ${limitBytes} bytes: cut off`);
    this.limitBytes = limitBytes;
  }
}

/** A success answer that is empty, not JSON, or not the shape this route answers with. */
export class ShortTermResponseShapeError extends ShortTermResponseError {
  override name = "ShortTermResponseShapeError";
  /** The start of the body, for a person to read. */
  readonly preview: string;

  constructor(method: string, path: string, status: number, expected: string, body: string) {
    const preview = body.slice(0, 200);
    const found = body === "" ? "an empty body" : JSON.stringify(preview);
    super(method, path, status, `expected ${expected}, got ${found}`);
    this.preview = preview;
  }
}

// -- answers: their shapes ----------------------------------------------------------------------

type Json = { [key: string]: unknown };
/** A check of a success body's shape, and what it expects (for the error). */
interface Shape<T> {
  expected: string;
  check: (value: unknown) => value is T;
}

const isObject = (v: unknown): v is Json =>
  typeof v === "object" && v !== null && !Array.isArray(v);
const isStringOrNull = (v: unknown): boolean => v === null || typeof v === "string";

function shape<T>(expected: string, check: (v: Json) => boolean): Shape<T> {
  return { expected, check: (value: unknown): value is T => isObject(value) && check(value) };
}

function isEntry(v: unknown): v is EntryOut {
  return (
    isObject(v) &&
    isObject(v.key) &&
    Array.isArray(v.messages) &&
    isStringOrNull(v.summary) &&
    isObject(v.categories)
  );
}

function turnShape<M, T>(withMessages: boolean): Shape<StartedTurn<M, T>> {
  const messages = withMessages ? " and messages" : "";
  return shape(`a started turn (turn_id, context, tools${messages})`, (v) => {
    const spliced = withMessages ? Array.isArray(v.messages) : v.messages == null;
    return (
      typeof v.turn_id === "string" &&
      v.turn_id !== "" &&
      typeof v.expires_in_s === "number" &&
      isObject(v.context) &&
      Array.isArray(v.context.items) &&
      Array.isArray(v.tools) &&
      typeof v.maintenance_due === "boolean" &&
      spliced
    );
  });
}

const SHAPES = {
  toolResult: shape<ToolResultOut>(
    "a tool result (ok, message)",
    (v) => typeof v.ok === "boolean" && typeof v.message === "string",
  ),
  entries: shape<EntriesOut>(
    "entries (entries, now)",
    (v) => Array.isArray(v.entries) && v.entries.every(isEntry) && typeof v.now === "number",
  ),
  entry: { expected: "an entry (key, messages, summary, categories)", check: isEntry },
  entryResult: shape<EntryResult>(
    "an edit's result (entry)",
    (v) => v.entry === null || isEntry(v.entry),
  ),
  servers: shape<ServersOut>(
    "servers (servers, next_after)",
    (v) => Array.isArray(v.servers) && isStringOrNull(v.next_after),
  ),
  serverSettings: shape<ServerSettingsModel>(
    "server settings",
    (v) => v.categories === undefined || Array.isArray(v.categories),
  ),
  userSettings: shape<UserSettingsModel>(
    "user settings",
    (v) => v.privacy === undefined || typeof v.privacy === "string",
  ),
  deleted: shape<DeletedOut>("a count (deleted)", (v) => typeof v.deleted === "number"),
  health: shape<HealthOut>(
    "a health answer (status, degraded)",
    (v) => typeof v.status === "string" && typeof v.degraded === "boolean",
  ),
};

// -- the client ---------------------------------------------------------------------------------

type Method = "GET" | "POST" | "PUT" | "DELETE";
type Query = Record<string, string | number | undefined>;

// A lone surrogate has no UTF-8 form: encodeURIComponent throws a URIError on it, and
// URLSearchParams would send U+FFFD instead, which names another id. It goes as its three
// WTF-8 bytes, and the sidecar refuses a path or query that is not UTF-8 (422, like an id with
// one in a JSON body), so the failure is a ShortTermError as every other.
const PIECES = /\p{Cs}|\P{Cs}+/gu;

function percentEncode(value: string): string {
  return value.replace(PIECES, (piece) => {
    const unit = piece.charCodeAt(0);
    if (piece.length > 1 || unit < 0xd800 || unit > 0xdfff) return encodeURIComponent(piece);
    const bytes = [0xe0 | (unit >> 12), 0x80 | ((unit >> 6) & 0x3f), 0x80 | (unit & 0x3f)];
    return bytes.map((b) => `%${b.toString(16).toUpperCase()}`).join("");
  });
}

const seg = percentEncode;

interface RequestOptions extends CallOptions {
  body?: unknown;
  query?: Query;
  turnId?: string;
}

/** One attempt's answer, read whole (within the size limit). */
interface Answer {
  status: number;
  statusText: string;
  retryAfter: string | null;
  /** The `Shortterm-Degraded` header: which tier failed while the call was served. */
  degraded: string | null;
  text: string;
}

/** What a capture did: `degraded` names the tier that failed (`"store"`: the dialogue was kept
 * in the hot tier only, the turn counter's step was lost), `null` when nothing did. */
export interface CaptureResult {
  degraded: string | null;
}

const RETRIED_STATUSES = new Set([429, 503]);

function isProblem(value: unknown): value is Problem {
  return isObject(value) && typeof value.code === "string" && typeof value.detail === "string";
}

function positive(name: string, value: number, integer = false): number {
  if (!Number.isFinite(value) || value <= 0 || (integer && !Number.isInteger(value))) {
    const what = integer ? "a positive integer" : "a positive number";
    throw new TypeError(`ShortTermClient: ${name} must be ${what}, not ${value}`);
  }
  return value;
}

/** The wait before attempt `attempt + 1`: the server's Retry-After, else a short backoff. */
export function retryDelayMs(retryAfter: string | null, attempt: number, maxMs: number): number {
  let wanted = 250 * 2 ** (attempt - 1);
  const value = retryAfter?.trim() ?? "";
  if (/^\d+$/.test(value)) {
    wanted = Number(value) * 1000;
  } else if (value !== "" && !Number.isNaN(Date.parse(value))) {
    wanted = Date.parse(value) - Date.now();
  }
  return Math.min(Math.max(wanted, 0), maxMs);
}

export class ShortTermClient {
  readonly baseUrl: string;
  readonly timeoutMs: number;
  readonly maxResponseBytes: number;
  readonly maxAttempts: number;
  readonly maxRetryDelayMs: number;
  readonly #token: string | undefined;
  readonly #fetch: typeof fetch;

  constructor(options: ClientOptions) {
    if (!options || typeof options.baseUrl !== "string" || !/^https?:\/\//.test(options.baseUrl)) {
      throw new TypeError("ShortTermClient: baseUrl must be an http:// or https:// URL");
    }
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.timeoutMs = positive("timeoutMs", options.timeoutMs ?? DEFAULT_TIMEOUT_MS);
    this.maxResponseBytes = positive(
      "maxResponseBytes",
      options.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES,
      true,
    );
    this.maxAttempts = positive("maxAttempts", options.maxAttempts ?? DEFAULT_MAX_ATTEMPTS, true);
    const maxDelay = options.maxRetryDelayMs ?? DEFAULT_MAX_RETRY_DELAY_MS;
    if (!Number.isFinite(maxDelay) || maxDelay < 0) {
      throw new TypeError(`ShortTermClient: maxRetryDelayMs must be 0 or more, not ${maxDelay}`);
    }
    this.maxRetryDelayMs = maxDelay;
    this.#token = options.token;
    const chosen = options.fetch ?? globalThis.fetch;
    if (typeof chosen !== "function") {
      throw new TypeError("ShortTermClient: no fetch available (Node 20 or newer has one)");
    }
    this.#fetch = chosen;
  }

  #url(path: string, query: Query | undefined): string {
    const params = Object.entries(query ?? {})
      .filter(([, value]) => value !== undefined)
      .map(([name, value]) => `${percentEncode(name)}=${percentEncode(String(value))}`);
    return params.length > 0 ? `${this.baseUrl}${path}?${params.join("&")}` : this.baseUrl + path;
  }

  /** Send, retrying an idempotent call on 503/429; the answer's body is still to be checked. */
  async #send(method: Method, path: string, options: RequestOptions): Promise<Answer> {
    const { signal } = options;
    // Only methods HTTP defines as idempotent: a turn start or a tool call that reached the
    // sidecar must not run twice.
    const attempts = method === "POST" ? 1 : this.maxAttempts;
    for (let attempt = 1; ; attempt++) {
      if (signal?.aborted) throw new ShortTermAbortError(method, path, signal.reason);
      const answer = await this.#attempt(method, path, options);
      if (!RETRIED_STATUSES.has(answer.status) || attempt >= attempts) return answer;
      const delay = retryDelayMs(answer.retryAfter, attempt, this.maxRetryDelayMs);
      await sleep(delay, signal, () => new ShortTermAbortError(method, path, signal?.reason));
    }
  }

  async #attempt(method: Method, path: string, options: RequestOptions): Promise<Answer> {
    const headers: Record<string, string> = { Accept: "application/json" };
    if (this.#token !== undefined) headers.Authorization = `Bearer ${this.#token}`;
    let body: string | undefined;
    if (options.body !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(options.body);
    }
    // One controller ends the request, whichever of the timer and the caller fires first.
    const abort = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      abort.abort();
    }, this.timeoutMs);
    const caller = options.signal;
    const onAbort = (): void => abort.abort();
    caller?.addEventListener("abort", onAbort, { once: true });
    try {
      const url = this.#url(path, options.query);
      const response = await this.#fetch(url, { method, headers, body, signal: abort.signal });
      const text = await readLimited(response, this.maxResponseBytes, () => {
        abort.abort(); // stop the transfer (and its decompression) now
        return new ShortTermResponseTooLargeError(
          method,
          path,
          response.status,
          this.maxResponseBytes,
        );
      });
      const retryAfter = response.headers.get("retry-after");
      const degraded = response.headers.get("shortterm-degraded");
      const { status, statusText } = response;
      return { status, statusText, retryAfter, degraded, text };
    } catch (error) {
      if (error instanceof ShortTermClientError) throw error;
      if (caller?.aborted) throw new ShortTermAbortError(method, path, caller.reason);
      if (timedOut) throw new ShortTermTimeoutError(method, path, this.timeoutMs);
      const reason = String(error instanceof Error ? (error.cause ?? error) : error);
      throw new ShortTermConnectionError(method, path, reason, { cause: error });
    } finally {
      clearTimeout(timer);
      caller?.removeEventListener("abort", onAbort);
    }
  }

  /** A call whose success answer must have `expected`'s shape. */
  async #json<T>(method: Method, path: string, expected: Shape<T>, options: RequestOptions = {}) {
    const answer = await this.#send(method, path, options);
    if (answer.status < 200 || answer.status > 299) this.#fail(method, path, answer, options);
    let parsed: unknown;
    try {
      parsed = JSON.parse(answer.text);
    } catch {
      throw new ShortTermResponseShapeError(
        method,
        path,
        answer.status,
        `JSON: ${expected.expected}`,
        answer.text,
      );
    }
    if (!expected.check(parsed)) {
      throw new ShortTermResponseShapeError(
        method,
        path,
        answer.status,
        expected.expected,
        answer.text,
      );
    }
    return parsed;
  }

  /** An error status as a typed error: the sidecar's problem body, or one made up from it. */
  #fail(method: Method, path: string, answer: Answer, options: RequestOptions): never {
    let parsed: unknown;
    try {
      parsed = JSON.parse(answer.text);
    } catch {
      parsed = undefined; // a proxy's page, an empty body: described below
    }
    const problem: Problem = isProblem(parsed)
      ? parsed
      : {
          code: `http_${answer.status}`,
          detail: answer.text.slice(0, 500) || answer.statusText || "no body",
        };
    // A turn route answers 404 only for a turn it does not hold, whatever produced the body.
    if (answer.status === 404 && options.turnId !== undefined) {
      throw new TurnNotFoundError(options.turnId, method, path, problem);
    }
    throw new ShortTermError(method, path, answer.status, problem);
  }

  // -- turns ------------------------------------------------------------------------------------

  /**
   * Start a turn: its id, the memory for the prompt and the tool definitions. Pass `messages`
   * (the prompt in the provider's shape, `messages_format`) to get them back with the memory
   * spliced in, ready to send with `tools`. Without type arguments `tools` has the shape of the
   * format asked for ({@link ToolSpecs}: `tools_format`, else `messages_format` when there are
   * messages, else OpenAI's) and `messages` the type of the messages passed; `<M, T>` names
   * your provider library's message and tool types instead (only the answer's outline is
   * checked here). Never retried: each call starts a turn.
   */
  // The first signature infers the formats from the request. Explicit `<M, T>` skips it (a
  // tool type fails `TF`'s constraint) for the second; a format known only at run time gets
  // the union of its shapes, never a wrong one.
  startTurn<
    M = ProviderMessage,
    TF extends ToolsFormat | null = null,
    MF extends MessagesFormat = "openai",
    P extends readonly M[] | null | undefined = readonly M[] | null | undefined,
  >(
    body: TurnRequest<M, TF, MF> & { messages?: P },
    options?: CallOptions,
  ): Promise<StartedTurn<M, ToolSpecs[ToolsFormatOf<TF, MF, P>]>>;
  /** The same, typed by your provider library's types: `startTurn<Message, Tool>(...)`. */
  startTurn<M = ProviderMessage, T = ToolSpec>(
    body: TurnRequest<M>,
    options?: CallOptions,
  ): Promise<StartedTurn<M, T>>;
  startTurn<M, T>(body: TurnRequest<M>, options: CallOptions = {}): Promise<StartedTurn<M, T>> {
    const expected = turnShape<M, T>(Array.isArray(body?.messages));
    return this.#json("POST", "/v1/turns", expected, { ...options, body });
  }

  /**
   * Run a tool call the model made in this turn (`args`: an object, or the JSON string the
   * model sent). A refusal is `ok: false` with a message for the model, not an error.
   * Never retried: the update may have been kept.
   */
  callTool(
    turnId: string,
    name: string,
    args: { [key: string]: unknown } | string,
    options: CallOptions = {},
  ): Promise<ToolResultOut> {
    const path = `/v1/turns/${seg(turnId)}/tool-calls`;
    const body = { name, arguments: args };
    return this.#json("POST", path, SHAPES.toolResult, { ...options, body, turnId });
  }

  /**
   * Keep the turn's recent dialogue and end the turn (its id is released). Never retried. The
   * result says whether the sidecar kept it degraded (a durable tier that failed): the bot's
   * turn goes on, but an operator should know.
   */
  async capture(
    turnId: string,
    body: CaptureIn,
    options: CallOptions = {},
  ): Promise<CaptureResult> {
    const path = `/v1/turns/${seg(turnId)}/capture`;
    const request = { ...options, body, turnId };
    const answer = await this.#send("POST", path, request);
    if (answer.status < 200 || answer.status > 299) this.#fail("POST", path, answer, request);
    return { degraded: answer.degraded };
  }

  // -- entries ----------------------------------------------------------------------------------

  /** The servers with durable shared memory, a page at a time (`next_after` for the next). */
  listServers(
    page: { after?: string; limit?: number } = {},
    options: CallOptions = {},
  ): Promise<ServersOut> {
    const query = { after: page.after, limit: page.limit };
    return this.#json("GET", "/v1/servers", SHAPES.servers, { ...options, query });
  }

  listServerEntries(
    serverId: string,
    filter: { channelId?: string; personaId?: string } = {},
    options: CallOptions = {},
  ): Promise<EntriesOut> {
    const query = { channel_id: filter.channelId, persona_id: filter.personaId };
    const path = `/v1/servers/${seg(serverId)}/entries`;
    return this.#json("GET", path, SHAPES.entries, { ...options, query });
  }

  listUserEntries(
    userId: string,
    filter: { channelId?: string; personaId?: string } = {},
    options: CallOptions = {},
  ): Promise<EntriesOut> {
    const query = { channel_id: filter.channelId, persona_id: filter.personaId };
    const path = `/v1/users/${seg(userId)}/entries`;
    return this.#json("GET", path, SHAPES.entries, { ...options, query });
  }

  /**
   * A channel's shared entry for one persona (none: the entry without one); `null` when
   * nothing is live.
   */
  getServerEntry(
    serverId: string,
    channelId: string,
    personaId?: string,
    options: CallOptions = {},
  ): Promise<EntryOut | null> {
    const path = `/v1/servers/${seg(serverId)}/channels/${seg(channelId)}/entry`;
    return this.#entry(path, personaId, options);
  }

  /** A user's personal entry in a channel; `null` if nothing is live. */
  getUserEntry(
    userId: string,
    channelId: string,
    personaId?: string,
    options: CallOptions = {},
  ): Promise<EntryOut | null> {
    const path = `/v1/users/${seg(userId)}/channels/${seg(channelId)}/entry`;
    return this.#entry(path, personaId, options);
  }

  async #entry(
    path: string,
    personaId: string | undefined,
    options: CallOptions,
  ): Promise<EntryOut | null> {
    try {
      const query = { persona_id: personaId };
      return await this.#json("GET", path, SHAPES.entry, { ...options, query });
    } catch (error) {
      // The sidecar's own 404 (its problem body), not a proxy's page.
      if (error instanceof ShortTermError && error.status === 404 && error.code === "not_found") {
        return null;
      }
      throw error;
    }
  }

  /** Replace the summary of a shared entry (`null` clears it). */
  setServerSummary(
    serverId: string,
    channelId: string,
    summary: string | null,
    personaId?: string,
    options: CallOptions = {},
  ): Promise<EntryResult> {
    const path = `/v1/servers/${seg(serverId)}/channels/${seg(channelId)}/entry/summary`;
    return this.#edit(path, { summary }, personaId, options);
  }

  /** Replace the summary of a user's entry (`null` clears it). */
  setUserSummary(
    userId: string,
    channelId: string,
    summary: string | null,
    personaId?: string,
    options: CallOptions = {},
  ): Promise<EntryResult> {
    const path = `/v1/users/${seg(userId)}/channels/${seg(channelId)}/entry/summary`;
    return this.#edit(path, { summary }, personaId, options);
  }

  /** Replace every category value of a shared entry (a blank value is dropped). */
  setServerCategories(
    serverId: string,
    channelId: string,
    categories: { [slug: string]: string },
    personaId?: string,
    options: CallOptions = {},
  ): Promise<EntryResult> {
    const path = `/v1/servers/${seg(serverId)}/channels/${seg(channelId)}/entry/categories`;
    return this.#edit(path, { categories }, personaId, options);
  }

  /** Replace every category value of a user's entry (a blank value is dropped). */
  setUserCategories(
    userId: string,
    channelId: string,
    categories: { [slug: string]: string },
    personaId?: string,
    options: CallOptions = {},
  ): Promise<EntryResult> {
    const path = `/v1/users/${seg(userId)}/channels/${seg(channelId)}/entry/categories`;
    return this.#edit(path, { categories }, personaId, options);
  }

  #edit(
    path: string,
    body: Json,
    personaId: string | undefined,
    options: CallOptions,
  ): Promise<EntryResult> {
    const query = { persona_id: personaId };
    return this.#json("PUT", path, SHAPES.entryResult, { ...options, body, query });
  }

  // -- settings ---------------------------------------------------------------------------------

  getServerSettings(serverId: string, options: CallOptions = {}): Promise<ServerSettingsModel> {
    const path = `/v1/servers/${seg(serverId)}/settings`;
    return this.#json("GET", path, SHAPES.serverSettings, options);
  }

  /** Replace a server's settings (missing fields take their defaults). */
  putServerSettings(
    serverId: string,
    settings: ServerSettingsModel,
    options: CallOptions = {},
  ): Promise<ServerSettingsModel> {
    const path = `/v1/servers/${seg(serverId)}/settings`;
    return this.#json("PUT", path, SHAPES.serverSettings, { ...options, body: settings });
  }

  getUserSettings(userId: string, options: CallOptions = {}): Promise<UserSettingsModel> {
    const path = `/v1/users/${seg(userId)}/settings`;
    return this.#json("GET", path, SHAPES.userSettings, options);
  }

  /**
   * Replace a user's settings; `privacy: "full"` also forgets what was kept about them, and
   * keeps what they wrote up to `at` out of later captures (see {@link ForgetOptions}).
   */
  async putUserSettings(
    userId: string,
    settings: UserSettingsModel,
    options: ForgetOptions = {},
  ): Promise<UserSettingsModel> {
    const { at, ...call } = options;
    const path = `/v1/users/${seg(userId)}/settings`;
    const query = forgetQuery(at);
    return this.#json("PUT", path, SHAPES.userSettings, { ...call, body: settings, query });
  }

  // -- deletion ---------------------------------------------------------------------------------

  /**
   * Forget a channel: every user, persona and scope of it; and every message of it written up
   * to `at` (the platform's time of the command), which later captures leave out.
   */
  async clearChannel(channelId: string, options: ForgetOptions = {}): Promise<DeletedOut> {
    const { at, ...call } = options;
    const path = `/v1/channels/${seg(channelId)}`;
    return this.#json("DELETE", path, SHAPES.deleted, { ...call, query: forgetQuery(at) });
  }

  /**
   * Forget a user: their scopes, their messages everywhere and the bot's answers to them; what
   * they wrote up to `at` (the platform's time of the command) later captures leave out.
   */
  async clearUser(userId: string, options: ForgetOptions = {}): Promise<DeletedOut> {
    const { at, ...call } = options;
    const path = `/v1/users/${seg(userId)}`;
    return this.#json("DELETE", path, SHAPES.deleted, { ...call, query: forgetQuery(at) });
  }

  /** Forget one channel's shared memory for one persona (none: the entry without one). */
  clearServerChannel(
    serverId: string,
    channelId: string,
    personaId?: string,
    options: CallOptions = {},
  ): Promise<DeletedOut> {
    const path = `/v1/servers/${seg(serverId)}/channels/${seg(channelId)}`;
    const query = { persona_id: personaId };
    return this.#json("DELETE", path, SHAPES.deleted, { ...options, query });
  }

  /** Delete durable rows untouched for `retentionDays` (the store's default when omitted). */
  runJanitor(retentionDays?: number, options: CallOptions = {}): Promise<DeletedOut> {
    const query = { retention_days: retentionDays };
    return this.#json("POST", "/v1/janitor", SHAPES.deleted, { ...options, query });
  }

  /** Drop expired hot-tier entries now (a background sweeper also does it). */
  sweep(options: CallOptions = {}): Promise<DeletedOut> {
    return this.#json("POST", "/v1/sweep", SHAPES.deleted, options);
  }

  // -- service ----------------------------------------------------------------------------------

  /**
   * Liveness: `degraded` is true while the durable tier is failing; `cache_degraded` is
   * present, and true, while the hot tier (Redis) is.
   */
  health(options: CallOptions = {}): Promise<HealthOut> {
    return this.#json("GET", "/healthz", SHAPES.health, options);
  }

  /** The Prometheus text exposition (`/metrics`), as it came. */
  async metrics(options: CallOptions = {}): Promise<string> {
    const answer = await this.#send("GET", "/metrics", options);
    if (answer.status < 200 || answer.status > 299) this.#fail("GET", "/metrics", answer, options);
    return answer.text;
  }
}

// -- helpers ------------------------------------------------------------------------------------

/**
 * The body as text, counting its bytes as they stream in (after decompression: `fetch`
 * inflates gzip itself) and stopping at `limit`, so a huge or inflating answer never sits in
 * memory whole.
 */
async function readLimited(
  response: Response,
  limit: number,
  tooLarge: () => ShortTermClientError,
): Promise<string> {
  const declared = Number(response.headers.get("content-length") ?? Number.NaN);
  if (response.headers.get("content-encoding") === null && declared > limit) {
    throw tooLarge();
  }
  if (response.body === null) return "";
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > limit) {
      const error = tooLarge();
      await reader.cancel().catch(() => undefined); // the transfer is already aborted
      throw error;
    }
    chunks.push(value);
  }
  const whole = new Uint8Array(total);
  let offset = 0;
  for (const chunk of chunks) {
    whole.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return new TextDecoder().decode(whole);
}

/** Wait `ms`, or reject with `aborted()` as soon as `signal` fires. */
function sleep(ms: number, signal: AbortSignal | undefined, aborted: () => Error): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(aborted());
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(aborted());
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
