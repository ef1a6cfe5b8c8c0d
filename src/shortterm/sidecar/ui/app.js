// The shortterm inspector: browse servers → channels → personas → one entry, edit its summary,
// clear a channel. Everything goes through the /v1 JSON API with the sidecar's bearer token.
// Remembered text is written with textContent only: it is data, never markup.

const TOKEN_KEY = "shortterm.token";
const PAGE = 50;

const $ = (id) => document.getElementById(id);

const state = {
  owner: null, // {kind: "server" | "user", id, label}
  entries: [], // the owner's live entries, as the API lists them
  now: 0, // the memory's clock when the entries were read (ages use it, not the browser's)
  channel: null,
  persona: undefined, // a persona id, or null for the entry without one
  serversAfter: null,
};

class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  const init = { method, headers };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (response.status === 401) {
    $("token-form").hidden = false;
    throw new ApiError(401, "The sidecar needs its token: enter it above.");
  }
  if (!response.ok) {
    let detail = response.statusText;
    try {
      detail = (await response.json()).detail || detail;
    } catch {
      // Not our JSON error shape (a proxy's page, say): the status text is all there is.
    }
    throw new ApiError(response.status, `${response.status}: ${detail}`);
  }
  return response.status === 204 ? null : response.json();
}

const seg = encodeURIComponent;

function personaQuery(persona) {
  return persona === null ? "" : `?persona_id=${seg(persona)}`;
}

function say(text, isError = false) {
  const notice = $("notice");
  notice.textContent = text;
  notice.classList.toggle("error", isError);
}

function failed(error) {
  say(error instanceof ApiError ? error.message : `Unexpected error: ${error}`, true);
}

// Mirrors shortterm.prompt.reltime.relative_time, so the page and the prompt speak alike.
function ago(then, now) {
  if (then === null || then === undefined) return "never";
  const age = now - then;
  if (age < 60) return "just now";
  if (age < 3600) return `${plural(Math.floor(age / 60), "minute")} ago`;
  if (age < 86400) return `${plural(Math.floor(age / 3600), "hour")} ago`;
  if (age < 7 * 86400) return `${plural(Math.floor(age / 86400), "day")} ago`;
  return "over a week ago";
}

function plural(n, unit) {
  return `${n} ${unit}${n === 1 ? "" : "s"}`;
}

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  return node;
}

function pickButton(text, current, onPick) {
  const button = el("button", text, "pick");
  button.type = "button";
  button.setAttribute("aria-current", String(current));
  button.addEventListener("click", onPick);
  return button;
}

function personaLabel(persona) {
  return persona === null ? "no persona" : `persona ${persona}`;
}

function channelLabel(entry) {
  return entry.channel_name ? `#${entry.channel_name}` : `channel ${entry.key.channel_id}`;
}

// -- the address bar keeps the view, so a reload or a shared link shows the same entry --------

function writeHash() {
  const params = new URLSearchParams();
  if (state.owner) params.set(state.owner.kind, state.owner.id);
  if (state.channel !== null) params.set("channel", state.channel);
  if (state.persona !== undefined) params.set("persona", state.persona ?? "");
  history.replaceState(null, "", `#${params}`);
}

function readHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  const persona = params.get("persona");
  return {
    kind: params.has("server") ? "server" : params.has("user") ? "user" : null,
    id: params.get("server") ?? params.get("user"),
    channel: params.get("channel"),
    persona: persona === null ? undefined : persona === "" ? null : persona,
  };
}

// The names the server list has shown, so an owner opened from the address is labelled alike.
const serverNames = new Map();

function serverLabel(id, name) {
  return name ? `${name} (${id})` : id;
}

function ownerOf(kind, id) {
  const label = kind === "server" ? serverLabel(id, serverNames.get(id)) : `user ${id}`;
  return { kind, id, label };
}

// -- servers ----------------------------------------------------------------------------------

async function loadServers(more = false) {
  const query = new URLSearchParams({ limit: String(PAGE) });
  if (more && state.serversAfter) query.set("after", state.serversAfter);
  const page = await api("GET", `/v1/servers?${query}`);
  const list = $("servers");
  if (!more) list.replaceChildren();
  for (const server of page.servers) {
    const item = el("li");
    const label = serverLabel(server.server_id, server.server_name);
    serverNames.set(server.server_id, server.server_name);
    const current = state.owner?.kind === "server" && state.owner.id === server.server_id;
    const button = pickButton(label, current, () =>
      openOwner(ownerOf("server", server.server_id)).catch(failed),
    );
    button.dataset.server = server.server_id;
    button.append(el("span", ` · ${server.entries}`, "count"));
    item.append(button);
    list.append(item);
  }
  if (!more && page.servers.length === 0) list.append(el("li", "No server has memory yet.", "empty"));
  state.serversAfter = page.next_after;
  $("more-servers").hidden = page.next_after === null;
}

function markServer() {
  for (const button of $("servers").querySelectorAll("button[data-server]")) {
    const current = state.owner?.kind === "server" && state.owner.id === button.dataset.server;
    button.setAttribute("aria-current", String(current));
  }
}

// -- one owner's channels and personas ----------------------------------------------------------

async function openOwner(owner, channel = null, persona = undefined) {
  const path = owner.kind === "server" ? "servers" : "users";
  const found = await api("GET", `/v1/${path}/${seg(owner.id)}/entries`);
  state.owner = owner;
  // Opened from the address or a link, the box says whose personal memory this is.
  if (owner.kind === "user") $("user-id").value = owner.id;
  state.entries = found.entries;
  state.now = found.now;
  state.channel = channel;
  state.persona = persona;
  if (!state.entries.some((e) => e.key.channel_id === channel)) {
    state.channel = null;
    state.persona = undefined;
  }
  say("");
  markServer();
  renderChannels();
  renderEntry();
  writeHash();
}

function channelsOf(entries) {
  const channels = new Map();
  for (const entry of entries) {
    const id = entry.key.channel_id;
    if (!channels.has(id)) channels.set(id, []);
    channels.get(id).push(entry);
  }
  return channels;
}

function renderChannels() {
  const who = state.owner.kind === "server" ? "shared memory" : "personal memory";
  $("channels-title").textContent = `Channels · ${who} of ${state.owner.label}`;
  const list = $("channels");
  list.replaceChildren();
  const channels = channelsOf(state.entries);
  if (channels.size === 0) {
    list.append(el("li", "Nothing is remembered here right now.", "empty"));
    return;
  }
  for (const [channel, entries] of channels) {
    const item = el("li");
    item.append(el("div", channelLabel(entries[0]), "channel"));
    const personas = el("ul");
    for (const entry of entries) {
      const persona = entry.key.persona_id;
      const current = state.channel === channel && state.persona === persona;
      const button = pickButton(personaLabel(persona), current, () => {
        state.channel = channel;
        state.persona = persona;
        renderChannels();
        renderEntry();
        writeHash();
      });
      button.dataset.channel = channel;
      button.dataset.persona = persona ?? "";
      const li = el("li");
      li.append(button);
      personas.append(li);
    }
    item.append(personas);
    list.append(item);
  }
}

// -- the entry ----------------------------------------------------------------------------------

function chosenEntry() {
  return state.entries.find(
    (e) => e.key.channel_id === state.channel && e.key.persona_id === state.persona,
  );
}

function renderEntry() {
  const entry = chosenEntry();
  $("entry-body").hidden = entry === undefined;
  $("channel-actions").hidden = state.channel === null;
  if (entry === undefined) {
    $("entry-title").textContent =
      state.channel === null ? "Pick a channel and a persona" : "Nothing is remembered here any more";
    return;
  }
  const now = state.now;
  $("entry-title").textContent = `${channelLabel(entry)} · ${personaLabel(entry.key.persona_id)}`;
  const whose =
    entry.key.kind === "server" ? `shared memory of server ${entry.key.owner_id}` : `user ${entry.key.owner_id}`;
  $("entry-meta").textContent =
    `${whose} · ${plural(entry.turns_since_refresh, "turn")} since the last summary · ` +
    `updated ${ago(entry.updated_at, now)}${entry.private ? " · private channel" : ""}`;
  $("summary").value = entry.summary ?? "";
  $("summary-age").textContent = entry.summary ? `written ${ago(entry.summary_at, now)}` : "";

  const categories = $("categories");
  categories.replaceChildren();
  const slugs = Object.keys(entry.categories).sort();
  if (slugs.length === 0) categories.append(el("dd", "No category values.", "empty"));
  for (const slug of slugs) {
    categories.append(el("dt", slug), el("dd", entry.categories[slug]));
  }

  const messages = $("messages");
  messages.replaceChildren();
  if (entry.messages.length === 0) {
    messages.append(el("li", "No recent messages (they refill as turns occur).", "empty"));
  }
  for (const message of entry.messages) {
    const item = el("li", undefined, message.role);
    const who = message.speaker ?? (message.role === "assistant" ? "bot" : message.author_id ?? "user");
    item.append(el("span", who, "who"), el("span", ago(message.at, now), "meta"));
    item.append(el("p", message.content, "text"));
    messages.append(item);
  }
}

async function saveSummary(event) {
  event.preventDefault();
  const entry = chosenEntry();
  if (entry === undefined) return;
  const text = $("summary").value.trim();
  const { kind, owner_id: owner, channel_id: channel, persona_id: persona } = entry.key;
  const path = `/v1/${kind === "server" ? "servers" : "users"}/${seg(owner)}/channels/${seg(channel)}`;
  const saved = await api("PUT", `${path}/entry/summary${personaQuery(persona)}`, {
    summary: text === "" ? null : text,
  });
  await openOwner(state.owner, state.channel, state.persona);
  say(saved.entry === null ? "Saved; nothing is live for this entry any more." : "Summary saved.");
}

async function clearChannel() {
  const entry = state.entries.find((e) => e.key.channel_id === state.channel);
  const label = entry ? channelLabel(entry) : state.channel;
  if (!confirm(`Forget everything remembered in ${label}, for every user and persona?`)) return;
  const cleared = await api("DELETE", `/v1/channels/${seg(state.channel)}`);
  await openOwner(state.owner);
  if (state.owner.kind === "server") await loadServers();
  say(`Cleared ${label}: ${cleared.deleted} entries forgotten.`);
}

// -- start ------------------------------------------------------------------------------------

async function start() {
  await loadServers();
  const wanted = readHash();
  if (wanted.kind !== null && wanted.id) {
    await openOwner(ownerOf(wanted.kind, wanted.id), wanted.channel, wanted.persona);
  }
}

$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
  $("token").value = "";
  $("token-form").hidden = true;
  say("");
  start().catch(failed);
});
$("user-form").addEventListener("submit", (event) => {
  event.preventDefault();
  openOwner(ownerOf("user", $("user-id").value.trim())).catch(failed);
});
$("more-servers").addEventListener("click", () => loadServers(true).catch(failed));
$("summary-form").addEventListener("submit", (event) => saveSummary(event).catch(failed));
$("clear-channel").addEventListener("click", () => clearChannel().catch(failed));

start().catch(failed);
