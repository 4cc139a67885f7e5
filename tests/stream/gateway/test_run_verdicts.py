"""The join of a schedule run with the decision of what it sent
(stream/gateway/readmodels/run_verdicts.py, docs/schedules.md "Run statuses"): in the
gateway's read model whichever of the two is read first, and with a crash's
re-sent start."""

from __future__ import annotations

from typing import Any

import pytest

from stream.gateway.readmodels.schedules import ScheduleModel
from topics import Topics

from .test_schedules_api import run_record

STARTED = "2026-04-26T09:00:00Z"


def start_decision(outcome: str, refused: str | None = None, now: str = STARTED) -> dict[str, Any]:
    given = {"type": "job.start", "key": "auto-0426", "playbook_key": "onbaording"}
    return {
        "type": "decision",
        "job_key": "auto-0426",
        "now": now,
        "input": {**given, "subject": {}, "contacts": []},
        "outcome": outcome,
        "refused": refused,
    }


def event_decision(outcome: str, key: str, refused: str | None = None) -> dict[str, Any]:
    given = {"type": "event", "action": "due", "properties": {}, "source": "world"}
    return {
        "type": "decision",
        "job_key": "job-7",
        "now": STARTED,
        "input": {**given, "idempotency_key": key},
        "outcome": outcome,
        "refused": refused,
    }


def model_with(*items: tuple[str, Any]) -> ScheduleModel:
    """A read model fed runs (``run``: a record's key and value) and decisions
    (``decision``) in the order given."""
    model = ScheduleModel(Topics("t"))
    for kind, item in items:
        if kind == "run":
            key, value = item
            model.apply(model.topics.schedule_runs, key, value, 0)
        else:
            model.decided(item)
    return model


START_RUN = run_record(
    "daily", "sl-1", "completed", STARTED, started_at=STARTED, job_key="auto-0426"
)
EVENT_RUN = run_record("remind", "wk-1", "completed", STARTED, started_at=STARTED, job_key="job-7")
REFUSED = start_decision("refused", "unknown playbook 'onbaording'")


@pytest.mark.parametrize("decision_first", [False, True])
def test_a_refused_start_reads_refused_whichever_is_read_first(decision_first: bool) -> None:
    items = [("run", START_RUN), ("decision", REFUSED)]
    model = model_with(*(reversed(items) if decision_first else items))
    [run] = model.newest_runs("daily", 10)[0]
    assert (run["status"], run["error"]) == ("refused", "unknown playbook 'onbaording'")
    assert model.newest_runs("daily", 10, status="completed")[0] == []
    assert model._awaiting == {}
    assert model.runs_held == sum(model._sizes["daily"].values())


def test_the_first_decision_of_a_start_counts() -> None:
    # A crash re-sent the slot's start: the copy is refused, the run did start its job.
    model = model_with(
        ("decision", start_decision("applied")),
        ("decision", start_decision("refused", "job_exists")),
        ("run", START_RUN),
    )
    assert model.newest_runs("daily", 10)[0][0]["status"] == "completed"


def test_another_starts_refusal_is_not_this_runs() -> None:
    later = start_decision("refused", "job_exists", now="2026-04-27T09:00:00Z")
    model = model_with(("run", START_RUN), ("decision", later))
    assert model.newest_runs("daily", 10)[0][0]["status"] == "completed"
    assert len(model._awaiting) == 2  # still waiting for its own decision


def test_a_refused_event_reads_refused_and_another_keys_does_not() -> None:
    model = model_with(
        ("run", EVENT_RUN),
        ("decision", event_decision("refused", "wk-other", "no job 'job-7'")),
    )
    assert model.newest_runs("remind", 10)[0][0]["status"] == "completed"
    model.decided(event_decision("refused", "wk-1", "no job 'job-7'"))
    run = model.newest_runs("remind", 10)[0][0]
    assert (run["status"], run["error"]) == ("refused", "no job 'job-7'")


def test_dropped_runs_leave_nothing_waiting() -> None:
    model = ScheduleModel(Topics("t"), runs_kept=1)
    model.apply(model.topics.schedule_runs, *START_RUN, offset=0)
    later = run_record("daily", "sl-2", "skipped", STARTED)
    model.apply(model.topics.schedule_runs, *later, offset=1)
    assert model._awaiting == {}
    model.remove("daily")
    assert model.runs == {}


def test_a_prompt_run_is_never_joined() -> None:
    prompt = run_record("p", "sl-3", "completed", STARTED, started_at=STARTED, output="ok")
    model = model_with(("run", prompt))
    assert model.runs["p"]["sl-3"]["status"] == "completed"
    assert model._awaiting == {}
