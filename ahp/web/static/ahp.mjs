// AHP 1.x for the viewer page: reducers, a mirror of the channels, and a client.
//
// Why our own: the page speaks the protocol itself (no AHP library exists for the
// browser that speaks 1.x here), and this module is all of it: the pure part
// (reduceTerminal, reduceRoot, Mirror, helpers) runs unchanged under node's test
// runner (tests/js/), the client takes its WebSocket constructor as a parameter.
//
// Shapes (1.x dialect): TerminalState {title, cwd?, cols?, rows?, content[], lifecycle,
// claim, supportsCommandDetection?, isPty?}; content parts {type: "unclassified",
// value} and {type: "command", commandId, commandLine, output, timestamp, isComplete,
// exitCode?, durationMs?}; envelopes {channel, action, serverSeq, origin?,
// rejectionReason?}. A rejected envelope is never applied (the server follows it with
// the true value); an envelope at or below a channel's cursor is already in the state.
//
// Bounds: a terminal's content is trimmed oldest-first past MAX_CONTENT_CHARS characters
// and MAX_PARTS parts (the server's own defaults); requests in flight are at most
// MAX_PENDING_REQUESTS (more are refused at once); reconnect attempts back off from
// RECONNECT_MIN_MS to RECONNECT_MAX_MS and go on while the page lives.

export const ROOT = "ahp-root://";
export const PROTOCOL_VERSIONS = Object.freeze(["1.0.0", "0.9.0"]);
/** Characters of content kept per terminal (the server's default scrollback). */
export const MAX_CONTENT_CHARS = 4 * 1024 * 1024;
/** Content parts kept per terminal (the server's bound). */
export const MAX_PARTS = 8192;
/** Requests awaiting an answer at most; more are refused without being sent. */
export const MAX_PENDING_REQUESTS = 256;
export const RECONNECT_MIN_MS = 250;
export const RECONNECT_MAX_MS = 5000;
/** The subprotocol the page asks for, and the prefix of the one carrying its token. */
export const PAGE_PROTOCOL = "ahp-terminals";
export const BEARER_PROTOCOL_PREFIX = "ahp-terminals.bearer.";
/** InitializeResult._meta key the server sets for a read-only connection. */
export const READ_ONLY_META = "ahp-terminals/readOnly";
/** JSON-RPC error: the server forgot this client (reconnect -> initialize). */
export const NOT_FOUND = -32008;

// -- pure: reducers ------------------------------------------------------------------

/** The raw VT text of a content list (what a terminal emulator is fed). */
export function contentText(content) {
  let text = "";
  for (const part of content) text += part.type === "command" ? part.output : part.value;
  return text;
}

function partChars(part) {
  return part.type === "command" ? part.output.length + part.commandLine.length : part.value.length;
}

/** Content trimmed oldest-first to the bounds (a first part may be cut, never a later one). */
export function trimContent(content, maxChars = MAX_CONTENT_CHARS, maxParts = MAX_PARTS) {
  let total = 0;
  for (const part of content) total += partChars(part);
  if (total <= maxChars && content.length <= maxParts) return content;
  const out = content.slice(Math.max(0, content.length - maxParts));
  total = 0;
  for (const part of out) total += partChars(part);
  while (out.length > 1 && total - partChars(out[0]) >= maxChars) {
    total -= partChars(out.shift());
  }
  if (total > maxChars && out.length > 0) {
    const first = out[0];
    const cut = total - maxChars;
    if (first.type === "command") {
      out[0] = { ...first, output: first.output.slice(Math.min(cut, first.output.length)) };
    } else {
      out[0] = { ...first, value: first.value.slice(cut) };
    }
  }
  return out;
}

function appendData(content, data) {
  const last = content[content.length - 1];
  if (last !== undefined && last.type === "command" && !last.isComplete) {
    return [...content.slice(0, -1), { ...last, output: last.output + data }];
  }
  if (last !== undefined && last.type === "unclassified") {
    return [...content.slice(0, -1), { ...last, value: last.value + data }];
  }
  return [...content, { type: "unclassified", value: data }];
}

/** A terminal state after one action (the 1.x terminal reducer; unknown types: no-op). */
export function reduceTerminal(state, action) {
  switch (action.type) {
    case "terminal/data":
      return { ...state, content: trimContent(appendData(state.content, action.data)) };
    case "terminal/resized":
      return { ...state, cols: action.cols, rows: action.rows };
    case "terminal/claimed":
      return { ...state, claim: action.claim };
    case "terminal/titleChanged":
      return { ...state, title: action.title };
    case "terminal/cwdChanged":
      return { ...state, cwd: action.cwd };
    case "terminal/exited": {
      const lifecycle = { status: "exited" };
      if (action.exitCode !== undefined && action.exitCode !== null) {
        lifecycle.exitCode = action.exitCode;
      }
      return { ...state, lifecycle };
    }
    case "terminal/cleared":
      return { ...state, content: [] };
    case "terminal/commandDetectionAvailable":
      return { ...state, supportsCommandDetection: true };
    case "terminal/commandExecuted":
      return {
        ...state,
        supportsCommandDetection: true,
        content: trimContent([
          ...state.content,
          {
            type: "command",
            commandId: action.commandId,
            commandLine: action.commandLine,
            output: "",
            timestamp: action.timestamp,
            isComplete: false,
          },
        ]),
      };
    case "terminal/commandFinished":
      return {
        ...state,
        content: state.content.map((part) => {
          if (part.type !== "command" || part.commandId !== action.commandId) return part;
          const done = { ...part, isComplete: true };
          if (action.exitCode !== undefined) done.exitCode = action.exitCode;
          if (action.durationMs !== undefined) done.durationMs = action.durationMs;
          return done;
        }),
      };
    default:
      return state; // terminal/input, and types this page does not know
  }
}

/** The root state after one action (root/terminalsChanged replaces the list). */
export function reduceRoot(state, action) {
  switch (action.type) {
    case "root/terminalsChanged":
      return { ...state, terminals: action.terminals };
    case "root/agentsChanged":
      return { ...state, agents: action.agents };
    case "root/activeSessionsChanged":
      return { ...state, activeSessions: action.activeSessions };
    case "root/configChanged": {
      if (state.config === undefined) return state;
      const values = action.replace ? { ...action.config } : { ...state.config.values, ...action.config };
      return { ...state, config: { ...state.config, values } };
    }
    default:
      return state;
  }
}

export function reduce(channel, state, action) {
  return channel === ROOT ? reduceRoot(state, action) : reduceTerminal(state, action);
}

// -- pure: what the page shows -------------------------------------------------------

/** The command parts of a terminal, as the commands panel lists them. */
export function commandsOf(state) {
  const out = [];
  for (const part of state.content) {
    if (part.type !== "command") continue;
    out.push({
      commandId: part.commandId,
      commandLine: part.commandLine,
      running: !part.isComplete,
      exitCode: part.exitCode,
      durationMs: part.durationMs,
      timestamp: part.timestamp,
    });
  }
  return out;
}

/** "client viewer-1", "session …", or "nobody" (a released claim). */
export function describeClaim(claim) {
  if (claim === undefined || claim === null) return "nobody";
  if (claim.kind === "client") return claim.clientId ? `client ${claim.clientId}` : "nobody";
  if (claim.kind === "session") {
    const where = claim.chat && claim.chat !== claim.session ? ` (${claim.chat})` : "";
    return `session ${claim.session}${where}`;
  }
  return "unknown";
}

export function describeLifecycle(info) {
  const lifecycle = info.lifecycle;
  if (lifecycle === undefined || lifecycle.status === "running") return "running";
  return lifecycle.exitCode === undefined ? "exited" : `exited ${lifecycle.exitCode}`;
}

export function holds(claim, clientId) {
  return claim !== undefined && claim !== null && claim.kind === "client" && claim.clientId === clientId;
}

/** "1.2 s", "340 ms", "2 min 5 s". */
export function formatDuration(ms) {
  if (ms === undefined || ms === null) return "";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  const minutes = Math.floor(ms / 60000);
  return `${minutes} min ${Math.round((ms % 60000) / 1000)} s`;
}

/** Token and access from a page URL's fragment: "#tkn=…" (full) or "#ro=…" (watch only). */
export function parseFragment(hash) {
  const params = new URLSearchParams(hash.replace(/^#/, ""));
  const full = params.get("tkn");
  if (full) return { token: full, readOnly: false };
  const ro = params.get("ro");
  if (ro) return { token: ro, readOnly: true };
  return { token: null, readOnly: false };
}

const TCHAR = /^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/;

/** Where and how the page's WebSocket connects: the token as a subprotocol offer (the
 * one header a page may set), or in the query when it has characters a subprotocol
 * cannot carry. */
export function socketTarget(location, token) {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const base = `${scheme}://${location.host}/`;
  if (!token) return { url: base, protocols: [PAGE_PROTOCOL] };
  if (TCHAR.test(token)) return { url: base, protocols: [PAGE_PROTOCOL, BEARER_PROTOCOL_PREFIX + token] };
  return { url: `${base}?tkn=${encodeURIComponent(token)}`, protocols: [PAGE_PROTOCOL] };
}

// -- pure: the mirror ----------------------------------------------------------------

/** Channel states and, per channel, the newest serverSeq already in its state. */
export class Mirror {
  constructor() {
    this.states = new Map();
    this.cursors = new Map();
  }

  /** Take a snapshot {resource, state, fromSeq}: it replaces what was there. */
  snapshot(snapshot) {
    const state = snapshot.resource === ROOT ? snapshot.state : { ...snapshot.state, content: trimContent(snapshot.state.content) };
    this.states.set(snapshot.resource, state);
    this.cursors.set(snapshot.resource, snapshot.fromSeq);
    return state;
  }

  /** Apply one envelope; true when it changed the state (applied), false when it was
   * rejected, already in the state, or for a channel this mirror does not follow. */
  apply(envelope) {
    const channel = envelope.channel;
    const state = this.states.get(channel);
    if (state === undefined) return false;
    const cursor = this.cursors.get(channel) ?? 0;
    if (envelope.serverSeq <= cursor) return false;
    this.cursors.set(channel, envelope.serverSeq);
    if (envelope.rejectionReason !== undefined) return false;
    this.states.set(channel, reduce(channel, state, envelope.action));
    return true;
  }

  forget(channel) {
    this.states.delete(channel);
    this.cursors.delete(channel);
  }

  /** Reconnect form B: one cursor per followed channel. */
  reconnectCursors() {
    return [...this.states.keys()].map((channel) => ({
      channel,
      lastSeenServerSeq: this.cursors.get(channel) ?? 0,
    }));
  }
}

// -- the client ----------------------------------------------------------------------

export class RequestError extends Error {
  constructor(error) {
    super(error.message);
    this.code = error.code;
    this.data = error.data;
  }
}

/**
 * One AHP connection that comes back by itself.
 *
 * Events (listener(kind, detail)): "status" {status: "connecting"|"open"|"closed",
 * readOnly?}, "snapshot" {channel, state} (the state was replaced: redraw),
 * "action" {channel, action, envelope, state, replayed} (applied; ``replayed``: sent in a
 * reconnect's replay, not as it happened), "rejected" {channel, envelope},
 * "missing" {channel} (gone while away), "error" {message}.
 */
export class AhpClient {
  constructor({ url, protocols = [], clientId, WebSocketImpl, listener, schedule }) {
    this.url = url;
    this.protocols = protocols;
    this.clientId = clientId;
    this.WebSocketImpl = WebSocketImpl;
    this.listener = listener ?? (() => {});
    this.schedule = schedule ?? ((fn, ms) => setTimeout(fn, ms));
    this.mirror = new Mirror();
    this.wanted = new Set([ROOT]);
    this.readOnly = false;
    this.socket = null;
    this.nextId = 1;
    this.clientSeq = 0;
    this.pending = new Map();
    this.stopped = false;
    this.everInitialized = false;
    this.delay = RECONNECT_MIN_MS;
    this.status = "closed";
    this.connections = 0;
  }

  emit(kind, detail) {
    try {
      this.listener(kind, detail);
    } catch (error) {
      console.error("listener failed", error);
    }
  }

  setStatus(status) {
    this.status = status;
    this.emit("status", { status, readOnly: this.readOnly });
  }

  start() {
    this.stopped = false;
    this.open();
  }

  stop() {
    this.stopped = true;
    if (this.socket !== null) this.socket.close(1000, "page closed");
  }

  open() {
    this.setStatus("connecting");
    const socket = new this.WebSocketImpl(this.url, this.protocols);
    this.socket = socket;
    socket.onopen = () => {
      if (socket === this.socket) this.handshake(socket);
    };
    socket.onmessage = (event) => {
      if (socket === this.socket) this.receive(event.data);
    };
    socket.onclose = () => {
      if (socket === this.socket) this.closed();
    };
    socket.onerror = () => {};
  }

  closed() {
    this.socket = null;
    for (const { reject } of this.pending.values()) reject(new Error("connection closed"));
    this.pending.clear();
    this.setStatus("closed");
    if (this.stopped) return;
    const delay = this.delay;
    this.delay = Math.min(this.delay * 2, RECONNECT_MAX_MS);
    this.schedule(() => {
      if (!this.stopped && this.socket === null) this.open();
    }, delay);
  }

  async handshake(socket) {
    try {
      if (this.everInitialized) {
        try {
          await this.resume();
        } catch (error) {
          if (!(error instanceof RequestError) || error.code !== NOT_FOUND) throw error;
          await this.initialize(); // the server forgot us (restarted, or too long away)
        }
      } else {
        await this.initialize();
      }
      this.delay = RECONNECT_MIN_MS;
      this.connections += 1;
      this.setStatus("open");
    } catch (error) {
      this.emit("error", { message: `handshake failed: ${error.message}` });
      if (socket === this.socket) socket.close(4000, "handshake failed");
    }
  }

  async initialize() {
    const asked = [...this.wanted];
    const result = await this.request("initialize", {
      channel: ROOT,
      protocolVersions: [...PROTOCOL_VERSIONS],
      clientId: this.clientId,
      initialSubscriptions: asked,
      clientInfo: { name: "ahp-terminals viewer" },
    });
    this.everInitialized = true;
    this.readOnly = Boolean(result._meta && result._meta[READ_ONLY_META]);
    const got = new Set();
    for (const snapshot of result.snapshots) {
      got.add(snapshot.resource);
      this.emit("snapshot", { channel: snapshot.resource, state: this.mirror.snapshot(snapshot) });
    }
    for (const channel of asked) {
      if (!got.has(channel)) this.lost(channel);
    }
  }

  async resume() {
    const cursors = [...this.wanted].map((channel) => ({
      channel,
      lastSeenServerSeq: this.mirror.states.has(channel) ? (this.mirror.cursors.get(channel) ?? 0) : 0,
    }));
    const result = await this.request("reconnect", {
      channel: ROOT,
      clientId: this.clientId,
      subscriptions: cursors,
    });
    for (const entry of result.channels) {
      if (entry.kind === "replay") {
        for (const envelope of entry.actions) this.envelope(envelope, true);
      } else if (entry.kind === "snapshot") {
        this.emit("snapshot", { channel: entry.channel, state: this.mirror.snapshot(entry.snapshot) });
      } else {
        this.lost(entry.channel);
      }
    }
  }

  lost(channel) {
    this.wanted.delete(channel);
    this.mirror.forget(channel);
    this.emit("missing", { channel });
  }

  request(method, params) {
    const socket = this.socket;
    if (socket === null || socket.readyState !== 1) return Promise.reject(new Error("not connected"));
    if (this.pending.size >= MAX_PENDING_REQUESTS) {
      return Promise.reject(new Error(`more than ${MAX_PENDING_REQUESTS} requests in flight`));
    }
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      socket.send(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
    });
  }

  notify(method, params) {
    const socket = this.socket;
    if (socket === null || socket.readyState !== 1 || this.status !== "open") return false;
    socket.send(JSON.stringify({ jsonrpc: "2.0", method, params }));
    return true;
  }

  receive(text) {
    let message;
    try {
      message = JSON.parse(text);
    } catch {
      this.emit("error", { message: "the server sent a frame that is not JSON" });
      return;
    }
    if (message.id !== undefined && message.method === undefined) {
      const waiter = this.pending.get(message.id);
      if (waiter === undefined) return;
      this.pending.delete(message.id);
      if (message.error !== undefined) waiter.reject(new RequestError(message.error));
      else waiter.resolve(message.result);
      return;
    }
    if (message.method === "action") this.envelope(message.params);
  }

  /** One envelope from the server; ``replayed``: from a reconnect's replay (what the
   * client missed while away), not sent as it happened. */
  envelope(envelope, replayed = false) {
    if (envelope.rejectionReason !== undefined) {
      this.mirror.apply(envelope); // (moves the cursor only)
      this.emit("rejected", { channel: envelope.channel, envelope });
      return;
    }
    if (this.mirror.apply(envelope)) {
      this.emit("action", {
        channel: envelope.channel,
        action: envelope.action,
        envelope,
        state: this.mirror.states.get(envelope.channel),
        replayed,
      });
    }
  }

  /** Follow a terminal: its snapshot arrives as a "snapshot" event. */
  async subscribe(channel) {
    this.wanted.add(channel);
    const result = await this.request("subscribe", { channel });
    this.emit("snapshot", { channel, state: this.mirror.snapshot(result.snapshot) });
    return this.mirror.states.get(channel);
  }

  unsubscribe(channel) {
    if (channel === ROOT) return;
    this.wanted.delete(channel);
    this.mirror.forget(channel);
    this.notify("unsubscribe", { channel });
  }

  /** Send an action (not applied here: the server's echo is). False when not connected. */
  dispatch(channel, action) {
    this.clientSeq += 1;
    return this.notify("dispatchAction", { channel, clientSeq: this.clientSeq, action });
  }

  state(channel) {
    return this.mirror.states.get(channel);
  }
}
