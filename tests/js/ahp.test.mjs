// Tests of the viewer page's protocol module (ahp/web/static/ahp.mjs) under node's test
// runner; run by tests/test_viewer_js.py. Pure logic only: the reducers against the
// vendored AHP reducer vectors, the bounds, the mirror, and the client against an
// in-memory server (the real server and browser are tests/test_viewer.py's).

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

import {
  AhpClient,
  MAX_PENDING_REQUESTS,
  RECONNECT_MIN_MS,
  Mirror,
  NOT_FOUND,
  READ_ONLY_META,
  ROOT,
  commandsOf,
  contentText,
  describeClaim,
  describeLifecycle,
  formatDuration,
  holds,
  parseFragment,
  reduceRoot,
  reduceTerminal,
  socketTarget,
  trimContent,
} from "../../ahp/web/static/ahp.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const vectors = join(here, "..", "fixtures", "ahp", "reducers");

// The 0.5 vectors say exitCode where 1.x says lifecycle: the one difference (docs/protocol.md, the dialects).
function as1x(state) {
  if (state === undefined || !("content" in state)) return state;
  const out = { ...state };
  if ("exitCode" in out) {
    out.lifecycle = { status: "exited", exitCode: out.exitCode };
    delete out.exitCode;
  }
  return out;
}

function dropUndefined(value) {
  return JSON.parse(JSON.stringify(value));
}

const files = readdirSync(vectors).filter((f) => f.endsWith(".json")).sort();

test("every vendored reducer vector is run", () => {
  assert.equal(files.length, 26);
});

for (const file of files) {
  test(`reducer vector ${file}`, () => {
    const vector = JSON.parse(readFileSync(join(vectors, file), "utf8"));
    const reduce = vector.reducer === "root" ? reduceRoot : reduceTerminal;
    let state = vector.reducer === "root" ? vector.initial : as1x(vector.initial);
    for (const action of vector.actions) state = reduce(state, action);
    const expected = vector.reducer === "root" ? vector.expected : as1x(vector.expected);
    const got = dropUndefined(state);
    if (vector.reducer === "terminal" && !("lifecycle" in expected)) delete got.lifecycle;
    assert.deepEqual(got, dropUndefined(expected));
  });
}

function seeded(seed) {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
}

test("trimContent keeps the newest characters and parts within the bounds", () => {
  for (let seed = 1; seed <= 300; seed++) {
    const random = seeded(seed);
    const content = [];
    const parts = 1 + Math.floor(random() * 30);
    for (let i = 0; i < parts; i++) {
      const text = "x".repeat(Math.floor(random() * 40)) + String(i);
      content.push(
        random() < 0.5
          ? { type: "unclassified", value: text }
          : { type: "command", commandId: `c${i}`, commandLine: "ls", output: text, timestamp: i, isComplete: true },
      );
    }
    const maxChars = 1 + Math.floor(random() * 400);
    const maxParts = 1 + Math.floor(random() * 20);
    const out = trimContent(content, maxChars, maxParts);
    const chars = out.reduce((n, p) => n + (p.type === "command" ? p.output.length + p.commandLine.length : p.value.length), 0);
    assert.ok(out.length <= maxParts, `seed ${seed}: ${out.length} parts`);
    // Within the bound, or one command part whose command line alone is larger.
    assert.ok(chars <= maxChars || (out.length === 1 && out[0].type === "command"), `seed ${seed}: ${chars} chars`);
    // What is kept is the end of what was there.
    assert.ok(contentText(content).endsWith(contentText(out)), `seed ${seed}`);
  }
});

test("terminal/data past the bound trims the oldest output", () => {
  let state = { title: "t", content: [], claim: { kind: "client", clientId: "" }, lifecycle: { status: "running" } };
  const chunk = "y".repeat(1024 * 1024);
  for (let i = 0; i < 6; i++) state = reduceTerminal(state, { type: "terminal/data", data: chunk + String(i) });
  const text = contentText(state.content);
  assert.ok(text.length <= 4 * 1024 * 1024);
  assert.ok(text.endsWith("5"));
});

test("the mirror applies each envelope once and never a rejected one", () => {
  const mirror = new Mirror();
  mirror.snapshot({
    resource: "ahp-terminal:/t",
    fromSeq: 10,
    state: { title: "t", content: [], claim: { kind: "client", clientId: "a" }, lifecycle: { status: "running" } },
  });
  const data = (seq, text) => ({ channel: "ahp-terminal:/t", serverSeq: seq, action: { type: "terminal/data", data: text } });
  assert.equal(mirror.apply(data(9, "old")), false); // already in the snapshot
  assert.equal(mirror.apply(data(11, "a")), true);
  assert.equal(mirror.apply(data(11, "a")), false); // a duplicate
  const rejected = {
    channel: "ahp-terminal:/t",
    serverSeq: 12,
    action: { type: "terminal/claimed", claim: { kind: "client", clientId: "b" } },
    origin: { clientId: "b", clientSeq: 1 },
    rejectionReason: "claimed by a",
  };
  assert.equal(mirror.apply(rejected), false);
  assert.equal(mirror.apply(data(13, "b")), true);
  assert.equal(mirror.apply({ ...data(14, "x"), channel: "ahp-terminal:/other" }), false);
  const state = mirror.states.get("ahp-terminal:/t");
  assert.equal(contentText(state.content), "ab");
  assert.deepEqual(state.claim, { kind: "client", clientId: "a" });
  assert.deepEqual(mirror.reconnectCursors(), [{ channel: "ahp-terminal:/t", lastSeenServerSeq: 13 }]);
});

test("what the page shows: claims, lifecycles, durations, commands", () => {
  assert.equal(describeClaim({ kind: "client", clientId: "" }), "nobody");
  assert.equal(describeClaim({ kind: "client", clientId: "viewer-1" }), "client viewer-1");
  assert.equal(describeClaim({ kind: "session", session: "s:/1", chat: "c:/1" }), "session s:/1 (c:/1)");
  assert.equal(describeLifecycle({ lifecycle: { status: "running" } }), "running");
  assert.equal(describeLifecycle({ lifecycle: { status: "exited", exitCode: 3 } }), "exited 3");
  assert.equal(describeLifecycle({ lifecycle: { status: "exited" } }), "exited");
  assert.equal(formatDuration(340), "340 ms");
  assert.equal(formatDuration(1250), "1.3 s");
  assert.equal(formatDuration(125000), "2 min 5 s");
  assert.ok(holds({ kind: "client", clientId: "me" }, "me"));
  assert.ok(!holds({ kind: "session", session: "s" }, "me"));
  const state = {
    content: [
      { type: "unclassified", value: "$ " },
      { type: "command", commandId: "c1", commandLine: "false", output: "", timestamp: 1, isComplete: true, exitCode: 1, durationMs: 5 },
      { type: "command", commandId: "c2", commandLine: "sleep 9", output: "", timestamp: 2, isComplete: false },
    ],
  };
  assert.deepEqual(
    commandsOf(state).map((c) => [c.commandId, c.running, c.exitCode]),
    [["c1", false, 1], ["c2", true, undefined]],
  );
});

test("the token leaves the fragment for a subprotocol offer, or the query", () => {
  assert.deepEqual(parseFragment("#tkn=abc"), { token: "abc", readOnly: false });
  assert.deepEqual(parseFragment("#ro=xyz"), { token: "xyz", readOnly: true });
  assert.deepEqual(parseFragment(""), { token: null, readOnly: false });
  const loc = { protocol: "http:", host: "127.0.0.1:9" };
  assert.deepEqual(socketTarget(loc, "abc-_1"), {
    url: "ws://127.0.0.1:9/",
    protocols: ["ahp-terminals", "ahp-terminals.bearer.abc-_1"],
  });
  assert.deepEqual(socketTarget(loc, "a b/c"), { url: "ws://127.0.0.1:9/?tkn=a%20b%2Fc", protocols: ["ahp-terminals"] });
  assert.equal(socketTarget({ protocol: "https:", host: "h:1" }, null).url, "wss://h:1/");
});

// -- the client against an in-memory server ------------------------------------------------

class FakeServer {
  constructor() {
    this.seq = 100;
    this.sockets = [];
    this.known = new Set();
    this.terminal = { title: "t", content: [{ type: "unclassified", value: "hello " }], claim: { kind: "client", clientId: "" }, lifecycle: { status: "running" } };
    this.received = [];
    this.readOnly = false;
  }

  socketClass() {
    const server = this;
    return class FakeSocket {
      constructor(url, protocols) {
        this.url = url;
        this.protocols = protocols;
        this.readyState = 0;
        server.sockets.push(this);
        queueMicrotask(() => {
          this.readyState = 1;
          this.onopen?.();
        });
      }
      send(text) {
        const message = JSON.parse(text);
        server.received.push(message);
        server.answer(this, message);
      }
      close() {
        if (this.readyState === 3) return;
        this.readyState = 3;
        queueMicrotask(() => this.onclose?.());
      }
      push(message) {
        queueMicrotask(() => this.onmessage?.({ data: JSON.stringify(message) }));
      }
    };
  }

  snapshot(channel) {
    if (channel === ROOT) {
      return { resource: ROOT, fromSeq: this.seq, state: { agents: [], terminals: [{ resource: "ahp-terminal:/t", title: "t", claim: this.terminal.claim, lifecycle: { status: "running" } }] } };
    }
    return { resource: channel, fromSeq: this.seq, state: this.terminal };
  }

  answer(socket, message) {
    const reply = (result) => socket.push({ jsonrpc: "2.0", id: message.id, result });
    const fail = (code, text) => socket.push({ jsonrpc: "2.0", id: message.id, error: { code, message: text } });
    const p = message.params;
    switch (message.method) {
      case "initialize":
        this.known.add(p.clientId);
        reply({
          protocolVersion: "1.0.0",
          serverSeq: this.seq,
          snapshots: p.initialSubscriptions.map((c) => this.snapshot(c)),
          ...(this.readOnly ? { _meta: { [READ_ONLY_META]: true } } : {}),
        });
        return;
      case "reconnect":
        if (!this.known.has(p.clientId)) {
          fail(NOT_FOUND, "Reconnect client not found");
          return;
        }
        reply({
          channels: p.subscriptions.map(({ channel, lastSeenServerSeq }) =>
            channel === "ahp-terminal:/t" && lastSeenServerSeq > 0
              ? { kind: "replay", channel, actions: this.missed.filter((e) => e.serverSeq > lastSeenServerSeq) }
              : { kind: "snapshot", channel, snapshot: this.snapshot(channel) },
          ),
        });
        return;
      case "subscribe":
        reply({ snapshot: this.snapshot(p.channel) });
        return;
      default:
        if (message.id !== undefined) fail(-32601, "no");
    }
  }

  publish(socket, action) {
    this.seq += 1;
    const envelope = { channel: "ahp-terminal:/t", action, serverSeq: this.seq };
    this.terminal = reduceTerminal(this.terminal, action);
    if (socket) socket.push({ jsonrpc: "2.0", method: "action", params: envelope });
    return envelope;
  }
}

function settle() {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

async function until(predicate) {
  for (let i = 0; i < 200; i++) {
    if (predicate()) return;
    await settle();
  }
  throw new Error("condition never held");
}

test("the client follows a terminal, and after a dropped socket resumes with replay", async () => {
  const server = new FakeServer();
  const events = [];
  const client = new AhpClient({
    url: "ws://x/",
    clientId: "viewer-a",
    WebSocketImpl: server.socketClass(),
    listener: (kind, detail) => events.push([kind, detail]),
    schedule: (fn) => setTimeout(fn, 0),
  });
  client.start();
  await until(() => client.status === "open");
  await client.subscribe("ahp-terminal:/t");
  server.publish(server.sockets[0], { type: "terminal/data", data: "world" });
  await until(() => contentText(client.state("ahp-terminal:/t").content) === "hello world");
  // The socket drops; meanwhile output goes on; the client comes back and replays it.
  server.sockets[0].close();
  server.missed = [server.publish(null, { type: "terminal/data", data: "!" }), server.publish(null, { type: "terminal/data", data: "?" })];
  await until(() => server.sockets.length === 2 && client.status === "open");
  await until(() => contentText(client.state("ahp-terminal:/t").content) === "hello world!?");
  // The page tells output replayed after a reconnect from output sent as it happened
  // (it answers terminal queries in live output only).
  const data = events.filter(([kind, d]) => kind === "action" && d.action.type === "terminal/data");
  assert.deepEqual(
    data.map(([, d]) => [d.action.data, d.replayed]),
    [["world", false], ["!", true], ["?", true]],
  );
  const reconnect = server.received.find((m) => m.method === "reconnect");
  assert.deepEqual(reconnect.params.subscriptions.find((s) => s.channel === "ahp-terminal:/t").lastSeenServerSeq, 101);
  assert.ok(events.some(([kind, d]) => kind === "status" && d.status === "closed"));
  // Input is sent as a dispatch, never applied locally.
  assert.ok(client.dispatch("ahp-terminal:/t", { type: "terminal/input", data: "ls\r" }));
  const sent = server.received.filter((m) => m.method === "dispatchAction");
  assert.deepEqual(sent.at(-1).params, { channel: "ahp-terminal:/t", clientSeq: 1, action: { type: "terminal/input", data: "ls\r" } });
  client.stop();
});

test("a client the server forgot initializes again with the same subscriptions", async () => {
  const server = new FakeServer();
  server.readOnly = true;
  const client = new AhpClient({ url: "ws://x/", clientId: "viewer-b", WebSocketImpl: server.socketClass(), schedule: (fn) => setTimeout(fn, 0) });
  client.start();
  await until(() => client.status === "open");
  assert.equal(client.readOnly, true);
  await client.subscribe("ahp-terminal:/t");
  server.known.clear(); // (a restarted server)
  server.sockets[0].close();
  await until(() => server.sockets.length === 2 && client.status === "open");
  const inits = server.received.filter((m) => m.method === "initialize");
  assert.equal(inits.length, 2);
  assert.deepEqual(inits[1].params.initialSubscriptions.sort(), [ROOT, "ahp-terminal:/t"].sort());
  client.stop();
});

test("requests in flight are bounded, and all fail when the socket closes", async () => {
  const server = new FakeServer();
  const client = new AhpClient({ url: "ws://x/", clientId: "viewer-c", WebSocketImpl: server.socketClass(), schedule: () => {} });
  client.start();
  await until(() => client.status === "open");
  server.answer = () => {}; // answers nothing from now on
  const waiting = [];
  for (let i = 0; i < MAX_PENDING_REQUESTS; i++) waiting.push(client.request("ping", { channel: ROOT }).catch((e) => e));
  await assert.rejects(client.request("ping", { channel: ROOT }), /requests in flight/);
  server.sockets[0].close();
  const outcomes = await Promise.all(waiting);
  assert.ok(outcomes.every((e) => e instanceof Error && /closed/.test(e.message)));
  client.stop();
});

test("reconnect attempts back off to RECONNECT_MAX_MS and go on; a success resets them", async () => {
  const delays = [];
  const pending = [];
  let refuse = true;
  const Real = new FakeServer().socketClass();
  class Refused {
    constructor() {
      this.readyState = 0;
      queueMicrotask(() => {
        this.readyState = 3;
        this.onclose?.();
      });
    }
    send() {}
    close() {}
  }
  // (A constructor that returns an object makes `new` yield that object.)
  function Socket(url, protocols) {
    return refuse ? new Refused() : new Real(url, protocols);
  }
  const client = new AhpClient({
    url: "ws://x/",
    clientId: "viewer-d",
    WebSocketImpl: Socket,
    schedule: (fn, ms) => {
      delays.push(ms);
      pending.push(fn);
    },
  });
  client.start();
  for (let i = 0; i < 8; i++) {
    await until(() => pending.length > 0);
    pending.shift()();
  }
  assert.deepEqual(delays, [250, 500, 1000, 2000, 4000, 5000, 5000, 5000]);
  refuse = false;
  await until(() => pending.length > 0);
  pending.shift()();
  await until(() => client.status === "open");
  assert.equal(client.delay, RECONNECT_MIN_MS);
  client.stop();
});
