"""``schedule.prompt`` tasks in the agents service, on a real broker: the real
``lemongraph agents`` process, the stand-in model over HTTP through the real
``openai`` client, and a local tool endpoint. Each run reports once on
``schedule-runs``, whatever is delivered again and whenever the service dies."""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi import FastAPI, Request

from agents.catalog import load_catalog
from agents.dev.standin import StandinScript, build_standin
from agents.model import ModelSettings
from agents.schedule_runs import run_key
from agents.service import AgentService, Where
from agents.tools.executor import derived_key
from stream.engine.worker import ensure_all_topics
from stream.runtime.config import Settings
from stream.runtime.kafka import bootstrap_of, producer, read_topic
from tests.lanes import Lane, wait_for
from topics import Headers, Topics

pytestmark = [pytest.mark.broker, pytest.mark.timeout(240)]

CATALOG = """\
integrations: {}
agents:
  conversation: {instructions: Help.}
  reporter:
    instructions: You check the queue and report.
    tools: [check_queue]
  greeter:
    instructions: You answer the schedule's prompt.
  tight:
    instructions: You check the queue, in one turn.
    tools: [check_queue]
    bounds: {max_turns: 1}
tools:
  check_queue:
    description: Count what waits in the queue.
    parameters: {type: object, properties: {}, additionalProperties: false}
    http: {url: "${QUEUE_URL}/check", method: POST}
    idempotent: true
    records: {fact: queue_checked, properties: {waiting: "$.waiting"}}
  nightly_job:
    description: Run the nightly job (not idempotent).
    parameters:
      type: object
      properties: {suite: {type: string}}
      required: [suite]
      additionalProperties: false
    # A command tool (agents/tools/command.py): its side effect is a line in
    # ${EFFECTS}, then 4 s of work (long enough to kill the service mid-call).
    command: {argv: [/bin/sh, -c, 'echo "$0" >> "$1"; sleep 4', "{suite}", "${EFFECTS}"]}
"""
SCRIPT = StandinScript.model_validate(
    {
        "rules": [
            {"when": {"agent": "reporter", "tool_result": "check_queue"},
             "say": "Queue checked: 3 waiting."},
            {"when": {"agent": "reporter"}, "call": {"tool": "check_queue", "args": {}}},
            {"when": {"agent": "tight"}, "call": {"tool": "check_queue", "args": {}}},
            {"when": {"last_message_contains": "fail please"}, "fail": 500},
            {"when": {"last_message_contains": 'Context: {"ticket":"T-9"}'},
             "say": "I saw the context."},
            {"say": " HEARTBEAT_OK\n"},
        ]
    }
)  # fmt: skip


WOKEN = 'Look.\n\nContext: {"ticket":"T-9"}'


def queue(slow: int = 0) -> FastAPI:
    """The tool's endpoint; the first ``slow`` calls answer only after a while
    (long enough to kill the service mid-call)."""
    app = FastAPI()
    app.state.calls = []

    @app.post("/check")
    async def check(request: Request) -> dict[str, Any]:
        app.state.calls.append(request.headers.get("idempotency-key"))
        if len(app.state.calls) <= slow:
            await asyncio.sleep(4)
        return {"waiting": 3}

    return app


def task(schedule: str, run: str, agent: str, prompt: str = "Check.", **extra: Any) -> bytes:
    deadline = datetime.now(UTC) + timedelta(minutes=5)
    return orjson.dumps(
        {
            "type": "schedule.prompt",
            "schedule_id": schedule,
            "run_id": run,
            "agent": agent,
            "prompt": prompt,
            "attempt": 0,
            "deadline": deadline.isoformat().replace("+00:00", "Z"),
            **extra,
        }
    )


def reports(lane: Lane, at_least: int = 1) -> list[dict[str, Any]] | None:
    """The reports on schedule-runs, once there are ``at_least`` (else None)."""
    found = [
        r for r in lane.read("schedule-runs", idle=0.2) if r["value"]["type"] == "schedule.report"
    ]
    return found if len(found) >= at_least else None


def start_agents(
    lane: Lane, serve: Callable[[Any], str], tools: FastAPI, **more: str
) -> tuple[FastAPI, dict[str, str]]:
    (lane.playbooks / "catalog.yaml").write_text(CATALOG)
    model = build_standin(SCRIPT)
    env = {
        "OPENAI_BASE_URL": f"{serve(model)}/v1",
        "OPENAI_API_KEY": "sk-test",
        "QUEUE_URL": serve(tools),
        "LEMONGRAPH_MODEL_RETRIES": "1",
        **more,
    }
    # At info: it says which task it ignored (a run reported already).
    lane.start(["agents", "--loglevel", "info"], "agents: ready", **env)
    return model, env


def wait_ignored(lane: Lane, *run_ids: str) -> None:
    """An observed end: the agents service (the last started) said it ignored a
    task of each run, reported already; nothing of such a task runs after that."""
    for run_id in run_ids:
        lane.workers[-1].wait_for(f"agents: prompt run {run_id} was reported already: ignored")


def test_a_prompt_task_runs_once_and_reports_its_reply_or_why_it_failed(
    lane: Lane, serve: Callable[[Any], str]
) -> None:
    tools = queue()
    model, _ = start_agents(lane, serve, tools)
    past = (datetime.now(UTC) - timedelta(seconds=1)).isoformat().replace("+00:00", "Z")
    tasks = [
        (b"s-report", task("s-report", "sl-1", "reporter")),
        (b"s-heart", task("s-heart", "sl-2", "greeter", "Say HEARTBEAT_OK if all is well.")),
        (b"s-wake", task("s-wake", "wk-3", "greeter", "Look.", context={"ticket": "T-9"})),
        (b"s-nobody", task("s-nobody", "sl-4", "nobody")),
        (b"s-late", task("s-late", "sl-5", "greeter", deadline=past)),
        (b"s-fail", task("s-fail", "sl-6", "greeter", "fail please")),
        (b"s-tight", task("s-tight", "sl-7", "tight")),
        # as the worker dispatches a wake: the context appended to the prompt already
        (b"s-wake", task("s-wake", "wk-8", "greeter", WOKEN, context={"ticket": "T-9"})),
    ]
    lane.produce(tasks, topic="tasks")

    found = wait_for(lambda: reports(lane, 8), 90, 0.3, "eight reports")
    by_run = {r["value"]["run_id"]: r for r in found}
    assert len(by_run) == 8, [r["value"] for r in found]
    # Each report is keyed by its schedule, on the partition its task came on.
    sent = {r["value"]["run_id"]: r["partition"] for r in lane.read("tasks")}
    for run_id, record in by_run.items():
        assert record["key"] == record["value"]["schedule_id"]
        assert record["partition"] == sent[run_id]
    outcome = {k: (r["value"]["status"], r["value"]["output"]) for k, r in by_run.items()}
    assert outcome["sl-1"] == ("completed", "Queue checked: 3 waiting.")
    assert outcome["sl-2"] == ("completed", " HEARTBEAT_OK\n")  # as the model said it
    assert outcome["wk-3"] == ("completed", "I saw the context.")
    assert outcome["wk-8"] == ("completed", "I saw the context.")
    errors = {k: r["value"].get("error") for k, r in by_run.items()}
    assert errors["sl-1"] is None
    for run_id in ("sl-4", "sl-5", "sl-6", "sl-7"):
        assert outcome[run_id] == ("failed", ""), run_id
    assert "unknown agent 'nobody'" in errors["sl-4"]
    assert errors["sl-5"].startswith("deadline passed before the run started")
    assert errors["sl-6"].startswith("the model call failed (status: HTTP 500")
    assert errors["sl-7"] == "budget exceeded: max_turns"
    # Model calls: reporter 2, the heartbeat 1, the wake 1, the failing one 2
    # (a retry), tight 1; the unknown agent and the late task none.
    assert model.state.calls == 8
    # The tool took effect through the executor, with our derived key; a prompt
    # run has no job, so its fact goes nowhere (nothing on the inbox) and it
    # talks to no one (nothing on messages).
    assert len(tools.state.calls) == 2
    assert all(k.startswith("lg-") for k in tools.state.calls)
    assert lane.read("inbox") == []
    assert lane.read("messages") == []
    journal = [r["value"] for r in lane.read("journal")]
    ours = [j for j in journal if j["run_id"] == "sl-1"]
    assert {j["job_key"] for j in ours} == {"schedule:s-report"}
    assert [j["type"] for j in ours] == [
        "journal.model_call", "journal.tool_call", "journal.model_call", "journal.run"
    ]  # fmt: skip
    assert (ours[1]["tool"], ours[1]["outcome"], ours[1]["fact"]) == (
        "check_queue", "done", "queue_checked"
    )  # fmt: skip
    assert (ours[-1]["agent"], ours[-1]["ended"]) == ("reporter", "done")
    [failed_call] = [j for j in journal if j["run_id"] == "sl-6"
                     and j["type"] == "journal.model_call"]  # fmt: skip
    assert failed_call["outcome"] == "status"
    # The model saw a wake's context once, whether the task's prompt had it or not.
    for run_id in ("wk-3", "wk-8"):
        [call] = [j for j in journal if j["run_id"] == run_id and j["type"] == "journal.model_call"]
        assert call["request"].count("Context: ") == 1, call["request"]
        # ... last, but for the schedule's previous reports (a run after another
        # of its schedule is told what that one reported: docs/schedules.md)
        _, context, after = call["request"].partition('Context: {"ticket":"T-9"}')
        assert context, call["request"]
        told = after.lstrip("\n")
        assert after == "" or told.startswith("Your previous reports"), call["request"]

    # Delivered again, after their reports: nothing runs, nothing is reported.
    lane.produce([tasks[0], tasks[1], tasks[3]], topic="tasks")
    wait_ignored(lane, "sl-1", "sl-2", "sl-4")
    assert len(reports(lane) or []) == 8
    assert model.state.calls == 8
    assert len(tools.state.calls) == 2


def test_a_service_killed_mid_run_resumes_it_and_reports_once(
    lane: Lane, serve: Callable[[Any], str]
) -> None:
    tools = queue(slow=1)
    model, env = start_agents(lane, serve, tools)
    first = lane.workers[-1]
    one = (b"s-slow", task("s-slow", "sl-9", "reporter"))
    lane.produce([one, one], topic="tasks")  # delivered twice at once: one run
    wait_for(lambda: tools.state.calls, 60, 0.1, "the tool call")
    first.stop(signal.SIGKILL)  # mid-call: the tool has not answered
    lane.start(["agents", "--loglevel", "info"], "agents: ready", **env)

    wait_for(lambda: reports(lane), 90, 0.3, "the report")
    lane.produce([one], topic="tasks")  # and once more after it
    wait_ignored(lane, "sl-9")
    [report] = reports(lane) or []
    assert (report["value"]["status"], report["value"]["output"]) == (
        "completed",
        "Queue checked: 3 waiting.",
    )
    # The resumed run called the tool again with the same key, and replayed the
    # model reply it had paid for (the call) instead of asking again.
    assert len(tools.state.calls) == 2
    assert len(set(tools.state.calls)) == 1
    assert model.state.calls == 2
    journal = [r["value"] for r in lane.read("journal") if r["value"]["run_id"] == "sl-9"]
    [end] = [j for j in journal if j["type"] == "journal.run"]
    assert (end["ended"], end["replayed"]) == ("done", 1)
    assert [j["type"] for j in journal].count("journal.model_call") == 2


def command(schedule: str, run: str, tool: str, args: dict[str, Any]) -> bytes:
    """A ``schedule.command`` task as the worker dispatches it (docs/schedules.md,
    "Command jobs"): a prompt's task with a tool and its args instead."""
    body = orjson.loads(task(schedule, run, "-", type="schedule.command", tool=tool, args=args))
    del body["agent"], body["prompt"]
    return orjson.dumps(body)


def test_command_runs_call_their_tool_once_and_report_across_a_kill(
    lane: Lane, serve: Callable[[Any], str]
) -> None:
    """docs/schedules.md, "Command jobs": the service calls a command run's
    catalog tool through the executor (our key: the schedule and the run) and
    reports the outcome on schedule-runs; killed mid-call, a non-idempotent
    call is never made again: its run reports the outcome unknown."""
    tools = queue()
    effects = lane.root / "effects"
    effects.write_text("")
    _, env = start_agents(lane, serve, tools, EFFECTS=str(effects))
    quick = (b"s-quick", command("s-quick", "sl-c1", "check_queue", {}))
    tasks = [
        quick,
        (b"s-nope", command("s-nope", "sl-c3", "no_such_tool", {})),
        (b"s-bad", command("s-bad", "sl-c4", "nightly_job", {"suite": 5})),
    ]
    lane.produce(tasks, topic="tasks")
    wait_for(lambda: reports(lane, 3), 60, 0.3, "three reports")
    slow = (b"s-night", command("s-night", "sl-c2", "nightly_job", {"suite": "smoke"}))
    lane.produce([slow, slow], topic="tasks")  # delivered twice at once: one run
    wait_for(lambda: effects.read_text(), 60, 0.1, "the nightly job's side effect")
    lane.workers[-1].stop(signal.SIGKILL)  # mid-call: the job has not answered
    lane.start(["agents", "--loglevel", "info"], "agents: ready", **env)
    wait_for(lambda: reports(lane, 4), 60, 0.3, "the fourth report")
    lane.produce([quick, slow], topic="tasks")  # and again, after their reports
    wait_ignored_runs(lane, "command run", "sl-c1", "sl-c2")

    by_run: dict[str, dict[str, Any]] = {}
    for record in reports(lane) or []:
        body = record["value"]
        assert by_run.setdefault(body["run_id"], body) == body  # a repeat is the same
        assert record["key"] == body["schedule_id"]
    assert sorted(by_run) == ["sl-c1", "sl-c2", "sl-c3", "sl-c4"]
    got = {k: (v["status"], v["outcome"], v["exit_code"]) for k, v in by_run.items()}
    assert got == {
        "sl-c1": ("completed", "done", None),  # an HTTP tool: no exit code
        "sl-c2": ("failed", "outcome_unknown", None),
        "sl-c3": ("failed", "refused", None),
        "sl-c4": ("failed", "refused", None),
    }
    assert by_run["sl-c1"]["output"] == '{"waiting":3}'  # an excerpt of the result
    assert by_run["sl-c2"]["error"].startswith("outcome unknown: the call was begun by a run")
    assert by_run["sl-c3"]["error"].startswith("refused: unknown tool 'no_such_tool'")
    assert "suite: 5 is not of type 'string'" in by_run["sl-c4"]["error"]
    # The side effect happened once: not again after the restart, nor for the
    # task delivered twice, nor for the args that did not fit.
    assert effects.read_text() == "smoke\n"
    # The idempotent tool was called once, with the key of the schedule and run.
    assert tools.state.calls == [derived_key("schedule:s-quick/sl-c1", "check_queue", {}, 1)]
    journal = [r["value"] for r in lane.read("journal") if r["value"]["run_id"].startswith("sl-c")]
    calls = {(j["job_key"], j["tool"], j["outcome"]) for j in journal}
    assert calls == {
        ("schedule:s-quick", "check_queue", "done"),
        ("schedule:s-night", "nightly_job", "outcome_unknown"),
        ("schedule:s-nope", "no_such_tool", "refused"),
        ("schedule:s-bad", "nightly_job", "refused"),
    }


def wait_ignored_runs(lane: Lane, what: str, *run_ids: str) -> None:
    """As :func:`wait_ignored`, for runs of another kind (``command run``)."""
    for run_id in run_ids:
        lane.workers[-1].wait_for(f"agents: {what} {run_id} was reported already: ignored")


@asynccontextmanager
async def services(
    kafka_url: str, folder: Path, model: ModelSettings, tool_env: dict[str, str] | None = None
) -> AsyncIterator[tuple[Topics, Callable[[str], AgentService]]]:
    """Agents services as separate processes would hold them (a data folder
    each), on the real broker, in this event loop: ``make(name)``."""
    settings = Settings(kafka_url=kafka_url, topic_prefix=f"t{uuid.uuid4().hex[:8]}.")
    await ensure_all_topics(settings)
    catalog = load_catalog(CATALOG, "c.yaml")
    made: list[AgentService] = []
    async with producer(bootstrap_of(kafka_url)) as client:

        async def send(
            topic: str, key: bytes | None, value: bytes | None, headers: Headers | None,
            partition: int | None,
        ) -> None:  # fmt: skip
            await (await client.send(topic, value, key=key, partition=partition))

        def make(name: str) -> AgentService:
            here = Settings(**{**settings.__dict__, "data_dir": folder / name})
            service = AgentService(here, catalog, model, tool_env=tool_env)
            service.send = send
            made.append(service)
            return service

        yield Topics(settings.topic_prefix), make
        for service in made:
            await service.close()


async def read_all(kafka_url: str, topic: str) -> list[Any]:
    return [r async for r in read_topic(bootstrap_of(kafka_url), topic)]


def test_a_reported_run_is_forgotten_a_while_past_its_deadline(
    kafka_url: str, tmp_path: Path
) -> None:
    """The first service reports a run and, once its time has passed, forgets
    it (a tombstone on the changelog); the second, assigned the partition, holds
    nothing of it."""

    async def go() -> None:
        async with services(kafka_url, tmp_path, ModelSettings(api_key="sk-test")) as (
            topics,
            make,
        ):
            one = make("one")
            await one.assign([1])
            one.prompts.keep = timedelta(seconds=1)
            raw = task("s-gone", "sl-g", "nobody")  # no model call: an unknown agent
            await one.on_record(raw, Where(topics.tasks, 1, 0, 0, b"s-gone", []))
            await asyncio.gather(*one.prompts.running.values())
            assert orjson.loads(one.db[run_key("sl-g")])["status"] == "reported"
            deadline = datetime.fromisoformat(orjson.loads(raw)["deadline"])
            assert await one.prompts.sweep(deadline) == 0  # not yet
            assert await one.prompts.sweep(deadline + timedelta(seconds=2)) == 1
            assert one.db.get(run_key("sl-g")) is None
            two = make("two")
            assert await two.assign([1]) == (1, 0)  # read back: the tombstone
            assert two.db.get(run_key("sl-g")) is None
            records = await read_all(kafka_url, topics.conversations)
            assert [(r.key, r.partition, r.value is None) for r in records][-1] == (
                run_key("sl-g"), 1, True
            )  # fmt: skip
            reported = await read_all(kafka_url, topics.schedule_runs)
            assert [(r.key, r.partition) for r in reported] == [(b"s-gone", 1)]

    asyncio.run(go())


def test_a_revoked_partition_stops_its_prompt_run_and_the_next_owner_finishes_it(
    kafka_url: str, tmp_path: Path, serve: Callable[[Any], str]
) -> None:
    """A run in flight (its tool call unanswered) when its partition is revoked
    is stopped; the process assigned it next reads it back from the changelog,
    resumes it (the paid model reply replayed) and reports once."""
    tools = queue(slow=1)
    model = build_standin(SCRIPT)
    settings = ModelSettings(api_key="sk-test", base_url=f"{serve(model)}/v1", retries=0)

    async def go() -> None:
        env = {"QUEUE_URL": serve(tools)}
        async with services(kafka_url, tmp_path, settings, env) as (topics, make):
            one = make("one")
            await one.assign([2])
            raw = task("s-move", "sl-m", "reporter")
            await one.on_record(raw, Where(topics.tasks, 2, 0, 0, b"s-move", []))
            for _ in range(300):
                if tools.state.calls:
                    break
                await asyncio.sleep(0.05)
            assert tools.state.calls, "the tool was not called"
            assert await one.revoke([2]) == 1  # mid-call: stopped
            assert one.prompts.running == {}
            two = make("two")
            assert await two.assign([2]) == (1, 1)  # read back, and resumed
            await asyncio.gather(*two.prompts.running.values())
            reported = await read_all(kafka_url, topics.schedule_runs)
            assert [orjson.loads(r.value)["output"] for r in reported] == [
                "Queue checked: 3 waiting."
            ]
            journal = [orjson.loads(r.value) for r in await read_all(kafka_url, topics.journal)]
            [end] = [j for j in journal if j["type"] == "journal.run"]
            assert (end["run_id"], end["replayed"]) == ("sl-m", 1)
            # one model reply paid for once, the tool called again with its key
            assert model.state.calls == 2
            assert len(tools.state.calls) == 2
            assert len(set(tools.state.calls)) == 1

    asyncio.run(go())
