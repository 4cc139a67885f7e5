// lemongraph UI: the Schedules pages (a list with each schedule's health, a schedule
// with its runs) over the gateway's schedules API (docs/schedules.md, "The API, the
// commands, the UI"). Loaded before app.js, whose helpers (h, api, state) it calls.
"use strict";

// -- schedules -------------------------------------------------------------------------

// A slot as the API gives it ({utc, local, abbreviation, timezone}): the wall time in the
// schedule's own time zone (not the browser's), and the UTC instant beside it.
function slotLocal(slot) {
  return `${String(slot.local).slice(0, 16).replace("T", " ")} ${slot.abbreviation} (${slot.timezone})`;
}

function slotItem(slot) {
  return h("li", { class: "slot", "data-utc": slot.utc },
    h("span", { class: "local" }, slotLocal(slot)), " · ",
    h("time", { class: "utc", datetime: slot.utc }, slot.utc));
}

// An instant of a schedule (a run's "at", the last run) as its next runs are shown:
// the wall time in the schedule's own zone with its abbreviation, then the UTC instant
// (a <time>, to the second), whatever the browser's zone.
function zoned(iso, timezone) {
  const utc = iso ? utcInstant(iso) : null;
  if (!utc) return iso ? String(iso) : "";
  const tz = timezone || "UTC";
  let local = utc;
  try {
    const parts = {};
    for (const p of new Intl.DateTimeFormat("en-US", { timeZone: tz, hourCycle: "h23",
      year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
      second: "2-digit", timeZoneName: "short" }).formatToParts(new Date(utc))) parts[p.type] = p.value;
    local = `${parts.year}-${parts.month}-${parts.day} ${parts.hour}:${parts.minute}:${parts.second} ${parts.timeZoneName} (${tz})`;
  } catch (e) { /* a zone this browser lacks: the UTC instant alone */ }
  return h("span", { class: "zoned" }, h("span", { class: "local" }, local), " · ",
    h("time", { class: "utc", datetime: utc, title: utc }, utc));
}

function runChip(run) {
  if (!run) return h("span", { class: "muted" }, "none yet");
  return h("span", { class: "chip run-" + run.status, "data-status": run.status }, run.status);
}

// A schedule's health (docs/schedules.md, "Health"): the status of the last run that
// ran, then what its runs add up to; a counter at 0 is left out.
const HEALTH_COUNTS = [["failed_in_a_row", "failed in a row"], ["failed", "failed"],
  ["suppressed", "suppressed"], ["missed", "missed"], ["skipped", "skipped"],
  ["retries", "retries"], ["stale_recoveries", "stale recoveries"], ["alerts", "alerts"]];

function healthCell(health) {
  const counts = HEALTH_COUNTS.filter(([name]) => health[name])
    .map(([name, label]) => h("span", { class: "count", "data-count": name }, `${label} ${health[name]}`));
  const cell = h("td", { class: "health", "data-failed-in-a-row": String(health.failed_in_a_row) },
    runChip(health.last_run));
  for (const c of counts) cell.append(" · ", c);
  return cell;
}

function actionText(action) {
  if (!action) return "";
  if (action.type === "start_job") return `start job (${action.playbook_key})`;
  if (action.type === "send_event") return `event ${action.event && action.event.action} → ${action.job_key}`;
  if (action.type === "prompt") return `prompt ${action.agent}`;
  if (action.type === "command") return `command ${action.tool}`;
  return action.type;
}

function whenText(sch) {
  if (sch.at) return `once at ${sch.at}`;  // a one-shot (docs/schedules.md, "One-shot schedules")
  return sch.schedule === sch.cron ? sch.cron : `${sch.schedule} (${sch.cron})`;
}

async function renderSchedules(append) {
  const view = state.view;
  const params = new URLSearchParams({ limit: "100" });
  if (append && state.scheduleCursor) params.set("cursor", state.scheduleCursor);
  let page;
  try { page = await api("/v1/schedules?" + params); } catch (e) { if (view === state.view) notice(e.message); return; }
  if (view !== state.view) return;
  notice("");
  const body = document.querySelector("#schedules tbody");
  if (!append) body.replaceChildren();
  for (const sch of page.schedules) {
    const href = "/schedules/" + encodeURIComponent(sch.id);
    const stateName = sch.enabled ? "enabled" : "paused";
    body.append(h("tr", { class: "schedule-row", "data-schedule": sch.id, "data-state": stateName, "data-href": href },
      h("td", {}, h("a", { href, "data-nav": "schedule" }, sch.id),
        sch.name && sch.name !== sch.id ? h("div", { class: "muted" }, sch.name) : null),
      h("td", {}, h("code", {}, whenText(sch))),
      h("td", {}, h("span", { class: "badge schedule-" + stateName }, stateName)),
      h("td", {}, actionText(sch.spec.action)),
      h("td", {}, sch.next.length ? h("ul", { class: "slots" }, sch.next.map(slotItem)) : h("span", { class: "muted" }, "—")),
      h("td", { class: "last-run" }, runChip(sch.last_run), sch.last_run ? [" ", zoned(sch.last_run.at, sch.timezone)] : null),
      healthCell(sch.health),
      h("td", { class: "controls" }, scheduleControls(sch, "schedules-action-status"))));
  }
  state.scheduleCursor = page.next;
  document.getElementById("schedules-more").hidden = !page.next;
  document.getElementById("schedules-count").textContent = `${page.total} schedule(s)`;
}

function runDetail(run) {
  const parts = [];
  if (run.missed_count) parts.push(`${run.missed_count} slots missed, to ${run.slot_last}`);
  if (run.error) parts.push(`error: ${run.error}`);
  if (run.exit_code !== null && run.exit_code !== undefined) parts.push(`exit code ${run.exit_code}`);
  if (run.output) parts.push(`output: ${run.output}`);
  if (run.delivered_to) parts.push(`delivered to ${run.delivered_to}`);
  if (run.context) parts.push(`context: ${JSON.stringify(run.context)}`);
  return parts.join(" · ");
}

function runRow(run) {
  return h("tr", { "data-run": run.run_id, "data-status": run.status },
    h("td", {}, zoned(run.at, state.scheduleZone)),
    h("td", {}, runChip(run), run.suppressed && run.status !== "suppressed" ? " (suppressed)" : null),
    h("td", {}, run.triggered_by + (run.attempt ? ` (attempt ${run.attempt})` : "")),
    h("td", {}, run.slot ? h("time", { datetime: run.slot }, run.slot) : ""),
    h("td", {}, h("code", {}, run.run_id)),
    h("td", { class: "detail" },
      // A refused run started no job: its key is shown, not linked.
      run.job_key && run.status === "refused" ? ["job ", h("code", { class: "not-started" }, run.job_key), " (not started)"] : null,
      run.job_key && run.status !== "refused" ? ["job ", h("a", { href: "/jobs/" + encodeURIComponent(run.job_key), "data-nav": "job" }, run.job_key)] : null,
      run.job_key && runDetail(run) ? " · " : null, runDetail(run)));
}

async function renderScheduleRuns(sid, view, append) {
  const params = new URLSearchParams({ limit: "100" });
  if (append && state.runsCursor) params.set("cursor", String(state.runsCursor));
  const page = await api("/v1/schedules/" + encodeURIComponent(sid) + "/runs?" + params);
  if (view !== state.view) return;
  const body = document.querySelector("#schedule-runs tbody");
  if (!append) body.replaceChildren();
  body.append(...page.runs.map(runRow));
  state.runsCursor = page.next;
  document.getElementById("runs-more").hidden = page.next === null || page.next === undefined;
}

function showScheduleMissing(sid, error) {
  const box = document.getElementById("schedule-missing");
  box.replaceChildren(h("strong", {}, "no schedule ", h("code", {}, sid)),
    ` (the gateway answered ${error.status} ${error.code}). `,
    h("a", { href: "/schedules", "data-nav": "/schedules" }, "All schedules"));
  box.hidden = false;
  document.getElementById("schedule-body").hidden = true;
}

async function showSchedule(sid, view, first) {
  if (first) {
    state.runsPaged = false;
    document.getElementById("schedule-title").textContent = sid;
    document.getElementById("schedule-missing").hidden = true;
    document.getElementById("schedule-body").hidden = true;
    const badge = document.getElementById("schedule-state");
    badge.textContent = "";
    badge.className = "badge";
  }
  let sch;
  try {
    sch = await api("/v1/schedules/" + encodeURIComponent(sid));
    if (view !== state.view) return;
    state.scheduleZone = sch.timezone;
    // Once older runs were asked for, the refresh leaves the history as the reader paged it.
    if (first || !state.runsPaged) await renderScheduleRuns(sid, view, false);
  } catch (e) {
    if (view !== state.view) return;
    if (e.status === 404) { notice(""); showScheduleMissing(sid, e); } else notice(e.message);
    return;
  }
  if (view !== state.view) return;
  notice("");
  const stateName = sch.enabled ? "enabled" : "paused";
  const badge = document.getElementById("schedule-state");
  badge.textContent = stateName;
  badge.className = "badge schedule-" + stateName;
  badge.dataset.state = stateName;
  document.getElementById("schedule-title").textContent = sch.name && sch.name !== sch.id ? `${sch.id} — ${sch.name}` : sch.id;
  fill(document.getElementById("schedule-meta"),
    h("code", {}, whenText(sch)), ` in ${sch.timezone} · ${actionText(sch.spec.action)} · overlap ${sch.spec.overlap}`,
    sch.spec.meta && sch.spec.meta.heartbeat ? " · heartbeat" : null,
    ` · deliver to ${sch.spec.deliver_to} · updated `, zoned(sch.updated_at, sch.timezone), ` by ${sch.by}`);
  document.getElementById("schedule-controls").replaceChildren(scheduleControls(sch, "schedule-action-status"));
  const next = document.getElementById("schedule-next");
  next.replaceChildren(...(sch.next.length ? sch.next.map(slotItem)
    : [h("li", { class: "muted" }, "none: the schedule is paused")]));
  document.getElementById("schedule-body").hidden = false;
}
