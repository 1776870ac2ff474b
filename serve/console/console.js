// The run console: picks an app, builds its input form from /v1/parameters,
// runs it through the Service API (streaming) and shows the answer, the end
// outputs by name, a summary and the run's timeline as a waterfall; opens
// earlier runs (and a chat app's conversations) from the store. Plain
// JavaScript, no build step, nothing fetched from outside this server.
"use strict";

const $ = (id) => document.getElementById(id);
const CHAT_MODES = ["advanced-chat", "chat", "agent-chat"];
const state = {
  apps: [], app: null, params: null, loaded: null, taskId: null, conversationId: "",
  running: false, done: false, started: 0, ticker: null, sawToken: false, runId: "", messageId: "", lastEventId: "",
};

// ---- words: the console's, in the browser's language (from /console/strings)

let words = {};
function say(key, params = {}) {
  const text = words[key] || key;
  return text.replace(/\{\{\s*(\w+)\s*\}\}/g, (m, name) => (name in params ? params[name] : m));
}

async function loadWords() {
  words = await (await fetch("/console/strings")).json();
  for (const el of document.querySelectorAll("[data-i18n]")) el.textContent = say(el.dataset.i18n);
  for (const el of document.querySelectorAll("[data-i18n-placeholder]")) el.placeholder = say(el.dataset.i18nPlaceholder);
}

// A runtime message (a wait, a fallback decision) in the console's language when
// its key is among the console's words, else as the server rendered it.
function told(data) {
  return data.message_key && words[data.message_key] ? say(data.message_key, data.params || {}) : data.message || "";
}

function isChat() { return !!state.app && CHAT_MODES.includes(state.app.mode); }
function isCompletion() { return !!state.app && state.app.mode === "completion"; }
function keyFor(stem) { return sessionStorage.getItem("key:" + stem) || ""; }

async function api(path, options = {}) {
  const headers = Object.assign({ Authorization: "Bearer " + $("key").value.trim() }, options.headers || {});
  const response = await fetch(path, Object.assign({}, options, { headers }));
  if (!response.ok) {
    let body = {};
    try { body = await response.json(); } catch (e) { body = { message: response.statusText }; }
    throw new Error(body.message || response.statusText);
  }
  return response;
}

function setStatus(text, kind) {
  $("status").textContent = text;
  $("status").className = kind || "";
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function shown(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

function seconds(value) { return Number(value || 0).toFixed(2) + " s"; }

// ---- apps and their inputs

async function loadApps() {
  const response = await fetch("/console/apps");
  state.apps = (await response.json()).data;
  $("app").replaceChildren(...state.apps.map((app) => {
    const option = el("option", "", app.name + " (" + app.stem + ")");
    option.value = app.stem;
    return option;
  }));
  await chooseApp();
}

async function chooseApp() {
  state.app = state.apps.find((a) => a.stem === $("app").value) || null;
  state.conversationId = "";
  clearRun();
  setStatus("");
  $("conversation").replaceChildren();
  $("history").replaceChildren();
  $("key").value = state.app ? keyFor(state.app.stem) : "";
  $("mode").textContent = state.app ? state.app.mode : "";
  $("chat").hidden = !isChat();
  $("history-status").hidden = isChat();
  await loadParameters();
}

async function loadParameters() {
  const wanted = (state.app ? state.app.stem : "") + "\n" + $("key").value.trim();
  if (wanted === state.loaded) return;  // a second change event for the same key
  state.loaded = wanted;
  $("inputs").replaceChildren();
  state.params = null;
  if (!state.app || !$("key").value.trim()) { setStatus(say("console.enterKey")); return; }
  sessionStorage.setItem("key:" + state.app.stem, $("key").value.trim());
  try {
    state.params = await (await api("/v1/parameters")).json();
  } catch (e) { setStatus(e.message, "error"); return; }
  setStatus("");
  for (const entry of state.params.user_input_form) {
    const [kind, spec] = Object.entries(entry)[0];
    $("inputs").append(field(kind, spec));
  }
  await loadHistory();
}

function field(kind, spec) {
  const label = el("label");
  label.append(el("span", "", (spec.label || spec.variable) + (spec.required ? " *" : "")));
  let input;
  if (kind === "paragraph") {
    input = el("textarea");
    input.rows = 3;
  } else if (kind === "select") {
    input = el("select");
    if (!spec.required) input.append(el("option", "", ""));
    for (const value of spec.options || []) {
      const option = el("option", "", value);
      option.value = value;
      input.append(option);
    }
  } else {
    input = el("input");
    input.type = { number: "number", checkbox: "checkbox", file: "file", "file-list": "file" }[kind] || "text";
    if (kind === "file-list") input.multiple = true;
  }
  input.name = spec.variable;
  input.dataset.kind = kind;
  input.dataset.label = spec.label || spec.variable;
  if (spec.required && kind !== "checkbox") input.dataset.required = "true";
  if (spec.default !== undefined && spec.default !== null && input.type !== "file") input.value = spec.default;
  input.addEventListener("input", () => input.removeAttribute("aria-invalid"));
  label.append(input);
  return label;
}

// The required inputs left empty (marked in the form), checked before anything is sent.
function missingInputs() {
  const missing = [];
  for (const input of $("inputs").querySelectorAll("[name]")) {
    const empty = input.type === "file" ? input.files.length === 0 : input.value.trim() === "";
    if (input.dataset.required && empty) {
      input.setAttribute("aria-invalid", "true");
      missing.push(input.dataset.label);
    } else {
      input.removeAttribute("aria-invalid");
    }
  }
  if (isChat() && $("query").value.trim() === "") {
    $("query").setAttribute("aria-invalid", "true");
    missing.push(say("console.message"));
  }
  return missing;
}

async function upload(file) {
  const form = new FormData();
  form.append("file", file);
  form.append("user", $("user").value);
  const record = await (await api("/v1/files/upload", { method: "POST", body: form })).json();
  return { type: kindOf(record.extension), transfer_method: "local_file", upload_file_id: record.id };
}

function kindOf(extension) {
  const kinds = { image: ["jpg", "jpeg", "png", "gif", "webp", "svg"], audio: ["mp3", "m4a", "wav", "amr", "mpga"], video: ["mp4", "mov", "mpeg", "webm"] };
  for (const [kind, list] of Object.entries(kinds)) if (list.includes(extension)) return kind;
  return "document";
}

async function collectInputs() {
  const inputs = {};
  for (const input of $("inputs").querySelectorAll("[name]")) {
    const kind = input.dataset.kind;
    if (kind === "file" || kind === "file-list") {
      const files = await Promise.all([...input.files].map(upload));
      if (files.length) inputs[input.name] = kind === "file" ? files[0] : files;
    } else if (kind === "checkbox") {
      inputs[input.name] = input.checked;
    } else if (kind === "number") {
      if (input.value !== "") inputs[input.name] = Number(input.value);
    } else if (input.value !== "") {
      inputs[input.name] = input.value;
    }
  }
  return inputs;
}

// ---- the timeline: one model for a live run and a replayed one

let tl = null;

function newTimeline(live) {
  return { live, t0: performance.now(), end: 0, rows: new Map(), containers: new Map(), runsOf: {} };
}

function clearRun() {
  stopTicker();
  tl = newTimeline(false);
  state.taskId = null;
  state.sawToken = false;
  state.done = false;
  state.runId = "";
  state.messageId = "";
  state.lastEventId = "";
  $("answer").textContent = "";
  $("outputs").replaceChildren();
  $("summary").replaceChildren();
  $("rows").replaceChildren();
  $("human-input").replaceChildren();
  $("timer").textContent = "";
}

function now() { return (performance.now() - tl.t0) / 1000; }

// The row of a node execution (made on first sight), under its container's round if it has one.
function nodeRow(data, t) {
  let row = tl.rows.get(data.id);
  if (row) return row;
  row = {
    id: data.id, nodeId: data.node_id, title: data.title || data.node_id, type: data.node_type || "",
    status: "running", start: t, end: null, marks: [], retries: [], fallbacks: [], waits: [],
    firstTokenAt: null, ttft: null, tokens: null, completion: null, handled: "", error: "",
  };
  row.el = rowElement(row);
  tl.rows.set(data.id, row);
  const place = containerOf(data);
  if (place) roundElement(place.container, place.round).append(row.el);
  else $("rows").append(row.el);
  return row;
}

function rowElement(row) {
  const wrap = el("div", "node running");
  wrap.dataset.id = row.id;
  wrap.dataset.node = row.nodeId;
  const details = el("details");
  const line = el("summary", "line");
  row.cells = {
    name: Object.assign(el("span", "name", row.title), { title: row.title }), type: el("span", "type", row.type),
    status: el("span", "status status-running", "running"), metrics: el("span", "metrics"),
    time: el("span", "time"), track: el("div", "track"),
  };
  row.bar = el("div", "bar");
  row.cells.track.append(row.bar);
  line.append(...Object.values(row.cells));
  row.more = el("div", "more");
  details.append(line, row.more);
  row.notes = el("div", "notes");
  wrap.append(details, row.notes);
  return wrap;
}

// The container a node execution runs in, and its round (from the event, else the current one).
function containerOf(data) {
  const id = data.iteration_id || data.loop_id;
  if (!id) return null;
  const container = tl.containers.get(id) || containerRow({ node_id: id, title: id, node_type: data.iteration_id ? "iteration" : "loop" }, 0, false);
  const meta = data.execution_metadata || {};
  const round = meta.iteration_index ?? meta.loop_index ?? container.current;
  return { container, round: Number(round) || 0 };
}

// A container's row (its node id's latest run; `starting` a new run once the last ended:
// an iteration inside a loop runs once per loop round).
function containerRow(data, t, starting) {
  let container = tl.containers.get(data.node_id);
  if (container && !(starting && container.row.end !== null)) return container;
  const n = (tl.runsOf[data.node_id] || 0) + 1;
  tl.runsOf[data.node_id] = n;
  const row = nodeRow({ ...data, id: `container:${data.node_id}:${n}` }, t);
  const rounds = el("div", "rounds");
  row.el.append(rounds);
  container = { row, rounds, byIndex: new Map(), current: 0 };
  tl.containers.set(data.node_id, container);
  return container;
}

// A container inside another: its end names the outer one and its round (its start
// does not), so it moves there then.
function placeInOuter(container, data) {
  const meta = data.execution_metadata || {};
  for (const kind of ["loop", "iteration"]) {
    const outer = meta[kind + "_id"];
    if (!outer || outer === data.node_id || !tl.containers.has(outer)) continue;
    roundElement(tl.containers.get(outer), Number(meta[kind + "_index"]) || 0).append(container.row.el);
    return;
  }
}

function roundElement(container, index) {
  let round = container.byIndex.get(index);
  if (!round) {
    round = el("div", "round");
    round.dataset.round = index;
    round.append(el("h4", "", say("console.round", { index: index + 1 })));
    // Rounds in their order, whichever arrives first.
    const later = [...container.byIndex.entries()].filter(([i]) => i > index).sort((a, b) => a[0] - b[0])[0];
    container.rounds.insertBefore(round, later ? later[1] : null);
    container.byIndex.set(index, round);
  }
  return round;
}

function mark(row, kind, t, title) {
  const dot = el("span", "mark " + kind);
  dot.title = title;
  dot.dataset.t = t;
  row.cells.track.append(dot);
  row.marks.push({ kind, t, el: dot });
}

function setRowStatus(row, status) {
  row.status = status;
  row.cells.status.textContent = status;
  row.cells.status.className = "status status-" + status;
  row.el.className = "node " + status;
}

// What a node row says below its line: errors and what handled them, retries, fallbacks, waits.
function renderNotes(row) {
  const lines = [];
  if (row.waits.length && row.firstTokenAt === null && row.status === "running") {
    lines.push(["waiting", say("console.waitingFirstToken")]);
  }
  for (const message of row.waits.slice(-1)) lines.push(["", say("console.waiting", { message })]);
  // One line per distinct error, with every attempt it ended: never the same message thrice.
  const byError = new Map();
  for (const retry of row.retries) {
    if (!byError.has(retry.error)) byError.set(retry.error, []);
    byError.get(retry.error).push(retry.attempt);
  }
  for (const [error, attempts] of byError) lines.push(["", say("console.retry", { attempt: attempts.join(", "), error })]);
  for (const fallback of row.fallbacks) lines.push(["", say("console.fallback", fallback)]);
  if (row.error) lines.push(["error", row.error]);
  if (row.handled) lines.push(["handled", say("console.handledBy", { how: row.handled })]);
  row.notes.replaceChildren(...lines.map(([cls, text]) => el("div", cls, text)));
}

function renderMetrics(row) {
  const parts = [];
  if (row.tokens !== null) parts.push(say("console.tokenCount", { count: row.tokens }));
  const streaming = row.end !== null && row.firstTokenAt !== null ? row.end - row.firstTokenAt : null;
  if (row.completion && streaming && streaming > 0) {
    parts.push(say("console.tokenRate", { rate: (row.completion / streaming).toFixed(1) }));
  }
  if (row.ttft !== null) parts.push(say("console.firstToken", { seconds: row.ttft.toFixed(2) }));
  row.cells.metrics.replaceChildren(...parts.map((p) => el("div", "", p)));
}

function renderDetails(row, data) {
  const sections = [];
  const add = (key, value) => {
    if (value === undefined || value === null) return;
    if (typeof value === "object" && Object.keys(value).length === 0) return;
    const block = el("div", "section");
    block.append(el("h4", "", say(key)), el("pre", "", shown(value)));
    sections.push(block);
  };
  const process = Object.assign({}, data.process_data || {});
  const prompt = process.prompts;
  delete process.prompts;
  add("console.inputs", data.inputs);
  add("console.prompt", prompt);
  add("console.outputs", data.outputs);
  add("console.processData", process);
  row.more.replaceChildren(...sections);
}

function nodeEnded(row, data, t) {
  row.end = t;
  if (data.elapsed_time !== undefined && row.start === null) row.start = t - data.elapsed_time;
  setRowStatus(row, data.status || "succeeded");
  row.cells.time.textContent = seconds(data.elapsed_time);
  const meta = data.execution_metadata || {};
  const usage = (data.outputs && typeof data.outputs === "object" && data.outputs.usage) || null;
  const tokens = usage && usage.total_tokens !== undefined ? usage.total_tokens : meta.total_tokens;
  if (tokens || row.firstTokenAt !== null) row.tokens = Number(tokens || 0);
  if (usage) row.completion = Number(usage.completion_tokens || 0);
  row.error = data.error || "";
  const strategy = meta.error_strategy;
  if (data.status === "exception" && strategy) {
    row.handled = say(strategy === "fail-branch" ? "console.handler.failBranch" : "console.handler.defaultValue");
  } else if (data.status === "succeeded" && row.retries.length) {
    row.handled = say("console.handler.retry");
  }
  renderDetails(row, data);
  renderMetrics(row);
  renderNotes(row);
}

// Where a row first seen at its end starts: its elapsed time before.
function startOf(id, data, t) {
  return tl.rows.has(id) ? t : Math.max(0, t - Number(data.elapsed_time || 0));
}

// One event of the run, at `t` seconds after its start (live: now; replayed: as kept).
function onEvent(event, t) {
  const data = event.data || {};
  if (event.task_id && tl.live) { state.taskId = event.task_id; $("stop").disabled = false; }
  tl.end = Math.max(tl.end, t);
  switch (event.event) {
    case "workflow_started": state.runId = data.id || event.workflow_run_id || ""; summary({ id: state.runId, status: "running" }); break;
    case "node_started": setRowStatus(nodeRow(data, t), "running"); break;
    case "node_first_token": {
      const row = nodeRow(data, t);
      row.firstTokenAt = t;
      row.ttft = Number(data.ttft);
      state.sawToken = true;
      mark(row, "first_token", t, say("console.firstToken", { seconds: row.ttft.toFixed(2) }));
      renderMetrics(row);
      renderNotes(row);
      break;
    }
    case "node_waiting": {
      const row = nodeRow(data, t);
      row.waits.push(told(data));
      mark(row, "waiting", t, say("console.waiting", { message: told(data) }));
      renderNotes(row);
      break;
    }
    case "node_retry": {
      const row = nodeRow(data, t);
      row.retries.push({ attempt: data.retry_index, error: data.error || "" });
      row.firstTokenAt = null;
      mark(row, "retry", t, say("console.retry", { attempt: data.retry_index, error: data.error || "" }));
      renderNotes(row);
      break;
    }
    case "node_fallback": {
      const row = nodeRow(data, t);
      row.fallbacks.push({ kind: data.kind, message: told(data) });
      mark(row, "fallback", t, say("console.fallback", { kind: data.kind, message: told(data) }));
      renderNotes(row);
      break;
    }
    case "node_finished": nodeEnded(nodeRow(data, startOf(data.id, data, t)), data, t); break;
    case "iteration_started": case "loop_started": setRowStatus(containerRow(data, t, true).row, "running"); break;
    case "iteration_next": case "loop_next": {
      const container = containerRow(data, t, false);
      container.current = Number(data.index) || 0;
      roundElement(container, container.current);
      break;
    }
    case "iteration_completed": case "loop_completed": {
      const begun = tl.containers.has(data.node_id) ? t : Math.max(0, t - Number(data.elapsed_time || 0));
      const container = containerRow(data, begun, false);
      nodeEnded(container.row, data, t);
      placeInOuter(container, data);
      break;
    }
    case "text_chunk": state.sawToken = true; $("answer").textContent += data.text; break;
    case "message": case "agent_message": state.sawToken = true; $("answer").textContent += event.answer || ""; break;
    case "message_end": ended(event); break;
    case "workflow_finished": finished(data); break;
    case "human_input_required": humanInput(event); break;
    case "error": state.done = true; setStatus(event.message, "error"); break;
  }
  // Bars are placed by the timer's tick (live) and once at the end: never per event,
  // which would cost a run of thousands of nodes their square.
}

function humanInput(event) {
  const data = event.data || {};
  const token = data.form_token || event.form_token || "";
  const submitUrl = token ? "/v1/form/human_input/" + encodeURIComponent(token) : "";
  const helper = window.firstgateHumanInput;
  if (helper && typeof helper.render === "function") helper.render(event, $("human-input"), submitUrl);
}

function summary(run) {
  const entries = [
    ["console.runId", run.id],
    ["console.status", run.status],
    ["console.totalTime", run.elapsed_time !== undefined ? seconds(run.elapsed_time) : undefined],
    ["console.steps", run.total_steps],
    ["console.tokens", run.total_tokens],
  ];
  const items = [];
  for (const [key, value] of entries) {
    if (value === undefined || value === null || value === "") continue;
    const dd = el("dd", "", String(value));
    dd.dataset.field = key.slice("console.".length);
    items.push(el("dt", "", say(key)), dd);
  }
  $("summary").replaceChildren(...items);
}

function outputs(values) {
  const items = [];
  for (const [name, value] of Object.entries(values || {})) {
    const dd = el("dd", "", shown(value));
    dd.dataset.name = name;
    items.push(el("dt", "", name), dd);
  }
  $("outputs").replaceChildren(...items);
}

function finished(data) {
  if (tl.live) state.done = true;
  summary(data);
  outputs(data.outputs);
  if (tl.live) setStatus(data.status + (data.error ? ": " + data.error : ""), data.status === "failed" ? "error" : "");
}

// A chat or completion turn's end: the conversation, and the tokens when no run summary came.
// (A completion or agent app streams no run events: its run's id is found after the end.)
function ended(event) {
  state.conversationId = event.conversation_id || state.conversationId;
  state.messageId = event.message_id || event.id || "";
  if (tl.live && !state.done) {
    const usage = (event.metadata && event.metadata.usage) || {};
    summary({ id: state.runId, status: "succeeded", elapsed_time: usage.latency, total_tokens: usage.total_tokens });
    state.done = true;
    setStatus("succeeded");
  }
}

// The run of a turn whose stream named only its message: a completion's message
// is its run; a chat turn's run is on its message in the conversation.
async function runOfMessage() {
  if (!state.messageId) return "";
  if (!isChat()) return state.messageId;
  const user = encodeURIComponent($("user").value);
  const conversation = encodeURIComponent(state.conversationId);
  const page = await (await api(`/v1/messages?conversation_id=${conversation}&user=${user}&limit=5`)).json();
  const found = page.data.find((m) => m.id === state.messageId);
  return found ? found.workflow_run_id || "" : "";
}

// Bars and marks placed on one scale: the run so far (live) or all of it.
function layout() {
  const span = Math.max(tl.live && state.running ? now() : tl.end, 0.001);
  for (const row of tl.rows.values()) {
    const start = row.start === null ? 0 : row.start;
    const end = row.end === null ? (state.running ? now() : tl.end) : row.end;
    row.bar.style.left = (100 * start / span) + "%";
    row.bar.style.width = (100 * Math.max(end - start, 0) / span) + "%";
    for (const m of row.marks) m.el.style.left = (100 * m.t / span) + "%";
    if (row.end === null && state.running) row.cells.time.textContent = seconds(end - start);
  }
  document.querySelector("#timeline .scale").textContent = seconds(span);
}

// ---- a live run: the timer, the events, the end

function startTicker() {
  state.started = performance.now();
  state.ticker = setInterval(tick, 100);
  tick();
}

function stopTicker() {
  if (state.ticker) clearInterval(state.ticker);
  state.ticker = null;
}

function tick() {
  $("timer").textContent = seconds((performance.now() - state.started) / 1000);
  if (!state.running || state.done) return;
  const waiting = !state.sawToken;
  setStatus(waiting ? say("console.waitingFirstToken") : say("console.running"), waiting ? "waiting" : "");
  if (tl && tl.live) layout();
}

async function readEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const lines = frame.split("\n");
      const position = lines.find((l) => l.startsWith("id:"));
      if (position) state.lastEventId = position.slice(3).trim();  // where to resume
      const data = lines.filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("\n");
      if (!data) continue;
      if (!tl.seen) { tl.seen = true; tl.t0 = performance.now(); }  // the first event is t = 0
      onEvent(JSON.parse(data), now());
    }
  }
}

function addTurn(role, text, runId) {
  const div = el("div", "turn " + role, text);
  if (runId) {
    div.dataset.run = runId;
    div.addEventListener("click", () => openRun(runId));
  }
  $("conversation").append(div);
  return div;
}

async function run() {
  if (!state.app || state.running) return;
  const missing = missingInputs();
  if (missing.length) {
    clearRun();
    setStatus(missing.map((name) => say("console.required", { name })).join(" "), "error");
    return;
  }
  clearRun();
  tl = newTimeline(true);
  state.running = true;
  $("run").disabled = true;
  startTicker();
  const chat = isChat();
  let path = "/v1/workflows/run";
  try {
    const body = { inputs: await collectInputs(), response_mode: "streaming", user: $("user").value };
    if (chat) {
      body.query = $("query").value;
      body.conversation_id = state.conversationId;
      path = "/v1/chat-messages";
      addTurn("user", body.query);
      $("query").value = "";
    } else if (isCompletion()) {
      path = "/v1/completion-messages";
    }
    const response = await api(path, { method: "POST", body: JSON.stringify(body), headers: { "Content-Type": "application/json" } });
    await readEvents(response);
    state.running = false;
    layout();
    // A completion or agent app streams no node events: its timeline comes from the store.
    if (!state.runId) state.runId = await runOfMessage();
    if (chat) addTurn("assistant", $("answer").textContent, state.runId);
    if (tl.rows.size === 0 && state.runId) await showRecorded(state.runId, false);
    await loadHistory();
  } catch (e) {
    // The page was cleared when the request went out: what shows now is this
    // request's (a refusal leaves nothing; a broken stream what arrived before).
    state.running = false;
    setStatus(e.message, "error");
  } finally {
    state.running = false;
    stopTicker();
    $("run").disabled = false;
    $("stop").disabled = true;
  }
}

// A run that goes on after the page's request ended (a human-input form answered:
// `human_input_form.js` says so with `firstgate:form-submitted`): its events
// again from the server, after the last one this page saw of it.
async function follow(runId) {
  if (!runId || state.running) return;
  const same = tl.live && state.runId === runId && state.lastEventId;
  if (!same) {
    clearRun();
    tl = newTimeline(true);
  }
  const headers = same ? { "Last-Event-ID": state.lastEventId } : {};
  state.running = true;
  state.done = false;
  $("run").disabled = true;
  startTicker();
  try {
    const user = encodeURIComponent($("user").value);
    await readEvents(await api(`/v1/workflow/${encodeURIComponent(runId)}/events?user=${user}`, { headers }));
    state.running = false;
    layout();
    await loadHistory();
  } catch (e) {
    state.running = false;
    setStatus(e.message, "error");
  } finally {
    state.running = false;
    stopTicker();
    $("run").disabled = false;
    $("stop").disabled = true;
  }
}

async function stop() {
  if (!state.taskId) return;
  const kind = isChat() ? "chat-messages" : isCompletion() ? "completion-messages" : "workflows/tasks";
  await api(`/v1/${kind}/${state.taskId}/stop`, { method: "POST", body: JSON.stringify({ user: $("user").value }), headers: { "Content-Type": "application/json" } });
}

// ---- history: the app's runs (or a chat app's conversations) from the store

function historyItem(text, onOpen, attrs) {
  const li = el("li", "", text);
  Object.assign(li.dataset, attrs);
  li.addEventListener("click", onOpen);
  return li;
}

async function loadHistory() {
  if (!state.params) return;
  const list = $("history");
  try {
    if (isChat()) {
      const user = encodeURIComponent($("user").value);
      const page = await (await api(`/v1/conversations?user=${user}&limit=20`)).json();
      list.replaceChildren(...page.data.map((c) => historyItem(
        c.name || c.id, () => openConversation(c.id), { conversation: c.id })));
    } else {
      const status = $("history-status").value;
      const query = "limit=20" + (status ? "&status=" + encodeURIComponent(status) : "");
      const page = await (await api("/v1/workflows/logs?" + query)).json();
      list.replaceChildren(...page.data.map((log) => {
        const r = log.workflow_run;
        const when = new Date(r.created_at * 1000).toLocaleString();
        const text = `${when} · ${r.status} · ${seconds(r.elapsed_time)} · ${say("console.tokenCount", { count: r.total_tokens })}`;
        return historyItem(text, () => openRun(r.id), { run: r.id, status: r.status });
      }));
    }
    if (!list.children.length) list.append(el("li", "empty", say("console.noRuns")));
  } catch (e) {
    list.replaceChildren(el("li", "empty", e.message));
  }
}

// A recorded run's timeline, summary and outputs, replayed from the store.
async function showRecorded(runId, clear) {
  const doc = await (await api(`/v1/workflows/run/${encodeURIComponent(runId)}/timeline`)).json();
  if (clear) clearRun();
  tl = newTimeline(false);
  $("rows").replaceChildren();
  for (const event of doc.events) onEvent(event, Number(event.t) || 0);
  tl.end = Math.max(tl.end, doc.run.elapsed_time || 0);
  state.runId = doc.run.id;
  summary(doc.run);
  outputs(doc.run.outputs);
  if (clear && typeof doc.run.outputs.answer === "string") $("answer").textContent = doc.run.outputs.answer;
  layout();
}

async function openRun(runId) {
  if (state.running) return;
  try {
    await showRecorded(runId, true);
    setStatus("");
  } catch (e) {
    clearRun();
    setStatus(e.message, "error");
  }
}

async function openConversation(conversationId) {
  if (state.running) return;
  try {
    const user = encodeURIComponent($("user").value);
    const page = await (await api(`/v1/messages?conversation_id=${encodeURIComponent(conversationId)}&user=${user}&limit=50`)).json();
    state.conversationId = conversationId;
    $("conversation").replaceChildren();
    for (const m of page.data) {
      addTurn("user", m.query);
      addTurn("assistant", m.answer, m.workflow_run_id);
    }
    const last = page.data[page.data.length - 1];
    if (last && last.workflow_run_id) await showRecorded(last.workflow_run_id, true);
  } catch (e) {
    clearRun();
    setStatus(e.message, "error");
  }
}

// The human-input form helper, when this server has it (serve/console/human_input_form.js).
function loadHelpers() {
  const script = document.createElement("script");
  script.src = "/console/human_input_form.js";
  script.addEventListener("error", () => script.remove());
  document.head.append(script);
}

window.addEventListener("DOMContentLoaded", () => {
  tl = newTimeline(false);
  loadHelpers();
  $("app").addEventListener("change", chooseApp);
  $("key").addEventListener("change", loadParameters);
  $("user").addEventListener("change", loadHistory);
  $("run").addEventListener("click", run);
  $("stop").addEventListener("click", stop);
  $("history-status").addEventListener("change", loadHistory);
  $("history-refresh").addEventListener("click", loadHistory);
  $("human-input").addEventListener("firstgate:form-submitted", (e) => follow(e.detail && e.detail.workflowRunId));
  $("query").addEventListener("input", () => $("query").removeAttribute("aria-invalid"));
  $("new-conversation").addEventListener("click", () => { state.conversationId = ""; $("conversation").replaceChildren(); clearRun(); });
  loadWords().then(loadApps).catch((e) => setStatus(e.message, "error"));
});
