// The run console: picks an app, builds its input form from /v1/parameters,
// runs it through the Service API (streaming) and shows the answer and a
// timeline of its nodes. Plain JavaScript, no build step, nothing fetched from
// outside this server.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { apps: [], app: null, params: null, loaded: null, taskId: null, conversationId: "", controller: null };

// The console's words, in the browser's language (from /console/strings).
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

function keyFor(stem) { return sessionStorage.getItem("key:" + stem) || ""; }

async function api(path, options = {}) {
  const headers = Object.assign({ Authorization: "Bearer " + $("key").value.trim() }, options.headers || {});
  const response = await fetch(path, Object.assign({}, options, { headers }));
  if (!response.ok && !options.stream) {
    let body = {};
    try { body = await response.json(); } catch (e) { body = { message: response.statusText }; }
    throw new Error(body.message || response.statusText);
  }
  return response;
}

function setStatus(text, error) {
  $("status").textContent = text;
  $("status").className = error ? "error" : "";
}

async function loadApps() {
  const response = await fetch("/console/apps");
  state.apps = (await response.json()).data;
  const select = $("app");
  select.replaceChildren(...state.apps.map((app) => {
    const option = document.createElement("option");
    option.value = app.stem;
    option.textContent = app.name + " (" + app.stem + ")";
    return option;
  }));
  await chooseApp();
}

async function chooseApp() {
  state.app = state.apps.find((a) => a.stem === $("app").value) || null;
  state.conversationId = "";
  $("conversation").replaceChildren();
  $("key").value = state.app ? keyFor(state.app.stem) : "";
  $("mode").textContent = state.app ? state.app.mode : "";
  $("chat").hidden = !(state.app && state.app.mode === "advanced-chat");
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
  } catch (e) { setStatus(e.message, true); return; }
  setStatus("");
  for (const entry of state.params.user_input_form) {
    const [kind, spec] = Object.entries(entry)[0];
    $("inputs").append(field(kind, spec));
  }
}

function field(kind, spec) {
  const label = document.createElement("label");
  const caption = document.createElement("span");
  caption.textContent = (spec.label || spec.variable) + (spec.required ? " *" : "");
  label.append(caption);
  let input;
  if (kind === "paragraph") {
    input = document.createElement("textarea");
    input.rows = 3;
  } else if (kind === "select") {
    input = document.createElement("select");
    for (const value of spec.options || []) {
      const option = document.createElement("option");
      option.value = option.textContent = value;
      input.append(option);
    }
  } else {
    input = document.createElement("input");
    input.type = { number: "number", checkbox: "checkbox", file: "file", "file-list": "file" }[kind] || "text";
    if (kind === "file-list") input.multiple = true;
  }
  input.name = spec.variable;
  input.dataset.kind = kind;
  if (spec.default !== undefined && spec.default !== null && input.type !== "file") input.value = spec.default;
  label.append(input);
  return label;
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

// ---- the timeline

function row(data) {
  const body = $("timeline").tBodies[0];
  let tr = body.querySelector(`tr[data-id="${CSS.escape(data.id)}"]`);
  if (!tr) {
    tr = document.createElement("tr");
    tr.dataset.id = data.id;
    for (let i = 0; i < 6; i++) tr.append(document.createElement("td"));
    tr.cells[0].textContent = data.index || body.rows.length + 1;
    tr.cells[1].textContent = data.title || data.node_id;
    tr.cells[2].textContent = data.node_type || "";
    tr.cells[4].className = "events";
    body.append(tr);
  }
  return tr;
}

function note(tr, text) {
  const line = document.createElement("div");
  line.textContent = text;
  tr.cells[4].append(line);
}

function setRowStatus(tr, status) {
  tr.cells[3].textContent = status;
  tr.cells[3].className = "status-" + status;
}

function onEvent(event) {
  const data = event.data || {};
  if (event.task_id) { state.taskId = event.task_id; $("stop").disabled = false; }
  switch (event.event) {
    case "workflow_started": setStatus(say("console.running")); break;
    case "node_started": setRowStatus(row(data), "running"); break;
    case "node_first_token": note(row(data), say("console.firstToken", { seconds: data.ttft.toFixed(2) })); break;
    case "node_waiting": note(row(data), say("console.waiting", { message: data.message })); break;
    case "node_retry": note(row(data), say("console.retry", { attempt: data.retry_index, error: data.error || "" })); break;
    case "node_fallback": note(row(data), say("console.fallback", { kind: data.kind, message: data.message })); break;
    case "node_finished": {
      const tr = row(data);
      setRowStatus(tr, data.status);
      if (data.error) note(tr, data.error);
      tr.cells[5].textContent = (data.elapsed_time || 0).toFixed(2) + " s";
      break;
    }
    case "text_chunk": $("answer").textContent += data.text; break;
    case "message": $("answer").textContent += event.answer; break;
    case "message_end": state.conversationId = event.conversation_id || state.conversationId; break;
    case "workflow_finished": setStatus(data.status + (data.error ? ": " + data.error : ""), data.status === "failed"); break;
    case "error": setStatus(event.message, true); break;
  }
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
      const data = frame.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("\n");
      if (data) onEvent(JSON.parse(data));
    }
  }
}

// ---- run and stop

function addTurn(role, text) {
  const div = document.createElement("div");
  div.className = "turn " + role;
  div.textContent = text;
  $("conversation").append(div);
  return div;
}

async function run() {
  if (!state.app) return;
  $("run").disabled = true;
  $("answer").textContent = "";
  $("timeline").tBodies[0].replaceChildren();
  state.taskId = null;
  const chat = state.app.mode === "advanced-chat";
  try {
    const body = { inputs: await collectInputs(), response_mode: "streaming", user: $("user").value };
    let path = "/v1/workflows/run";
    if (chat) {
      body.query = $("query").value;
      body.conversation_id = state.conversationId;
      path = "/v1/chat-messages";
      addTurn("user", body.query);
      $("query").value = "";
    }
    const response = await api(path, { method: "POST", body: JSON.stringify(body), headers: { "Content-Type": "application/json" }, stream: true });
    if (!response.ok) throw new Error((await response.json()).message);
    await readEvents(response);
    if (chat) addTurn("assistant", $("answer").textContent);
  } catch (e) {
    setStatus(e.message, true);
  } finally {
    $("run").disabled = false;
    $("stop").disabled = true;
  }
}

async function stop() {
  if (!state.taskId) return;
  const chat = state.app.mode === "advanced-chat";
  const path = chat ? `/v1/chat-messages/${state.taskId}/stop` : `/v1/workflows/tasks/${state.taskId}/stop`;
  await api(path, { method: "POST", body: JSON.stringify({ user: $("user").value }), headers: { "Content-Type": "application/json" } });
}

window.addEventListener("DOMContentLoaded", () => {
  $("app").addEventListener("change", chooseApp);
  $("key").addEventListener("change", loadParameters);
  $("run").addEventListener("click", run);
  $("stop").addEventListener("click", stop);
  $("new-conversation").addEventListener("click", () => { state.conversationId = ""; $("conversation").replaceChildren(); });
  loadWords().then(loadApps).catch((e) => setStatus(e.message, true));
});
