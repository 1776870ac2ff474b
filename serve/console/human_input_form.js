// The run console's human-input form: shows the form a paused run waits on
// (a `human_input_required` event) and submits the answer to
// `POST /v1/form/human_input/{token}` with the console's app key and user.
//
// window.firstgateHumanInput.render(event, container, submitUrl): `submitUrl`
// is empty for a form that goes only by email (shown, not answerable here).
// Everything a server or a workflow wrote is set as text, never as HTML.
// After an accepted submit the container sends `firstgate:form-submitted`
// (detail: the run id and the action), so the page can follow the resumed run.
"use strict";

(function () {
  let words = null;

  async function loadWords() {
    if (words) return words;
    try {
      words = await (await fetch("/console/strings")).json();
    } catch (e) {
      words = {};
    }
    return words;
  }

  function say(key, params, fallback) {
    let text = (words && words[key]) || fallback || key;
    for (const [name, value] of Object.entries(params || {})) {
      text = text.split("{{" + name + "}}").join(String(value));
    }
    return text;
  }

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function field(id) {
    const node = document.getElementById(id);
    return node && typeof node.value === "string" ? node.value.trim() : "";
  }

  // The form's content with each input's place shown as its name in brackets.
  function contentText(content) {
    return String(content || "").replace(/\{\{#\$output\.([A-Za-z_][A-Za-z0-9_]*)#\}\}/g, "[$1]");
  }

  function inputControl(input, defaults) {
    const name = input.output_variable_name;
    const wrap = el("label", "hi-input");
    wrap.dataset.input = name;
    wrap.append(el("span", "hi-name", name));
    let control;
    if (input.type === "select") {
      control = el("select");
      control.append(el("option", "", ""));
      const options = (input.option_source && input.option_source.value) || [];
      for (const option of options) {
        const item = el("option", "", String(option));
        item.value = String(option);
        control.append(item);
      }
    } else if (input.type === "file" || input.type === "file-list") {
      control = el("input");
      control.type = "file";
      control.multiple = input.type === "file-list";
    } else {
      control = el("textarea");
      control.rows = 4;
      control.value = (defaults && defaults[name]) || "";
    }
    control.name = name;
    wrap.append(control);
    return wrap;
  }

  async function upload(file, key, user) {
    const body = new FormData();
    body.append("file", file);
    body.append("user", user);
    const response = await fetch("/v1/files/upload", {
      method: "POST",
      headers: { Authorization: "Bearer " + key },
      body,
    });
    const reply = await response.json();
    if (!response.ok) throw new Error(reply.message || String(response.status));
    return { transfer_method: "local_file", upload_file_id: reply.id, type: fileType(file) };
  }

  function fileType(file) {
    const kind = (file.type || "").split("/")[0];
    if (kind === "image" || kind === "audio" || kind === "video") return kind;
    return "document";
  }

  async function collect(form, inputs, key, user) {
    const values = {};
    for (const input of inputs) {
      const control = form.elements.namedItem(input.output_variable_name);
      if (!control) continue;
      if (input.type === "file" || input.type === "file-list") {
        const picked = Array.from(control.files || []);
        if (!picked.length) continue;
        const mapped = [];
        for (const file of picked) mapped.push(await upload(file, key, user));
        values[input.output_variable_name] = input.type === "file" ? mapped[0] : mapped;
      } else if (control.value !== "") {
        values[input.output_variable_name] = control.value;
      }
    }
    return values;
  }

  async function render(event, container, submitUrl) {
    if (!container) return;
    await loadWords();
    const data = (event && event.data) || {};
    const runId = (event && event.workflow_run_id) || data.workflow_run_id || "";
    const box = el("form", "hi-form");
    box.dataset.formId = data.form_id || "";
    box.append(el("h3", "hi-title", data.node_title || data.node_id || ""));
    box.append(el("pre", "hi-content", contentText(data.form_content)));
    const inputs = Array.isArray(data.inputs) ? data.inputs : [];
    for (const input of inputs) box.append(inputControl(input, data.resolved_default_values));
    if (data.expiration_time) {
      const when = new Date(Number(data.expiration_time) * 1000).toLocaleString();
      box.append(el("p", "hi-expires", say("console.form.expires", { time: when })));
    }
    const status = el("p", "hi-status");
    const actions = el("div", "hi-actions");
    for (const action of Array.isArray(data.actions) ? data.actions : []) {
      const button = el("button", "hi-action hi-" + (action.button_style || "default"), action.title);
      button.type = "submit";
      button.value = action.id;
      button.dataset.action = action.id;
      button.disabled = !submitUrl;
      actions.append(button);
    }
    box.append(actions, status);
    box.addEventListener("submit", async (e) => {
      e.preventDefault();
      const chosen = e.submitter && e.submitter.dataset.action;
      if (!chosen || !submitUrl) return;
      const buttons = Array.from(actions.querySelectorAll("button"));
      buttons.forEach((b) => { b.disabled = true; });
      const key = field("key");
      const user = field("user") || "console";
      try {
        const inputsGiven = await collect(box, inputs, key, user);
        const response = await fetch(submitUrl, {
          method: "POST",
          headers: { Authorization: "Bearer " + key, "Content-Type": "application/json" },
          body: JSON.stringify({ inputs: inputsGiven, action: chosen, user }),
        });
        const reply = await response.json();
        if (!response.ok) throw new Error(reply.message || String(response.status));
        const title = e.submitter.textContent;
        status.textContent = say("console.form.sent", { action: title });
        status.dataset.state = "sent";
        container.dispatchEvent(new CustomEvent("firstgate:form-submitted", {
          bubbles: true, detail: { workflowRunId: runId, action: chosen },
        }));
      } catch (err) {
        status.textContent = say("console.form.failed", { error: err.message });
        status.dataset.state = "failed";
        buttons.forEach((b) => { b.disabled = false; });
      }
    });
    container.replaceChildren(box);
  }

  window.firstgateHumanInput = { render };
})();
