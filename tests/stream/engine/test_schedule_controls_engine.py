"""LemonAutomation's controls in the engine, without a broker (docs/schedules.md,
"Run now", "Abort", "One-shot schedules"): a ``schedule.wake`` whose ``control``
is ``run`` or ``abort``, and a one-shot's tombstone and audit record, which the
worker writes itself and reads back. Ids are computed from their documented
formulas, never by the code under test."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import orjson

from stream.engine.schedules import schedule_key
from tests.stream.engine.engine_harness import TOPICS, on
from tests.stream.engine.test_schedules_engine import (
    T0,
    Lane,
    every_5m,
    home,
    prompt_every_5m,
    runs,
    slot,
    starts,
)
from topics import AuditRecord


def manual(schedule_id: str, request: str) -> str:
    """docs/schedules.md, "Run now": ``mn-`` and 20 hex of the hash."""
    text = f"{schedule_id}\nmanual\n{request}"
    return "mn-" + hashlib.sha256(text.encode()).hexdigest()[:20]


def test_a_run_now_of_a_paused_schedule_starts_its_job_once_per_request() -> None:
    lane = Lane()
    lane.run(lane.define(every_5m(enabled=False)))
    at = T0 + timedelta(minutes=1)
    batch = lane.run(lane.wake("review", at, request_id="m1", control="run"))
    run_id = manual("review", "m1")
    assert [(r.run_id, r.status, r.triggered_by) for r in runs(batch)] == [
        (run_id, "completed", "manual")
    ]
    assert [s.key for _o, s in starts(batch)] == [run_id]
    assert lane.run(lane.wake("review", at, request_id="m1", control="run")).outputs == []
    # A plain wake of the paused schedule is skipped, as before.
    [woken] = runs(lane.run(lane.wake("review", at, request_id="m1")))
    assert (woken.status, woken.error, woken.triggered_by) == ("skipped", "paused", "wake")


def test_an_abort_ends_the_run_and_its_report_after_changes_nothing() -> None:
    lane = Lane()
    p = home("check")
    lane.run(lane.define(prompt_every_5m(max_retries=2, deliver_to="web:job-9")))
    fired = T0 + timedelta(minutes=5)
    lane.run(lane.tick(fired, p))
    sid = slot("check", fired)
    batch = lane.run(
        lane.wake(
            "check", fired + timedelta(seconds=10), request_id="a", control="abort", run_id=sid
        )
    )
    assert [(r.run_id, r.status, r.error) for r in runs(batch)] == [
        (sid, "aborted", "aborted on request a")
    ]
    assert on(batch, "messages") == []  # an abort is delivered nowhere
    late = lane.run(lane.report("check", sid, fired + timedelta(seconds=20), output="done"))
    assert late.outputs == []
    # No retry comes due for it either.
    assert lane.run(lane.tick(fired + timedelta(minutes=1), p)).outputs == []


def test_an_abort_without_a_run_id_is_dead_lettered() -> None:
    lane = Lane()
    lane.run(lane.define(every_5m()))
    batch = lane.run(lane.wake("review", T0, request_id="a", control="abort"))
    [letter] = on(batch, "deadletter")
    reason = dict(letter.headers or []).get("lemongraph.dlq.reason", b"")
    assert b"an abort names the run it ends" in reason, letter.headers


def test_switched_off_a_run_now_is_skipped_and_an_abort_still_ends_its_run() -> None:
    lane = Lane()
    p = home("check")
    lane.run(lane.define(prompt_every_5m()))
    lane.run(lane.tick(T0 + timedelta(minutes=5), p))
    off = lane.restart(enabled=False)
    at = T0 + timedelta(minutes=6)
    [skipped] = runs(off.run(off.wake("check", at, request_id="m", control="run")))
    assert (skipped.run_id, skipped.status, skipped.triggered_by) == (
        manual("check", "m"),
        "skipped",
        "manual",
    )
    sid = slot("check", T0 + timedelta(minutes=5))
    ended = off.run(off.wake("check", at, request_id="a", control="abort", run_id=sid))
    assert [(r.run_id, r.status) for r in runs(ended)] == [(sid, "aborted")]


def test_a_one_shot_runs_once_then_the_worker_removes_it_and_audits_why() -> None:
    lane = Lane()
    p = home("once")
    spec = {
        "id": "once",
        "name": "Once",
        "at": "2026-03-02T09:07:00Z",
        "action": {"type": "start_job", "playbook_key": "quick"},
    }
    lane.run(lane.define(spec))
    due = T0 + timedelta(minutes=7)
    assert lane.next_due("once") == int(due.timestamp() * 1000)
    assert lane.run(lane.tick(due - timedelta(minutes=1), p)).outputs == []
    batch = lane.run(lane.tick(due, p))
    run_id = slot("once", due)
    assert [(r.run_id, r.status, r.triggered_by) for r in runs(batch)] == [
        (run_id, "completed", "schedule")
    ]
    [tombstone] = on(batch, "schedules")
    assert (tombstone.key, tombstone.value, tombstone.partition) == (b"once", None, p)
    [audit_out] = on(batch, "audit")
    audit = AuditRecord.model_validate_json(audit_out.value)
    assert (audit.action, audit.target, audit.by) == ("delete", "schedule:once", "one-shot")
    assert audit.detail == {
        "reason": "one-shot: its run ended",
        "run_id": run_id,
        "status": "completed",
    }
    # The tombstone read back removes the state, and nothing is due again.
    back = lane.record("schedules", b"once", None, due, tombstone.partition)
    lane.run(back)
    assert lane.store.get((schedule_key("once"), p)) is None
    assert lane.next_due("once") is None
    assert TOPICS.name("schedules") == tombstone.topic
    value = orjson.loads(on(batch, "inbox")[0].value or b"{}")
    assert value["key"] == run_id
