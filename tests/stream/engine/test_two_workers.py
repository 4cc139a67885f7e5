"""Two workers in one group: the second takes over partitions from the first,
restores their job state from the changelog, and both decide exactly what the
pure core decides."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import pytest

from compiler import Event, JobGraph, JobState, Start, input_from_json
from stream.runtime.files import load_playbook_file
from tests.lanes import Lane
from tests.stream.engine.engine_harness import latest_hashes

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(300)]

JOBS = 200


def test_a_second_worker_takes_over_partitions_with_their_state(lane: Lane) -> None:
    first = lane.start_worker(LEMONGRAPH_DATA_DIR=str(lane.root / "data-a"))
    lane.send(
        *[
            {"type": "job.start", "key": f"job-{i:03d}", "playbook_key": "onboarding"}
            for i in range(JOBS)
        ]
    )
    lane.send(
        *[{"type": "event", "key": f"job-{i:03d}", "action": "id_uploaded"} for i in range(JOBS)]
    )
    lane.wait_until("decisions", lambda rs: len(rs) >= 2 * JOBS)
    second = lane.join_worker(LEMONGRAPH_DATA_DIR=str(lane.root / "data-b"))
    lane.send(
        *[
            {"type": "event", "key": f"job-{i:03d}", "action": "self_service_completed"}
            for i in range(JOBS)
        ]
    )
    lane.wait_until("decisions", lambda rs: len(rs) >= 3 * JOBS, timeout=120)

    graph = JobGraph(load_playbook_file(lane.playbooks / "onboarding.yaml"))
    states: dict[str, JobState | None] = defaultdict(lambda: None)
    for record in lane.read("inbox"):
        value: dict[str, Any] = record["value"]
        now = datetime.fromtimestamp(record["timestamp"] / 1000, UTC)
        item = input_from_json(value)
        if isinstance(item, Start):
            item = Start(value["key"], value["playbook_key"])
        if isinstance(item, Event):
            item = Event(item.action, id=f"p{record['partition']}@{record['offset']}")
        states[value["key"]] = graph.next(states[value["key"]], now, item).state
    stored: dict[str, dict[str, Any]] = {}
    for r in lane.read("engine-jobstate-changelog", idle=1.0):
        if r["key"] not in stored or r["value"]["seq"] >= stored[r["key"]]["seq"]:
            stored[r["key"]] = r["value"]
    hashes = latest_hashes(lane.read("decisions", idle=1.0))
    assert {k: s["seq"] for k, s in stored.items()} == {k: h[0] for k, h in hashes.items()}
    wrong = [k for k, s in states.items() if s is None or hashes[k][1] != s.hash]
    assert wrong == [], f"{len(wrong)} jobs differ from the pure core, e.g. {wrong[:3]}"
    # Both took part: each stops with a count of the records it decided.
    for worker in (first, second):
        assert worker.stop() == 0
    decided = [
        int(line.split(" records,")[0].rsplit(" ", 1)[1])
        for worker in (first, second)
        for line in worker.lines
        if "worker: stopped" in line
    ]
    assert len(decided) == 2
    assert all(n > 0 for n in decided), decided
    refused = [r for r in lane.read("decisions") if r["value"]["outcome"] == "refused"]
    assert refused == [], refused[:2]
