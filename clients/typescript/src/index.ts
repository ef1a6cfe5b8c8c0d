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
 * Only `fetch` is needed (Node 18 or newer, Deno, Bun, browsers). Every failure is one of the
 * errors below: the sidecar's error body is kept on {@link ShortTermError}, and a turn that
 * expired or was already captured is a {@link TurnNotFoundError}.
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

export type * from "./openapi.js";

/** A provider message in whatever shape `messages_format` says. */
export type ProviderMessage = { [key: string]: unknown };
/** A tool definition in whatever shape `tools_format` says. */
export type ProviderTool = { [key: string]: unknown };

/**
 * A turn start. `M` is your provider library's message type (e.g. the `openai` package's
 * `ChatCompletionMessageParam`), so its messages go in, and come back spliced, as they are.
 */
export interface TurnRequest<M = ProviderMessage> extends Omit<TurnStart, "messages"> {
  messages?: readonly M[] | null;
}

/** A started turn: `messages` (only when the request had some) and `tools` typed as asked. */
export interface StartedTurn<M = ProviderMessage, T = ProviderTool> extends Omit<
  TurnOut,
  "messages" | "tools"
> {
  messages?: M[];
  tools: T[];
}

export interface ClientOptions {
  /** Where the sidecar listens, e.g. `http://127.0.0.1:8765`. */
  baseUrl: string;
  /** `SHORTTERM_TOKEN`, sent as `Authorization: Bearer ...` (required off loopback). */
  token?: string | undefined;
  /** Abort a request after this long (default 10,000 ms). */
  timeoutMs?: number;
  /** Another `fetch` (a test double, a proxy-aware one); the global one by default. */
  fetch?: typeof fetch;
}

// -- errors -------------------------------------------------------------------------------------

/** The sidecar answered with an error: `status`, and its body's `code`, `detail`, `field`. */
export class ShortTermError extends Error {
  override name = "ShortTermError";
  readonly status: number;
  readonly code: string;
  readonly detail: string;
  readonly field: string | null;
  readonly errors: ProblemField[];
  readonly method: string;
  readonly path: string;

  constructor(method: string, path: string, status: number, problem: Problem) {
    const where = problem.field ? ` (${problem.field})` : "";
    super(`${method} ${path}: ${status} ${problem.code}${where}: ${problem.detail}`);
    this.status = status;
    this.code = problem.code;
    this.detail = problem.detail;
    this.field = problem.field ?? null;
    this.errors = problem.errors ?? [];
    this.method = method;
    this.path = path;
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
export class ShortTermTimeoutError extends Error {
  override name = "ShortTermTimeoutError";
  constructor(method: string, path: string, timeoutMs: number) {
    super(`${method} ${path}: no answer from the sidecar within ${timeoutMs} ms`);
  }
}

/** The sidecar could not be reached (refused, reset, DNS), or its answer was not its JSON. */
export class ShortTermConnectionError extends Error {
  override name = "ShortTermConnectionError";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

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

function isProblem(value: unknown): value is Problem {
  if (typeof value !== "object" || value === null) return false;
  const v = value as { code?: unknown; detail?: unknown };
  return typeof v.code === "string" && typeof v.detail === "string";
}

export class ShortTermClient {
  readonly baseUrl: string;
  readonly timeoutMs: number;
  readonly #token: string | undefined;
  readonly #fetch: typeof fetch;

  constructor(options: ClientOptions) {
    if (!options || typeof options.baseUrl !== "string" || !/^https?:\/\//.test(options.baseUrl)) {
      throw new TypeError("ShortTermClient: baseUrl must be an http:// or https:// URL");
    }
    const timeoutMs = options.timeoutMs ?? 10_000;
    if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
      throw new TypeError(`ShortTermClient: timeoutMs must be a positive number, not ${timeoutMs}`);
    }
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.timeoutMs = timeoutMs;
    this.#token = options.token;
    const chosen = options.fetch ?? globalThis.fetch;
    if (typeof chosen !== "function") {
      throw new TypeError("ShortTermClient: no fetch available (Node 18 or newer has one)");
    }
    this.#fetch = chosen;
  }

  async #request<T>(
    method: Method,
    path: string,
    options: { body?: unknown; query?: Query; turnId?: string } = {},
  ): Promise<T> {
    let target = this.baseUrl + path;
    const params = Object.entries(options.query ?? {})
      .filter(([, value]) => value !== undefined)
      .map(([name, value]) => `${percentEncode(name)}=${percentEncode(String(value))}`);
    if (params.length > 0) target += `?${params.join("&")}`;
    const headers: Record<string, string> = { Accept: "application/json" };
    if (this.#token !== undefined) headers.Authorization = `Bearer ${this.#token}`;
    let body: string | undefined;
    if (options.body !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(options.body);
    }
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), this.timeoutMs);
    let response: Response;
    let text: string;
    try {
      response = await this.#fetch(target, { method, headers, body, signal: abort.signal });
      text = await response.text();
    } catch (error) {
      if (abort.signal.aborted) throw new ShortTermTimeoutError(method, path, this.timeoutMs);
      const reason = String(error instanceof Error ? (error.cause ?? error) : error);
      throw new ShortTermConnectionError(`${method} ${path}: ${reason}`, { cause: error });
    } finally {
      clearTimeout(timer);
    }
    if (response.status === 204) return undefined as T;
    let parsed: unknown;
    try {
      parsed = text === "" ? undefined : JSON.parse(text);
    } catch (error) {
      throw new ShortTermConnectionError(
        `${method} ${path}: ${response.status} with a body that is not JSON: ${text.slice(0, 200)}`,
        { cause: error },
      );
    }
    if (response.ok) return parsed as T;
    const problem: Problem = isProblem(parsed)
      ? parsed
      : { code: `http_${response.status}`, detail: text.slice(0, 500) || response.statusText };
    if (response.status === 404 && options.turnId !== undefined) {
      throw new TurnNotFoundError(options.turnId, method, path, problem);
    }
    throw new ShortTermError(method, path, response.status, problem);
  }

  // -- turns ------------------------------------------------------------------------------------

  /**
   * Start a turn: its id, the memory for the prompt and the tool definitions. Pass `messages`
   * (the prompt in the provider's shape, `messages_format`) to get them back with the memory
   * spliced in, ready to send with `tools`. The type parameters name your provider library's
   * message and tool types (the sidecar answers in the shape you asked for; it is not checked
   * here).
   */
  startTurn<M = ProviderMessage, T = ProviderTool>(
    body: TurnRequest<M>,
  ): Promise<StartedTurn<M, T>> {
    return this.#request<StartedTurn<M, T>>("POST", "/v1/turns", { body });
  }

  /**
   * Run a tool call the model made in this turn (`args`: an object, or the JSON string the
   * model sent). A refusal is `ok: false` with a message for the model, not an error.
   */
  callTool(
    turnId: string,
    name: string,
    args: { [key: string]: unknown } | string,
  ): Promise<ToolResultOut> {
    const path = `/v1/turns/${seg(turnId)}/tool-calls`;
    return this.#request<ToolResultOut>("POST", path, {
      body: { name, arguments: args },
      turnId,
    });
  }

  /** Keep the turn's recent dialogue and end the turn (its id is released). */
  async capture(turnId: string, body: CaptureIn): Promise<void> {
    await this.#request<undefined>("POST", `/v1/turns/${seg(turnId)}/capture`, { body, turnId });
  }

  // -- entries ----------------------------------------------------------------------------------

  /** The servers with durable shared memory, a page at a time (`next_after` for the next). */
  listServers(options: { after?: string; limit?: number } = {}): Promise<ServersOut> {
    return this.#request<ServersOut>("GET", "/v1/servers", { query: options });
  }

  listServerEntries(
    serverId: string,
    filter: { channelId?: string; personaId?: string } = {},
  ): Promise<EntriesOut> {
    const query = { channel_id: filter.channelId, persona_id: filter.personaId };
    return this.#request<EntriesOut>("GET", `/v1/servers/${seg(serverId)}/entries`, { query });
  }

  listUserEntries(
    userId: string,
    filter: { channelId?: string; personaId?: string } = {},
  ): Promise<EntriesOut> {
    const query = { channel_id: filter.channelId, persona_id: filter.personaId };
    return this.#request<EntriesOut>("GET", `/v1/users/${seg(userId)}/entries`, { query });
  }

  /**
   * A channel's shared entry for one persona (none: the entry without one); `null` when
   * nothing is live.
   */
  getServerEntry(
    serverId: string,
    channelId: string,
    personaId?: string,
  ): Promise<EntryOut | null> {
    return this.#entry(`/v1/servers/${seg(serverId)}/channels/${seg(channelId)}/entry`, personaId);
  }

  /** A user's personal entry in a channel; `null` if nothing is live. */
  getUserEntry(userId: string, channelId: string, personaId?: string): Promise<EntryOut | null> {
    return this.#entry(`/v1/users/${seg(userId)}/channels/${seg(channelId)}/entry`, personaId);
  }

  async #entry(path: string, personaId: string | undefined): Promise<EntryOut | null> {
    try {
      return await this.#request<EntryOut>("GET", path, { query: { persona_id: personaId } });
    } catch (error) {
      if (error instanceof ShortTermError && error.status === 404) return null;
      throw error;
    }
  }

  /** Replace the summary of a shared entry (`null` clears it). */
  setServerSummary(
    serverId: string,
    channelId: string,
    summary: string | null,
    personaId?: string,
  ): Promise<EntryResult> {
    const path = `/v1/servers/${seg(serverId)}/channels/${seg(channelId)}/entry/summary`;
    return this.#request<EntryResult>("PUT", path, {
      body: { summary },
      query: { persona_id: personaId },
    });
  }

  /** Replace the summary of a user's entry (`null` clears it). */
  setUserSummary(
    userId: string,
    channelId: string,
    summary: string | null,
    personaId?: string,
  ): Promise<EntryResult> {
    const path = `/v1/users/${seg(userId)}/channels/${seg(channelId)}/entry/summary`;
    return this.#request<EntryResult>("PUT", path, {
      body: { summary },
      query: { persona_id: personaId },
    });
  }

  /** Replace every category value of a shared entry. */
  setServerCategories(
    serverId: string,
    channelId: string,
    categories: { [slug: string]: string },
    personaId?: string,
  ): Promise<EntryResult> {
    const path = `/v1/servers/${seg(serverId)}/channels/${seg(channelId)}/entry/categories`;
    return this.#request<EntryResult>("PUT", path, {
      body: { categories },
      query: { persona_id: personaId },
    });
  }

  // -- settings ---------------------------------------------------------------------------------

  getServerSettings(serverId: string): Promise<ServerSettingsModel> {
    return this.#request<ServerSettingsModel>("GET", `/v1/servers/${seg(serverId)}/settings`);
  }

  /** Replace a server's settings (missing fields take their defaults). */
  putServerSettings(serverId: string, settings: ServerSettingsModel): Promise<ServerSettingsModel> {
    return this.#request<ServerSettingsModel>("PUT", `/v1/servers/${seg(serverId)}/settings`, {
      body: settings,
    });
  }

  getUserSettings(userId: string): Promise<UserSettingsModel> {
    return this.#request<UserSettingsModel>("GET", `/v1/users/${seg(userId)}/settings`);
  }

  /** Replace a user's settings; `privacy: "full"` also forgets what was kept about them. */
  putUserSettings(userId: string, settings: UserSettingsModel): Promise<UserSettingsModel> {
    return this.#request<UserSettingsModel>("PUT", `/v1/users/${seg(userId)}/settings`, {
      body: settings,
    });
  }

  // -- deletion ---------------------------------------------------------------------------------

  /** Forget a channel: every user, persona and scope of it. */
  clearChannel(channelId: string): Promise<DeletedOut> {
    return this.#request<DeletedOut>("DELETE", `/v1/channels/${seg(channelId)}`);
  }

  /** Forget a user: their scopes, and their messages everywhere. */
  clearUser(userId: string): Promise<DeletedOut> {
    return this.#request<DeletedOut>("DELETE", `/v1/users/${seg(userId)}`);
  }

  /** Forget one channel's shared memory for one persona (none: the entry without one). */
  clearServerChannel(serverId: string, channelId: string, personaId?: string): Promise<DeletedOut> {
    const path = `/v1/servers/${seg(serverId)}/channels/${seg(channelId)}`;
    return this.#request<DeletedOut>("DELETE", path, { query: { persona_id: personaId } });
  }

  // -- service ----------------------------------------------------------------------------------

  health(): Promise<HealthOut> {
    return this.#request<HealthOut>("GET", "/healthz");
  }
}
