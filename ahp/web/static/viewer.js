// The viewer page: the terminals of this server, live, in xterm.js; their commands;
// taking over and giving back; the recordings, played with asciinema-player.
//
// The protocol is ahp.mjs; this file is the page around it. The token comes from the
// URL's fragment (#tkn=… or #ro=…), which the browser never sends anywhere; it is kept
// in this tab's sessionStorage (so a reload works) and taken out of the address bar.
// Bounds: output waiting for xterm.js to parse is at most maxPendingWrite characters;
// past it the page stops writing, and once xterm.js caught up it asks the server for a
// fresh snapshot (a slow tab resynchronises instead of growing without bound).
//
// Terminal queries: the server passes them through (docs/protocol.md), and xterm.js
// answers those it parses through onData, the event that carries keystrokes. The page
// knows an answer from a keystroke, and what it answers (see "terminal queries" below).

import { Terminal } from "./vendor/xterm/xterm.mjs";
import { FitAddon } from "./vendor/xterm/addon-fit.mjs";
import {
  AhpClient,
  ROOT,
  commandsOf,
  contentText,
  describeClaim,
  describeLifecycle,
  formatDuration,
  holds,
  parseFragment,
  socketTarget,
} from "./ahp.mjs";

// Every import above has loaded: boot.js need not say the page failed.
window.ahpViewerStarted = true;

/** Characters handed to xterm.js and not yet parsed, at most (see above): more than a
 * whole snapshot (ahp.mjs's MAX_CONTENT_CHARS), so a redraw always fits. */
let maxPendingWrite = 8 * 1024 * 1024;
/** Lines xterm.js keeps above the screen. */
const SCROLLBACK_LINES = 10000;
/** Smallest zoom a watching page uses to fit the holder's size; below it, it scrolls. */
const MIN_ZOOM = 0.5;

const $ = (id) => document.getElementById(id);

function readAccess() {
  const fromUrl = parseFragment(location.hash);
  if (fromUrl.token) {
    sessionStorage.setItem("ahp-access", JSON.stringify(fromUrl));
    history.replaceState(null, "", location.pathname + location.search);
    return fromUrl;
  }
  const kept = sessionStorage.getItem("ahp-access");
  return kept ? JSON.parse(kept) : fromUrl;
}

function clientIdFor(readOnly) {
  const key = readOnly ? "ahp-client-id-ro" : "ahp-client-id";
  let id = sessionStorage.getItem(key);
  if (!id) {
    const bytes = crypto.getRandomValues(new Uint8Array(6));
    const hex = [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
    id = `viewer-${readOnly ? "ro-" : ""}${hex}`;
    sessionStorage.setItem(key, id);
  }
  return id;
}

const access = readAccess();
const clientId = clientIdFor(access.readOnly);
const target = socketTarget(location, access.token);

const term = new Terminal({
  scrollback: SCROLLBACK_LINES,
  fontSize: 13,
  fontFamily: "ui-monospace, 'DejaVu Sans Mono', monospace",
  // Off by default: in this mode xterm.js ignores text input events (an IME's, a phone
  // keyboard's); the DOM renderer keeps the screen's text in the DOM either way.
  screenReaderMode: localStorage.getItem("ahp-screen-reader") === "1",
  cursorBlink: false,
  theme: { background: "#101216", foreground: "#d8dae0" },
});
const fit = new FitAddon();
term.loadAddon(fit);
term.open($("screen"));

const screenReader = $("screen-reader");
screenReader.checked = term.options.screenReaderMode;
screenReader.addEventListener("change", () => {
  term.options.screenReaderMode = screenReader.checked;
  localStorage.setItem("ahp-screen-reader", screenReader.checked ? "1" : "0");
});

/** A Map mirrored into this tab's sessionStorage under ``key`` (it survives a reload). */
function keptMap(key) {
  let entries = [];
  try {
    entries = JSON.parse(sessionStorage.getItem(key) ?? "[]");
  } catch {
    entries = [];
  }
  const map = new Map(Array.isArray(entries) ? entries : []);
  const save = () => sessionStorage.setItem(key, JSON.stringify([...map]));
  return {
    get: (k) => map.get(k),
    has: (k) => map.has(k),
    set: (k, v) => (map.set(k, v), save()),
    delete: (k) => (map.delete(k), save()),
  };
}

const ui = {
  current: null,
  /** Per terminal: the claim a "Take over" replaced (restored by "Give back"); kept in
   * this tab's sessionStorage, so a reload can still give it back. */
  replaced: keptMap("ahp-replaced"),
  markers: new Map(),
  pending: 0,
  behind: false,
  /** Times the page fell behind and took a fresh snapshot. */
  resyncs: 0,
  /** The socket opened once; the token was checked; the server refused it. */
  opened: false,
  tokenChecked: false,
  tokenRefused: false,
  firstDrawAt: null,
  playing: false,
  readOnly: access.readOnly,
  noticeTimer: null,
};

const client = new AhpClient({
  url: target.url,
  protocols: target.protocols,
  clientId,
  WebSocketImpl: WebSocket,
  listener: onEvent,
});

// -- terminal queries ---------------------------------------------------------------------
//
// Programs ask their terminal things (vim, fzf, prompt_toolkit at start: the cursor
// position, the device attributes, the colours…), and the server passes the questions to
// every client. xterm.js 6 answers, through onData like a keystroke: CPR and DSR
// (CSI n, CSI ? n), DA1 and DA2 (CSI c, CSI > c), DECRQM (CSI $ p, CSI ? $ p), DECRQSS
// (DCS $ q), the colours (OSC 4, 10, 11, 12 with "?"), the window reports (CSI t, when
// windowOptions allows them: not here), and it reports the focus as soon as a program
// turns focus reports on (CSI ? 1004 h). An answer is sent only for a question that is
// asked now: output that arrives live (not replayed after a reconnect), on the terminal
// shown, while the page may type; history (a snapshot, a replay) was answered when it
// was asked, and its answers typed again would be garbage at a prompt. A watching page
// answers nothing and says nothing (no key was pressed).
//
// How the page tells an answer from a keystroke: xterm.js answers synchronously while it
// parses the question. The page hooks each answered sequence in xterm.js's parser (the
// hook runs just before xterm.js's own handler and lets it run); from the hook to the
// end of that task, onData is xterm.js answering. Keystrokes come in their own events,
// never inside a parse, so they are never mistaken (typed while a long history is drawn
// too). Which output is being parsed: xterm.js parses writes in order and calls a
// write's callback once it is parsed, so the oldest write whose callback has not come is
// the one being parsed (``parsing`` below, runs of writes of the same source).
// Nothing is removed from the output: xterm.js keeps every mode and colour it set.

/** Writes handed to xterm.js and not yet parsed, oldest first: runs of {live, channel,
 * count} (a run per successive writes from the same source; bounded like the writes). */
const parsing = [];
/** The source of the output xterm.js is answering a question of now (null: not parsing
 * a question, so onData is a keystroke). */
let answering = null;
let answeringReset = false;
const answers = { sent: 0, dropped: 0 };

function parsed() {
  const head = parsing[0];
  head.count -= 1;
  if (head.count === 0) parsing.shift();
  answering = null;
}

/** The sole caller of term.write: ``live`` says whether questions in ``data`` are asked
 * now (see above); ``done`` runs once xterm.js parsed it. */
function feed(data, { live = false, channel = ui.current } = {}, done = undefined) {
  const last = parsing.at(-1);
  if (last !== undefined && last.live === live && last.channel === channel) last.count += 1;
  else parsing.push({ live, channel, count: 1 });
  try {
    // (Pushed first: right after a keystroke xterm.js parses a write at once, inside it.)
    term.write(data, () => {
      parsed();
      if (done) done();
    });
  } catch (error) {
    const run = parsing.at(-1);
    if (--run.count === 0) parsing.pop();
    throw error;
  }
}

function questionParsed() {
  answering = parsing[0] ?? { live: false, channel: null };
  if (!answeringReset) {
    answeringReset = true;
    queueMicrotask(() => {
      answering = null;
      answeringReset = false;
    });
  }
  return false; // (xterm.js's own handler runs next, and answers)
}

for (const id of [
  { final: "c" },
  { prefix: ">", final: "c" },
  { final: "n" },
  { prefix: "?", final: "n" },
  { intermediates: "$", final: "p" },
  { prefix: "?", intermediates: "$", final: "p" },
  { final: "t" },
  { prefix: "?", final: "h" },
]) {
  term.parser.registerCsiHandler(id, questionParsed);
}
term.parser.registerDcsHandler({ intermediates: "$", final: "q" }, questionParsed);
for (const id of [4, 10, 11, 12]) term.parser.registerOscHandler(id, questionParsed);

/** xterm.js's answer to a question parsed in ``source``'s output. */
function answer(data, source) {
  const live = source.live && source.channel === ui.current && !ui.playing;
  if (live && canType(client.state(ui.current)) && client.dispatch(ui.current, { type: "terminal/input", data })) {
    answers.sent += 1;
  } else {
    answers.dropped += 1;
  }
}

// -- writing into xterm.js --------------------------------------------------------------

function write(data, { bounded = true, live = false } = {}) {
  if (ui.behind || data.length === 0) return;
  if (bounded && ui.pending + data.length > maxPendingWrite) {
    ui.behind = true;
    // Caught up once the writes in flight are parsed; with none, at once.
    if (ui.pending === 0) setTimeout(resync, 0);
    return;
  }
  ui.pending += data.length;
  feed(data, { live }, () => {
    ui.pending -= data.length;
    if (ui.behind && ui.pending === 0) resync();
  });
}

function resync() {
  ui.behind = false;
  ui.resyncs += 1;
  if (ui.current !== null) client.subscribe(ui.current).catch(() => {});
}

/** Mark where a command's output starts (once everything before it is parsed). */
function markCommand(commandId) {
  feed("", {}, () => {
    const marker = term.registerMarker(0);
    if (marker) ui.markers.set(commandId, marker);
  });
}

function redraw(state) {
  term.reset();
  ui.markers.clear();
  ui.behind = false; // (writes still queued keep counting in ui.pending until parsed)
  // (A snapshot is bounded by MAX_CONTENT_CHARS: written whole. It is history: the
  // questions in it are not answered, see "terminal queries".)
  for (const part of state.content) {
    if (part.type === "command") {
      markCommand(part.commandId);
      write(part.output, { bounded: false });
    } else {
      write(part.value, { bounded: false });
    }
  }
  applySize(state);
  renderToolbar(state);
  renderCommands(state);
  // When the first terminal was on screen (ms since the navigation began; for benchmarks).
  if (ui.firstDrawAt === null) feed("", {}, () => (ui.firstDrawAt = performance.now()));
}

// -- size: the holder's pty size; a watcher fits it in its window -------------------------

function canType(state) {
  return !ui.readOnly && state !== undefined && holds(state.claim, clientId) && state.lifecycle?.status !== "exited";
}

function applySize(state) {
  if (state === undefined) return;
  const screen = $("screen");
  if (canType(state)) {
    screen.classList.add("holder");
    screen.style.zoom = "";
    const dims = fit.proposeDimensions();
    if (dims && dims.cols > 0 && dims.rows > 0) {
      if (dims.cols !== term.cols || dims.rows !== term.rows) term.resize(dims.cols, dims.rows);
      if (dims.cols !== state.cols || dims.rows !== state.rows) {
        client.dispatch(ui.current, { type: "terminal/resized", cols: dims.cols, rows: dims.rows });
      }
    }
    return;
  }
  screen.classList.remove("holder");
  if (state.cols && state.rows && (state.cols !== term.cols || state.rows !== term.rows)) {
    term.resize(state.cols, state.rows);
  }
  const wrap = $("screen-wrap");
  screen.style.zoom = "";
  const natural = term.element ? term.element.scrollWidth : 0;
  const room = wrap.clientWidth - 12;
  const zoom = natural > 0 && room > 0 ? Math.max(MIN_ZOOM, Math.min(1, room / natural)) : 1;
  screen.style.zoom = zoom < 1 ? String(zoom) : "";
}

let resizeTimer = null;
window.addEventListener("resize", () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => applySize(client.state(ui.current)), 100);
});

// -- rendering ------------------------------------------------------------------------

/** A cwd's path as the shell shows it (a file:// URI carries it percent-encoded). */
function pathOf(uri) {
  const path = uri.replace(/^file:\/\/[^/]*/, "");
  try {
    return decodeURIComponent(path);
  } catch {
    return path; // (not valid percent-encoding: shown as it came)
  }
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children) node.append(child);
  return node;
}

function renderTerminals(root) {
  const list = $("terminals");
  const terminals = root?.terminals ?? [];
  list.replaceChildren(
    ...terminals.map((info) => {
      const known = client.state(info.resource);
      const life = describeLifecycle(info);
      const detail = [life, `held by ${describeClaim(info.claim)}`];
      if (known?.cwd) detail.push(pathOf(known.cwd));
      const button = el(
        "button",
        { type: "button", "data-uri": info.resource, title: info.resource },
        el("span", { class: "entry-title" }, info.title || info.resource),
        el("span", { class: `entry-detail ${life === "running" ? "state-running" : "state-exited"}` }, detail.join(" · ")),
      );
      button.setAttribute("aria-current", String(info.resource === ui.current));
      button.addEventListener("click", () => openTerminal(info.resource));
      return el("li", {}, button);
    }),
  );
  $("no-terminals").hidden = terminals.length > 0;
}

function renderToolbar(state) {
  const takeOver = $("take-over");
  const giveBack = $("give-back");
  if (state === undefined || ui.current === null) {
    $("term-title").textContent = "Pick a terminal";
    $("term-meta").textContent = "";
    takeOver.hidden = giveBack.hidden = true;
    return;
  }
  $("term-title").textContent = state.title || ui.current;
  $("term-title").title = state.title || ui.current;
  const meta = [];
  if (state.cwd) meta.push(pathOf(state.cwd));
  if (state.cols && state.rows) meta.push(`${state.cols}×${state.rows}`);
  meta.push(holds(state.claim, clientId) ? "held by you" : `held by ${describeClaim(state.claim)}`);
  meta.push(describeLifecycle(state));
  $("term-meta").textContent = meta.join(" · ");
  $("term-meta").title = meta.join(" · ");
  const exited = state.lifecycle?.status === "exited";
  const mine = holds(state.claim, clientId);
  takeOver.hidden = ui.readOnly || mine || exited || ui.playing;
  // (Held by this page's clientId, kept across a reload: it can always give the claim
  // back, to the claim it replaced, or unheld when that is not known.)
  giveBack.hidden = ui.readOnly || !mine || ui.playing;
}

/** The newest commands the panel lists: the panel is rebuilt as commands come, and a
 * terminal's thousands of commands made each rebuild cost seconds (the page stalled). */
const MAX_LISTED_COMMANDS = 200;

function renderCommands(state) {
  const list = $("commands");
  const all = state ? commandsOf(state) : [];
  const commands = all.slice(-MAX_LISTED_COMMANDS);
  const earlier = all.length - commands.length;
  list.replaceChildren(
    ...(earlier > 0
      ? [el("li", { class: "muted", id: "earlier-commands" }, `${earlier} earlier commands not listed`)]
      : []),
    ...commands.map((command) => {
      let status;
      if (command.running) status = el("span", { class: "cmd-status cmd-running" }, "running…");
      else if (command.exitCode === undefined) status = el("span", { class: "cmd-status" }, "done");
      else {
        const ok = command.exitCode === 0;
        status = el("span", { class: `cmd-status ${ok ? "cmd-ok" : "cmd-bad"}` }, `${ok ? "✓" : "✗"} exit ${command.exitCode}`);
      }
      const duration = formatDuration(command.durationMs);
      const button = el(
        "button",
        { type: "button", "data-command-id": command.commandId },
        el("span", { class: "cmd-line" }, `$ ${command.commandLine || "(command line not reported)"}`),
        status,
        el("span", { class: "muted" }, duration ? ` · ${duration}` : ""),
      );
      button.setAttribute("data-running", String(command.running));
      if (command.exitCode !== undefined) button.setAttribute("data-exit-code", String(command.exitCode));
      button.addEventListener("click", () => scrollToCommand(command.commandId));
      return el("li", {}, button);
    }),
  );
  $("no-commands").hidden = all.length > 0;
}

function scrollToCommand(commandId) {
  const marker = ui.markers.get(commandId);
  if (!marker || marker.isDisposed || marker.line < 0) {
    notice("That command's output has left the terminal's scrollback.");
    return;
  }
  term.scrollToLine(marker.line);
}

function notice(text) {
  $("notice").textContent = text;
  clearTimeout(ui.noticeTimer);
  ui.noticeTimer = setTimeout(() => ($("notice").textContent = ""), 4000);
}

function setConnection(status) {
  const badge = $("connection");
  badge.textContent = status === "open" ? "live" : status === "connecting" ? "connecting…" : "disconnected: reconnecting";
  badge.className = `badge ${status}`;
  if (status === "open") ui.opened = true;
  else if (ui.tokenRefused && !ui.opened) badge.textContent = refusedText();
  else if (status === "closed" && !ui.opened) checkToken();
}

/** The badge of a refused page: a page opened without a token (the bare URL serve
 * prints when its token comes from $AHP_TOKEN_FILE) is told what to add. */
function refusedText() {
  if (!access.token) return "refused: this page has no token: add #tkn=TOKEN (or #ro=READ-ONLY-TOKEN) to its address";
  return "refused: this server does not accept the page's token (#tkn= or #ro= in its address)";
}

/** A page whose socket never opened asks the server whether it takes the page's token
 * (a browser hides the upgrade's 403): refused, the badge says so instead of
 * "reconnecting" for ever. (It keeps trying: the server may take it again later.) */
async function checkToken() {
  if (ui.tokenChecked) return;
  ui.tokenChecked = true;
  try {
    const answer = await fetch("/api/access", {
      headers: { Authorization: `Bearer ${access.token}` },
      cache: "no-store",
    });
    if (answer.status === 401 && !ui.opened) {
      const badge = $("connection");
      badge.textContent = refusedText();
      badge.className = "badge closed";
      ui.tokenRefused = true;
    }
  } catch {
    // (not reachable: "reconnecting" says it)
  }
}

// -- opening, taking over ---------------------------------------------------------------

async function openTerminal(uri) {
  stopPlaying();
  if (ui.current !== null && ui.current !== uri) client.unsubscribe(ui.current);
  ui.current = uri;
  sessionStorage.setItem("ahp-current", uri);
  renderTerminals(client.state(ROOT));
  try {
    await client.subscribe(uri); // (the snapshot event redraws)
  } catch (error) {
    notice(`Cannot open ${uri}: ${error.message}`);
  }
}

$("take-over").addEventListener("click", () => {
  const state = client.state(ui.current);
  if (state === undefined) return;
  ui.replaced.set(ui.current, state.claim);
  client.dispatch(ui.current, { type: "terminal/claimed", claim: { kind: "client", clientId } });
});

$("give-back").addEventListener("click", () => {
  const previous = ui.replaced.get(ui.current) ?? { kind: "client", clientId: "" };
  ui.replaced.delete(ui.current);
  client.dispatch(ui.current, { type: "terminal/claimed", claim: previous });
});

term.onData((data) => {
  if (answering !== null) {
    answer(data, answering); // (xterm.js answering a question, not a key)
    return;
  }
  const state = client.state(ui.current);
  if (ui.playing || ui.current === null) return;
  if (!canType(state)) {
    notice(ui.readOnly ? "Read-only: this page can only watch." : "Watching: keystrokes go nowhere. Take over to type.");
    return;
  }
  client.dispatch(ui.current, { type: "terminal/input", data });
});

// -- events from the connection -------------------------------------------------------------

function onEvent(kind, detail) {
  if (kind === "status") {
    ui.readOnly = ui.readOnly || detail.readOnly;
    $("access").hidden = !ui.readOnly;
    setConnection(detail.status);
    if (detail.status === "open") {
      loadRecordings();
      renderToolbar(client.state(ui.current));
    }
    return;
  }
  if (kind === "snapshot") {
    if (detail.channel === ROOT) {
      renderTerminals(detail.state);
      autoOpen(detail.state);
    } else if (detail.channel === ui.current) {
      redraw(detail.state);
    }
    return;
  }
  if (kind === "missing") {
    if (detail.channel === ui.current) forgetCurrent("This terminal is gone.");
    return;
  }
  if (kind === "rejected") {
    if (detail.channel === ui.current && detail.envelope.action.type === "terminal/claimed") {
      ui.replaced.delete(ui.current);
      notice(`Take over refused: ${detail.envelope.rejectionReason}`);
    }
    return;
  }
  if (kind === "action") onAction(detail);
}

function forgetCurrent(why) {
  client.unsubscribe(ui.current);
  ui.current = null;
  sessionStorage.removeItem("ahp-current");
  term.reset();
  ui.markers.clear();
  renderToolbar(undefined);
  renderCommands(undefined);
  notice(why);
}

function autoOpen(root) {
  if (ui.current !== null) return;
  const terminals = root.terminals ?? [];
  const kept = sessionStorage.getItem("ahp-current");
  const pick = terminals.find((t) => t.resource === kept) ?? terminals.find((t) => describeLifecycle(t) === "running") ?? terminals[0];
  if (pick) openTerminal(pick.resource);
}

let recordingsLoaded = 0;
let recordingsTimer = null;

/** Reload the recordings list after a catalogue change: at most every
 * RECORDINGS_INTERVAL ms, and once more after a change that came within it (a terminal
 * created right after another was never listed). */
const RECORDINGS_INTERVAL = 2000;
function reloadRecordingsSoon() {
  const wait = recordingsLoaded + RECORDINGS_INTERVAL - Date.now();
  if (wait <= 0) {
    loadRecordings();
  } else if (recordingsTimer === null) {
    recordingsTimer = setTimeout(() => {
      recordingsTimer = null;
      loadRecordings();
    }, wait);
  }
}

function onAction({ channel, action, state, replayed }) {
  if (channel === ROOT) {
    renderTerminals(state);
    if (ui.current !== null && !(state.terminals ?? []).some((t) => t.resource === ui.current)) {
      forgetCurrent("This terminal was disposed.");
    }
    autoOpen(state);
    reloadRecordingsSoon();
    return;
  }
  if (channel !== ui.current) return;
  switch (action.type) {
    case "terminal/data":
      write(action.data, { live: !replayed }); // (replayed after a reconnect: history)
      return;
    case "terminal/commandExecuted":
      markCommand(action.commandId);
      renderCommands(state);
      return;
    case "terminal/commandFinished":
      renderCommands(state);
      return;
    case "terminal/cleared":
      term.clear();
      ui.markers.clear();
      renderCommands(state);
      return;
    case "terminal/claimed":
    case "terminal/resized":
      applySize(state);
      renderToolbar(state);
      return;
    default:
      renderToolbar(state);
      renderTerminals(client.state(ROOT));
  }
}

// -- recordings ---------------------------------------------------------------------------

async function loadRecordings() {
  recordingsLoaded = Date.now();
  const note = $("recordings-note");
  if (ui.readOnly || !access.token) {
    note.textContent = "Recordings need the full token.";
    return;
  }
  let listing;
  try {
    const answer = await fetch("/api/recordings", {
      headers: { Authorization: `Bearer ${access.token}` },
      cache: "no-store",
      credentials: "omit",
    });
    if (!answer.ok) throw new Error(`${answer.status}`);
    listing = await answer.json();
  } catch (error) {
    note.textContent = `Cannot list the recordings (${error.message}).`;
    return;
  }
  note.textContent = listing.enabled
    ? listing.recordings.length === 0
      ? "No recordings yet."
      : listing.leftOff
        ? `${listing.leftOff} older ones not listed.`
        : ""
    : "Recording is off (serve --record DIR).";
  if (listing.partial) note.textContent += " The directory holds too many files: the listing is partial.";
  $("recordings").replaceChildren(
    ...listing.recordings.map((entry) => {
      const when = new Date(entry.modified * 1000).toLocaleString();
      const button = el(
        "button",
        { type: "button", "data-recording": entry.name, title: entry.name },
        el("span", { class: "entry-title" }, entry.name),
        el("span", { class: "entry-detail" }, `${when} · ${Math.ceil(entry.size / 1024)} KiB`),
      );
      button.addEventListener("click", () => play(entry.name));
      return el("li", {}, button);
    }),
  );
}

let player = null;
let playerScript = null;

/** asciinema-player (220 KB), loaded the first time a recording is played. */
function loadPlayer() {
  if (playerScript === null) {
    playerScript = new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = "/static/vendor/asciinema-player/asciinema-player.min.js";
      script.onload = () => resolve(window.AsciinemaPlayer);
      script.onerror = () => {
        playerScript = null;
        reject(new Error("cannot load the player"));
      };
      document.head.append(script);
    });
  }
  return playerScript;
}

async function play(name) {
  let text;
  try {
    const answer = await fetch(`/api/recordings/${encodeURIComponent(name)}`, {
      headers: { Authorization: `Bearer ${access.token}` },
      cache: "no-store",
      credentials: "omit",
    });
    if (!answer.ok) throw new Error(`${answer.status} ${await answer.text()}`);
    text = await answer.text();
    await loadPlayer();
  } catch (error) {
    notice(`Cannot load ${name}: ${error.message}`);
    return;
  }
  stopPlaying();
  ui.playing = true;
  $("screen").hidden = true;
  const box = $("player");
  box.hidden = false;
  box.setAttribute("data-recording", name);
  $("term-title").textContent = `Recording ${name}`;
  $("term-meta").textContent = "";
  $("back-to-live").hidden = false;
  renderToolbar(client.state(ui.current));
  $("term-title").textContent = `Recording ${name}`;
  player = window.AsciinemaPlayer.create({ data: text }, box, { autoPlay: true, fit: "width", idleTimeLimit: 2 });
}

function stopPlaying() {
  if (!ui.playing) return;
  ui.playing = false;
  if (player !== null) player.dispose();
  player = null;
  const box = $("player");
  box.replaceChildren();
  box.hidden = true;
  box.removeAttribute("data-recording");
  $("screen").hidden = false;
  $("back-to-live").hidden = true;
  renderToolbar(client.state(ui.current));
}

$("back-to-live").addEventListener("click", stopPlaying);

// For tests and the curious: the page's own view of the protocol state.
window.ahpViewer = {
  client,
  term,
  clientId,
  get current() {
    return ui.current;
  },
  get readOnly() {
    return ui.readOnly;
  },
  get resyncs() {
    return ui.resyncs;
  },
  get firstDrawAt() {
    return ui.firstDrawAt;
  },
  /** Characters handed to xterm.js and not parsed yet. */
  get pendingWrites() {
    return ui.pending;
  },
  /** xterm.js's answers to terminal queries: sent as input, or dropped (history, or
   * the page may not type). */
  get queryAnswers() {
    return { ...answers };
  },
  /** For tests: a smaller bound on output waiting for xterm.js. */
  setWriteBound(chars) {
    maxPendingWrite = chars;
  },
  openTerminal,
  text: () => contentText(client.state(ui.current)?.content ?? []),
};

client.start();
