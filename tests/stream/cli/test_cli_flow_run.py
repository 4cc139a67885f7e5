"""`lemongraph flow run` and `lemongraph flow replay` (docs/flows.md, "Running a
flow at the terminal", "Replay"): each shipped example on the stand-in with its
script, answers on stdin, --json, and a recorded run replayed with no model and
no tool call. The commands run in the test's process (tests/inprocess.py); a
question answered on a real process's stdin runs the console script."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agents.dev.demo_tools import build_demo_tools
from agents.dev.standin import build_standin
from tests.inprocess import lemongraph
from tests.stream.cli.test_cli_simulate_check import PLAYBOOKS, ROOT

FLOWS = PLAYBOOKS / "flows"


def flow_run(
    *args: str,
    stdin: str = "",
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    process: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``lemongraph flow ARGS``: in the test's process (tests/inprocess.py), or with
    ``process`` through the console script."""
    # No model configured: the stand-in; no tool URL: the demo tools.
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LEMONGRAPH_", "OPENAI_"))
        and k not in ("CRM_URL", "BILLING_URL", "CALENDAR_URL")
    }
    environ.update(env or {})
    return lemongraph("flow", *args, cwd=cwd or ROOT, env=environ, input=stdin, process=process)


def example(name: str) -> list[str]:
    return [str(FLOWS / f"{name}.yaml"), "--script", str(FLOWS / f"{name}.standin.yaml")]


#: Each shipped example: its inputs, what is answered on stdin, the nodes it
#: completes, and the outputs it finishes with.
EXAMPLES = [
    (
        "classify-ticket",
        ["ticket=My invoice is wrong"],
        "",
        ["classify", "billing_desk"],
        {"reply": "Your invoice is attached again; the charge is correct."},
    ),
    (
        "classify-ticket",
        ["ticket=The site is down"],
        "We will call you within the hour\n",
        ["classify", "escalate"],
        {"reply": "We will call you within the hour"},
    ),
    (
        "approve-refund",
        ["order_id=A-17"],
        "yes\n",
        ["lookup", "approve", "refund", "confirm"],
        {"reply": "Your refund is made: the money is on its way."},
    ),
    (
        "approve-refund",
        ["order_id=A-17"],
        "not now\n",
        ["lookup", "approve", "decline"],
        {"refund": None},
    ),
    (
        "review-orders",
        ["order_ids=A-1, B-22 and A-1"],
        "",
        ["split", "spread", "lookup", "lookup", "sum_up"],
        {"summary": "Your orders are on their way or delivered."},
    ),
    (
        "review-orders",
        ["order_ids=my parcel"],
        "",
        ["split", "none_found"],
        {"summary": "Which order do you mean? Its id is on the confirmation email."},
    ),
    (
        "lookup-then-ask",
        ["order_id=A-17"],
        "ok\n",
        ["lookup", "decide", "confirm"],
        {"decision": {"action": "refund"}, "reply": "ok"},
    ),
]


@pytest.mark.parametrize(("name", "inputs", "stdin", "trail", "outputs"), EXAMPLES)
def test_each_example_runs_on_the_stand_in(
    name: str, inputs: list[str], stdin: str, trail: list[str], outputs: dict[str, Any]
) -> None:
    args = [a for i in inputs for a in ("--input", i)]
    proc = flow_run("run", *example(name), *args, "--json", stdin=stdin)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[0]["kind"] == "flow_run"
    assert lines[0]["flow"] == name
    end = lines[-1]
    assert end["kind"] == "end"
    assert end["status"] == "finished"
    assert end["trail"] == trail
    for key, value in outputs.items():
        assert end["outputs"][key] == value
    steps = [line for line in lines if line["kind"] == "step"]
    assert steps
    assert all(s["node"] for s in steps)
    # the same run, for people: one line per step, then how it ended
    human = flow_run("run", *example(name), *args, stdin=stdin)
    assert human.returncode == 0, human.stdout + human.stderr
    out = human.stdout.splitlines()
    assert out[-1].startswith("finished: ")
    assert next(line for line in out if line[:1].isdigit()).startswith(f"1 {steps[0]['node']}  ")


def test_a_question_is_printed_and_an_answer_not_allowed_is_asked_again(tmp_path: Path) -> None:
    (tmp_path / "pick.yaml").write_text(
        'version: "1"\noutputs: [choice]\nstate:\n  choice: {type: string}\nstart: ask\n'
        "nodes:\n  - {id: ask, type: ask, ask: 'Red or blue?', answers: [red, blue],"
        " output: choice}\n"
        "edges:\n  - {from: ask, to: END}\n",
        encoding="utf-8",
    )
    # the console script as its own process, answers on its stdin (the rest of
    # this module runs `lemongraph flow` in-process)
    proc = flow_run("run", "pick.yaml", stdin="green\nblue\n", cwd=tmp_path, process=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "? ask: Red or blue? [red | blue]"
    assert "the answer must be one of: red, blue" in proc.stdout
    assert lines[-1] == 'finished: {"choice":"blue"}'
    given = flow_run("run", "pick.yaml", "--answer", "ask=red", cwd=tmp_path)
    assert given.returncode == 0
    assert given.stdout.splitlines()[-1] == 'finished: {"choice":"red"}'
    ended = flow_run("run", "pick.yaml", cwd=tmp_path)  # stdin ends: no answer
    assert ended.returncode == 2
    assert "no answer for ask (stdin ended)" in ended.stderr


def test_a_failed_run_exits_1_and_bad_input_exits_2(tmp_path: Path) -> None:
    (tmp_path / "strict.yaml").write_text(
        'version: "1"\ninputs: [q]\noutputs: [a]\n'
        "state:\n  q: {type: string}\n  a: {type: object}\n"
        "start: ask\nnodes:\n  - id: ask\n    type: llm\n    prompt: '{{q}}'\n    output: a\n"
        "    schema: {type: object, properties: {n: {type: number, minimum: 5}}, required: [n]}\n"
        "edges:\n  - {from: ask, to: END}\n",
        encoding="utf-8",
    )
    (tmp_path / "strict.standin.yaml").write_text(
        "rules:\n  - when: {flow_node: ask}\n    json: {n: 1}\n", encoding="utf-8"
    )
    proc = flow_run(
        "run", "strict.yaml", "--script", "strict.standin.yaml", "--input", "q=hi", cwd=tmp_path
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "failed at ask: a.n must be at least 5, and it is 1"
    bad = flow_run("run", "strict.yaml", "--input", "nope=1", cwd=tmp_path)
    assert bad.returncode == 2
    assert "--input nope: not an input of the flow (inputs: q)" in bad.stderr
    (tmp_path / "broken.yaml").write_text('version: "1"\nstart: x\nnodes: []\n', encoding="utf-8")
    assert flow_run("run", "broken.yaml", cwd=tmp_path).returncode == 2


class Counted:
    """An ASGI app, counting the requests it is sent."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.requests = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.requests += 1
        await self.app(scope, receive, send)


def test_a_recorded_run_replays_with_no_model_and_no_tool_call(
    serve: Callable[[Any], str], tmp_path: Path
) -> None:
    standin = build_standin()
    model_url = serve(standin) + "/v1"
    tools = Counted(build_demo_tools())
    tools_url = serve(tools)
    env = {
        "OPENAI_BASE_URL": model_url,
        "OPENAI_API_KEY": "standin",
        "CRM_URL": f"{tools_url}/crm",
        "BILLING_URL": f"{tools_url}/billing",
    }
    record = tmp_path / "run.jsonl"
    flow = str(FLOWS / "approve-refund.yaml")
    proc = flow_run(
        "run", flow, "--input", "order_id=A-9", "--record", str(record), stdin="y\n", env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stand-in" not in proc.stderr
    assert "demo tools" not in proc.stderr
    calls, requests = standin.state.calls, tools.requests
    assert (calls, requests) == (1, 2)  # confirm's model call; get_order and refund_order
    replay = flow_run("replay", flow, "--journal", str(record), env=env)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert replay.stdout == "same path and outputs (4 steps, no model or tool called)\n"
    assert (standin.state.calls, tools.requests) == (calls, requests)
    as_json = flow_run("replay", flow, "--journal", str(record), "--json")
    assert json.loads(as_json.stdout) == {"kind": "replay", "same": True, "steps": 4}


def test_replay_of_a_changed_flow_names_the_first_difference(tmp_path: Path) -> None:
    record = tmp_path / "run.jsonl"
    proc = flow_run(
        "run", *example("classify-ticket"), "--input", "ticket=My invoice is wrong",
        "--record", str(record),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    original = (FLOWS / "classify-ticket.yaml").read_text(encoding="utf-8")
    folder = tmp_path / "flows"
    folder.mkdir()
    changed = folder / "classify-ticket.yaml"
    # the billing route goes to the technical desk now
    changed.write_text(
        original.replace(
            "{billing: billing_desk, technical: tech_desk,",
            "{billing: tech_desk, technical: billing_desk,",
        ),
        encoding="utf-8",
    )
    proc = flow_run("replay", str(changed), "--journal", str(record))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout == "differs: step 3: tech_desk call_model, which the recording never did\n"
    # a prompt reworded: the same node, another request
    changed.write_text(
        original.replace("Answer this billing question:", "Answer this question about money:"),
        encoding="utf-8",
    )
    proc = flow_run("replay", str(changed), "--journal", str(record))
    assert proc.returncode == 1
    assert proc.stdout.startswith("differs: step 3: billing_desk call_model: prompt was ")
    same = flow_run("replay", str(FLOWS / "classify-ticket.yaml"), "--journal", str(record))
    assert same.returncode == 0, same.stdout
