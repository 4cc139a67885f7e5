// lemongraph UI: what a message shows beyond plain text (docs/operations.md, "The UI").
// A Markdown table in a reply is an HTML table; a list of records (objects with the same
// keys, as JSON) is a table; a file value ({id, name, mediaType, url, bytes}: docs/flows.md,
// "File channels") is its image, or a link that downloads it. Never raw JSON, and every
// cell is text (textContent): nothing a reply holds becomes markup.
// A flow's question that expects a file gets a file picker: the file is uploaded
// (POST /v1/files) and its value is the answer.
"use strict";

const FILE_KEYS = ["id", "name", "mediaType", "url", "bytes"];

function isFileValue(v) {
  return Boolean(v) && typeof v === "object" && !Array.isArray(v) &&
    FILE_KEYS.every((k) => k in v) && /^\/v1\/files\/[0-9a-f]{64}$/.test(String(v.url));
}

// Records with the same keys (at least one record, at least one key), or null.
function recordColumns(v) {
  if (!Array.isArray(v) || !v.length) return null;
  const isRecord = (x) => x && typeof x === "object" && !Array.isArray(x);
  if (!v.every(isRecord)) return null;
  const keys = Object.keys(v[0]);
  const same = (x) => Object.keys(x).length === keys.length && keys.every((k) => k in x);
  return keys.length && v.every(same) ? keys : null;
}

function cellText(x) {
  if (x === null || x === undefined) return "";
  if (typeof x === "object") return typeof valueText === "function" ? valueText(x) : String(x);
  return String(x);
}

function dataTable(head, rows) {
  const el = document.createElement("table");
  el.className = "data-table";
  const thead = el.createTHead().insertRow();
  for (const name of head) {
    const th = document.createElement("th");
    th.textContent = name;
    thead.append(th);
  }
  const body = el.createTBody();
  for (const row of rows) {
    const tr = body.insertRow();
    for (const cell of row) tr.insertCell().textContent = cell;
  }
  return el;
}

// A Markdown table's row: its cells, without the outer pipes ("\|" is a pipe in a cell).
function markdownCells(line) {
  const inner = line.trim().replace(/^\|/, "").replace(/\|$/, "");
  return inner.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, "|"));
}

const TABLE_RULE = /^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$/;

// The text's blocks: runs of plain lines, and Markdown tables (a header row, a rule row,
// body rows), each as a node.
function markdownBlocks(text) {
  const lines = String(text).split("\n");
  const out = [];
  let plain = [];
  const flush = () => {
    if (plain.length) out.push(document.createTextNode(plain.join("\n")));
    plain = [];
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (line.includes("|") && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1])) {
      const head = markdownCells(line);
      let j = i + 2;
      const rows = [];
      while (j < lines.length && lines[j].includes("|") && lines[j].trim()) {
        const cells = markdownCells(lines[j]);
        rows.push(head.map((_, c) => cells[c] === undefined ? "" : cells[c]));
        j++;
      }
      flush();
      out.push(dataTable(head, rows));
      i = j - 1;
    } else {
      plain.push(line);
    }
  }
  flush();
  return out;
}

// A stored file shown in place: the API wants the token in a header, so the image is
// fetched and shown from a blob: address (the page's policy allows blob: images).
function fileView(v) {
  const label = `${v.name} (${v.mediaType}, ${v.bytes} bytes)`;
  const box = document.createElement("figure");
  box.className = "file-value";
  box.dataset.fileId = v.id;
  const caption = document.createElement("figcaption");
  caption.textContent = label;
  if (String(v.mediaType).startsWith("image/") && state.token) {
    const img = document.createElement("img");
    img.alt = v.name;
    img.className = "file-image";
    fetch(v.url, { headers: { Authorization: "Bearer " + state.token } })
      .then((r) => (r.ok ? r.blob() : Promise.reject(new Error(String(r.status)))))
      .then((blob) => { img.src = URL.createObjectURL(blob); })
      .catch(() => { caption.textContent = label + " — could not be loaded"; });
    box.append(img);
  }
  box.append(caption);
  return box;
}

// What a message's text shows: a file value, a table of records, or text with its
// Markdown tables as tables.
function richText(text) {
  const raw = String(text === null || text === undefined ? "" : text);
  const trimmed = raw.trim();
  if (trimmed.startsWith("{") || trimmed.startsWith("[")) {
    let value;
    try { value = JSON.parse(trimmed); } catch (_) { value = undefined; }
    if (isFileValue(value)) return [fileView(value)];
    const keys = recordColumns(value);
    if (keys) return [dataTable(keys, value.map((r) => keys.map((k) => cellText(r[k]))))];
  }
  return markdownBlocks(raw);
}

// Upload a file (POST /v1/files, multipart) and return its file value; a refusal throws
// like api() does.
async function uploadFile(file) {
  if (!state.token) throw new Error("paste an API token first (lemongraph token, or the dev token)");
  const form = new FormData();
  form.append("file", file, file.name);
  const response = await fetch("/v1/files", { method: "POST", body: form,
    headers: { Authorization: "Bearer " + state.token } });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const err = body.error || {};
    const error = new Error(`${response.status} ${err.code || ""}: ${err.message || response.statusText}`);
    error.status = response.status;
    throw error;
  }
  return body;
}

// The answer box of a question that expects a file: a picker (its `accept`), uploaded
// on submit, then answered with the file value.
function filePicker(rec, controls, status, send) {
  const input = document.createElement("input");
  input.type = "file";
  input.className = "q-file";
  input.setAttribute("aria-label", "your file");
  if (rec.accept) input.accept = rec.accept;
  const submit = document.createElement("button");
  submit.type = "submit";
  submit.textContent = "Send file";
  controls.push(input, submit);
  const form = document.createElement("form");
  form.className = "q-answers";
  form.append(input, " ", submit);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const file = input.files && input.files[0];
    if (!file) return;
    status.textContent = "uploading…";
    try {
      send(await uploadFile(file));
    } catch (e) {
      status.textContent = e.message;
    }
  });
  return form;
}
