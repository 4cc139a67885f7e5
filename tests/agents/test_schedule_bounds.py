"""Schedules cannot run away (docs/schedules.md, "Wake loops"; docs/agents.md,
"Scheduled prompts and heartbeats"), with real processes: the worker decides
the schedules, the gateway takes the wakes, ``lemongraph agents`` runs the
prompts on the stand-in model through the real ``openai`` client, and the tools
are HTTP endpoints.

* A prompt schedule whose tool wakes its own schedule, and two that wake each
  other, stop at the first wake from inside their own chain: the worker records
  it ``skipped`` with the reason, and nothing more runs.
* Slow prompt runs fill their own bound (``LEMONGRAPH_PROMPT_CONCURRENCY``), not
  the conversations': a new job's first agent run starts at once beside them.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from fastapi import FastAPI

from agents.dev.standin import StandinScript, build_standin
from tests.lanes import Lane, wait_for
from tests.stream.gateway.conftest import launch_gateway

pytestmark = [pytest.mark.broker, pytest.mark.timeout(240)]


def _wake_tool(target: str) -> str:
    return f"""\
  wake_{target}:
    description: Wake the {target} schedule.
    parameters: {{type: object, properties: {{}}, additionalProperties: false}}
    http:
      url: "${{GATEWAY}}/v1/schedules/{target}/wake"
      method: POST
      headers: {{Authorization: "Bearer ${{WAKE_TOKEN}}"}}
"""


CATALOG = (
    """\
integrations: {}
agents:
  conversation: {instructions: Help.}
  looper: {instructions: Wake your own schedule., tools: [wake_loop]}
  pinger: {instructions: Wake pong., tools: [wake_pong]}
  ponger: {instructions: Wake ping., tools: [wake_ping]}
  checker: {instructions: Check the slow queue., tools: [slow_check]}
tools:
"""
    + _wake_tool("loop")
    + _wake_tool("ping")
    + _wake_tool("pong")
    + """\
  slow_check:
    description: Check the slow queue.
    parameters: {type: object, properties: {}, additionalProperties: false}
    http: {url: "${SLOW_URL}/check", method: POST, timeout: 120}
    idempotent: true
"""
)
RULES: list[dict[str, Any]] = []
for _agent, _tool in (
    ("looper", "wake_loop"),
    ("pinger", "wake_pong"),
    ("ponger", "wake_ping"),
    ("checker", "slow_check"),
):
    RULES += [
        {"when": {"agent": _agent, "tool_result": _tool}, "say": f"Done: {_tool}."},
        {"when": {"agent": _agent}, "call": {"tool": _tool, "args": {}}},
    ]
SCRIPT = StandinScript.model_validate({"rules": [*RULES, {"say": "Hello."}]})


def prompt_schedule(sid: str, agent: str) -> dict[str, Any]:
    return {
        "id": sid,
        "name": f"Schedule {sid}",
        "schedule": "@yearly",
        "action": {"type": "prompt", "agent": agent, "prompt": "Go."},
    }


def start_agents(lane: Lane, serve: Callable[[Any], str], **env: str) -> FastAPI:
    """``lemongraph agents`` on the stand-in (returned) with :data:`CATALOG`."""
    (lane.playbooks / "catalog.yaml").write_text(CATALOG)
    model = build_standin(SCRIPT)
    url = f"{serve(model)}/v1"
    lane.start(["agents"], "agents: ready", OPENAI_BASE_URL=url, OPENAI_API_KEY="sk-test", **env)
    return model


def runs_of(lane: Lane, sid: str) -> dict[str, dict[str, Any]]:
    """The last record of each run of ``sid`` on ``schedule-runs``."""
    last: dict[str, dict[str, Any]] = {}
    for record in lane.read("schedule-runs", idle=0.2):
        value = record["value"]
        if value["type"] == "schedule.run" and value["schedule_id"] == sid:
            last[value["run_id"]] = value
    return last


def settled(lane: Lane, sid: str) -> dict[str, dict[str, Any]] | None:
    """``sid``'s runs, once one is refused and none is still going (else None)."""
    runs = runs_of(lane, sid)
    refused = [r for r in runs.values() if r["status"] == "skipped"]
    going = [r for r in runs.values() if r["status"] in ("pending", "running")]
    return runs if refused and not going else None


def test_a_schedule_that_wakes_itself_or_its_waker_is_refused_at_the_first_loop(
    lane: Lane, serve: Callable[[Any], str]
) -> None:
    lane.start_worker()
    gateway = launch_gateway(lane)
    try:
        token = gateway.token(name="ops")
        wake_token = gateway.token(name="wake-tool")
        model = start_agents(lane, serve, GATEWAY=gateway.api, WAKE_TOKEN=wake_token)
        with gateway.client(token) as client:
            for sid, agent in (("loop", "looper"), ("ping", "pinger"), ("pong", "ponger")):
                created = client.post("/v1/schedules", json=prompt_schedule(sid, agent))
                assert created.status_code == 201, created.text
            for sid in ("loop", "ping"):
                kicked = client.post(f"/v1/schedules/{sid}/wake", json={"request_id": "kick"})
                assert kicked.status_code == 202, kicked.text
        loop = wait_for(lambda: settled(lane, "loop"), 120, 0.5, "loop's refused wake")
        ping = wait_for(lambda: settled(lane, "ping"), 120, 0.5, "ping's refused wake")
        pong = runs_of(lane, "pong")
    finally:
        gateway.stop()

    # loop: the kick ran, and its own wake from inside that run was refused.
    assert sorted(r["status"] for r in loop.values()) == ["completed", "skipped"], loop
    [first] = [r for r in loop.values() if r["status"] == "completed"]
    [again] = [r for r in loop.values() if r["status"] == "skipped"]
    assert first["output"] == "Done: wake_loop."
    assert again["triggered_by"] == "wake"
    assert again["error"] == (
        f"wake loop: woken from inside its own run loop/{first['run_id']} "
        f"(origin: loop/{first['run_id']})"
    )
    # ping → pong → ping: pong's run carried ping's, and ping refused the wake back.
    assert [r["status"] for r in pong.values()] == ["completed"], pong
    [pong_run] = pong.values()
    assert sorted(r["status"] for r in ping.values()) == ["completed", "skipped"], ping
    [ping_run] = [r for r in ping.values() if r["status"] == "completed"]
    [back] = [r for r in ping.values() if r["status"] == "skipped"]
    chain = f"ping/{ping_run['run_id']}, pong/{pong_run['run_id']}"
    assert back["error"] == (
        f"wake loop: woken from inside its own run ping/{ping_run['run_id']} (origin: {chain})"
    )
    # The wakes on the inbox: two each for loop and ping, one for pong, each
    # from the gateway with the origin the executor's header said.
    wakes = [r["value"] for r in lane.read("inbox") if r["value"]["type"] == "schedule.wake"]
    origins = sorted((w["schedule_id"], tuple(w["origin"])) for w in wakes)
    assert origins == [
        ("loop", ()),
        ("loop", (f"loop/{first['run_id']}",)),
        ("ping", ()),
        ("ping", (f"ping/{ping_run['run_id']}", f"pong/{pong_run['run_id']}")),
        ("pong", (f"ping/{ping_run['run_id']}",)),
    ]
    # Three runs, two model calls each (the wake, then the answer): nothing more.
    assert model.state.calls == 6


class SlowQueue:
    """A tool endpoint that holds every call until released (at most 90 s),
    counting the calls in flight."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.in_flight = 0
        self.most = 0
        self.calls = 0
        self.app = FastAPI()
        self.app.post("/check")(self.check)

    async def check(self) -> dict[str, Any]:
        self.calls += 1
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            give_up = time.monotonic() + 90
            while not self.released.is_set() and time.monotonic() < give_up:
                await asyncio.sleep(0.05)
        finally:
            self.in_flight -= 1
        return {"waiting": 0}


def prompt_task(sid: str, run: str) -> bytes:
    deadline = (datetime.now(UTC) + timedelta(minutes=5)).isoformat().replace("+00:00", "Z")
    return orjson.dumps(
        {"type": "schedule.prompt", "schedule_id": sid, "run_id": run, "agent": "checker",
         "prompt": "Check.", "attempt": 0, "deadline": deadline}
    )  # fmt: skip


def job_task(key: str) -> bytes:
    now = datetime.now(UTC)
    return orjson.dumps(
        {"type": "task.opened", "task_id": f"{key}/first", "job_key": key, "milestone": "first",
         "at": now.isoformat().replace("+00:00", "Z"), "instructions": "Greet them.",
         "playbook_instructions": "", "integrations": [], "frontier": ["first"],
         "deadline": (now + timedelta(days=1)).isoformat().replace("+00:00", "Z"),
         "playbook_key": "p"}
    )  # fmt: skip


def test_slow_prompt_runs_never_delay_a_new_jobs_first_agent_run(
    lane: Lane, serve: Callable[[Any], str]
) -> None:
    slow = SlowQueue()
    start_agents(
        lane,
        serve,
        SLOW_URL=serve(slow.app),
        LEMONGRAPH_AGENT_CONCURRENCY="64",  # the defaults, said here
        LEMONGRAPH_PROMPT_CONCURRENCY="4",
    )
    try:
        lane.produce(
            [(f"s{n}".encode(), prompt_task(f"s{n}", f"sl-{n}")) for n in range(12)], topic="tasks"
        )
        # The prompt runs' own bound is full: four calls wait at the tool.
        wait_for(lambda: slow.in_flight >= 4, 60, 0.1, "four slow calls in flight")
        sent = time.monotonic()
        lane.produce([(b"job-1", job_task("job-1"))], topic="tasks")

        def first_call() -> float | None:
            journal = [r["value"] for r in lane.read("journal", idle=0.1)]
            ours = [j for j in journal if j["job_key"] == "job-1"]
            return time.monotonic() - sent if ours else None

        waited = wait_for(first_call, 30, 0.1, "the job's first model call")
        assert waited < 10, waited  # seconds; it waited for the slow tool before
        assert slow.most == 4  # never more prompt runs at once than their bound
    finally:
        slow.released.set()

    def reported() -> list[dict[str, Any]] | None:
        found = [
            r["value"] for r in lane.read("schedule-runs", idle=0.2)
            if r["value"]["type"] == "schedule.report"
        ]  # fmt: skip
        return found if len(found) >= 12 else None

    reports = wait_for(reported, 120, 0.5, "twelve reports")
    assert sorted(r["status"] for r in reports) == ["completed"] * 12
    assert slow.calls == 12
    assert slow.most == 4
