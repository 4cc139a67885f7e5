"""Command tools (docs/agents.md, "Command tools"): the trusted executor runs
real programs — a model's argument is one literal argv element, the child gets
only the allowed environment, a timeout stops the whole process group, the
output is capped and hashed, values from the environment are never shown — and
the same rules as HTTP tools hold: refusals, bounds, flows, the journal, and a
call cut short by a killed service is never run again."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import signal
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest
import yaml
from pydantic import BaseModel

from agents.catalog import CatalogError, load_catalog
from agents.dev.standin import StandinScript, build_standin
from agents.flows.executor import FlowExecutor
from agents.flows.files import check_flow_paths
from agents.flows.handlers import HandlerRegistry
from agents.model import Model, ModelSettings
from agents.run import Conversation, Outbox, Runner
from agents.tools.command import OUTPUT_TAIL_BYTES
from agents.tools.executor import Executor, Outcome, derived_key
from compiler import CallTool, ToolResult
from tests.lanes import Lane, wait_for
from topics import InboxEvent, JournalRun, JournalToolCall, TaskOpenedRecord

ROOT = Path(__file__).resolve().parents[3]
#: Prints its arguments as JSON, one element each.
ECHO = "import sys, json; print(json.dumps(sys.argv[1:]))"
#: Prints ``bye`` and exits with its argument.
EXIT = "import sys; print('bye'); sys.exit(int(sys.argv[1]))"
#: 10 MiB of numbered lines: no window of it looks like another.
BIG = "import sys; sys.stdout.buffer.write(b''.join(b'%09d%c' % (i, 10) for i in range(1048576)))"

CATALOG_TEXT = f"""\
integrations:
  shell: {{tools: [echo, exits, sleepy, env_dump, big, append, nowhere, lost]}}
agents:
  conversation:
    instructions: Run things.
    bounds: {{max_turns: 6, max_tool_calls: 2}}
tools:
  echo:
    description: Echo the arguments.
    parameters:
      type: object
      properties: {{arg: {{type: string}}, more: {{type: array, items: {{type: string}}}}}}
      required: [arg]
      additionalProperties: false
    command:
      argv: ["${{PYTHON}}", "-c", "{ECHO}", "--token=${{TOKEN}}", "{{arg}}", "{{more}}"]
      env: []
    records: {{fact: echoed, properties: {{out: "$.output_tail"}}}}
  exits:
    description: Exit with a code.
    parameters: {{type: object, properties: {{code: {{type: integer}}}}, required: [code]}}
    command: {{argv: ["${{PYTHON}}", "-c", "{EXIT}", "{{code}}"], env: []}}
    records: {{fact: tests_passed, properties: {{exit_code: "$.exit_code"}}}}
    records_on_failure: {{fact: tests_failed, properties: {{exit_code: "$.exit_code"}}}}
  sleepy:
    description: Start a child that ignores SIGTERM and sleeps, and wait for it.
    command:
      argv: ["sh", "-c", "trap '' TERM; sleep 30 & echo $!; wait"]
      timeout: 0.5
    records_on_failure: {{fact: timed_out, properties: {{timed_out: "$.timed_out"}}}}
  env_dump:
    description: Print the environment.
    command: {{argv: ["env"], env: [PATH, HOME]}}
  big:
    description: Print 10 MiB.
    command: {{argv: ["${{PYTHON}}", "-c", "{BIG}"], env: []}}
  append:
    description: Append a line to a file.
    command: {{argv: ["sh", "-c", "echo ran >> \\"$1\\"", "sh", "${{RAN_FILE}}"]}}
    records: {{fact: appended}}
  nowhere:
    description: Run a program that does not exist.
    command: {{argv: ["/nonexistent/program"], env: []}}
    records_on_failure: {{fact: never}}
  lost:
    description: Run in a folder that does not exist.
    command: {{argv: ["${{PYTHON}}", "-c", "pass"], cwd: "${{NO_SUCH_DIR}}/x", env: []}}
"""
CATALOG = load_catalog(CATALOG_TEXT, "c.yaml")
GRANTED = tuple(CATALOG.tools)


def env_of(tmp_path: Path, **more: str) -> dict[str, str]:
    """The service's environment in these tests: what ``${VAR}`` reads and the
    allow-lists pick from; SECRET is in it, and no command may see it."""
    return {
        "PYTHON": sys.executable,
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "SECRET": "s3cr3t-value",
        "TOKEN": "tok-123",
        "RAN_FILE": str(tmp_path / "ran.txt"),
        **more,
    }


def call(
    tmp_path: Path, name: str, args: dict[str, Any], granted: tuple[str, ...] = GRANTED
) -> Outcome:
    async def go() -> Outcome:
        async with httpx2.AsyncClient() as client:
            executor = Executor(CATALOG, client, env_of(tmp_path))
            return await executor.run(
                job_key="job-1",
                task_id="job-1/run",
                name=name,
                arguments=orjson.dumps(args).decode(),
                granted=granted,
                occurrence=1,
            )

    return asyncio.run(go())


def test_exit_0_records_its_fact_and_a_non_zero_exit_the_failure_fact(tmp_path: Path) -> None:
    ok = call(tmp_path, "exits", {"code": 0})
    failed = call(tmp_path, "exits", {"code": 3})
    for outcome, code in ((ok, 0), (failed, 3)):
        assert outcome.data["exit_code"] == code
        assert outcome.data["output_tail"] == "bye\n"
        assert outcome.data["output_sha256"] == hashlib.sha256(b"bye\n").hexdigest()
        assert outcome.data["timed_out"] is False
        assert outcome.key == derived_key("job-1/run", "exits", {"code": code}, 1)
        assert outcome.fact is not None
        assert (outcome.fact.source, outcome.fact.idempotency_key) == ("tool", outcome.key)
        assert outcome.fact.properties == {"exit_code": code}
    assert (ok.status, ok.fact and ok.fact.action) == ("done", "tests_passed")
    assert (failed.status, failed.fact and failed.fact.action) == ("failed", "tests_failed")
    told = orjson.loads(failed.output)
    assert (told["ok"], told["error"]) == (False, "the command exited with 3")
    assert orjson.loads(ok.output)["ok"] is True
    # A command tool is not idempotent unless the catalog says so.
    assert not CATALOG.tools["exits"].idempotent


def test_a_model_argument_is_one_literal_argv_element(tmp_path: Path) -> None:
    hostile = ["; rm -rf /", "$(id)", "`id`", "a b", "*", "--token=forged", "'\"\n"]
    for arg in hostile:
        outcome = call(tmp_path, "echo", {"arg": arg, "more": ["x; y", "$HOME"]})
        assert outcome.status == "done", outcome.output
        argv = orjson.loads(outcome.data["output_tail"])
        # each as it was given, one element, after the catalog's own
        assert argv == ["--token=tok-123", arg, "x; y", "$HOME"]


def test_a_timeout_stops_the_whole_process_group(tmp_path: Path) -> None:
    started = time.monotonic()
    outcome = call(tmp_path, "sleepy", {})
    assert outcome.status == "failed"
    assert outcome.data["timed_out"] is True
    assert outcome.data["exit_code"] < 0  # ended by a signal
    assert outcome.fact is not None
    assert (outcome.fact.action, outcome.fact.properties) == ("timed_out", {"timed_out": True})
    assert orjson.loads(outcome.output)["error"] == "timed out: the command was stopped"
    # The child ignores SIGTERM: it took the SIGKILL, KILL_GRACE after the timeout.
    assert time.monotonic() - started < 10
    child = int(outcome.data["output_tail"])
    # The output ends when the child's files close, a moment before the kernel
    # marks it dead: on a loaded machine that moment can be seen.
    wait_for(lambda: not alive(child), timeout=5, interval=0.05, what=f"child {child} to end")


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def test_the_command_gets_only_the_allowed_environment(tmp_path: Path) -> None:
    outcome = call(tmp_path, "env_dump", {})
    assert outcome.status == "done"
    lines = outcome.data["output_tail"].splitlines()
    assert sorted(line.split("=", 1)[0] for line in lines) == ["HOME", "PATH"]
    assert f"HOME={tmp_path}" in lines
    assert "s3cr3t-value" not in outcome.output


def test_10_mib_of_output_is_capped_hashed_and_never_held(tmp_path: Path) -> None:
    expected = b"".join(b"%09d\n" % i for i in range(1048576))
    tracemalloc.start()
    try:
        outcome = call(tmp_path, "big", {})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert outcome.status == "done"
    assert outcome.data["output_bytes"] == len(expected) == 10 * 1024 * 1024
    assert outcome.data["output_sha256"] == hashlib.sha256(expected).hexdigest()
    assert outcome.data["output_tail"] == expected[-OUTPUT_TAIL_BYTES:].decode()
    assert peak < 2 * 1024 * 1024, peak  # read as a stream, never held
    told = orjson.loads(outcome.output)  # the model gets the end of it, as JSON
    assert len(outcome.output) <= 2000
    assert told["result"]["output_tail"].endswith("001048575\n")


def test_values_from_the_environment_are_shown_redacted(tmp_path: Path) -> None:
    outcome = call(tmp_path, "echo", {"arg": "hello world"})
    assert outcome.command is not None
    assert outcome.command.endswith("'--token=***' 'hello world'")
    assert "tok-123" not in outcome.command
    assert sys.executable not in outcome.command  # ${PYTHON} too
    assert outcome.journaled() == {
        "command": outcome.command,
        "exit_code": 0,
        "output_sha256": outcome.data["output_sha256"],
    }
    assert (outcome.url, outcome.http_status) == (None, None)


def test_refused_when_not_granted_or_the_arguments_do_not_fit(tmp_path: Path) -> None:
    ran = tmp_path / "ran.txt"
    refused = call(tmp_path, "append", {}, granted=("echo",))
    assert refused.status == "refused"
    assert "not granted" in refused.output
    unfit = call(tmp_path, "echo", {"arg": 3})
    assert unfit.status == "refused"
    assert "do not fit the tool's schema" in unfit.output
    extra = call(tmp_path, "echo", {"arg": "x", "program": "/bin/sh"})
    assert extra.status == "refused"
    assert not ran.exists()
    assert call(tmp_path, "append", {}).status == "done"  # granted: it runs
    assert ran.read_text() == "ran\n"


def test_a_command_that_cannot_start_fails_with_the_reason(tmp_path: Path) -> None:
    missing = call(tmp_path, "nowhere", {})
    assert (missing.status, missing.fact, missing.data) == ("failed", None, None)
    error = orjson.loads(missing.output)["error"]
    assert error == "the command did not start: No such file or directory: /nonexistent/program"
    lost = call(tmp_path, "lost", {})
    assert (lost.status, lost.fact) == ("failed", None)
    assert "the command did not start: No such file or directory" in lost.output


def test_the_catalog_checks_a_command_tool() -> None:
    text = """\
agents: {conversation: {instructions: Hi.}}
tools:
  both:
    description: Two kinds.
    http: {url: "http://x"}
    command: {argv: [ls]}
  neither:
    description: No kind.
  bad:
    description: Every mistake once.
    parameters: {type: object, properties: {path: {type: string}}}
    command:
      argv: ["{path}", "{nope}", "--in={path}", "${BROKEN", "ok"]
      cwd: "${ALSO"
      env: [PATH, "not a name"]
    records: {fact: f, properties: {code: "$.exitcode"}}
  empty:
    description: No program.
    command: {argv: [" "]}
  failing_http:
    description: An http call cannot record a failure.
    http: {url: "http://x"}
    records_on_failure: {fact: f}
"""
    with pytest.raises(CatalogError) as caught:
        load_catalog(text, "c.yaml")
    problems = [p.split(": ", 1)[1] for p in caught.value.problems]
    assert problems == [
        "tools.both: says more than one thing (http, command) for trusted code to do: "
        "exactly one of http, command, mcp, workspace",
        "tools.neither: says nothing for trusted code to do: "
        "exactly one of http, command, mcp, workspace",
        "tools.bad.command.argv: the program (argv[0]) cannot come from the model",
        "tools.bad.command.argv: '{nope}' names no property of the tool's parameters (path)",
        "tools.bad.command.argv: '--in={path}': a placeholder must be a whole argv element "
        "(make {path} an element of its own)",
        "tools.bad.command.argv: '${BROKEN': a ${VAR} is not well formed",
        "tools.bad.command.cwd: '${ALSO': a ${VAR} is not well formed",
        "tools.bad.command.env: 'not a name' is not a variable name",
        "tools.bad.records.properties.code: '$.exitcode': a command's result has exit_code, "
        "duration_ms, output_tail, output_sha256, output_bytes, timed_out",
        "tools.empty.command.argv: the program (argv[0]) is empty",
        "tools.failing_http.records_on_failure: a failed http call records nothing "
        "(only command, mcp tools record a failure)",
    ]


FLOW = """\
version: "1"
outputs: [result]
state:
  result: {type: object}
tools: [run_tests]
start: test
nodes:
  - {id: test, type: tool, tool: run_tests, args: {}, output: result}
edges:
  - {from: test, to: END}
"""
FLOW_CATALOG = """\
integrations:
  ci: {tools: [run_tests]}
  email: {}
agents: {conversation: {instructions: Hi.}}
tools:
  run_tests:
    description: Run the project's test suite.
    parameters: {type: object, properties: {}, additionalProperties: false}
    command: {argv: ["sh", "-c", "${TEST_CMD}"], cwd: "${WORKDIR}", timeout: 300, env: [PATH, HOME]}
    writes: false
    records: {fact: tests_passed, properties: {exit_code: "$.exit_code"}}
    records_on_failure: {fact: tests_failed, properties: {exit_code: "$.exit_code"}}
"""
FLOW_PLAYBOOK = """\
key: ship
version: 1
milestones:
  - id: test
    condition: {fact}
    integrations: [{integration}]
    flow: ci
"""


@pytest.mark.parametrize(
    ("fact", "integration", "found"),
    [
        ("tests_passed", "ci", []),
        ("tests_failed", "ci", []),  # a failed run is evidence too
        ("deployed", "ci", ["CLAIM_ONLY_PATH"]),
        ("tests_passed", "email", ["TOOL_NOT_IN_INTEGRATIONS"]),
    ],
)
def test_flow_checks_know_command_tools(
    tmp_path: Path, fact: str, integration: str, found: list[str]
) -> None:
    (tmp_path / "catalog.yaml").write_text(FLOW_CATALOG)
    (tmp_path / "ship.yaml").write_text(FLOW_PLAYBOOK.format(fact=fact, integration=integration))
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "ci.yaml").write_text(FLOW)
    problems, count = check_flow_paths([tmp_path / "flows"], tmp_path / "catalog.yaml")
    assert count == 1
    assert [p.rule for p in problems] == found, [str(p) for p in problems]


def test_a_flow_tool_node_runs_a_command_tool(tmp_path: Path) -> None:
    catalog = load_catalog(FLOW_CATALOG, "c.yaml")
    published: list[tuple[str, str, BaseModel]] = []

    async def publish(topic: str, key: str, record: BaseModel) -> None:
        published.append((topic, key, record))

    async def go() -> Any:
        env = {"PATH": os.environ["PATH"], "WORKDIR": str(tmp_path), "TEST_CMD": "pwd; exit 1"}
        async with httpx2.AsyncClient() as client:
            tools = Executor(catalog, client, env)
            executor = FlowExecutor(None, tools, HandlerRegistry(), publish)
            action = CallTool(call_id="j-1/ci/1/test/1/1", node="test", tool="run_tests")
            return await executor.execute(action, job_key="j-1", flow="ci", run_id="j-1/ci/1")

    result = asyncio.run(go())
    assert isinstance(result, ToolResult)
    assert (result.ok, result.error) == (False, "the command exited with 1")
    [fact] = [r for t, _, r in published if t == "inbox"]
    assert isinstance(fact, InboxEvent)
    assert (fact.action, fact.properties, fact.idempotency_key, fact.source) == (
        "tests_failed",
        {"exit_code": 1},
        "j-1/ci/1/test/1/1",
        "tool",
    )
    [journal] = [r for t, _, r in published if t == "journal"]
    assert isinstance(journal, JournalToolCall)
    assert (journal.outcome, journal.fact, journal.exit_code, journal.url) == (
        "failed",
        "tests_failed",
        1,
        None,
    )
    assert journal.command == "sh -c '***'"
    assert journal.output_sha256 == hashlib.sha256(f"{tmp_path}\n".encode()).hexdigest()


def test_a_run_counts_command_calls_against_its_bounds(
    tmp_path: Path, serve: Callable[[Any], str]
) -> None:
    model_url = serve(
        build_standin(StandinScript.model_validate({"rules": [{"call": {"tool": "append"}}]}))
    )
    published: list[BaseModel] = []

    async def publish(topic: str, key: str, record: BaseModel) -> None:
        published.append(record)

    async def save(conv: Conversation) -> None:
        pass

    async def go() -> Any:
        conv = Conversation("job-1")
        conv.apply(
            TaskOpenedRecord(
                task_id="job-1/run", job_key="job-1", milestone="run", at="2026-01-05T09:00:00Z",
                instructions="Run it.", playbook_instructions="", integrations=["shell"],
                deadline="2026-01-08T09:00:00Z", frontier=["run"], playbook_key="p",
            )
        )  # fmt: skip
        model = Model(ModelSettings(api_key="sk-test", base_url=f"{model_url}/v1"))
        async with httpx2.AsyncClient() as client:
            executor = Executor(CATALOG, client, env_of(tmp_path))
            try:
                return await Runner(CATALOG, model, executor).run(conv, Outbox(publish, save))
            finally:
                await model.close()

    end = asyncio.run(go())
    assert (end.reason, end.tool_calls) == ("max_tool_calls", 2)
    assert (tmp_path / "ran.txt").read_text() == "ran\n" * 2  # two calls, two runs
    calls = [r for r in published if isinstance(r, JournalToolCall)]
    assert [(c.tool, c.outcome, c.fact, c.exit_code) for c in calls] == [
        ("append", "done", "appended", 0)
    ] * 2
    assert calls[0].command == "sh -c 'echo ran >> \"$1\"' sh '***'"
    assert len({c.key for c in calls}) == 2  # the next occurrence: a new key
    assert [r.ended for r in published if isinstance(r, JournalRun)] == ["max_tool_calls"]


# -- a service killed mid-command ---------------------------------------------------

SHELL_PLAYBOOK = """\
key: shellwork
version: 1
instructions: Run the command.
milestones:
  - id: runIt
    instructions: Run the command once.
    condition: line_appended
    integrations: [shell]
"""
SHELL_SCRIPT = StandinScript.model_validate(
    {
        "rules": [
            {"when": {"tool_result": "append_line"}, "say": "I cannot tell whether it ran."},
            {"when": {"next_step": "runIt"}, "call": {"tool": "append_line", "args": {}}},
            {"say": "Hello."},
        ]
    }
)  # fmt: skip


@pytest.mark.broker
@pytest.mark.timeout(240)
def test_a_service_killed_mid_command_does_not_run_it_again(
    lane: Lane, serve: Callable[[Any], str], tmp_path: Path
) -> None:
    """The command writes its pid to a file, then sleeps (in a session of its
    own, it outlives the service): the service is killed mid-call, and the
    resumed run finds the call pending and does not run it again."""
    catalog = yaml.safe_load((ROOT / "examples" / "catalog.yaml").read_text())
    catalog["integrations"]["shell"] = {"tools": ["append_line"]}
    catalog["tools"]["append_line"] = {
        "description": "Append this command's pid to the run file, then wait.",
        "command": {"argv": ["sh", "-c", 'echo $$ >> "$1"; exec sleep 60', "sh", "${RAN_FILE}"]},
        "records": {"fact": "line_appended"},
    }
    (lane.playbooks / "catalog.yaml").write_text(yaml.safe_dump(catalog))
    shutil.copytree(ROOT / "examples" / "skills", lane.playbooks / "skills", dirs_exist_ok=True)
    (lane.playbooks / "shellwork.yaml").write_text(SHELL_PLAYBOOK)
    ran = tmp_path / "ran.txt"
    env = {
        "OPENAI_BASE_URL": f"{serve(build_standin(SHELL_SCRIPT))}/v1",
        "OPENAI_API_KEY": "sk-test",
        "RAN_FILE": str(ran),
    }
    lane.start_worker()
    agents = lane.start(["agents"], "agents: ready", **env)
    lane.send({"type": "job.start", "key": "s-1", "playbook_key": "shellwork"})
    deadline = time.monotonic() + 90
    while not ran.exists() or not ran.read_text().endswith("\n"):
        assert time.monotonic() < deadline, "the command never ran"
        time.sleep(0.1)
    try:
        agents.stop(signal.SIGKILL)  # mid-call: the command is still sleeping
        lane.start(["agents"], "agents: ready", **env)

        def resumed(records: list[dict[str, Any]]) -> bool:
            return any(
                r["value"]["type"] == "journal.run" and r["value"]["replayed"] for r in records
            )

        journal = [r["value"] for r in lane.wait_until("journal", resumed, timeout=120)]
        calls = [j for j in journal if j["type"] == "journal.tool_call"]
        assert [(c["tool"], c["outcome"], c["fact"]) for c in calls] == [
            ("append_line", "outcome_unknown", None)
        ]
        assert "may or may not have taken effect" in calls[0]["result"]
        assert len(ran.read_text().splitlines()) == 1  # it ran once
    finally:
        for pid in ran.read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(pid), signal.SIGKILL)
