"""`lemongraph schedule ...`, in the test's process (tests/inprocess.py; one
command through the real console script): `next` with no broker (the DST days
of docs/schedules.md, invalid expressions exit 1 naming the field); add, list,
show, pause, resume, wake, runs and remove against the real embedded broker,
and what each puts on `schedules`, the inbox and `audit`."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.inprocess import lemongraph
from tests.lanes import Lane
from topics import ScheduleRunRecord, encode


def cli(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None, process: bool = False
) -> subprocess.CompletedProcess[str]:
    """``lemongraph ARGS``: in the test's process (tests/inprocess.py), or with
    ``process`` through the console script."""
    environ = env if env is not None else dict(os.environ)
    return lemongraph(*args, env=environ, cwd=Path.cwd(), input=stdin, process=process)


def at(tz: str, start: str, count: int) -> list[str]:
    return ["--tz", tz, "--from", start, "--count", str(count)]


@pytest.mark.parametrize(
    ("args", "lines"),
    [
        (
            ["30 2 * * *", *at("America/New_York", "2026-03-07T00:00:00Z", 3)],
            [
                "2026-03-07T07:30:00Z  2026-03-07 02:30 EST (America/New_York)",
                "2026-03-08T07:00:00Z  2026-03-08 03:00 EDT (America/New_York)",
                "2026-03-09T06:30:00Z  2026-03-09 02:30 EDT (America/New_York)",
            ],
        ),
        (
            ["30 1 * * *", *at("America/New_York", "2026-10-31T00:00:00Z", 3)],
            [
                "2026-10-31T05:30:00Z  2026-10-31 01:30 EDT (America/New_York)",
                "2026-11-01T05:30:00Z  2026-11-01 01:30 EDT (America/New_York)",
                "2026-11-02T06:30:00Z  2026-11-02 01:30 EST (America/New_York)",
            ],
        ),
        (
            ["every 30m", *at("Australia/Lord_Howe", "2026-04-04T14:00:00Z", 4)],
            [
                "2026-04-04T14:30:00Z  2026-04-05 01:30 +11 (Australia/Lord_Howe)",
                "2026-04-04T15:00:00Z  2026-04-05 01:30 +1030 (Australia/Lord_Howe)",
                "2026-04-04T15:30:00Z  2026-04-05 02:00 +1030 (Australia/Lord_Howe)",
                "2026-04-04T16:00:00Z  2026-04-05 02:30 +1030 (Australia/Lord_Howe)",
            ],
        ),
        (
            ["weekdays at 09:30", "--from", "2026-03-06T11:00:00+01:00", "--count", "2"],
            [
                "2026-03-09T09:30:00Z  2026-03-09 09:30 UTC (UTC)",
                "2026-03-10T09:30:00Z  2026-03-10 09:30 UTC (UTC)",
            ],
        ),
    ],
)  # fmt: skip
def test_next_prints_each_slot_utc_first_then_local(args: list[str], lines: list[str]) -> None:
    result = cli("schedule", "next", *args)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == lines


def test_next_defaults_to_five_slots_from_now() -> None:
    result = cli("schedule", "next", "hourly")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 5
    assert all(line.endswith(" (UTC)") for line in result.stdout.splitlines())


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (
            ["61 * * * *"],
            1,
            'schedule: "61 * * * *": minute field (position 1): 61 is out of range',
        ),
        (["every 7m"], 1, "schedule:"),
        (["* * * *"], 1, 'schedule: "* * * *": position 8: expected 5 fields'),
        ([""], 1, "error: schedule: is empty: write a 5-field cron expression or a shorthand"),
        (["weekdays 9am"], 1, "position"),
        (["hourly", "--tz", "europe/paris"], 1, "timezone: 'europe/paris'"),
        (["hourly", "--from", "2026-03-07T00:00:00"], 2, "no offset"),
        (["hourly", "--from", "yesterday"], 2, "not an ISO 8601 instant"),
        (["hourly", "--count", "0"], 2, "--count"),
    ],
)
def test_next_refuses_what_it_cannot_read(args: list[str], code: int, words: str) -> None:
    result = cli("schedule", "next", *args)
    assert result.returncode == code, result.stdout + result.stderr
    assert words in result.stderr
    assert result.stdout == ""


def definitions(lane: Lane, sid: str) -> list[Any]:
    return [r["value"] for r in lane.read("schedules") if r["key"] == sid]


REVIEW = """\
schedules:
  - id: lead-review
    name: Lead review
    schedule: weekdays at 09:30
    timezone: America/New_York
    action: {type: start_job, playbook_key: lead-qualification}
  - name: Queue check
    schedule: every 30m
    action: {type: send_event, job_key: job-1, event: {action: reminder_due}}
"""


@pytest.mark.broker
@pytest.mark.timeout(300)
def test_schedules_are_added_listed_shown_paused_resumed_woken_and_removed(
    lane: Lane, tmp_path: Path
) -> None:
    path = tmp_path / "schedules.yaml"
    path.write_text(REVIEW)
    added = lane.cli("schedule", "add", str(path))
    assert added.stdout.splitlines()[0].startswith("lead-review: created; next 20")
    assert "(America/New_York)" in added.stdout
    assert "queue-check: created; next" in added.stdout

    listed = lane.cli("schedule", "list").stdout.splitlines()
    assert [line.split()[0] for line in listed] == ["lead-review", "queue-check"]
    assert "enabled" in listed[0]
    assert "'weekdays at 09:30'" in listed[0]
    as_json = [
        json.loads(line) for line in lane.cli("schedule", "list", "--json").stdout.splitlines()
    ]
    assert as_json[0]["timezone"] == "America/New_York"
    assert as_json[1]["id"] == "queue-check"

    # The same id again is refused, and nothing is written; --replace updates.
    again = lane.cli("schedule", "add", str(path), check=False)
    assert again.returncode == 1
    assert "id in use: lead-review, queue-check (--replace updates them)" in again.stderr
    path.write_text(REVIEW.replace("name: Lead review", "name: Leads"))
    replaced = lane.cli("schedule", "add", "--replace", str(path)).stdout
    assert "lead-review: updated" in replaced
    assert "queue-check: unchanged" in replaced

    shown = lane.cli("schedule", "show", "lead-review").stdout
    spec = json.loads(shown[: shown.index("\nupdated ")])
    assert spec["name"] == "Leads"
    assert spec["overlap"] == "skip"
    assert "by cli" in shown
    # The normalised cron, and the catch-up window in effect (the default: one period).
    assert "\ncron: 30 9 * * 1-5  ('weekdays at 09:30' in America/New_York)\n" in shown
    assert "\ncatch-up window: one period, the default " in shown
    assert shown.count("(America/New_York)") == 5
    assert "runs: 0" in shown
    assert "\nhealth: no run yet; retries 0, suppressed 0, missed 0, skipped 0, failed 0," in shown
    queue = lane.cli("schedule", "show", "queue-check").stdout
    assert "\ncron: */30 * * * *  ('every 30m' in UTC)\n" in queue
    assert "\ncatch-up window: one period (30m, the default)\n" in queue

    assert lane.cli("schedule", "pause", "lead-review").stdout.strip() == "lead-review: paused"
    assert "paused" in lane.cli("schedule", "list").stdout.splitlines()[0]
    assert "next: none (paused)" in lane.cli("schedule", "show", "lead-review").stdout
    assert "already paused" in lane.cli("schedule", "pause", "lead-review").stdout
    resumed = lane.cli("schedule", "resume", "lead-review").stdout
    assert resumed.startswith("lead-review: resumed; next 20")
    # --replace replaces the whole definition: a file without `enabled` resumes a
    # paused schedule, and says so.
    lane.cli("schedule", "pause", "lead-review")
    again_resumed = lane.cli("schedule", "add", "--replace", str(path)).stdout
    assert again_resumed.startswith("lead-review: resumed; next 20"), again_resumed
    lane.cli("schedule", "pause", "lead-review")
    path.write_text(
        REVIEW.replace("name: Lead review", "name: Leads").replace(
            "timezone: America/New_York", "timezone: America/New_York\n    timeout: 10m"
        )
    )
    changed = lane.cli("schedule", "add", "--replace", str(path)).stdout
    assert changed.startswith("lead-review: updated (timeout) and resumed; next 20"), changed

    woken = lane.cli(
        "schedule", "wake", "lead-review", "--context", '{"reason": "big lead"}',
        "--skip-if-running", "--request-id", "cli-wake-1",
    ).stdout  # fmt: skip
    assert woken.startswith("lead-review: woken (request cli-wake-1, run wk-")
    # The same request id again is one wake: nothing sent, and said so.
    twice = lane.cli("schedule", "wake", "lead-review", "--request-id", "cli-wake-1").stdout
    run_id = woken.split("run ", 1)[1].split(",", 1)[0]
    assert twice.startswith(
        f"lead-review: duplicate: already woken with request id cli-wake-1 (run {run_id}, "
    ), twice
    assert twice.rstrip().endswith("by cli); nothing sent")
    bad = lane.cli("schedule", "wake", "lead-review", "--context", "[1]", check=False)
    assert bad.returncode == 2
    assert "must be a JSON object" in bad.stderr

    # Runs come from schedule-runs (written by the worker: here, records of its shape).
    runs = [
        ScheduleRunRecord(
            schedule_id="lead-review", run_id="sl-a", status="missed", triggered_by="schedule",
            slot="2026-12-01T14:30:00Z", root_run_id="sl-a", at="2026-12-02T15:00:00.996123Z",
        ),
        ScheduleRunRecord(
            schedule_id="lead-review", run_id="sl-b", status="completed",
            triggered_by="schedule", slot="2026-12-02T14:30:00Z", root_run_id="sl-b",
            at="2026-12-02T14:30:01Z", job_key="sl-b",
        ),
    ]  # fmt: skip
    lane.produce([(b"lead-review", encode(r)) for r in runs], topic="schedule-runs")
    listed_runs = lane.cli("schedule", "runs", "lead-review")
    lines = listed_runs.stdout.splitlines()
    assert [line.split()[1] for line in lines] == ["completed", "missed"]
    assert "job sl-b" in lines[0]
    assert lines[1].startswith("2026-12-02T15:00:00.996Z  ")  # milliseconds at most
    assert "2 of 2 run(s)" in listed_runs.stderr
    one = lane.cli("schedule", "runs", "lead-review", "--limit", "1", "--json").stdout
    assert json.loads(one)["run_id"] == "sl-b"

    assert lane.cli("schedule", "remove", "lead-review").stdout.strip() == "lead-review: removed"
    missing = lane.cli("schedule", "show", "lead-review", check=False)
    assert missing.returncode == 1
    assert "no schedule 'lead-review'" in missing.stderr
    assert lane.cli("schedule", "remove", "lead-review", check=False).returncode == 1
    assert lane.cli("schedule", "pause", "nope", check=False).returncode == 1
    # A removed schedule's runs are still there to read.
    assert "completed" in lane.cli("schedule", "runs", "lead-review").stdout
    assert lane.cli("schedule", "runs", "nope", check=False).returncode == 1

    # What went on the topics.
    records = definitions(lane, "lead-review")
    assert [r and (r["spec"]["name"], r["spec"]["enabled"]) for r in records] == [
        ("Lead review", True), ("Leads", True), ("Leads", False), ("Leads", True),
        ("Leads", False), ("Leads", True), ("Leads", False), ("Leads", True), None,
    ]  # fmt: skip
    assert {r["by"] for r in records if r} == {"cli"}
    audit = [r["value"] for r in lane.read("audit") if r["key"] == "lead-review"]
    assert [a["action"] for a in audit] == [
        "create", "update", "pause", "resume", "pause", "resume", "pause", "update", "wake",
        "delete",
    ]  # fmt: skip
    assert audit[2]["detail"] == {"enabled": False}
    assert audit[3]["detail"] == {"enabled": True}
    assert audit[7]["detail"] == {"changed": ["enabled", "timeout"]}
    assert audit[8]["detail"]["request_id"] == "cli-wake-1"
    wakes = [r["value"] for r in lane.read("inbox") if r["key"] == "lead-review"]
    assert len(wakes) == 1
    assert wakes[0]["type"] == "schedule.wake"
    assert wakes[0]["context"] == {"reason": "big lead"}
    assert wakes[0]["skip_if_running"] is True


@pytest.mark.broker
@pytest.mark.timeout(300)
def test_add_validates_everything_before_writing_and_reads_stdin(
    lane: Lane, tmp_path: Path
) -> None:
    action = {"type": "start_job", "playbook_key": "onboarding"}
    one = json.dumps({"id": "first", "name": "First", "schedule": "daily", "action": action})
    result = cli("schedule", "add", "-", stdin=one, env=lane.env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("first: created; next ")
    # No playbook is registered: written, with a warning line.
    assert result.stderr == (
        "warning: first: action.playbook_key: no playbook 'onboarding' is registered: until "
        "one is, each run's job.start is refused (the run reads refused, with the core's "
        "reason)\n"
    )
    bad = """\
- id: second
  name: Second
  schedule: daily
  action: {type: start_job, playbook_key: onboarding}
- id: third
  name: Third
  schedule: "61 * * * *"
  action: {type: start_job, playbook_key: onboarding}
- id: fourth
  name: Fourth
  schedule: hourly
  timezone: Mars/Base
  action: {type: start_job}
"""
    refused = cli("schedule", "add", "-", stdin=bad, env=lane.env())
    assert refused.returncode == 1
    # Each definition is named alike, with the line of the field at fault.
    assert (
        'error: <stdin>:7: [1] (third): schedule: "61 * * * *": minute field (position 1)'
        in refused.stderr
    )
    assert "error: <stdin>:12: [2] (fourth): timezone: 'Mars/Base'" in refused.stderr
    assert refused.stdout == ""
    ids = {r["key"] for r in lane.read("schedules")}
    assert ids == {"first"}  # the valid "second" was not written either
    not_yaml = cli("schedule", "add", "-", stdin="a: [", env=lane.env())
    assert not_yaml.returncode == 1
    assert "error: <stdin>:1:" in not_yaml.stderr
    assert "not YAML or JSON: while parsing a flow" in not_yaml.stderr
    path = tmp_path / "bad.yaml"
    path.write_text("schedules:\n  - id: x\n    schedule: [1, 2\n")
    in_file = cli("schedule", "add", str(path), env=lane.env())
    assert in_file.returncode == 1
    assert in_file.stderr.startswith(f"error: {path}:4:1: not YAML or JSON: while parsing")
    path.write_text("schedules:\n  - id: x\n    name: X\n    schedule: daily\n")
    one = cli("schedule", "add", str(path), env=lane.env())
    assert one.stderr.startswith(f"error: {path}:2: schedules[0] (x): action"), one.stderr
    path.write_text('{"id": "y", "name": "Y", "schedule": "1 2 3 4", "action": {}}')
    single = cli("schedule", "add", str(path), env=lane.env())
    assert single.stderr.startswith(
        f'error: {path}:1: definition (y): schedule: "1 2 3 4": position 8: expected 5 fields'
    ), single.stderr
    gone = cli("schedule", "add", "/no/such/file.yaml", env=lane.env())
    assert gone.returncode == 1
    assert "cannot read" in gone.stderr


def test_a_command_without_a_broker_says_so() -> None:
    env = {k: v for k, v in os.environ.items() if k != "LEMONGRAPH_KAFKA_URL"}
    # the console script as its own process (the module's other commands run in
    # the test's process)
    result = cli("schedule", "list", env=env, process=True)
    assert result.returncode == 1
    assert "LEMONGRAPH_KAFKA_URL is not set" in result.stderr


@pytest.mark.broker
@pytest.mark.timeout(300)
def test_a_wake_from_the_cli_runs_on_the_worker_and_its_run_is_read_back(
    lane: Lane, tmp_path: Path
) -> None:
    lane.start_worker()
    path = tmp_path / "nightly.json"
    path.write_text(
        json.dumps(
            {
                "name": "Nightly onboarding",
                "schedule": "daily at 02:00",
                "timezone": "Europe/Paris",
                "action": {"type": "start_job", "playbook_key": "onboarding"},
            }
        )
    )
    assert "nightly-onboarding: created" in lane.cli("schedule", "add", str(path)).stdout
    woken = lane.cli("schedule", "wake", "nightly-onboarding", "--request-id", "w1").stdout
    run_id = woken.split("run ", 1)[1].split(",", 1)[0]
    assert run_id.startswith("wk-")

    def completed() -> str | None:
        out = lane.cli("schedule", "runs", "nightly-onboarding").stdout
        return out if "completed" in out else None

    deadline = time.monotonic() + 60
    out = completed()
    while out is None and time.monotonic() < deadline:
        time.sleep(0.5)
        out = completed()
    assert out is not None, "no completed run"
    line = out.splitlines()[0]
    assert line.split()[1:4] == ["completed", "wake", run_id]
    assert "job " in line
    shown = lane.cli("schedule", "show", "nightly-onboarding").stdout
    assert "runs: 1 (newest first)" in shown
    assert run_id in shown
    # Its health (docs/schedules.md, "Health"), folded from the same records.
    assert f"\nhealth: last run {run_id} completed at " in shown
    assert "; retries 0, suppressed 0, missed 0, skipped 0, failed 0, failed in a row 0," in shown
    # The job the run started has its state on the job table's changelog.
    job = line.split("job ", 1)[1].split()[0]
    jobs = [r for r in lane.read("engine-jobstate-changelog") if r["key"] == job]
    assert jobs, f"no state of {job}"
