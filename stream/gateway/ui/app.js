// lemongraph UI: a job list and a live job view over the gateway's API.
// No libraries and no network beyond this origin: it works offline.
// The token comes in the address's fragment (#token=..., as `lemongraph dev` prints it:
// a browser never sends a fragment to the server) or is pasted; the tab keeps it
// (sessionStorage), and the fragment is taken out of the address at once.
// What the page does (start a job, send an event, a schedule's controls) is in
// actions.js, through the same API and token (docs/operations.md, "The UI"); the
// milestone graph is in graph.js, the Schedules pages in schedules.js, the open questions in questions.js, rich
// text in rich.js.
"use strict";

const TOKEN_KEY = "lemongraph.token";
// `view` counts page changes: work begun for an earlier page (a fetch still on its
// way when the user moved on) sees that it is stale and stops.
const state = { token: "", filter: "", cursor: null, source: null, job: null,
  scheduleCursor: null, runsCursor: null, runsPaged: false, scheduleZone: "UTC",
  decisions: [], journal: [], messages: [], questions: new Map(), listTimer: null, view: 0 };

// -- small helpers ---------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v; else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const SVG = "http://www.w3.org/2000/svg";
function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c !== null && c !== undefined) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// An instant (the API's ISO-8601, maybe with microseconds) as a <time>: local time to
// the second, the UTC instant (ISO, no fraction, Z) as its datetime and on hover.
function utcInstant(iso) {
  const ms = Date.parse(String(iso).replace(/(\.\d{3})\d+/, "$1"));
  return Number.isNaN(ms) ? null : new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z");
}

function when(iso) {
  if (!iso) return "";
  const utc = utcInstant(iso);
  if (!utc) return String(iso);
  return h("time", { datetime: utc, title: utc }, new Date(utc).toLocaleString());
}

// Replace an element's children (nested lists flattened, nulls skipped), as text.
function fill(el, ...children) {
  el.replaceChildren(...h("span", {}, ...children).childNodes);
}

function notice(text) { document.getElementById("notice").textContent = text || ""; }

// A call of the API with the token: a GET, or with `payload` a POST (or `method`).
// A refusal throws an Error that carries the API's {"error": {code, message, ...}}:
// `status`, `code`, `text` (the API's message) and `field` when it names one.
async function api(path, payload, method) {
  if (!state.token) throw new Error("paste an API token first (lemongraph token, or the dev token)");
  const options = { headers: { Authorization: "Bearer " + state.token } };
  if (payload !== undefined) {
    options.method = method || "POST";
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(payload);
  }
  const response = await fetch(path, options);
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const err = body.error || {};
    const error = new Error(`${response.status} ${err.code || ""}: ${err.message || response.statusText}`);
    error.status = response.status;
    error.code = err.code || "";
    error.text = typeof err.message === "string" ? err.message : response.statusText;
    error.field = typeof err.field === "string" ? err.field : "";
    throw error;
  }
  return body;
}

function countdown(deadline) {
  if (!deadline) return "";
  let left = Math.round((Date.parse(deadline) - Date.now()) / 1000);
  const late = left < 0;
  left = Math.abs(left);
  const d = Math.floor(left / 86400), hr = Math.floor(left % 86400 / 3600);
  const m = Math.floor(left % 3600 / 60), sec = left % 60;
  const text = (d ? d + "d " : "") + (d || hr ? hr + "h " : "") + (d || hr || m ? m + "m " : "") + sec + "s";
  return late ? text + " ago" : "in " + text;
}

function tickCountdowns() {
  for (const el of document.querySelectorAll(".countdown[data-deadline]")) {
    const text = countdown(el.dataset.deadline);
    el.textContent = text;
    el.classList.toggle("late", text.endsWith("ago"));
  }
}

// -- token -----------------------------------------------------------------------------

// The tab keeps the token (sessionStorage: gone with the tab, never shared with
// another); an earlier page kept it in localStorage, which is cleared here.
function loadToken() {
  localStorage.removeItem(TOKEN_KEY);
  const fromHash = new URLSearchParams(location.hash.slice(1)).get("token");
  if (fromHash) sessionStorage.setItem(TOKEN_KEY, fromHash);
  // The fragment out of the address bar (and its history entry) at once; /ui/ is the job list.
  const path = location.pathname.replace(/^\/ui\/?$/, "/");
  if (fromHash || location.hash || path !== location.pathname) {
    history.replaceState(null, "", path + location.search);
  }
  state.token = sessionStorage.getItem(TOKEN_KEY) || "";
  document.getElementById("token-input").placeholder = state.token
    ? "token saved (paste another to replace it)" : "paste an API token (lemongraph_sk_…)";
}

// -- subject and contacts --------------------------------------------------------------

function subjectText(subject) {
  return Object.entries(subject || {}).map(([k, v]) =>
    `${k}: ${typeof v === "string" ? v : JSON.stringify(v)}`).join(" · ");
}

function contactLabel(c) {
  if (c && typeof c === "object") {
    const name = c.name || c.id || "", email = c.email || "";
    return name && email ? `${name} <${email}>` : name || email || JSON.stringify(c);
  }
  return c === null || c === undefined ? "" : String(c);
}

// -- job list --------------------------------------------------------------------------

// A job's status as a person reads it: an override is said in words, never
// shown as "done" (docs/playbooks.md, "Ending with an override").
function statusLabel(status) {
  return status === "completed_with_override" ? "completed with override" : status;
}

async function renderList(append) {
  const view = state.view;
  const params = new URLSearchParams({ limit: "100" });
  if (state.filter) params.set("status", state.filter);
  if (append && state.cursor) params.set("cursor", state.cursor);
  let page;
  try { page = await api("/v1/jobs?" + params); } catch (e) { if (view === state.view) notice(e.message); return; }
  if (view !== state.view) return;
  notice("");
  const body = document.querySelector("#jobs tbody");
  if (!append) body.replaceChildren();
  for (const job of page.jobs) {
    const states = Object.values(job.milestones);
    const done = states.filter((x) => x === "done").length;
    const href = "/jobs/" + encodeURIComponent(job.key);
    // The row navigates through the page's one click handler (data-href), as its link does.
    const row = h("tr", { class: "job-row", "data-job": job.key, "data-status": job.status, "data-href": href },
      h("td", {}, h("a", { href, "data-nav": "job" }, job.key)),
      h("td", { class: "subject" }, subjectText(job.subject)),
      h("td", {}, h("span", { class: "badge status-" + job.status }, statusLabel(job.status))),
      h("td", {}, job.playbook_key + (job.playbook_version ? " v" + job.playbook_version : "")),
      h("td", {}, job.next_step || ""),
      h("td", {}, states.length ? `${done}/${states.length} done` : ""),
      h("td", { class: "muted" }, when(job.updated_at)));
    body.append(row);
  }
  state.cursor = page.next;
  document.getElementById("more").hidden = !page.next;
  document.getElementById("list-count").textContent = `${page.total} job(s)`;
}

// -- job view --------------------------------------------------------------------------

// An open milestone whose task `due` still holds back: its window is open, but no
// task went to the agents yet (its `due` timer is pending).
function heldBack(job, m) {
  if (m.state !== "open") return false;
  if ((job.timers || []).some((t) => t.kind === "due" && t.milestone === m.id)) return true;
  return Boolean(m.task_at) && Date.parse(utcInstant(m.task_at) || "") > Date.now();
}

// Where a verdict stands: an open milestone's window is open or closed; a settled
// one's verdict is the one that settled it, whatever its window was then.
function verdictWhen(m, exp) {
  if (m.state !== "open") return [" (settled ", m.state, m.settled_at ? [" at ", when(m.settled_at)] : null, ")"];
  return exp.closed ? " (window closed)" : " (window open)";
}

function evidenceItem(e, i) {
  return h("span", { class: "src-" + e.source }, i ? ", " : "",
    `${e.action}${e.value !== null && e.value !== undefined ? "=" + JSON.stringify(e.value) : ""}`,
    ` [${e.source}, ${e.id}`, e.at ? [", ", when(e.at)] : null, "]",
    e.source === "agent" ? " — claim, not evidence" : null);
}

function renderMilestones(job) {
  const box = document.getElementById("milestones");
  box.replaceChildren(...job.milestones.map((m) => {
    const exp = m.explanation;
    const held = heldBack(job, m);
    return h("div", { class: "milestone state-" + m.state, "data-milestone": m.id, "data-state": m.state },
      h("div", { class: "head" },
        h("strong", {}, m.id),
        h("span", { class: "chip state-" + m.state }, m.state),
        m.next_best ? h("span", { class: "chip next" }, "★ next best step") : null,
        m.condition ? h("code", {}, m.condition) : null,
        m.state === "open" && m.deadline
          ? h("span", {}, "deadline ", h("span", { class: "countdown", "data-deadline": m.deadline }, countdown(m.deadline)))
          : null,
        held
          ? h("span", { class: "chip held", "data-held": "due" }, "task held back (due) until ", when(m.task_at))
          : null,
        m.outcome ? h("span", { class: "muted" }, "outcome: " + m.outcome) : null),
      m.instructions ? h("div", { class: "muted" }, m.instructions) : null,
      exp ? h("div", { class: "verdict" }, "verdict ", h("strong", { class: "v-" + exp.verdict }, exp.verdict),
        verdictWhen(m, exp),
        h("ul", { class: "atoms" }, (exp.atoms || []).map((a) =>
          h("li", {}, h("code", {}, a.atom), " → ", h("span", { class: "v-" + a.verdict }, a.verdict),
            ` (${a.count} match${a.count === 1 ? "" : "es"})`)))) : null,
      m.evidence.length ? h("div", {}, "evidence: ", m.evidence.map(evidenceItem)) : null);
  }));
}

function describeInput(input) {
  if (!input) return "";
  if (input.type === "event") {
    const claim = input.source === "agent" ? " — claim, not evidence" : "";
    return `event ${input.action}${input.value !== null && input.value !== undefined ? "=" + JSON.stringify(input.value) : ""} [${input.source || "world"}]${claim}`;
  }
  return input.type === "job.start" ? "job.start " + (input.playbook_key || "") : input.type;
}

// An agent's event is applied (recorded) but moves nothing: it is a claim, not evidence.
function decisionOutcome(d) {
  const claim = d.input && d.input.type === "event" && d.input.source === "agent" && d.outcome === "applied";
  return d.outcome + (d.refused ? ": " + d.refused : "") + (claim ? " (claim, not evidence)" : "");
}

// What a decision moved: "milestone: from→to" each.
function movesText(d) {
  return (d.transitions || []).map((t) => `${t.milestone}: ${t.from || t.before || "?"}→${t.to || t.after || "?"}`).join(", ");
}

// The event a decision remembered (its fact.remembered effect's event_id), which a
// profile's fact links to as /jobs/<job>?event=<id> (docs/memory.md, "Reading it").
function rememberedId(d) {
  const fact = (d.effects || []).find((e) => e.type === "fact.remembered");
  return fact ? fact.event_id : null;
}

function decisionRow(d) {
  const remembered = rememberedId(d);
  const focused = remembered !== null && remembered === new URLSearchParams(location.search).get("event");
  return h("tr", { "data-seq": d.seq, "data-event": remembered, class: focused ? "focused" : null },
    h("td", {}, d.seq ?? ""), h("td", { class: "muted" }, when(d.now)),
    h("td", {}, describeInput(d.input)),
    h("td", { class: "outcome-" + d.outcome }, decisionOutcome(d)),
    h("td", {}, movesText(d)), h("td", {}, d.status || ""));
}

function renderDecisions() {
  document.querySelector("#decisions tbody").replaceChildren(...state.decisions.map(decisionRow).reverse());
}

function tokens(t) {
  if (!t) return "tokens not reported";
  return `tokens ${t.input} in / ${t.output} out` + (t.cached ? ` (${t.cached} cached)` : "") + ` = ${t.total}`;
}

// A value of a flow (its outputs, an approval's `show`, an answer) as words on one
// line: an object as "key: value, …" (a nested one in parentheses), a list as "a, b";
// never JSON.
function valueText(v, depth = 0) {
  if (v === null || v === undefined) return depth ? "none" : "";
  if (typeof v === "boolean") return v ? "yes" : "no";
  if (typeof v !== "object") return String(v);
  const items = Array.isArray(v) ? v.map((x) => valueText(x, depth + 1))
    : Object.entries(v).map(([k, x]) => `${k}: ${valueText(x, depth + 1)}`);
  if (!items.length) return "none";
  return depth ? `(${items.join(", ")})` : items.join(", ");
}

// What an approval shows, for a person: the service writes it readable and labelled
// (`shown`: docs/flows.md, "What a person reads"); a record without it (written before)
// gets its `show` values as lines here, never JSON.
function shownFields(rec) {
  if (rec.shown && rec.shown.length) return rec.shown.map((f) => [f.label, f.text]);
  return Object.entries(rec.show || {}).map(([k, v]) => [k, readableLines(v, 0).join("\n")]);
}

function readableLines(v, depth) {
  if (v === null || v === undefined) return ["none"];
  if (typeof v === "boolean") return [v ? "yes" : "no"];
  if (typeof v !== "object") return [String(v).replace(/\s+/g, " ").trim()];
  const list = Array.isArray(v);
  const items = list ? v.map((x) => [null, x]) : Object.entries(v);
  if (!items.length) return ["none"];
  if (depth > 3) return ["…"];
  const lines = [];
  for (const [k, x] of items.slice(0, 20)) {
    const inner = readableLines(x, depth + 1);
    const nested = x !== null && typeof x === "object" && inner[0] !== "none";
    if (list) lines.push("- " + inner[0], ...inner.slice(1).map((l) => "  " + l));
    else if (nested) lines.push(k + ":", ...inner.map((l) => "  " + l));
    else lines.push(`${k}: ${inner[0]}`);
  }
  if (items.length > 20) lines.push(`… and ${items.length - 20} more`);
  return lines;
}

function entriesText(obj) {
  return Object.entries(obj || {}).map(([k, v]) => `${k}: ${valueText(v)}`).join("; ");
}

// Where a flow's record belongs: "flow NAME · node ID" (either part when known).
function flowLabel(r) {
  return [r.flow ? "flow " + r.flow : null, r.node ? "node " + r.node : null].filter(Boolean).join(" · ");
}

// Who answered (or tried to) a flow's question: a token's source and name, or a
// contact on their channel (docs/api.md, "Approvals").
function answererText(by) {
  if (by.contact) return `${by.contact} (${by.channel || "channel"})`;
  return `${by.source} token ${by.name || "(unnamed)"}` + (by.approver ? ", approver" : "");
}

function journalRow(r) {
  let what, outcome, detail;
  const label = flowLabel(r);
  if (r.type === "journal.flow") {
    what = "flow " + r.flow + (r.node ? " · node " + r.node : "");
    outcome = r.event;
    detail = [`run ${r.run_id}`, r.task_id ? "task " + r.task_id : null,
      r.outputs ? "outputs " + entriesText(r.outputs) : null,
      r.error ? "error: " + r.error : null].filter(Boolean).join(" · ");
  } else if (r.type === "journal.interrupt") {
    what = (r.kind === "approval" ? "approval" : "question") + " · " + label;
    outcome = r.status;
    detail = [r.question || null, r.answers && r.answers.length ? "answers: " + r.answers.join(", ") : null,
      r.show && Object.keys(r.show).length ? "shows " + entriesText(r.show) : null,
      r.status === "answered" ? "answer: " + valueText(r.answer) : null,
      r.by ? (r.status === "refused" ? "refused from " : "by ") + answererText(r.by) : null,
      r.approvers && r.approvers.length ? "approvers: " + r.approvers.join(", ") : null,
      r.expires_at ? "expires " + r.expires_at : null, `run ${r.run_id}`, `id ${r.interrupt_id}`]
      .filter(Boolean).join(" · ");
  } else if (r.type === "journal.handler_call") {
    what = `${r.kind} ${r.name} · ${label}`;
    outcome = r.outcome;
    detail = `${r.latency_ms} ms · ${r.result}`;
  } else if (r.type === "journal.model_call") {
    what = "model call";
    outcome = r.outcome;
    detail = `${tokens(r.tokens)} · ${r.latency_ms} ms · ${r.response}`;
    if (label) what += " · " + label;
  } else if (r.type === "journal.tool_call") {
    what = "tool " + r.tool + (label ? " · " + label : "");
    outcome = r.outcome;
    // An MCP tool's address is `mcp:<server>/<tool>`, then where the server is.
    const mcp = (r.url || "").startsWith("mcp:") ? r.url.split(" ")[0] : null;
    detail = [r.http_status ? "HTTP " + r.http_status : null, mcp,
      r.exit_code != null ? "exit " + r.exit_code : null, r.fact ? "recorded " + r.fact : null,
      `${r.latency_ms} ms`, r.result].filter(Boolean).join(" · ");
  } else if (r.type === "journal.mail") {
    what = "email " + r.direction;
    outcome = r.outcome;
    detail = [r.address, r.detail].filter(Boolean).join(" · ");
  } else if (r.type === "journal.worktree") {
    // A coding job's worktree while it waits at a checkpoint (docs/coding.md,
    // "A changed worktree: the 409"): while it is changed, answers are refused.
    what = "worktree";
    outcome = r.status;
    detail = [r.why || null, r.found ? "now diff " + String(r.found.diff_sha256).slice(0, 12) : null,
      `run ${r.run_id}`].filter(Boolean).join(" · ");
  } else {
    what = "run ended";
    outcome = r.ended;
    detail = `${r.turns} turn(s), ${r.tool_calls} tool call(s), ${r.tokens} tokens` +
      (r.replayed ? `, ${r.replayed} step(s) replayed` : "");
  }
  return h("tr", { class: "journal-row", "data-kind": r.type, "data-outcome": outcome,
    "data-flow": r.flow || null, "data-node": r.node || null },
    h("td", { class: "muted" }, when(r.at)), h("td", {}, r.agent || (r.flow ? "flow " + r.flow : "")),
    h("td", {}, what),
    h("td", {}, h("span", { class: "outcome-" + outcome }, outcome)), h("td", { class: "detail" }, detail));
}

// A flow's question (out) and the answer to it (in) carry the interrupt's id.
function messageItem(m) {
  const who = m.direction === "out" ? (m.agent || "agent") : (m.contact || "person");
  const asked = Boolean(m.interrupt_id);
  const mark = asked ? h("span", { class: "chip question" }, m.direction === "out" ? "question" : "answer") : null;
  return h("li", { class: "msg " + m.direction + (asked ? " question" : ""), "data-direction": m.direction,
    "data-message-id": m.message_id, "data-interrupt-id": m.interrupt_id || null },
    h("div", { class: "who" }, mark, mark ? " " : null, who,
      h("span", { class: "muted" }, ` · ${m.channel} · `, when(m.at))),
    h("div", { class: "text" }, richText(m.text)));  // tables and files: rich.js
}

function renderConversation() {
  const list = document.getElementById("conversation");
  list.replaceChildren(...state.messages.map(messageItem));
  if (!state.messages.length) list.append(h("li", { class: "muted" }, "No messages yet."));
}

function contactName(c) {
  if (c && typeof c === "object") return c.email || c.name || c.id || "";
  return c === null || c === undefined ? "" : String(c);
}

function newMessageId() {
  const random = (window.crypto && crypto.randomUUID) ? crypto.randomUUID()
    : Date.now().toString(36) + Math.random().toString(36).slice(2);
  return "web-" + random.replace(/[^A-Za-z0-9-]/g, "");
}

async function sendReply(ev) {
  ev.preventDefault();
  const box = document.getElementById("reply-text");
  const text = box.value;
  if (!text.trim() || !state.job) return;
  const contact = document.getElementById("reply-contact").value.trim() || null;
  const body = { text, message_id: newMessageId() };
  if (contact) body.contact = contact;
  try {
    await api("/v1/jobs/" + encodeURIComponent(state.job.key) + "/messages", body);
    box.value = "";
    notice("");
  } catch (e) { notice(e.message); }
}

async function renderDevMail(key, view) {
  const section = document.getElementById("dev-mail");
  let caught;
  try { caught = await api("/v1/dev/mail"); } catch (e) { if (view === state.view) section.hidden = true; return; }
  if (view !== state.view) return;
  const mine = caught.mails.filter((m) => m.job_key === key);
  section.hidden = false;
  document.getElementById("dev-mail-list").replaceChildren(...(mine.length ? mine.map((m) =>
    h("li", { class: "mail", "data-message-id": m.message_id },
      h("div", { class: "who" }, `to ${m.to.join(", ")} · `, when(m.at)),
      h("div", { class: "muted" }, `Subject: ${m.subject} · Reply-To: ${m.reply_to}`),
      h("div", { class: "text" }, m.text))) : [h("li", { class: "muted" }, "No mail for this job yet.")]));
}

function renderJournal() {
  document.querySelector("#journal tbody").replaceChildren(...state.journal.map(journalRow).reverse());
}

function renderJob(job) {
  state.job = job;
  document.getElementById("job-title").textContent = job.key;
  const badge = document.getElementById("job-status");
  badge.textContent = statusLabel(job.status);
  badge.className = "badge status-" + job.status;
  const next = job.milestones.find((m) => m.id === job.next_step);
  const nextHeld = Boolean(next) && heldBack(job, next);
  fill(document.getElementById("job-meta"),
    `playbook ${job.playbook_key}${job.playbook_version ? " v" + job.playbook_version : ""} · `,
    `${job.events} event(s) · next step: ${job.next_step || "none"}`,
    nextHeld ? " (its task held back by due)" : null,
    ` · frontier: ${job.frontier.join(", ") || "none"}`,
    job.started_at ? [" · started ", when(job.started_at)] : null,
    job.ended_at ? [" · ended ", when(job.ended_at)] : null,
    job.timers.length ? [" · timers: ", job.timers.map((t, i) => [i ? "; " : "", `${t.kind} ${t.milestone} `, when(t.at)])] : null,
    job.refused ? " · refused: " + job.refused : null,
    job.in_memory === false
      ? h("span", { class: "chip evicted", "data-in-memory": "false" },
        " this gateway let go of the job's history to bound its memory (it stays on the topics; the next change brings it back)")
      : null);
  const contacts = (job.contacts || []).map(contactName).filter(Boolean);
  const labels = (job.contacts || []).map(contactLabel).filter(Boolean);
  fill(document.getElementById("job-subject"),
    h("span", { class: "subject" }, "subject: ", subjectText(job.subject) || "none"), " · ",
    h("span", { class: "contacts" }, "contacts: ", labels.join(", ") || "none"));
  const who = document.getElementById("reply-contact");
  if (!who.value && contacts.length) who.value = contacts[0];
  drawGraph(job);
  renderMilestones(job);
  offerFacts(job);  // actions.js: the event form's suggestions
  document.getElementById("pending").replaceChildren(...job.pending_writes.map((w) =>
    h("li", {}, `${w.type}${w.action ? " " + w.action : ""} accepted `, when(w.accepted_at),
      ` (partition ${w.partition}, offset ${w.offset}), not decided yet`)));
  document.getElementById("job-body").hidden = false;
}

// The job's subject's current facts (docs/memory.md, "Reading it"): each with its
// source, since when, a link to the event that proved it (its decision, on its job's
// page) and one to that job.
function profileRow(f) {
  const props = Object.keys(f.properties || {}).length ? JSON.stringify(f.properties) : "";
  return h("tr", { "data-fact": f.name },
    h("td", {}, f.name),
    h("td", {}, [f.value === null ? "" : String(f.value), props ? " " + props : ""].join("")),
    h("td", {}, f.source),
    h("td", {}, when(f.valid_from)),
    h("td", {}, "event ",
      h("a", { href: "/jobs/" + encodeURIComponent(f.job_key) + "?event=" + encodeURIComponent(f.event_id),
        "data-nav": "job", "data-event-link": f.event_id }, h("code", {}, f.event_id)), " · ",
      h("a", { href: "/jobs/" + encodeURIComponent(f.job_key), "data-nav": "job" },
        "job " + f.job_key)));
}

async function renderProfile(job, view) {
  const section = document.getElementById("profile");
  const subject = job.subject_key;
  if (!subject) { section.hidden = true; return; }
  let facts;
  try {
    facts = (await api("/v1/subjects/" + encodeURIComponent(subject) + "/profile")).facts;
  } catch (e) {
    if (view !== state.view) return;
    // 404: nothing remembered (or erased); 403: this token may not read profiles
    if (e.status !== 404) { section.hidden = true; return; }
    facts = [];
  }
  if (view !== state.view) return;
  document.getElementById("profile-subject").textContent = subject;
  document.querySelector("#profile-facts tbody").replaceChildren(...(facts.length
    ? facts.map(profileRow)
    : [h("tr", {}, h("td", { colspan: "5", class: "muted" }, "Nothing remembered of this subject."))]));
  section.hidden = false;
}

function showMissing(key, error) {
  const box = document.getElementById("job-missing");
  box.replaceChildren(h("strong", {}, "no job with key ", h("code", {}, key)),
    ` (the gateway answered ${error.status} ${error.code}). `,
    h("a", { href: "/", "data-nav": "/" }, "All jobs"));
  box.hidden = false;
}

// Nothing of a job is shown until it is read: no skeleton of an unknown one.
function clearJobHeader(title) {
  document.getElementById("job-body").hidden = true;
  document.getElementById("job-missing").hidden = true;
  document.getElementById("job-title").textContent = title;
  const badge = document.getElementById("job-status");
  badge.textContent = "";
  badge.className = "badge";
  document.getElementById("job-live").textContent = "";
}

// A deep link whose key does not decode (/jobs/%E0): said so, not a blank page.
function showBadLink() {
  clearJobHeader("");
  notice("");
  const box = document.getElementById("job-missing");
  box.replaceChildren(h("strong", {}, "not a valid job link: ", h("code", {}, location.pathname)),
    " (a job's key is percent-encoded text, and this is not). ",
    h("a", { href: "/", "data-nav": "/" }, "All jobs"));
  box.hidden = false;
}

async function showJob(key, view) {
  state.job = null;
  state.decisions = [];
  state.journal = [];
  state.messages = [];
  state.questions = new Map();
  renderDecisions();
  renderJournal();
  renderConversation();
  renderQuestions();
  clearJobHeader(key);
  resetEventForm();  // actions.js
  const live = document.getElementById("job-live");
  document.getElementById("reply-contact").value = "";
  let job, trail, journal, talk, asked;
  try {
    job = await api("/v1/jobs/" + encodeURIComponent(key));
    trail = await api("/v1/jobs/" + encodeURIComponent(key) + "/decisions");
    journal = await api("/v1/jobs/" + encodeURIComponent(key) + "/journal");
    talk = await api("/v1/jobs/" + encodeURIComponent(key) + "/messages");
    asked = await api("/v1/jobs/" + encodeURIComponent(key) + "/interrupts");
  } catch (e) {
    if (view !== state.view) return;
    if (e.status === 404 && e.code === "job_not_found") { notice(""); showMissing(key, e); } else notice(e.message);
    return;
  }
  if (view !== state.view) return;  // the page moved on while these were read
  notice("");
  renderJob(job);
  renderProfile(job, view);
  state.decisions = trail.decisions;
  renderDecisions();
  const focused = document.querySelector("#decisions tr.focused");
  if (focused) focused.scrollIntoView({ block: "center" });
  state.journal = journal.records;
  renderJournal();
  state.messages = talk.messages;
  renderConversation();
  for (const rec of asked.interrupts) openQuestion(rec);
  renderQuestions();
  renderDevMail(key, view);
  closeStream();
  // The stream resumes where the lists were read (their totals): a decision, a
  // journal record or a message that came between the lists and the stream comes
  // first on it. On a reconnect EventSource sends the last record's id, from which
  // the gateway resumes likewise.
  const after = [trail.total, journal.total, talk.total].map((n) => n || 0).join(".");
  const source = new EventSource("/v1/jobs/" + encodeURIComponent(key) + "/events?access_token=" +
    encodeURIComponent(state.token) + "&after=" + after);
  state.source = source;
  source.addEventListener("open", () => { live.textContent = "● live"; });
  source.addEventListener("error", () => { live.textContent = "○ reconnecting…"; });
  source.addEventListener("job", (ev) => renderJob(JSON.parse(ev.data)));
  source.addEventListener("decision", (ev) => {
    const d = JSON.parse(ev.data);
    state.decisions.push(d);
    if (state.decisions.length > 500) state.decisions.shift();
    renderDecisions();
    eventDecided(d);  // actions.js: the answer to an event sent from this page
  });
  source.addEventListener("message", (ev) => {
    const m = JSON.parse(ev.data);
    if (state.messages.some((x) => x.message_id === m.message_id)) return;
    state.messages.push(m);
    if (state.messages.length > 200) state.messages.shift();
    renderConversation();
    // an answer on its way to the flow (this page's, another's, or the person's mail)
    const answered = m.direction === "in" && m.interrupt_id && state.questions.get(m.interrupt_id);
    if (answered && answered.el.dataset.state !== "sent") {
      settleQuestion(answered, "sent", `answered ${m.text}; the flow takes it next`);
    }
    if (m.channel === "email") setTimeout(() => renderDevMail(key, view), 1500);
  });
  source.addEventListener("journal", (ev) => {
    const r = JSON.parse(ev.data);
    if (r.type === "journal.interrupt") {
      // a refused answer (not an approver, docs/api.md "Approvals") leaves it open
      if (r.status === "open") openQuestion(r); else if (r.status !== "refused") closeQuestion(r.interrupt_id);
    }
    state.journal.push(r);
    if (state.journal.length > 200) state.journal.shift();
    renderJournal();
  });
}

function closeStream() {
  if (state.source) { state.source.close(); state.source = null; }
}

// -- navigation ------------------------------------------------------------------------

// Every page change comes here (a click, back/forward, a new token): the previous
// page's stream is closed and its work still on the way is made stale.
function route() {
  const view = ++state.view;
  closeStream();
  clearInterval(state.listTimer);
  actionsRouted();  // actions.js
  const path = location.pathname;
  const match = path.match(/^\/jobs\/(.+)$/);
  const scheduleMatch = path.match(/^\/schedules\/(.+)$/);
  const schedules = path === "/schedules";
  const page = match ? "job" : scheduleMatch ? "schedule" : schedules ? "schedules" : "list";
  document.getElementById("list-view").hidden = page !== "list";
  document.getElementById("job-view").hidden = page !== "job";
  document.getElementById("schedules-view").hidden = page !== "schedules";
  document.getElementById("schedule-view").hidden = page !== "schedule";
  const onSchedules = page === "schedules" || page === "schedule";
  for (const [id, current] of [["nav-jobs", !onSchedules], ["nav-schedules", onSchedules]]) {
    const link = document.getElementById(id);
    if (current) link.setAttribute("aria-current", "page"); else link.removeAttribute("aria-current");
  }
  if (page === "schedules") {
    renderSchedules(false);
    state.listTimer = setInterval(() => renderSchedules(false), 2000);
    return;
  }
  if (page === "schedule") {
    let sid;
    try {
      sid = decodeURIComponent(scheduleMatch[1]);
    } catch {
      notice("not a valid schedule link: " + path);
      return;
    }
    showSchedule(sid, view, true);
    state.listTimer = setInterval(() => showSchedule(sid, view, false), 2000);
    return;
  }
  if (match) {
    let key;
    try {
      key = decodeURIComponent(match[1]);
    } catch {
      showBadLink();  // a malformed %-escape (/jobs/%E0): no key to ask for
      return;
    }
    showJob(key, view);
  } else {
    renderList(false);
    state.listTimer = setInterval(() => renderList(false), 2000);
  }
}

function go(path) {
  if (path !== location.pathname + location.search) history.pushState(null, "", path);
  route();
}

// The one navigation path: a link of the page (a[data-nav]) or a job row (tr[data-href]);
// a click on a row's link is the link's, once. A modified click is the browser's.
document.addEventListener("click", (ev) => {
  const target = ev.target.closest("a[data-nav], tr[data-href]");
  if (!target) return;
  if (ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.altKey) return;
  ev.preventDefault();
  go(target.getAttribute("href") || target.dataset.href);
});
window.addEventListener("popstate", route);
document.getElementById("status-filter").addEventListener("change", (ev) => {
  state.filter = ev.target.value;
  renderList(false);
});
document.getElementById("more").addEventListener("click", () => renderList(true));
document.getElementById("schedules-more").addEventListener("click", () => renderSchedules(true));
document.getElementById("runs-more").addEventListener("click", () => {
  const m = location.pathname.match(/^\/schedules\/(.+)$/);
  if (!m) return;
  state.runsPaged = true;
  renderScheduleRuns(decodeURIComponent(m[1]), state.view, true).catch((e) => notice(e.message));
});
document.getElementById("reply-form").addEventListener("submit", sendReply);
document.getElementById("token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const input = document.getElementById("token-input");
  if (input.value.trim()) sessionStorage.setItem(TOKEN_KEY, input.value.trim());
  input.value = "";
  loadToken();
  route();
});
document.getElementById("token-forget").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  loadToken();
  route();
});

initActions();  // actions.js
loadToken();
route();
setInterval(tickCountdowns, 1000);
