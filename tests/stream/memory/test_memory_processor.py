"""Grounded memory end to end (docs/memory.md), on the real broker with real
processes: a worker's remembered facts on ``memory-facts``, ``lemongraph
memory`` folding them into each subject's profile on ``memory``, erasure, and
``lemongraph memory verify``."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from aiokafka.partitioner import DefaultPartitioner

from stream.memory.fold import Bounds, Profile, fold_record
from tests.lanes import Lane, WorkerProcess, wait_for

pytestmark = [pytest.mark.broker, pytest.mark.timeout(300)]

PLAYBOOK = """\
key: remembering
version: 1
remember: [plan_chosen, account_activated]
milestones:
  - id: close
    condition: account_closed WITHIN 30d
"""
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def memory_fact(subject: str, name: str, value: Any, at: datetime, event: str) -> dict[str, Any]:
    return {
        "type": "memory.fact",
        "schema": 1,
        "subject": subject,
        "name": name,
        "value": value,
        "properties": {},
        "source": "world",
        "event_id": event,
        "job_key": f"job-of-{subject}",
        "at": iso(at),
    }


def memory_note(subject: str, job: str, turn_to: int, at: datetime) -> dict[str, Any]:
    """A job's conversation summary (docs/memory.md, "Summaries are claims")."""
    return {
        "type": "memory.note", "schema": 1, "subject": subject, "kind": "summary",
        "source": "agent", "job_key": job, "note_id": f"{job}/summary/{turn_to}",
        "text": f"turns 1-{turn_to} of {job}", "turn_from": 1, "turn_to": turn_to,
        "at": iso(at), "run_id": f"{job}#1",
    }  # fmt: skip


def produce_facts(lane: Lane, records: list[dict[str, Any]]) -> None:
    lane.produce([(r["subject"].encode(), orjson.dumps(r)) for r in records], "memory-facts")


def group(lane: Lane) -> str:
    return f"{lane.prefix}memory"


def handled(lane: Lane, topic: str = "memory-facts") -> list[dict[str, Any]]:
    """Every record of ``topic``, once the memory processor has stored its fold of each."""
    records = lane.read(topic, idle=0.2)
    lane.wait_handled(group(lane), topic, records)
    return records


def profiles(lane: Lane) -> dict[str, Any]:
    """The latest value of each subject on the memory topic (None: a tombstone)."""
    latest: dict[str, Any] = {}
    for r in lane.read("memory", idle=0.2):
        latest[r["key"]] = r["value"]
    return latest


def start_memory(lane: Lane, **extra: str) -> WorkerProcess:
    return lane.start(["memory"], "memory: reading", **extra)


@pytest.fixture(scope="module")
def remembering(module_lane: Lane) -> Lane:
    """A worker with a playbook that remembers, and the memory processor."""
    (module_lane.playbooks / "remembering.yaml").write_text(PLAYBOOK)
    module_lane.start_worker()
    start_memory(module_lane)
    return module_lane


def test_grounded_facts_reach_the_profile_and_a_claim_never_does(remembering: Lane) -> None:
    lane = remembering
    key = "mem-job-2"  # its home partition is 1, its subject's 3
    lane.send(
        {"type": "job.start", "key": key, "playbook_key": "remembering", "subject": {"id": "S1"}},
        {"type": "event", "key": key, "action": "plan_chosen", "value": "pro",
         "idempotency_key": "a1"},
        {"type": "event", "key": key, "action": "account_activated", "source": "tool",
         "idempotency_key": "a2"},
        {"type": "event", "key": key, "action": "plan_chosen", "value": "enterprise",
         "source": "agent", "idempotency_key": "a3"},
    )  # fmt: skip
    lane.wait_until("decisions", lambda rs: sum(r["key"] == key for r in rs) == 4)
    time.sleep(0.01)  # the next plan's record is decided at a later instant
    lane.send(
        {"type": "event", "key": key, "action": "plan_chosen", "value": "team",
         "idempotency_key": "a4"}
    )  # fmt: skip
    lane.wait_until("decisions", lambda rs: sum(r["key"] == key for r in rs) == 5)
    facts = [r for r in handled(lane) if r["key"] == "S1"]
    # On the subject's partition, as Kafka's default partitioner puts its key.
    every = list(range(4))
    choose = DefaultPartitioner()
    assert choose(key.encode(), every, every) != choose(b"S1", every, every)
    assert {f["partition"] for f in facts} == {choose(b"S1", every, every)}
    assert [(f["value"]["name"], f["value"]["value"], f["value"]["source"]) for f in facts] == [
        ("plan_chosen", "pro", "world"),
        ("account_activated", None, "tool"),
        ("plan_chosen", "team", "world"),
    ]
    profile = profiles(lane)["S1"]
    assert profile["subject"] == "S1"
    shown = [
        (f["name"], f["value"], f["source"], f["event_id"], f["job_key"], f["valid_to"] is None)
        for f in profile["facts"]
    ]
    assert shown == [
        ("account_activated", None, "tool", "a2", key, True),
        ("plan_chosen", "pro", "world", "a1", key, False),
        ("plan_chosen", "team", "world", "a4", key, True),
    ]
    pro, team = profile["facts"][1:]
    assert pro["valid_to"] == team["valid_from"]  # closed by the newer one, not deleted
    assert "enterprise" not in orjson.dumps(profile).decode()
    # The decision log replays with the remembered facts in it.
    verified = lane.cli("replay", "--verify")
    assert "all states and effects match" in verified.stdout


def test_an_erasure_leaves_a_tombstone_and_ignores_a_late_older_fact(remembering: Lane) -> None:
    lane = remembering
    produce_facts(lane, [memory_fact("S2", "plan_chosen", "pro", T0, "b1")])
    handled(lane)
    assert profiles(lane)["S2"]["facts"][0]["value"] == "pro"
    erase = {
        "type": "memory.erase",
        "schema": 1,
        "subject": "S2",
        "at": iso(T0 + timedelta(days=1)),
        "request_id": "req-1",
    }
    lane.produce([(b"S2", orjson.dumps(erase))], "memory-facts")
    # A fact decided before the erasure that arrives after it, then one after.
    produce_facts(lane, [memory_fact("S2", "plan_chosen", "team", T0 + timedelta(hours=1), "b2")])
    handled(lane)
    written = [r for r in lane.read("memory", idle=0.2) if r["key"] == "S2"]
    assert written[-1]["value"] is None  # the tombstone, and nothing after it
    produce_facts(lane, [memory_fact("S2", "region", "eu", T0 + timedelta(days=2), "b3")])
    handled(lane)
    again = profiles(lane)["S2"]
    assert [(f["name"], f["value"]) for f in again["facts"]] == [("region", "eu")]
    verified = lane.cli("memory", "verify")
    assert "equal the table's byte for byte" in verified.stdout


def test_ten_thousand_facts_of_one_subject_stay_bounded(remembering: Lane) -> None:
    lane = remembering
    records = [
        memory_fact("S3", f"name{i % 20}", i, T0 + timedelta(seconds=i), f"c{i}")
        for i in range(10_000)
    ]
    started = time.monotonic()
    produce_facts(lane, records)
    handled(lane)
    took = time.monotonic() - started
    profile = profiles(lane)["S3"]
    raw = orjson.dumps(profile)
    assert len(profile["facts"]) == 20 * 10  # 20 names, the newest 10 versions each
    assert {f["value"] for f in profile["facts"] if f["valid_to"] is None} == set(
        range(9980, 10_000)
    )
    print(f"\n10,000 facts of one subject through the processor: {len(raw)} bytes, {took:.1f} s")


def test_a_sigkill_mid_stream_loses_nothing_and_counts_nothing_twice(lane: Lane) -> None:
    subjects = [f"K{i}" for i in range(40)]
    # Every ninth record a conversation summary (a note) of one of three jobs of the subject.
    records = [
        memory_fact(subjects[i % 40], f"n{i % 7}", i, T0 + timedelta(seconds=i % 500), f"d{i}")
        if i % 9
        else memory_note(subjects[i % 40], f"job-{i % 3}", i, T0 + timedelta(seconds=i % 500))
        for i in range(3000)
    ]
    # A worker that re-decided a batch sends some facts again, byte for byte.
    records += records[100:400]
    produce_facts(lane, records)
    total = lane.read("memory-facts", idle=0.2)
    ends = {}
    for r in total:
        ends[r["partition"]] = max(ends.get(r["partition"], -1), r["offset"])
    first = start_memory(lane, LEMONGRAPH_MEMORY_BATCH="50")
    partitions = sorted(ends)
    wait_for(
        lambda: max(lane.committed(group(lane), "memory-facts", partitions).values()) > 0,
        60,
        0.02,
        "a first batch stored",
    )
    first.stop(9)
    at_kill = lane.committed(group(lane), "memory-facts", partitions)
    assert any(at_kill[p] <= ends[p] for p in ends), "the processor had finished before the kill"
    start_memory(lane, LEMONGRAPH_MEMORY_BATCH="50")
    lane.wait_handled(group(lane), "memory-facts", total, timeout=120)
    latest = profiles(lane)
    for subject in subjects:
        facts = latest[subject]["facts"]
        ids = [f["event_id"] for f in facts]
        assert len(ids) == len(set(ids)), subject  # no version twice
        jobs = [n["job_key"] for n in latest[subject]["notes"]]
        assert jobs, subject
        assert len(jobs) == len(set(jobs)), subject  # the newest note per job
    # The same, byte for byte, as a fold of the whole log into a fresh table.
    verified = lane.cli("memory", "verify")
    assert "equal the table's byte for byte" in verified.stdout
    # And the memory topic holds what the pure fold of the log says, byte for byte.
    expected: dict[str, Profile | None] = {}
    for r in sorted(total, key=lambda r: (r["partition"], r["offset"])):
        subject = r["value"]["subject"]
        expected[subject], _, _ = fold_record(expected.get(subject), None, r["value"], Bounds())
    for subject, profile in expected.items():
        assert profile is not None
        assert orjson.dumps(latest[subject]) == profile.encode(), subject
