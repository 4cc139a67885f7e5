"""Kill a worker with SIGKILL in the middle of 1,000 jobs, restart it, and check
that every job ends where the pure core says it should, with no task lost and
none emitted twice with different content."""

from __future__ import annotations

import random
import re
import signal
import time
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from compiler import (
    Event,
    JobGraph,
    JobState,
    Start,
    TaskClosed,
    TaskOpened,
    input_from_json,
    to_iso,
)
from stream.runtime.files import load_playbook_file
from tests.lanes import Lane
from tests.stream.engine.engine_harness import latest_hashes

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(420)]

JOBS = 1000


def _script(rng: random.Random, key: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = [
        {"type": "job.start", "key": key, "playbook_key": "onboarding"}
    ]
    if rng.random() < 0.9:
        records.append(
            {"type": "event", "key": key, "action": "id_uploaded", "idempotency_key": f"{key}-id"}
        )
        path = rng.choice(["self_service_completed", "meeting_scheduled", "meeting_cancelled"])
        records.append({"type": "event", "key": key, "action": path})
        if rng.random() < 0.3:  # a client retry of the same upload
            records.append(
                {
                    "type": "event",
                    "key": key,
                    "action": "id_uploaded",
                    "idempotency_key": f"{key}-id",
                }
            )
        if rng.random() < 0.7:
            source = rng.choice(["world", "tool", "agent"])
            records.append(
                {"type": "event", "key": key, "action": "account_activated", "source": source}
            )
    return records


def _expected(
    graph: JobGraph, inbox: list[dict[str, Any]]
) -> tuple[dict[str, JobState], dict[str, dict[str, Any]]]:
    """Run each job's inbox records (in partition order, at their timestamps)
    through the pure core: final states, and task content by (task_id, type)."""
    states: dict[str, JobState | None] = defaultdict(lambda: None)
    tasks: dict[str, dict[str, Any]] = {}
    for record in inbox:
        value = record["value"]
        now = datetime.fromtimestamp(record["timestamp"] / 1000, UTC)
        item = input_from_json(value)
        if isinstance(item, Event) and item.idempotency_key is None:
            item = Event(
                item.action,
                item.value,
                item.properties,
                item.source,
                None,
                f"p{record['partition']}@{record['offset']}",
            )
        if isinstance(item, Start):
            item = Start(value["key"], value["playbook_key"])
        step = graph.next(states[value["key"]], now, item)
        if step.state is not None:
            states[value["key"]] = step.state
        for effect in step.effects:
            if isinstance(effect, TaskOpened | TaskClosed):
                data = effect.to_json()
                if isinstance(effect, TaskOpened):  # on the task record, not the effect
                    data["frontier"] = list(effect.frontier)
                tasks[f"{data['task_id']} {data['type']}"] = data
    return {k: v for k, v in states.items() if v is not None}, tasks


def test_sigkill_mid_stream_loses_nothing_and_repeats_nothing(lane: Lane) -> None:
    rng = random.Random(7)
    script = [r for i in range(JOBS) for r in _script(rng, f"job-{i:04d}")]
    # Interleave jobs as real traffic would, keeping each job's own order.
    queues = defaultdict(list)
    for record in script:
        queues[record["key"]].append(record)
    order: list[dict[str, Any]] = []
    keys = list(queues)
    while keys:
        key = rng.choice(keys)
        order.append(queues[key].pop(0))
        if not queues[key]:
            keys.remove(key)

    first = lane.start_worker()
    started = time.monotonic()
    lane.send(*order)
    produced = time.monotonic()
    lane.wait_until("decisions", lambda rs: len(rs) >= len(order) // 3, timeout=120)
    first.stop(signal.SIGKILL)
    killed = time.monotonic()

    second = lane.start_worker()
    resumed = time.monotonic()
    graph = JobGraph(load_playbook_file(lane.playbooks / "onboarding.yaml"))
    inbox = lane.read("inbox")
    assert len(inbox) == len(order)
    want_states, want_tasks = _expected(graph, inbox)
    want_seq = {k: s.seq for k, s in want_states.items()}

    def all_done(records: list[dict[str, Any]]) -> bool:
        latest: dict[str, int] = {}
        for r in records:
            latest[r["key"]] = max(latest.get(r["key"], 0), r["value"]["seq"])
        return latest == want_seq

    jobs = lane.wait_until("engine-jobstate-changelog", all_done, timeout=240)
    finished = time.monotonic()
    assert second.stop() == 0

    stored: dict[str, dict[str, Any]] = {}
    for r in jobs:
        if r["key"] not in stored or r["value"]["seq"] >= stored[r["key"]]["seq"]:
            stored[r["key"]] = r["value"]
    assert len(stored) == JOBS
    hashes = latest_hashes(lane.read("decisions", idle=1.0))
    assert {k: s["seq"] for k, s in stored.items()} == {k: h[0] for k, h in hashes.items()}
    wrong = [k for k, s in want_states.items() if hashes[k][1] != s.hash]
    assert wrong == [], f"{len(wrong)} jobs ended elsewhere than the pure core, e.g. {wrong[:3]}"

    seen: dict[str, dict[str, Any]] = {}
    for r in lane.read("tasks", idle=1.0):
        task = r["value"]
        ident = f"{task['task_id']} {task['type']}"
        if ident in seen:
            assert seen[ident] == task, f"{ident} emitted twice with different content"
        seen[ident] = task
    assert set(seen) == set(want_tasks), "tasks missing or unexpected"
    for ident, want in want_tasks.items():
        got = seen[ident]
        for field in ("job_key", "milestone", "at", "outcome", "frontier", "deadline"):
            assert got.get(field) == want.get(field), (ident, field)

    # Decisions: one per (job, seq); a repeat may only be a byte-identical re-emission.
    decisions: dict[tuple[str, int], bytes] = {}
    for r in lane.read("decisions", idle=1.0):
        ident = (r["key"], r["value"]["seq"])
        body = orjson.dumps(r["value"], option=orjson.OPT_SORT_KEYS)
        assert decisions.setdefault(ident, body) == body, f"decision {ident} differs"
    applied = sum(s.seq for s in want_states.values())
    assert len(decisions) == applied

    stopped = "".join(second.lines)
    skipped = int(re.search(r"(\d+) re-deliveries skipped", stopped).group(1))  # type: ignore[union-attr]
    ready_at = next(i for i, line in enumerate(second.lines) if "ready" in line)
    print(
        f"\n{len(order)} records for {JOBS} jobs produced in {produced - started:.1f}s; "
        f"SIGKILL at {killed - started:.1f}s; restarted worker ready in {resumed - killed:.1f}s "
        f"(line {ready_at}); all {JOBS} jobs settled {finished - resumed:.1f}s later; "
        f"{skipped} re-delivered records recognised and skipped; at {to_iso(datetime.now(UTC))}"
    )
