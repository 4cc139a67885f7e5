"""The schedule records of docs/schedules.md and docs/kafka.md: their shapes,
what is refused, and the inbox's ``schedule.wake``."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pydantic import TypeAdapter, ValidationError

import topics
from topics import (
    AuditRecord,
    HeartbeatAlert,
    RecordError,
    ScheduleCommandTask,
    SchedulePromptTask,
    ScheduleRecord,
    ScheduleReport,
    ScheduleRunRecord,
    ScheduleRunsRecord,
    ScheduleWake,
    TaskClosedRecord,
    TaskRecord,
    Topics,
    decode_inbox,
    encode,
)

RUN: dict[str, Any] = {
    "type": "schedule.run",
    "schema": 1,
    "schedule_id": "queue-check",
    "run_id": "sl-4be6f1c0a9d24e7b8c11",
    "status": "suppressed",
    "triggered_by": "schedule",
    "slot": "2026-03-09T14:30:00Z",
    "attempt": 0,
    "root_run_id": "sl-4be6f1c0a9d24e7b8c11",
    "started_at": "2026-03-09T14:30:00Z",
    "ended_at": "2026-03-09T14:30:04Z",
    "at": "2026-03-09T14:30:04Z",
    "output": "HEARTBEAT_OK",
    "suppressed": True,
}


def test_the_three_topics_have_names_under_the_prefix() -> None:
    names = Topics("acme.")
    assert names.schedules == "acme.schedules"
    assert names.schedule_runs == "acme.schedule-runs"
    assert names.audit == "acme.audit"
    assert names.name("schedule-runs") == "acme.schedule-runs"
    assert topics.TOPIC_NAMES["schedules"][1] is True  # compacted: the definitions
    assert topics.TOPIC_NAMES["schedule-runs"][1] is False
    assert topics.TOPIC_NAMES["audit"][1] is False


def test_the_documented_run_record_reads_and_writes_back_the_same() -> None:
    run = ScheduleRunRecord.model_validate(RUN)
    assert run.status == "suppressed"
    assert run.suppressed is True
    assert {k: v for k, v in run.dump().items() if v is not None} == RUN


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("status", "done"),
        ("triggered_by", "cron"),
        ("output", "x" * 2001),
        ("surprise", 1),
    ],
)
def test_a_run_record_refuses_what_is_not_documented(field: str, value: Any) -> None:
    with pytest.raises(ValidationError):
        ScheduleRunRecord.model_validate({**RUN, field: value})


def test_schedule_runs_carries_runs_and_reports_told_apart_by_type() -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(ScheduleRunsRecord)
    report = {
        "type": "schedule.report",
        "schedule_id": "queue-check",
        "run_id": "sl-1",
        "status": "failed",
        "error": "model unavailable",
        "at": "2026-03-09T14:30:04Z",
    }
    parsed = adapter.validate_python(report)
    assert isinstance(parsed, ScheduleReport)
    assert (parsed.output, parsed.error) == ("", "model unavailable")
    assert isinstance(adapter.validate_python(RUN), ScheduleRunRecord)
    with pytest.raises(ValidationError):
        adapter.validate_python({**report, "status": "timeout"})  # the worker's word, not theirs


# docs/schedules.md, "Heartbeats" (the example, as documented)
ALERT: dict[str, Any] = {
    "type": "heartbeat.alert", "schema": 1, "schedule_id": "queue-check",
    "run_id": "sl-4be6f1c0a9d24e7b8c11", "severity": "warning", "status": "completed",
    "triggered_by": "schedule", "name": "Queue check",
    "output": "Two tickets wait for a refund.", "error": None, "delivered_to": "web:ops-desk",
    "at": "2026-03-09T11:00:04Z",
}  # fmt: skip


def test_a_heartbeat_alert_is_a_record_of_its_own_on_schedule_runs() -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(ScheduleRunsRecord)
    alert = adapter.validate_python(ALERT)
    assert isinstance(alert, HeartbeatAlert)
    assert alert.dump() == ALERT
    for field, value in [("severity", "urgent"), ("status", "suppressed"), ("surprise", 1)]:
        with pytest.raises(ValidationError):
            adapter.validate_python({**ALERT, field: value})


def test_a_definition_record_and_an_audit_record() -> None:
    record = ScheduleRecord(
        spec={"id": "lead-review", "name": "Lead review"},
        updated_at="2026-03-09T10:00:00Z",
        by="cli",
    )
    assert orjson.loads(encode(record)) == {
        "schema": 1,
        "type": "schedule",
        "spec": {"id": "lead-review", "name": "Lead review"},
        "updated_at": "2026-03-09T10:00:00Z",
        "by": "cli",
    }
    audit = AuditRecord.model_validate(
        {
            "type": "audit",
            "schema": 1,
            "action": "pause",
            "target": "schedule:lead-review",
            "by": "ops@example.com",
            "at": "2026-03-09T10:02:11Z",
            "detail": {"enabled": False},
        }
    )
    assert audit.detail == {"enabled": False}
    with pytest.raises(ValidationError):
        AuditRecord.model_validate({**audit.dump(), "action": "rename"})


def test_a_prompt_task_is_a_third_kind_of_task_record() -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(TaskRecord)
    task = adapter.validate_python(
        {
            "type": "schedule.prompt",
            "schedule_id": "queue-check",
            "run_id": "sl-1",
            "agent": "assistant",
            "prompt": "Check the queue.",
            "deadline": "2026-03-09T14:35:00Z",
        }
    )
    assert isinstance(task, SchedulePromptTask)
    assert (task.attempt, task.context, task.slot, task.triggered_by) == (0, None, None, "schedule")
    closed = adapter.validate_python(
        {
            "type": "task.closed",
            "task_id": "t",
            "job_key": "j",
            "milestone": "m",
            "at": "2026-03-09T14:35:00Z",
            "outcome": "done",
        }
    )
    assert isinstance(closed, TaskClosedRecord)


def test_a_command_task_and_its_report_docs_schedules_command_jobs() -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(TaskRecord)
    task = adapter.validate_python(
        {
            "type": "schedule.command",
            "schedule_id": "nightly",
            "run_id": "sl-1",
            "tool": "run_tests",
            "args": {"suite": "smoke"},
            "deadline": "2026-03-09T14:35:00Z",
        }
    )
    assert isinstance(task, ScheduleCommandTask)
    assert (task.tool, task.args, task.attempt, task.triggered_by) == (
        "run_tests", {"suite": "smoke"}, 0, "schedule"
    )  # fmt: skip
    with pytest.raises(ValidationError):
        adapter.validate_python({**task.dump(), "args": ["--all"]})  # a JSON object only
    report = ScheduleReport.model_validate(
        {
            "type": "schedule.report",
            "schedule_id": "nightly",
            "run_id": "sl-1",
            "status": "failed",
            "error": "failed: exit code 2",
            "at": "2026-03-09T14:31:00Z",
            "outcome": "failed",
            "exit_code": 2,
        }
    )
    assert (report.outcome, report.exit_code) == ("failed", 2)
    with pytest.raises(ValidationError):
        ScheduleReport.model_validate({**report.dump(), "outcome": "maybe"})
    assert ScheduleRunRecord.model_validate({**RUN, "exit_code": 0}).exit_code == 0


# -- the inbox's schedule.wake ----------------------------------------------------------


def test_decode_inbox_reads_a_wake_keyed_by_its_schedule_id() -> None:
    raw = orjson.dumps(
        {
            "type": "schedule.wake",
            "schedule_id": "lead-review",
            "request_id": "req-1",
            "context": {"why": "a lead came in"},
            "skip_if_running": True,
        }
    )
    wake = decode_inbox(raw, b"lead-review")
    assert isinstance(wake, ScheduleWake)
    assert wake.key == "lead-review"
    assert (wake.request_id, wake.context, wake.skip_if_running) == (
        "req-1",
        {"why": "a lead came in"},
        True,
    )
    bare = decode_inbox(b'{"type": "schedule.wake", "schedule_id": "a.b_c-1"}')
    assert isinstance(bare, ScheduleWake)
    assert (bare.request_id, bare.context, bare.skip_if_running) == (None, None, False)


@pytest.mark.parametrize(
    ("body", "key", "reason"),
    [
        ({"schedule_id": "lead-review"}, b"other", "is not the schedule id 'lead-review'"),
        ({"schedule_id": "-bad"}, None, "schedule_id: String should match pattern"),
        ({"schedule_id": "x" * 65}, None, "schedule_id: String should have at most 64"),
        ({"schedule_id": "a", "request_id": ""}, None, "request_id"),
        ({"schedule_id": "a", "skip": True}, None, "skip: unknown field"),
    ],
)
def test_decode_inbox_refuses_a_bad_wake(
    body: dict[str, Any], key: bytes | None, reason: str
) -> None:
    with pytest.raises(RecordError) as caught:
        decode_inbox(orjson.dumps({"type": "schedule.wake", **body}), key)
    assert reason in caught.value.reason


def test_a_record_without_a_type_names_the_three_inbox_types() -> None:
    with pytest.raises(RecordError) as caught:
        decode_inbox(b'{"key": "j"}')
    assert "'schedule.wake'" in caught.value.reason


def test_the_schedule_names_are_exported() -> None:
    for name in (
        "AuditRecord",
        "ScheduleCommandTask",
        "ScheduleId",
        "SchedulePromptTask",
        "ScheduleRecord",
        "ScheduleReport",
        "ScheduleRunRecord",
        "ScheduleRunsRecord",
        "ScheduleWake",
        "SCHEDULE_HEADER",
        "SCHEDULE_RUN_HEADER",
    ):
        assert name in topics.__all__
    assert topics.SCHEDULE_HEADER == "lemongraph.schedule"
    assert topics.SCHEDULE_RUN_HEADER == "lemongraph.run"
