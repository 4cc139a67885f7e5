"""The stream engine end to end, against a real broker and real worker processes."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka.partitioner import DefaultPartitioner

from stream.runtime.kafka import producer
from tests.lanes import Lane, wait_for
from tests.scrape import Samples, metrics_urls, scrape, value
from topics import FORWARDED_FROM_HEADER, DecisionRecord

pytestmark = [pytest.mark.broker, pytest.mark.timeout(240)]


def start(key: str, playbook: str = "onboarding") -> dict[str, Any]:
    return {
        "type": "job.start",
        "key": key,
        "playbook_key": playbook,
        "subject": {},
        "contacts": [],
    }


def event(key: str, action: str, **extra: Any) -> dict[str, Any]:
    return {"type": "event", "key": key, "action": action, **extra}


def values(records: list[dict[str, Any]], *keys: str) -> list[dict[str, Any]]:
    """The values of the records of jobs ``keys`` (of every job without any)."""
    return [r["value"] for r in records if not keys or r["key"] in keys]


def latest_state(lane: Lane, key: str) -> dict[str, Any]:
    """The job's latest state on the job table's changelog."""
    states = values(lane.read("engine-jobstate-changelog"), key)
    assert states, f"no state of {key}"
    return max(states, key=lambda s: s["seq"])


@pytest.fixture(scope="module")
def worked(module_lane: Lane) -> Lane:
    """One worker for the tests below that do not start, stop or restart it:
    each has its own job keys (and playbook keys). Its playbooks are in the
    folder before it starts."""
    (module_lane.playbooks / "quick2s.yaml").write_text(
        "key: quick2s\nversion: 1\nmilestones:\n"
        "  - id: reply\n    condition: customer_replied WITHIN 2s\n"
    )
    module_lane.start_worker(LEMONGRAPH_METRICS_PORT="0")  # test_the_worker_s_metrics
    return module_lane


def test_a_job_runs_end_to_end_and_tasks_arrive_in_order(worked: Lane) -> None:
    lane = worked
    lane.send(
        start("job-1"),
        event("job-1", "id_uploaded", idempotency_key="evt-1"),
        event("job-1", "self_service_completed"),
        event("job-1", "account_activated", source="tool"),
    )
    tasks = lane.wait_until("tasks", lambda rs: len(values(rs, "job-1")) >= 8)
    seen = [(t["type"], t["milestone"], t.get("outcome")) for t in values(tasks, "job-1")]
    assert seen == [
        ("task.opened", "collectIdentity", None),
        ("task.closed", "collectIdentity", "done"),
        ("task.opened", "bookCall", None),
        ("task.opened", "selfServe", None),
        ("task.closed", "selfServe", "done"),
        ("task.closed", "bookCall", "dropped"),  # the losing branch of the any merge
        ("task.opened", "activateAccount", None),
        ("task.closed", "activateAccount", "done"),
    ]
    opened = values(tasks, "job-1")[2]
    assert opened["task_id"] == "job-1/bookCall"
    assert opened["frontier"] == ["bookCall", "selfServe"]
    lane.wait_until(
        "engine-jobstate-changelog",
        lambda rs: any(v["status"] == "done" for v in values(rs, "job-1")),
    )
    final = latest_state(lane, "job-1")
    assert {m: d["status"] for m, d in final["milestones"].items()} == {
        "collectIdentity": "done",
        "bookCall": "dropped",
        "selfServe": "done",
        "activateAccount": "done",
    }
    decisions = values(lane.read("decisions"), "job-1")
    assert [d["outcome"] for d in decisions] == ["applied"] * 4
    assert [d["seq"] for d in decisions] == [1, 2, 3, 4]
    evidence = decisions[1]["verdicts"][0]["atoms"][0]["evidence"]
    assert evidence == ["evt-1"]


def test_the_worker_s_metrics_count_decisions_and_dead_letters_with_bounded_labels(
    worked: Lane,
) -> None:
    """docs/operations.md, "Metrics": after a walk of many jobs, a refusal and a
    poison record, /metrics counts the decisions under their playbook and
    outcome and the poison record under its reason code, the inbox's lag falls
    to 0, and no label holds a job key."""
    lane = worked
    [url] = metrics_urls(lane.workers[0].lines)["worker"]
    before = scrape(url)
    keys = [f"metered-{i}" for i in range(40)]
    lane.send(*(start(key) for key in keys), event("metered-unknown", "id_uploaded"))
    lane.produce([(b"metered-poison", b"not json at all")])
    lane.drain()  # every record above is decided (or dead-lettered) by now
    inbox = lane.topics.inbox

    def grew(now: Samples, name: str, **labels: str) -> float:
        return value(now, name, **labels) - value(before, name, **labels)

    def counted() -> Samples | None:
        now = scrape(url)
        lags = [v for (n, ls), v in now.items() if n == "lemongraph_consumer_lag" and
                dict(ls)["topic"] == inbox]  # fmt: skip
        decisions = "lemongraph_decisions_total"
        ok = (
            grew(now, decisions, playbook="onboarding", outcome="applied") >= len(keys)
            # the unknown job's event (and drain's markers): no playbook is named
            and grew(now, decisions, playbook="", outcome="refused") >= 1
            and grew(now, "lemongraph_deadletters_total", topic=inbox, reason="invalid_record") == 1
            and len(lags) == 4
            and not any(lags)
        )
        return now if ok else None

    now = wait_for(counted, 30, 0.3, "the worker's metrics to count the walk")
    decided = value(now, "lemongraph_decision_seconds_count") - value(
        before, "lemongraph_decision_seconds_count"
    )
    assert decided >= len(keys) + 1, decided
    # Each onboarding job waits on a timer (collectIdentity WITHIN 30d by default).
    assert value(now, "lemongraph_timers_pending") >= len(keys)
    labels = {v for (_n, ls) in now for _k, v in ls}
    assert not [v for v in labels if "metered" in v], labels


def test_a_within_deadline_fires_from_ticks(worked: Lane) -> None:
    lane = worked  # its playbook quick2s: customer_replied WITHIN 2s
    lane.send(start("job-t", "quick2s"))
    tasks = lane.wait_until("tasks", lambda rs: len(values(rs, "job-t")) >= 2, timeout=30)
    closed = values(tasks, "job-t")[1]
    assert (closed["type"], closed["outcome"]) == ("task.closed", "timed_out")
    final = latest_state(lane, "job-t")
    assert final["status"] == "failed"
    assert {m: d["status"] for m, d in final["milestones"].items()} == {"reply": "knocked"}
    fired = [d for d in values(lane.read("decisions"), "job-t") if d["input"]["type"] == "tick"]
    assert len(fired) == 1
    assert fired[0]["fired"][0]["kind"] == "settle"
    # `lemongraph tail` shows a job's rows on the table's changelog as its state.
    shown = lane.cli("tail", "engine-jobstate-changelog", "--no-follow").stdout.splitlines()
    states = [line["value"] for line in map(orjson.loads, shown) if line["key"] == "job-t"]
    assert [s["seq"] for s in states] == sorted(s["seq"] for s in states)
    assert (states[-1]["status"], states[-1]["seq"]) == ("failed", final["seq"])


def test_a_retried_idempotency_key_gives_one_decision_and_one_task(worked: Lane) -> None:
    lane = worked
    retry = event("job-2", "id_uploaded", idempotency_key="upload-1")
    lane.send(start("job-2"), retry, retry)
    lane.send(event("job-2", "self_service_completed"))
    lane.wait_until("decisions", lambda rs: len(values(rs, "job-2")) >= 3)
    decisions = values(lane.read("decisions", idle=1.0), "job-2")
    assert [d["input"].get("action") for d in decisions] == [
        None,
        "id_uploaded",
        "self_service_completed",
    ]
    tasks = values(lane.read("tasks"), "job-2")
    opened = [t["task_id"] for t in tasks if t["type"] == "task.opened"]
    assert opened == [
        "job-2/collectIdentity",
        "job-2/bookCall",
        "job-2/selfServe",
        "job-2/activateAccount",
    ]


def test_bad_records_go_to_the_deadletter_topic_and_the_stream_goes_on(worked: Lane) -> None:
    lane = worked  # the only test of the module's worker that dead-letters
    lane.produce(
        [
            (b"job-p", b"\xff\xfe not json at all"),
            (b"job-p", orjson.dumps({"type": "event", "key": "job-p"})),  # no action
            (b"job-p", orjson.dumps({"type": "launch", "key": "job-p"})),
            (b"other", orjson.dumps(start("job-p"))),  # record key is not the job key
        ]
    )
    lane.send(start("job-p"))
    lane.wait_until("decisions", lambda rs: len(values(rs, "job-p")) >= 1)
    letters = values(lane.wait_until("deadletter", lambda rs: len(rs) >= 4))
    # Partitions keep no order between them: find each letter by its bytes.
    by_value = {
        base64.b64decode(d["value_b64"]) if d["value_b64"] else d["value_text"].encode(): d
        for d in letters
    }
    assert by_value[b"\xff\xfe not json at all"]["reason"].startswith("not JSON")
    assert by_value[b"\xff\xfe not json at all"]["value_text"] is None
    no_action = by_value[orjson.dumps({"type": "event", "key": "job-p"})]
    assert "action: Field required" in no_action["reason"]
    assert "launch" in by_value[orjson.dumps({"type": "launch", "key": "job-p"})]["reason"]
    wrong_key = by_value[orjson.dumps(start("job-p"))]
    assert wrong_key["reason"] == "record key 'other' is not the job key 'job-p'"
    assert wrong_key["key"] == "other"
    assert {d["topic"] for d in letters} == {lane.topics.inbox}
    assert all(isinstance(d["offset"], int) for d in letters)
    decision = values(lane.read("decisions"), "job-p")[0]
    assert decision["outcome"] == "applied"


def test_unknown_jobs_playbooks_and_repeated_starts_are_refused_in_decisions(
    worked: Lane,
) -> None:
    lane = worked
    lane.send(
        event("ghost", "id_uploaded"),
        start("job-6", "no-such-playbook"),
        start("job-7"),
        start("job-7"),
    )
    mine = ("ghost", "job-6", "job-7")
    decisions = lane.wait_until("decisions", lambda rs: len(values(rs, *mine)) >= 4)
    by_key = {(r["key"], r["value"]["outcome"], r["value"]["refused"]) for r in decisions}
    assert ("ghost", "refused", "unknown job: no job.start was applied") in by_key
    assert ("job-6", "refused", "unknown playbook 'no-such-playbook'") in by_key
    assert ("job-7", "applied", None) in by_key
    assert ("job-7", "refused", "job 'job-7' already exists") in by_key


def _copies(lane: Lane, message: dict[str, Any], copies: list[tuple[int, int]]) -> None:
    """``message`` on its home partition, once for every (partition, offset) of
    ``copies``: as the worker forwards a record a producer put there (a crash
    after the forward and before the commit forwards it twice, docs/kafka.md)."""
    key = message["key"].encode()

    async def go() -> None:
        async with producer(lane.bootstrap) as client:
            for partition, offset in copies:
                header = (FORWARDED_FROM_HEADER, f"p{partition}@{offset}".encode())
                sent = await client.send(
                    lane.topics.inbox, orjson.dumps(message), key=key, headers=[header]
                )
                await sent

    asyncio.run(go())


def test_a_jobs_decisions_are_unique_by_the_documented_key_refusals_included(
    worked: Lane,
) -> None:
    """docs/kafka.md: a consumer de-duplicates decisions by (``job_key``,
    ``origin``). A refused decision keeps the seq of the state it left alone,
    so (``job_key``, ``seq``) is not unique; a refusal of a job that does not
    exist has no seq at all; and one record forwarded twice around a job's
    start is decided twice, refused and then applied."""
    lane = worked
    copy = event("job-u", "id_uploaded")
    partitions = int(lane.env()["LEMONGRAPH_PARTITIONS"])
    home = DefaultPartitioner()(b"job-u", list(range(partitions)), list(range(partitions)))
    elsewhere = (home + 1) % partitions
    _copies(lane, copy, [(elsewhere, 7)])  # before the start: refused
    lane.send(start("job-u"), event("job-u", "self_service_completed"))
    lane.wait_until("decisions", lambda rs: len(values(rs, "job-u")) >= 3)
    _copies(lane, copy, [(elsewhere, 7)])  # the second copy: applied
    lane.send(start("job-u"), event("ghost-u", "id_uploaded"), event("ghost-u", "id_uploaded"))
    lane.wait_until("decisions", lambda rs: len(values(rs, "job-u", "ghost-u")) >= 7)
    decisions = [DecisionRecord.model_validate(d) for d in values(lane.read("decisions"), "job-u")]
    assert [(d.outcome, d.seq) for d in decisions] == [
        ("refused", None),  # the first copy, before the start
        ("applied", 1),
        ("applied", 2),
        ("applied", 3),  # the second copy of the same record
        ("refused", 3),  # the second start: the seq of the state it left alone
    ]
    first, again = decisions[0].identity, decisions[3].identity
    assert first[2:4] == again[2:4] == (elsewhere, 7)  # one record where it was produced
    assert first[4:] != again[4:]  # two copies of it, read at two offsets
    ghosts = [DecisionRecord.model_validate(d) for d in values(lane.read("decisions"), "ghost-u")]
    assert [(d.outcome, d.seq) for d in ghosts] == [("refused", None), ("refused", None)]
    for log in (decisions, ghosts):
        identities = [d.identity for d in log]
        assert len(set(identities)) == len(identities), identities


def test_replay_verify_passes_on_a_run_and_fails_on_a_tampered_record(lane: Lane) -> None:
    lane.start_worker()
    lane.send(
        start("job-r"),
        event("job-r", "id_uploaded"),
        event("job-r", "meeting_scheduled", properties={"room": "A"}),
        start("job-s", "payment-reminders"),
        event("job-s", "invoice_sent", source="tool"),
        event("job-s", "payment", properties={"amount": 500}),
    )
    lane.wait_until("decisions", lambda rs: len(rs) >= 6)
    ok = lane.cli("replay", "--verify")
    assert "replayed 6 decisions of 2 jobs: all states and effects match" in ok.stdout
    last = values(lane.read("decisions"), "job-r")[-1]
    forged = dict(last, effects=[], state_hash="0" * 64)
    lane.produce([(b"job-r", orjson.dumps(forged))], topic="decisions")
    bad = lane.cli("replay", "--verify", check=False)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "MISMATCH job-r" in bad.stdout


def test_each_playbook_version_has_its_own_record_key_so_compaction_keeps_it(lane: Lane) -> None:
    """The ``playbooks`` topic is compacted: keyed by playbook key alone, Kafka
    would in time keep only the newest version, and jobs pinned to an older one
    would be refused. Each version is its own key (docs/kafka.md)."""
    spec = "key: quick\nversion: {v}\nmilestones:\n  - id: reply\n    condition: replied\n"
    (lane.playbooks / "quick.yaml").write_text(spec.format(v=1))
    first = lane.start_worker()
    lane.send(start("job-v1", "quick"))
    lane.wait_until("decisions", lambda rs: len(values(rs, "job-v1")) >= 1)
    first.stop()
    (lane.playbooks / "quick.yaml").write_text(spec.format(v=2))
    lane.start_worker()
    lane.send(event("job-v1", "replied"))
    decisions = values(
        lane.wait_until("decisions", lambda rs: len(values(rs, "job-v1")) >= 2), "job-v1"
    )
    assert [(d["outcome"], d["playbook_version"]) for d in decisions] == [("applied", 1)] * 2
    registered = [r for r in lane.read("playbooks") if r["value"]["key"] == "quick"]
    assert sorted((r["key"], r["value"]["version"]) for r in registered) == [
        ("quick@v1", 1),
        ("quick@v2", 2),
    ]


def _stopped_with_a_pending_timer(lane: Lane, key: str) -> Path:
    """A worker's table holding job ``key`` with a timer 6 s off, the worker
    stopped: the path of the job's partition's RocksDB database."""
    from stream.runtime.partitions import home_partition

    (lane.playbooks / "quick.yaml").write_text(
        "key: quick\nversion: 1\nmilestones:\n"
        "  - id: reply\n    condition: customer_replied WITHIN 6s\n"
    )
    worker = lane.start_worker()
    lane.send(start(key, "quick"))
    lane.wait_until("decisions", lambda rs: len(values(rs, key)) >= 1, timeout=30)
    assert worker.stop() == 0
    partition = home_partition(key.encode(), 4)
    [path] = [p for p in (lane.root / "data").rglob(f"*jobstate-{partition}.db") if p.is_dir()]
    return path


def _timed_out(lane: Lane, key: str) -> None:
    tasks = lane.wait_until("tasks", lambda rs: len(values(rs, key)) >= 2, timeout=30)
    closed = values(tasks, key)[1]
    assert (closed["type"], closed["outcome"]) == ("task.closed", "timed_out")


def test_a_table_stored_before_the_due_time_index_is_indexed_once_and_its_timers_fire(
    lane: Lane,
) -> None:
    """A worker's table from before the due-time index (its jobs' due times only
    in their headers): at the assignment the new worker indexes it once, through
    the changelog, and the timer fires (docs/operations.md, "The due-time index")."""
    import rocksdict

    from stream.engine.timers import DUE_PREFIX, INDEX_MARK

    path = _stopped_with_a_pending_timer(lane, "job-m")
    # The partition's database as an older worker left it: no index rows, no mark.
    db = rocksdict.Rdict(str(path), options=rocksdict.Options(raw_mode=True))
    try:
        gone = [k for k, _v in db.items() if k.startswith(b"\x00due")]
        assert INDEX_MARK.encode() in gone
        assert any(k.startswith(DUE_PREFIX.encode()) and k.endswith(b"/job-m") for k in gone)
        for key in gone:
            del db[key]
    finally:
        db.close()
    again = lane.start_worker()
    again.wait_for("due-time index written for 1 timers", timeout=30)
    _timed_out(lane, "job-m")


def test_a_table_an_older_worker_wrote_to_last_is_indexed_again_and_its_timers_fire(
    lane: Lane,
) -> None:
    """Rolled back to a worker without the due-time index and forward again: the
    older worker moved a job's timer without moving its index row, and its
    changelog record, not the index's mark, is the partition's last. The new
    worker indexes the partition again at the assignment, and the timer fires
    (docs/operations.md, "The due-time index")."""
    import rocksdict

    from stream.engine.timers import DUE_PREFIX, INDEX_MARK
    from stream.runtime.partitions import home_partition

    path = _stopped_with_a_pending_timer(lane, "job-r")
    db = rocksdict.Rdict(str(path), options=rocksdict.Options(raw_mode=True))
    try:
        [row] = [k for k, _v in db.items() if k.startswith(DUE_PREFIX.encode())]
        assert row.endswith(b"/job-r")
        assert db.get(INDEX_MARK.encode()) is not None
        # What the older worker left: the row at another due time than the
        # header's (centuries on), and the job's state written after the mark.
        del db[row]
        db[row.replace(b"/0", b"/1", 1)] = b"1"
        state = db[b"job-r"]
    finally:
        db.close()

    async def older_worker_writes() -> None:
        async with producer(lane.bootstrap) as client:
            changelog = f"{lane.prefix}engine-jobstate-changelog"
            partition = home_partition(b"job-r", 4)
            await (await client.send(changelog, state, key=b"job-r", partition=partition))

    asyncio.run(older_worker_writes())
    again = lane.start_worker()
    again.wait_for("a worker without the index wrote to it; indexing it again", timeout=30)
    _timed_out(lane, "job-r")
