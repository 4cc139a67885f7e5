"""Heartbeats end to end on a real broker (docs/schedules.md, "Heartbeats";
docs/agents.md, "Scheduled prompts and heartbeats"): the real worker decides the
schedules, the real ``lemongraph agents`` runs their prompts on the stand-in
model through the real ``openai`` client, and what comes back is suppressed or
delivered. A reply that trims to ``HEARTBEAT_OK`` is recorded and goes nowhere;
any other reply, and any failure, is an alert on the schedule's ``deliver_to``.
``LEMONGRAPH_SCHEDULES_ENABLED=0`` stops them all."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from agents.dev.standin import StandinScript, build_standin
from compiler import request_run_id
from stream.runtime.kafka import producer
from tests.agents.test_schedule_prompt import CATALOG
from tests.lanes import Lane, WorkerProcess, wait_for

pytestmark = [pytest.mark.broker, pytest.mark.timeout(300)]

SCRIPT = StandinScript.model_validate(
    {
        "rules": [
            {"when": {"last_message_contains": "case spaced"}, "say": " HEARTBEAT_OK\n"},
            {"when": {"last_message_contains": "case status"}, "say": "Status: OK"},
            {"when": {"last_message_contains": "case extra"}, "say": "HEARTBEAT_OK extra"},
            {"when": {"last_message_contains": "case fail"}, "fail": 500},
            {"say": "HEARTBEAT_OK"},
        ]
    }
)  # fmt: skip
#: Where alerts go: a job's web conversation.
TARGET = "ops-1"


def heartbeat(
    sid: str, prompt: str, agent: str = "greeter", schedule: str = "@yearly"
) -> dict[str, Any]:
    return {
        "id": sid,
        "name": f"Heartbeat {sid}",
        "schedule": schedule,
        "action": {"type": "prompt", "agent": agent, "prompt": prompt},
        "deliver_to": f"web:{TARGET}",
        "meta": {"heartbeat": True},
    }


def define(lane: Lane, *specs: dict[str, Any], ago: float = 0.0) -> None:
    """Definitions on ``schedules``, each at its home partition (murmur2 of its
    id: the producer's default partitioner), stamped ``ago`` seconds in the past
    (a definition is decided at its record's timestamp, so its first slot can be
    due already)."""
    when = datetime.now(UTC) - timedelta(seconds=ago)
    at = when.isoformat().replace("+00:00", "Z")
    name = lane.topics.schedules
    stamp = int(when.timestamp() * 1000)

    async def go() -> None:
        async with producer(lane.bootstrap) as client:
            for spec in specs:
                body = {"type": "schedule", "schema": 1, "spec": spec, "updated_at": at}
                value = orjson.dumps({**body, "by": "test"})
                await client.send_and_wait(name, value, key=spec["id"].encode(), timestamp_ms=stamp)

    asyncio.run(go())


def wake(lane: Lane, ids: list[str]) -> dict[str, str]:
    """Wake each schedule once; the run id of each wake. A wake read before its
    schedule's definition is dead-lettered ("no schedule"): that one is sent
    again under a new request id."""
    runs: dict[str, str] = {}
    tries = dict.fromkeys(ids, 0)
    deadline = time.monotonic() + 60
    while True:
        for sid in ids:
            if sid not in runs:
                tries[sid] += 1
                request = f"{sid}-{tries[sid]}"
                value = {"type": "schedule.wake", "schedule_id": sid, "request_id": request}
                lane.produce([(sid.encode(), orjson.dumps(value))])
                runs[sid] = request_run_id(sid, request)
        pending = set(runs.values())
        while pending and time.monotonic() < deadline:
            seen = {r["value"]["run_id"] for r in lane.read("schedule-runs", idle=0.2)}
            pending -= seen
            refused = [
                d["value"] for d in lane.read("deadletter", idle=0.2)
                if "no schedule" in d["value"]["reason"]
            ]  # fmt: skip
            for letter in refused:
                sid = str(letter["key"])
                if runs.get(sid) in pending:
                    pending.discard(runs.pop(sid))
            if any(sid not in runs for sid in ids):
                break
            time.sleep(0.3)
        if not pending and all(sid in runs for sid in ids):
            return runs
        assert time.monotonic() < deadline, f"wakes not taken: {pending}"


def ended(lane: Lane, runs: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The last record of each run, once every run has ended (not ``running``)."""

    def check() -> dict[str, dict[str, Any]] | None:
        last: dict[str, dict[str, Any]] = {}
        for r in lane.read("schedule-runs", idle=0.2):
            value = r["value"]
            if value["type"] == "schedule.run":
                last[value["run_id"]] = value
        found = {sid: last.get(run) for sid, run in runs.items()}
        if all(v is not None and v["status"] not in ("pending", "running") for v in found.values()):
            return {k: v for k, v in found.items() if v is not None}
        return None

    result: dict[str, dict[str, Any]] = wait_for(check, 120, 0.5, "the runs' ends")
    return result


def start(lane: Lane, serve: Callable[[Any], str], **worker_env: str) -> WorkerProcess:
    """The worker (with ``worker_env``) and the agents on the stand-in."""
    (lane.playbooks / "catalog.yaml").write_text(CATALOG)
    worker = lane.start_worker(**worker_env)
    lane.start(
        ["agents"],
        "agents: ready",
        OPENAI_BASE_URL=f"{serve(build_standin(SCRIPT))}/v1",
        OPENAI_API_KEY="sk-test",
        LEMONGRAPH_MODEL_RETRIES="0",
    )
    return worker


def test_a_heartbeat_is_suppressed_only_when_its_reply_is_heartbeat_ok(
    lane: Lane, serve: Callable[[Any], str]
) -> None:
    worker = start(lane, serve)
    specs = [
        heartbeat("hb-ok", "case ok"),
        heartbeat("hb-spaced", "case spaced"),
        heartbeat("hb-status", "case status"),
        heartbeat("hb-extra", "case extra"),
        heartbeat("hb-fail", "case fail"),
        heartbeat("hb-nobody", "case ok", agent="nobody"),
    ]
    define(lane, *specs)
    runs = wake(lane, [s["id"] for s in specs])
    last = ended(lane, runs)

    status = {sid: (r["status"], r["suppressed"]) for sid, r in last.items()}
    assert status == {
        "hb-ok": ("suppressed", True),
        "hb-spaced": ("suppressed", True),
        "hb-status": ("completed", False),
        "hb-extra": ("completed", False),
        "hb-fail": ("failed", False),
        "hb-nobody": ("failed", False),
    }, last
    assert last["hb-status"]["output"] == "Status: OK"
    assert last["hb-extra"]["output"] == "HEARTBEAT_OK extra"
    assert "the model call failed (status: HTTP 500" in last["hb-fail"]["error"]
    assert "unknown agent 'nobody'" in last["hb-nobody"]["error"]
    for sid in ("hb-ok", "hb-spaced"):
        assert last[sid].get("delivered_to") is None, last[sid]
    # Every alert, and nothing else, is delivered: an out message on the web
    # conversation of the target job, once per run.
    alerts = ("hb-status", "hb-extra", "hb-fail", "hb-nobody")
    for sid in alerts:
        assert last[sid]["delivered_to"] == f"web:{TARGET}", last[sid]

    def delivered() -> list[dict[str, Any]] | None:
        found = [m["value"] for m in lane.read("messages", idle=0.2)]
        return found if len(found) >= len(alerts) else None

    wait_for(delivered, 60, 0.3, "the alerts")
    # A message for a suppressed run, were there one, is here too once the worker
    # has decided every report (it commits past a record after its outputs).
    reported = [r for r in lane.read("schedule-runs") if r["value"]["type"] == "schedule.report"]
    lane.wait_handled(worker.group, "schedule-runs", reported)
    messages = [m["value"] for m in lane.read("messages")]
    by_id = {m["message_id"]: m for m in messages}
    assert sorted(by_id) == sorted(f"sched-{runs[sid]}" for sid in alerts), messages
    assert len(messages) == len(alerts)
    for sid in alerts:
        message = by_id[f"sched-{runs[sid]}"]
        assert (message["job_key"], message["channel"], message["direction"]) == (
            TARGET,
            "web",
            "out",
        )
    assert "Status: OK" in by_id[f"sched-{runs['hb-status']}"]["text"]
    assert "HEARTBEAT_OK extra" in by_id[f"sched-{runs['hb-extra']}"]["text"]
    assert "HTTP 500" in by_id[f"sched-{runs['hb-fail']}"]["text"]
    assert "unknown agent" in by_id[f"sched-{runs['hb-nobody']}"]["text"]
    # One report per run, from the agents service.
    reports = [
        r["value"]["run_id"] for r in lane.read("schedule-runs")
        if r["value"]["type"] == "schedule.report"
    ]  # fmt: skip
    assert sorted(reports) == sorted(runs.values())
    # Beside each alerting run's record, its heartbeat.alert (docs/schedules.md,
    # "Heartbeats"): warning for a reply, critical for a failure; none when suppressed.
    written = [r for r in lane.read("schedule-runs") if r["value"]["type"] == "heartbeat.alert"]
    severity = {r["key"]: (r["value"]["run_id"], r["value"]["severity"]) for r in written}
    assert len(written) == len(alerts), written
    assert severity == {
        "hb-status": (runs["hb-status"], "warning"),
        "hb-extra": (runs["hb-extra"], "warning"),
        "hb-fail": (runs["hb-fail"], "critical"),
        "hb-nobody": (runs["hb-nobody"], "critical"),
    }


def test_the_global_switch_stops_every_schedule_heartbeats_included(
    lane: Lane, serve: Callable[[Any], str]
) -> None:
    worker = start(lane, serve, LEMONGRAPH_SCHEDULES_ENABLED="0")
    # An alert every minute, were it on: its reply is not HEARTBEAT_OK.
    minute = heartbeat("hb-minute", "case status", schedule="every 1m")
    minute["catchup_window"] = "5m"  # however long the restart below takes
    # Defined two minutes ago: its first slot is due at every tick from now on.
    define(lane, minute, ago=120)
    [run] = wake(lane, ["hb-minute"]).values()
    [skipped] = [r["value"] for r in lane.read("schedule-runs") if r["value"]["run_id"] == run]
    assert skipped["status"] == "skipped"
    assert "LEMONGRAPH_SCHEDULES_ENABLED=0" in skipped["error"]
    # Ticks come while the slot is due and the switch is off: nothing fires. Five
    # more on every partition, decided (the worker committed past them; the topic
    # never goes quiet to be read to its end).
    partitions = list(range(int(lane.env()["LEMONGRAPH_PARTITIONS"])))
    decided = lane.committed(worker.group, "ticks", partitions)
    lane.wait_committed(worker.group, "ticks", {p: max(o, 0) + 4 for p, o in decided.items()})
    assert [r["value"] for r in lane.read("schedule-runs")] == [skipped]
    assert [r for r in lane.read("tasks") if r["value"]["type"] == "schedule.prompt"] == []
    assert lane.read("messages") == []

    # Switched on again, the slot missed inside its catch-up window fires (the
    # same schedule: the switch, not the test, kept it quiet) and alerts.
    worker.stop(signal.SIGTERM)
    lane.start_worker()

    def alerted() -> list[dict[str, Any]] | None:
        found = [m["value"] for m in lane.read("messages", idle=0.2)]
        return found or None

    [message] = wait_for(alerted, 90, 0.5, "the slot's alert")
    assert (message["job_key"], message["text"].count("Status: OK")) == (TARGET, 1)
    runs = [r["value"] for r in lane.read("schedule-runs") if r["value"]["type"] == "schedule.run"]
    fired = [r for r in runs if r["triggered_by"] == "schedule"]
    assert {r["status"] for r in fired} >= {"completed"}, runs
