"""A command schedule's run and its checks (docs/schedules.md, "Command jobs"):
what a report says of an executed call, whatever the tool's kind (a command's
``{exit_code, duration_ms, output_tail, output_sha256, timed_out}``, or any other
result), and the check of a command schedule's tool and args against the
catalog, in process and through ``lemongraph check`` and ``lemongraph schedule
add`` (which refuses before it needs a broker)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agents.tools.executor import Outcome
from agents.tools.scheduled import OUTPUT_MAX, check_command_schedules, command_report
from tests.stream.cli.test_cli_simulate_check import run

CATALOG = """\
agents:
  conversation: {instructions: Help.}
tools:
  run_tests:
    description: Run the suite.
    parameters:
      type: object
      properties: {suite: {type: string, enum: [smoke, full]}}
      required: [suite]
      additionalProperties: false
    http: {url: "http://127.0.0.1:9/run", method: POST}
"""


def ran(exit_code: int, tail: str, timed_out: bool = False) -> dict[str, Any]:
    """A command tool's result (the shape issue 31 pins)."""
    return {
        "exit_code": exit_code,
        "duration_ms": 1200,
        "output_tail": tail,
        "output_sha256": "0" * 64,
        "timed_out": timed_out,
    }


def test_a_command_tools_exit_code_and_output_tail_are_reported() -> None:
    done = command_report(Outcome("done", '{"ok":true}', "lg-1", data=ran(0, "42 passed\n")))
    assert (done.status, done.outcome, done.exit_code, done.output, done.error) == (
        "completed", "done", 0, "42 passed\n", None
    )  # fmt: skip
    long = "x" * 5000 + "FAILED test_login\n"
    failed = command_report(Outcome("failed", '{"ok":false}', "lg-2", data=ran(2, long)))
    assert (failed.status, failed.outcome, failed.exit_code) == ("failed", "failed", 2)
    assert failed.error == "failed: exit code 2"
    assert failed.output == long[-OUTPUT_MAX:]  # the tail: its end is kept
    slow = command_report(Outcome("failed", "{}", "lg-3", data=ran(-9, "", timed_out=True)))
    assert slow.error == "failed: exit code -9 (timed out)"


def test_any_other_result_is_reported_as_an_excerpt() -> None:
    body = {"waiting": 3, "names": ["a" * 3000]}
    done = command_report(Outcome("done", "{}", "lg-4", http_status=200, data=body))
    assert (done.status, done.exit_code, done.http_status) == ("completed", None, 200)
    assert done.output.startswith('{"waiting":3,"names":["aaa')
    assert len(done.output) == OUTPUT_MAX
    told = '{"ok":false,"error":"HTTP 503: down"}'
    assert command_report(Outcome("failed", told, "lg-5")).error == "failed: HTTP 503: down"
    unknown = '{"ok":false,"error":"timed out after 5.0s; it may or may not have taken effect"}'
    assert command_report(Outcome("outcome_unknown", unknown, "lg-6")).error == (
        "outcome unknown: timed out after 5.0s; it may or may not have taken effect; not retried"
    )


def spec(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": "n", "action": {"type": "command", "tool": tool, "args": args}}


def test_the_catalog_check_names_an_unknown_tool_and_args_that_do_not_fit(
    tmp_path: Path,
) -> None:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(CATALOG)
    schedules = [
        ("s.yaml:2: schedules[0] (a)", spec("run_test", {})),
        ("s.yaml:5: schedules[1] (b)", spec("run_tests", {"suite": "all"})),
        ("s.yaml:8: schedules[2] (c)", spec("run_tests", {"suite": "smoke"})),
        ("s.yaml:9: schedules[3] (d)", {"id": "d", "action": {"type": "start_job"}}),
    ]
    assert check_command_schedules(schedules=schedules, catalog=catalog) == [
        f"s.yaml:2: schedules[0] (a): action.tool: no tool 'run_test' in {catalog} "
        "(did you mean 'run_tests'?)",
        f"s.yaml:5: schedules[1] (b): action.args/suite: do not fit the parameters of "
        f"'run_tests' in {catalog}: 'all' is not one of ['smoke', 'full']",
    ]


SCHEDULES = """\
schedules:
  - id: nightly
    name: Nightly
    schedule: daily at 2am
    command: {tool: run_tests, args: {suite: all}}
  - id: fine
    name: Fine
    schedule: daily at 3am
    command: {tool: run_tests, args: {suite: smoke}}
"""


def test_check_and_schedule_add_refuse_what_the_catalog_does_not_fit(tmp_path: Path) -> None:
    (tmp_path / "catalog.yaml").write_text(CATALOG)
    (tmp_path / "schedules.yaml").write_text(SCHEDULES)
    checked = run("check", str(tmp_path))
    problem = (
        "action.args/suite: do not fit the parameters of 'run_tests' in "
        f"{tmp_path / 'catalog.yaml'}: 'all' is not one of ['smoke', 'full']"
    )
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert checked.stdout.splitlines() == [
        f"{tmp_path / 'schedules.yaml'}:2: schedules[0] (nightly): {problem}"
    ]
    env = {"LEMONGRAPH_PLAYBOOKS_DIR": str(tmp_path), "LEMONGRAPH_KAFKA_URL": "kafka://127.0.0.1:9"}
    added = run("schedule", "add", str(tmp_path / "schedules.yaml"), env=env)
    assert added.returncode == 1, added.stdout + added.stderr
    assert added.stderr.splitlines() == [
        f"error: {tmp_path / 'schedules.yaml'}:2: schedules[0] (nightly): {problem}"
    ]
