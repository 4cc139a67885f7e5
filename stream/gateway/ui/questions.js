// lemongraph UI: a job's open questions (a flow's ask or approval) and their answers
// (docs/api.md, "Approvals"). Loaded before app.js, whose helpers (h, api, state) it calls.
"use strict";

// -- open questions (a flow's ask or approval) ------------------------------------------

// Each open interrupt keeps its element (a text being typed is not redrawn away); the
// journal's answered/expired/cancelled record takes it out of the section.
function questionItem(rec) {
  const status = h("div", { class: "q-status", role: "status" });
  const controls = [];
  const item = { rec, status, controls, el: null };
  const send = (answer) => answerQuestion(item, answer);
  const button = (label, answer) => {
    const b = h("button", { type: "button", class: "answer", "data-answer": answer }, label);
    b.addEventListener("click", () => send(answer));
    controls.push(b);
    return b;
  };
  let answerBox;
  if (rec.kind === "approval") {
    answerBox = h("div", { class: "q-answers" }, button("Approve", "yes"), " ", button("Reject", "no"));
  } else if (rec.expects === "file") {
    answerBox = filePicker(rec, controls, status, send);  // rich.js
  } else if (rec.answers && rec.answers.length) {
    answerBox = h("div", { class: "q-answers" }, rec.answers.map((a, i) => [i ? " " : null, button(a, a)]));
  } else {
    const input = h("input", { type: "text", class: "q-text", maxlength: 4000, "aria-label": "your answer" });
    const submit = h("button", { type: "submit" }, "Answer");
    controls.push(input, submit);
    answerBox = h("form", { class: "q-answers", autocomplete: "off" }, input, " ", submit);
    answerBox.addEventListener("submit", (ev) => {
      ev.preventDefault();
      if (input.value.trim()) send(input.value);
    });
  }
  const shown = shownFields(rec);
  item.el = h("li", { class: "question", "data-interrupt-id": rec.interrupt_id, "data-kind": rec.kind,
    "data-state": "open" },
    h("div", { class: "who" }, h("span", { class: "chip question" }, rec.kind === "approval" ? "approval" : "question"),
      " ", flowLabel(rec),
      rec.expires_at ? h("span", { class: "muted" }, " · expires ",
        h("span", { class: "countdown", "data-deadline": rec.expires_at }, countdown(rec.expires_at))) : null),
    h("div", { class: "q-text-asked" }, rec.question),
    shown.length ? h("dl", { class: "q-show" }, shown.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])) : null,
    answerBox, status);
  return item;
}

function settleQuestion(item, to, text) {
  item.el.dataset.state = to;
  item.status.textContent = text;
  for (const c of item.controls) c.disabled = to === "sent" || to === "closed";
}

async function answerQuestion(item, answer) {
  const job = state.job;
  if (!job) return;
  const view = state.view;
  for (const c of item.controls) c.disabled = true;
  item.status.textContent = "sending…";
  try {
    const done = await api("/v1/jobs/" + encodeURIComponent(job.key) + "/answers",
      { interrupt_id: item.rec.interrupt_id, answer });
    if (view !== state.view) return;
    const said = isFileValue(answer) ? answer.name : valueText(answer);  // a file: its name
    settleQuestion(item, "sent", `answer ${said} accepted (message ${done.message_id}); ` +
      "the flow takes it next");
  } catch (e) {
    if (view !== state.view) return;
    // 409 interrupt_not_open: no longer open (answered elsewhere, expired); 422: not an
    // answer it takes; 409 worktree_changed: still open, answerable once the coding
    // job's worktree is put back (docs/coding.md, "A changed worktree: the 409").
    const closed = e.status === 409 && e.code !== "worktree_changed";
    settleQuestion(item, closed ? "closed" : "error", e.message);
  }
}

function renderQuestions() {
  const list = document.getElementById("questions");
  const els = [...state.questions.values()].map((q) => q.el);
  list.replaceChildren(...els);
  if (!els.length) list.append(h("li", { class: "muted none" }, "No open questions."));
}

function openQuestion(rec) {
  if (state.questions.has(rec.interrupt_id)) return;
  state.questions.set(rec.interrupt_id, questionItem(rec));
  renderQuestions();
}

function closeQuestion(id) {
  if (state.questions.delete(id)) renderQuestions();
}
