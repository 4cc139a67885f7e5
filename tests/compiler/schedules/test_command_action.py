"""Command schedules in the pure core (docs/schedules.md, "Command jobs"): the
``command`` action's shape, the seed's form ``command: {tool, args}``, what is
refused and why; and the state machine treating a command run as it treats a
prompt run (active until reported, overlap, timeout, retries), except that a
run whose outcome is unknown is never retried."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest

from compiler import (
    Define,
    Dispatch,
    Report,
    RunRecorded,
    ScheduleError,
    ScheduleState,
    ScheduleStep,
    ScheduleTick,
    Wake,
    request_run_id,
    retry_id,
    schedule_step,
    slot_id,
    validate_schedule,
)
from topics import ScheduleRunRecord

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
COMMAND = {"type": "command", "tool": "run_tests", "args": {"suite": "smoke", "n": [1, 2]}}


def definition(**fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"id": "s", "name": "Nightly tests", "schedule": "every 30m"}
    out.update(fields)
    return out


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def ms(instant: datetime) -> int:
    return int(instant.timestamp() * 1000)


def slot(minutes: float) -> str:
    return slot_id("s", at(minutes))


# -- the shape -------------------------------------------------------------------------


def test_a_command_action_is_a_tool_and_its_args_and_reads_back_the_same() -> None:
    schedule = validate_schedule(definition(action=COMMAND))
    assert schedule.action == COMMAND
    assert schedule.action_type == "command"
    assert schedule.to_json()["action"] == COMMAND
    assert validate_schedule(schedule.to_json()) == schedule


def test_the_seeds_form_is_the_same_action() -> None:
    seed = validate_schedule(
        definition(command={"tool": "run_tests", "args": {"suite": "smoke", "n": [1, 2]}})
    )
    assert seed == validate_schedule(definition(action=COMMAND))
    assert "command" not in seed.to_json()  # stored as the action
    # args default to none
    bare = validate_schedule(definition(command={"tool": "run_tests"}))
    assert bare.action == {"type": "command", "tool": "run_tests", "args": {}}
    assert validate_schedule(definition(action={"type": "command", "tool": "t", "args": None}))


REFUSED = [
    (
        definition(action=COMMAND, command={"tool": "x"}),
        "command",
        "command: give action or command, not both (command: {tool, args} is the action "
        "{type: command, tool, args})",
    ),
    (
        definition(command="make test"),
        "command",
        "command: must be an object: {tool: NAME, args: {...}}",
    ),
    (definition(command={"args": {}}), "command.tool", "command.tool: this field is required"),
    (
        definition(action={"type": "command", "args": {}}),
        "action.tool",
        "action.tool: this field is required",
    ),
    (
        definition(command={"tool": "rm -rf /"}),
        "command.tool",
        "command.tool: 'rm -rf /' is not a tool name: 1-64 letters, digits, '_' and '-', "
        "starting with a letter or '_'",
    ),
    (
        definition(command={"tool": "t", "args": ["--all"]}),
        "command.args",
        "command.args: must be a JSON object (the tool's arguments), got list",
    ),
    (
        definition(action={"type": "command", "tool": "t", "args": "x=1"}),
        "action.args",
        "action.args: must be a JSON object (the tool's arguments), got str",
    ),
    (
        definition(command={"tool": "t", "args": {"since": date(2026, 1, 5)}}),
        "command.args.since",
        "command.args.since: datetime.date(2026, 1, 5) (date) is not JSON: quote it to make it "
        "text",
    ),
    (
        definition(command={"tool": "t", "args": {"n": [1, float("nan")]}}),
        "command.args.n.1",
        "command.args.n.1: nan is not a JSON number",
    ),
    (
        definition(command={"tool": "t", "args": {1: "x"}}),
        "command.args",
        "command.args: the key 1 is not text: JSON keys are text",
    ),
    (
        definition(command={"tool": "t"}, meta={"heartbeat": True}),
        "meta.heartbeat",
        "meta.heartbeat: a heartbeat is a prompt schedule: action.type must be prompt",
    ),
    # the aliases: a near or usual name is suggested
    (
        definition(cmd={"tool": "t"}),
        "cmd",
        "cmd: unknown field 'cmd' (did you mean 'command'?)",
    ),
    (
        definition(command={"tool": "t", "arguments": {}}),
        "command.arguments",
        "command.arguments: unknown field 'arguments' (did you mean 'args'?)",
    ),
    (
        definition(action={"type": "command", "tool": "t", "params": {}}),
        "action.params",
        "action.params: unknown field 'params' (did you mean 'args'?)",
    ),
    (
        definition(command={"tol": "t"}),
        "command.tol",
        "command.tol: unknown field 'tol' (did you mean 'tool'?)",
    ),
    (definition(), "action", "action: this field is required"),
]


@pytest.mark.parametrize(("data", "field", "message"), REFUSED)
def test_what_is_refused_names_the_field_and_why(data: Any, field: str, message: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        validate_schedule(data, "schedules.yaml")
    assert (caught.value.field, str(caught.value)) == (field, message)


# -- the state machine -------------------------------------------------------------------


def start(**fields: Any) -> tuple[ScheduleState, ScheduleStep]:
    schedule = validate_schedule(definition(command={"tool": "run_tests"}, **fields))
    state = schedule_step(None, T0, Define(schedule)).state
    assert state is not None
    step = schedule_step(state, at(30), ScheduleTick())
    assert step.state is not None
    return step.state, step


def runs(step: ScheduleStep) -> list[dict[str, Any]]:
    out = [dict(e.run) for e in step.effects if isinstance(e, RunRecorded)]
    for run in out:
        assert ScheduleRunRecord.model_validate(run).dump() == run  # exactly its fields
    return out


def test_a_command_run_is_dispatched_and_stays_running_until_its_report() -> None:
    state, step = start()
    (dispatch,) = [e for e in step.effects if isinstance(e, Dispatch)]
    assert dispatch == Dispatch(
        slot(30),
        "s",
        ms(at(30)),
        "schedule",
        0,
        slot(30),
        {"type": "command", "tool": "run_tests", "args": {}},
        None,
        None,
        ms(at(35)),  # the schedule's timeout bounds the run
    )
    assert [(r["status"], r["exit_code"]) for r in runs(step)] == [("running", None)]
    assert [a.run_id for a in state.active] == [slot(30)]
    ended = schedule_step(state, at(31), Report(slot(30), "completed", "42 passed\n", None, 0))
    (run,) = runs(ended)
    assert (run["status"], run["output"], run["exit_code"]) == ("completed", "42 passed\n", 0)
    assert ended.state is not None
    assert ended.state.active == ()


def test_overlap_skips_a_slot_while_a_command_runs() -> None:
    state, _ = start(timeout="1h")
    step = schedule_step(state, at(60), ScheduleTick())
    (run,) = runs(step)
    assert (run["status"], run["error"]) == ("skipped", f"overlap: run {slot(30)} still running")


def test_a_failed_command_run_is_retried_with_its_exit_code_recorded() -> None:
    state, _ = start(max_retries=1, retry_backoff="1m")
    step = schedule_step(
        state, at(31), Report(slot(30), "failed", "FAILED test_x\n", "exit code 2", 2)
    )
    (run,) = runs(step)
    assert (run["status"], run["error"], run["exit_code"]) == ("failed", "exit code 2", 2)
    assert step.state is not None
    assert [(r.root_run_id, r.attempt) for r in step.state.retries] == [(slot(30), 1)]
    retried = schedule_step(step.state, at(32), ScheduleTick())
    (dispatch,) = [e for e in retried.effects if isinstance(e, Dispatch)]
    assert (dispatch.run_id, dispatch.action["type"]) == (retry_id(slot(30), 1), "command")


def test_a_timed_out_command_run_is_retried() -> None:
    state, _ = start(max_retries=1)
    step = schedule_step(state, at(35), ScheduleTick())
    (run,) = runs(step)
    assert (run["status"], run["error"]) == ("timeout", "timeout: no report within 5m")
    assert step.state is not None
    assert len(step.state.retries) == 1


def test_a_run_whose_outcome_is_unknown_is_never_retried() -> None:
    state, _ = start(max_retries=3)
    unknown = Report(slot(30), "failed", "", "outcome unknown: ...; not retried", None, False)
    step = schedule_step(state, at(31), unknown)
    (run,) = runs(step)
    assert (run["status"], run["error"]) == ("failed", "outcome unknown: ...; not retried")
    assert step.state is not None
    assert step.state.retries == ()


def test_a_wakes_context_is_recorded_and_the_args_stay_as_defined() -> None:
    schedule = validate_schedule(definition(command={"tool": "t", "args": {"a": 1}}))
    state = schedule_step(None, T0, Define(schedule)).state
    assert state is not None
    step = schedule_step(state, at(1), Wake("r", {"ticket": "T-1"}))
    (dispatch,) = [e for e in step.effects if isinstance(e, Dispatch)]
    assert dispatch.action == {"type": "command", "tool": "t", "args": {"a": 1}}
    assert dispatch.context == {"ticket": "T-1"}
    assert dispatch.run_id == request_run_id("s", "r")
    assert runs(step)[0]["context"] == {"ticket": "T-1"}
