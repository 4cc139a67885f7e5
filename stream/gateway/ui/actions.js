// lemongraph UI: what the page does, beside what it shows (app.js): start a job, send an
// event to a job, and pause, resume, wake or run a schedule now. Each is a call of the
// API's own route with the page's token (app.js `api`), so a token may do here exactly
// what it may do through the API, and a refusal is said in the API's words
// (docs/operations.md, "The UI"). Loaded before app.js, which calls these functions
// once both are loaded.
"use strict";

const actions = { awaiting: null, playbooks: [] };

// A refusal as a person reads it: the API's message (with its code and the field it
// names), never its JSON; an error of the page itself (no token, no network) as is.
function refusalText(e) {
  if (!e.status) return e.message;
  const field = e.field ? ` (field ${e.field})` : "";
  return `refused (${e.status}${e.code ? " " + e.code : ""}): ${e.text || e.message}${field}`;
}

function say(id, text, kind) {
  const el = document.getElementById(id);
  if (!el) return;
  el.textContent = text;
  el.dataset.kind = kind || "";
}

function requestId() {
  return newMessageId();  // app.js: "web-<uuid>", within the API's key rule
}

// -- start a job -------------------------------------------------------------------------

function playbookLabel(p) {
  const name = p.spec && p.spec.name && p.spec.name !== p.key ? `${p.spec.name} — ` : "";
  return `${name}${p.key} v${p.version}`;
}

function aboutPlaybook() {
  const chosen = actions.playbooks.find((p) => p.key === document.getElementById("start-playbook").value);
  const spec = chosen ? chosen.spec || {} : {};
  const milestones = (spec.milestones || []).map((m) => m.id);
  document.getElementById("start-about").textContent = chosen
    ? `${milestones.length} milestone(s): ${milestones.join(", ")}` +
      (spec.goals && spec.goals.length ? ` · goals ${spec.goals.join(", ")}` : "")
    : "";
}

// The picker, from GET /v1/playbooks (the latest version of each): read when the panel
// opens, so a playbook registered meanwhile is there.
async function loadPlaybooks() {
  const select = document.getElementById("start-playbook");
  let listed;
  try {
    listed = (await api("/v1/playbooks")).playbooks;
  } catch (e) {
    say("start-status", refusalText(e), "refused");
    return;
  }
  const kept = select.value;
  actions.playbooks = listed;
  select.replaceChildren(...listed.map((p) => h("option", { value: p.key }, playbookLabel(p))));
  if (!listed.length) select.append(h("option", { value: "" }, "no playbook registered"));
  if (listed.some((p) => p.key === kept)) select.value = kept;
  aboutPlaybook();
}

// Lines of "name: value" (the subject), each value as text.
function subjectFrom(text) {
  const subject = {};
  for (const line of text.split("\n")) {
    if (!line.trim()) continue;
    const at = line.indexOf(":");
    if (at < 1) throw new Error(`subject: "${line.trim()}" is not "name: value"`);
    subject[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return subject;
}

// One contact a line: "Name <address>" as {name, email}, anything else as it is.
function contactsFrom(text) {
  return text.split("\n").map((l) => l.trim()).filter(Boolean).map((line) => {
    const m = line.match(/^(.*?)\s*<([^<>\s]+)>$/);
    return m ? (m[1] ? { name: m[1], email: m[2] } : m[2]) : line;
  });
}

async function startJob(ev) {
  ev.preventDefault();
  const button = ev.target.querySelector("button[type=submit]");
  const key = document.getElementById("start-key").value.trim();
  let body;
  try {
    body = { key, playbook_key: document.getElementById("start-playbook").value,
      subject: subjectFrom(document.getElementById("start-subject").value),
      contacts: contactsFrom(document.getElementById("start-contacts").value) };
  } catch (e) {
    say("start-status", e.message, "refused");
    return;
  }
  button.disabled = true;
  say("start-status", "starting…", "");
  try {
    await api("/v1/jobs", body);
  } catch (e) {
    say("start-status", refusalText(e), "refused");
    return;
  } finally {
    button.disabled = false;
  }
  for (const id of ["start-key", "start-subject", "start-contacts"]) document.getElementById(id).value = "";
  say("start-status", "", "");
  go("/jobs/" + encodeURIComponent(key));  // app.js: the job's page, live
}

// -- send an event -----------------------------------------------------------------------

const KEYWORDS = /^(AND|OR|NOT|WITHIN|AFTER|BEFORE|THEN|COUNT|true|false)$/i;

// The facts the job's conditions name, offered (not imposed) as the event's action.
function offerFacts(job) {
  const facts = new Set();
  for (const m of job.milestones) {
    for (const word of String(m.condition || "").match(/[A-Za-z_][A-Za-z0-9_.-]*/g) || []) {
      if (!KEYWORDS.test(word)) facts.add(word);
    }
  }
  const list = document.getElementById("event-actions");
  list.replaceChildren(...[...facts].sort().map((f) => h("option", { value: f })));
}

function resetEventForm() {
  actions.awaiting = null;
  say("event-status", "", "");
}

// A value as the API takes it (text, a number, true/false, or none).
function eventValue(text) {
  const t = text.trim();
  if (!t) return null;
  if (t === "true" || t === "false") return t === "true";
  return /^-?\d+(\.\d+)?$/.test(t) ? Number(t) : t;
}

async function sendEvent(ev) {
  ev.preventDefault();
  const job = state.job;
  if (!job) return;
  const button = ev.target.querySelector("button[type=submit]");
  const action = document.getElementById("event-action").value.trim();
  // Always named: a retry is one event, and its decision is found by the name.
  const idem = document.getElementById("event-idem").value.trim() || requestId();
  const body = { key: job.key, action, value: eventValue(document.getElementById("event-value").value),
    idempotency_key: idem };
  actions.awaiting = { key: job.key, idem, view: state.view };
  button.disabled = true;
  say("event-status", "sending…", "");
  let accepted;
  try {
    accepted = await api("/v1/events", body);
  } catch (e) {
    actions.awaiting = null;
    say("event-status", refusalText(e), "refused");
    return;
  } finally {
    button.disabled = false;
  }
  if (!actions.awaiting || actions.awaiting.idem !== idem) return;  // decided already
  document.getElementById("event-action").value = "";
  document.getElementById("event-value").value = "";
  document.getElementById("event-idem").value = "";
  actions.awaiting.duplicate = Boolean(accepted.duplicate);
  const again = accepted.duplicate ? " (a key already sent: it counts once)" : "";
  say("event-status", `event ${action} accepted as ${accepted.event_id}${again}; waiting for its decision…`, "sent");
  // A duplicate's decision was made before this page listened: the log has it.
  const earlier = state.decisions.find((d) => sameEvent(d, idem));
  if (earlier) eventDecided(earlier);
}

function sameEvent(d, idem) {
  return Boolean(d.input && d.input.type === "event" && d.input.idempotency_key === idem);
}

// The decision of the event this page sent (app.js calls it with each one streamed).
function eventDecided(d) {
  const waiting = actions.awaiting;
  if (!waiting || waiting.view !== state.view || !sameEvent(d, waiting.idem)) return;
  actions.awaiting = null;
  const moved = movesText(d);  // app.js
  // A key sent before is that event's one decision, not a second one.
  const once = waiting.duplicate ? ": this key was sent before, decided once" : " decided";
  say("event-status", `event ${d.input.action}${once}: ${decisionOutcome(d)}` +
    (moved ? ` — ${moved}` : " — nothing moved"), d.outcome === "refused" ? "refused" : "decided");
}

// -- a schedule's controls ---------------------------------------------------------------

function scheduleButton(label, name, onClick, extra) {
  const b = h("button", { type: "button", class: "quiet", "data-action": name, ...(extra || {}) }, label);
  b.addEventListener("click", (ev) => { ev.stopPropagation(); onClick(b); });
  return b;
}

// Pause or resume, wake, and run now, for one schedule (a list row or its page); what
// each did or why it was refused goes to `statusId`, which outlives the page's refresh.
function scheduleControls(sch, statusId) {
  const path = "/v1/schedules/" + encodeURIComponent(sch.id);
  const act = async (button, verb, call) => {
    button.disabled = true;
    say(statusId, `${sch.id}: ${verb}…`, "");
    try {
      say(statusId, `${sch.id}: ${await call()}`, "done");
    } catch (e) {
      say(statusId, `${sch.id}: ${refusalText(e)}`, "refused");
    } finally {
      button.disabled = false;
    }
    refreshSchedules();
  };
  const toggle = sch.enabled
    ? scheduleButton("Pause", "pause", (b) => act(b, "pausing", async () => {
      await api(path, { enabled: false }, "PATCH");
      return "paused: no run starts until it is resumed";
    }))
    : scheduleButton("Resume", "resume", (b) => act(b, "resuming", async () => {
      await api(path, { enabled: true }, "PATCH");
      return "resumed";
    }));
  const wake = scheduleButton("Wake", "wake", (b) => act(b, "waking", async () => {
    const woke = await api(path + "/wake", { request_id: requestId() });
    return `woken: run ${woke.run_id}` + (sch.enabled ? "" : " (recorded skipped: the schedule is paused)");
  }));
  // Run now (POST /v1/schedules/{id}/run): a manual run, paused or not (docs/schedules.md).
  const runNow = scheduleButton("Run now", "run", (b) => act(b, "run now", async () => {
    const ran = await api(path + "/run", { request_id: requestId() });
    return `run now: run ${ran.run_id} (manual)`;
  }), { class: "quiet run-now" });
  return h("span", { class: "schedule-controls", "data-schedule": sch.id }, toggle, " ", wake, " ", runNow);
}

function refreshSchedules() {
  const m = location.pathname.match(/^\/schedules\/(.+)$/);
  if (m) showSchedule(decodeURIComponent(m[1]), state.view, false);
  else if (location.pathname === "/schedules") renderSchedules(false);
}

// -- wiring ------------------------------------------------------------------------------

// Called by app.js's route() on every page change: earlier actions' words go.
function actionsRouted() {
  for (const el of document.querySelectorAll(".action-status")) say(el.id, "", "");
  actions.awaiting = null;
  const panel = document.getElementById("start-panel");
  if (panel.open && location.pathname === "/") loadPlaybooks();
}

function initActions() {
  const panel = document.getElementById("start-panel");
  panel.addEventListener("toggle", () => { if (panel.open) loadPlaybooks(); });
  document.getElementById("start-playbook").addEventListener("change", aboutPlaybook);
  document.getElementById("start-form").addEventListener("submit", startJob);
  document.getElementById("event-form").addEventListener("submit", sendEvent);
}
