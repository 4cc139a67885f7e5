"""``stream.engine.engine.Engine`` without a broker: records in, outputs and state writes out.

A dict stands in for the RocksDB table. After each ``process`` the test does what
the Faust layer does (stream/engine/app.py): it "produces" the outputs (keeps them),
writes ``Batch.writes()`` into the dict, then calls ``engine.committed(batch)``.

Every expected value is written out by hand from docs/decisions.md, docs/kafka.md and the playbooks
below; none is computed by the code under test.
"""

from __future__ import annotations

from datetime import timedelta

import orjson
import pytest

from stream.engine.batch import Record
from tests.stream.engine.engine_harness import (
    ONBOARD,
    QUICK,
    T0,
    TOPICS,
    WALL,
    Harness,
    decisions,
    event,
    letters,
    ms,
    on,
    parse_iso,
    registry,
    sha,
    start,
    tasks,
)
from topics import (
    TaskClosedRecord,
    TaskOpenedRecord,
    TickRecord,
)

# -- decisions, tasks and job views -----------------------------------------------------


def test_a_start_then_events_give_chained_decision_records() -> None:
    h = Harness(registry(ONBOARD))
    first = h.run([h.inbox(start("job-1"), at=T0)])
    [d1] = decisions(first)
    assert (d1.job_key, d1.outcome, d1.seq, d1.refused) == ("job-1", "applied", 1, None)
    assert (d1.playbook_key, d1.playbook_version) == ("onboard", 1)
    assert d1.origin is not None
    assert (d1.origin.topic, d1.origin.partition, d1.origin.offset) == ("test.inbox", 0, 0)
    assert d1.input.type == "job.start"
    assert d1.prev_state_hash is None
    assert d1.state_hash == sha(h.state_bytes("job-1"))
    assert d1.status == "running"
    assert d1.frontier == ["collect"]
    assert parse_iso(d1.now) == T0

    second = h.run(
        [
            h.inbox(
                event("job-1", "id_uploaded", idempotency_key="evt-1"), at=T0 + timedelta(hours=1)
            ),
            h.inbox(event("job-1", "account_activated"), at=T0 + timedelta(hours=2)),
        ]
    )
    d2, d3 = decisions(second)
    assert [d.seq for d in (d2, d3)] == [2, 3]
    assert [d.origin.offset for d in (d2, d3) if d.origin] == [1, 2]
    assert d2.prev_state_hash == d1.state_hash
    assert d3.prev_state_hash == d2.state_hash
    assert d3.state_hash == sha(h.state_bytes("job-1"))
    assert d2.input.action == "id_uploaded"
    assert d3.status == "done"
    assert [o.key for o in on(second, "decisions")] == [b"job-1", b"job-1"]
    # the verdict that settled collect names the occurrence that made it TRUE
    assert "evt-1" in [e for v in d2.verdicts for a in v.atoms for e in a.evidence]
    assert (second.decisions, first.decisions) == (2, 1)


def test_tasks_open_and_close_with_stable_task_ids() -> None:
    h = Harness(registry(ONBOARD))
    started = h.run([h.inbox(start("job-1", subject={"name": "Ada"}, contacts=["ada@x"]), at=T0)])
    [opened] = tasks(started)
    assert isinstance(opened, TaskOpenedRecord)
    assert opened.task_id == "job-1/collect"
    assert (opened.job_key, opened.milestone) == ("job-1", "collect")
    assert opened.instructions == "Ask for an ID document."
    assert opened.playbook_key == "onboard"
    assert opened.playbook_instructions == "Be brief and friendly."
    assert opened.integrations == ["email"]
    assert parse_iso(opened.at) == T0
    assert parse_iso(opened.deadline) == T0 + timedelta(days=7)
    assert opened.frontier == ["collect"]
    assert opened.subject == {"name": "Ada"}
    assert opened.contacts == ["ada@x"]
    assert [o.key for o in on(started, "tasks")] == [b"job-1"]

    later = T0 + timedelta(hours=3)
    moved = h.run([h.inbox(event("job-1", "id_uploaded"), at=later)])
    closed, opened2 = tasks(moved)
    assert isinstance(closed, TaskClosedRecord)
    assert (closed.task_id, closed.outcome) == ("job-1/collect", "done")
    assert parse_iso(closed.at) == later
    assert isinstance(opened2, TaskOpenedRecord)
    assert (opened2.task_id, opened2.integrations) == ("job-1/activate", ["crm"])
    assert opened2.frontier == ["activate"]


def test_one_snapshot_per_changed_job_per_batch_with_the_latest_state() -> None:
    h = Harness(registry(ONBOARD))
    batch = h.run(
        [
            h.inbox(start("job-1"), at=T0),
            h.inbox(start("job-2"), at=T0),
            h.inbox(event("job-1", "id_uploaded"), at=T0 + timedelta(minutes=1)),
            h.inbox(event("job-1", "noise"), at=T0 + timedelta(minutes=2)),
        ]
    )
    assert batch.decisions == 4
    snaps = h.snapshots(batch)
    assert sorted(s.key for s in snaps) == ["job-1", "job-2"]
    by_key = {s.key: s for s in snaps}
    one = by_key["job-1"]
    assert one.seq == 3
    assert one.events == 2
    assert one.milestones == {"collect": "done", "activate": "open"}
    assert one.frontier == ["activate"]
    assert one.status == "running"
    # the latest state: the last decision's (the hash is on the decisions only)
    assert one.state_hash is None
    last = [d for d in decisions(batch) if d.job_key == "job-1"][-1]
    assert (last.seq, last.state_hash) == (3, sha(h.state_bytes("job-1")))
    assert by_key["job-2"].milestones == {"collect": "open", "activate": "pending"}
    assert by_key["job-2"].seq == 1
    # a batch that changes only job-2 writes only job-2's state
    again = h.run([h.inbox(event("job-2", "id_uploaded"), at=T0 + timedelta(minutes=5))])
    assert [s.key for s in h.snapshots(again)] == ["job-2"]


def test_outputs_go_to_the_input_partition_and_the_state_is_written_per_job() -> None:
    h = Harness(registry(ONBOARD), partitions=4)
    batch = h.run([h.inbox(start("job-2"), at=T0)])  # job-2's home is partition 2
    # Every topic has the inbox's partition count: a job keeps one partition.
    assert [o.partition for o in batch.outputs] == [2] * len(batch.outputs)
    assert all(o.key == b"job-2" for o in batch.outputs)
    assert {o.topic for o in batch.outputs} == {"test.decisions", "test.tasks"}
    assert ("job-2", 2) in h.store
    # home partition, next due (7 days on), applied: offset 0 of partition 2
    assert h.store[("job-2", 2)].startswith(b"LG2 2 %d 2:0\n" % ms(T0 + timedelta(days=7)))


# -- re-delivery, crashes, idempotency --------------------------------------------------


def test_redelivered_records_after_a_commit_produce_nothing() -> None:
    h = Harness(registry(ONBOARD))
    records = [
        h.inbox(start("job-1"), at=T0),
        h.inbox(event("job-1", "id_uploaded"), at=T0 + timedelta(minutes=1)),
        h.inbox(event("job-1", "account_activated"), at=T0 + timedelta(minutes=2)),
    ]
    first = h.run(records)
    assert first.decisions == 3
    before = dict(h.store)

    again = h.run(records)
    assert again.outputs == []
    assert (again.skipped, again.decisions, again.deadletters) == (3, 0, 0)
    assert h.store == before

    restarted = h.restart()
    after_restart = restarted.run(records)
    assert after_restart.outputs == []
    assert after_restart.skipped == 3
    assert h.store == before


def test_redelivered_deadletters_and_refusals_are_recognised_by_the_watermark() -> None:
    h = Harness(registry(ONBOARD))
    records = [
        h.inbox(b"\xff not json", key=b"job-x"),
        h.inbox(event("ghost", "id_uploaded")),
        h.inbox(start("job-9", "no-such-playbook")),
    ]
    first = h.run(records)
    assert (first.deadletters, first.decisions) == (1, 2)
    again = h.run(records)
    assert again.outputs == []
    assert again.skipped == 3
    fresh = h.restart().run(records)
    assert fresh.outputs == []
    assert fresh.skipped == 3


def test_a_partly_written_batch_is_recognised_by_the_jobs_own_offsets() -> None:
    """The watermark is written last: a crash before it leaves the jobs' offsets."""
    h = Harness(registry(ONBOARD))
    records = [
        h.inbox(start("job-1"), at=T0),
        h.inbox(event("job-1", "id_uploaded"), at=T0 + timedelta(minutes=1)),
    ]
    batch = h.engine.process(records)
    writes = batch.writes()
    jobs_only = [w for w in writes if w[0] == "job-1"]
    assert len(jobs_only) == 1
    # the job's due-time index row, the job, the watermark, the index's mark
    assert [k for k, _p, _r in writes][2:] == ["\x00inbox-watermark-0", "\x00due-index"]
    assert len(writes) == 4
    for key, partition, raw in jobs_only:
        h.store[(key, partition)] = raw
    again = h.restart().run(records)
    assert again.outputs == []
    assert again.skipped == 2


def test_a_crash_part_way_through_the_writes_loses_and_repeats_nothing() -> None:
    """Whatever prefix of ``writes()`` reached the table, re-processing the batch
    after a restart ends in the same table as a run without a crash."""
    reg = registry(ONBOARD)
    base = Harness(reg)
    base.run([base.inbox(start("job-1"), at=T0)])
    records = [
        base.inbox(event("job-1", "id_uploaded"), at=T0 + timedelta(minutes=1)),
        base.inbox(start("job-2"), at=T0 + timedelta(minutes=2)),
        base.inbox(b"junk", key=b"job-3", at=T0 + timedelta(minutes=3)),
    ]
    clean = Harness(reg, dict(base.store))
    clean.run(records)
    writes = Harness(reg, dict(base.store)).engine.process(records).writes()
    # job-1's and job-2's new due-time rows, the jobs, job-1's old row deleted,
    # the watermark, the index's mark
    assert len(writes) == 7
    decided_clean = dict(clean.store)
    late = T0 + timedelta(days=30)  # past every timer of both jobs
    clean.run([clean.tick(late)])
    for cut in range(len(writes) + 1):
        crashed = Harness(reg, dict(base.store))
        for key, partition, raw in writes[:cut]:
            if raw is None:
                crashed.store.pop((key, partition), None)
            else:
                crashed.store[(key, partition)] = raw
        restarted = crashed.restart()
        rerun = restarted.run(records)
        decided = {d.job_key for d in decisions(rerun)}
        assert decided == {"job-1", "job-2"} - {k for k, _p, _r in writes[:cut]}
        # At most a stale index row is left (job-1's old one, when the crash
        # came between its state and the row's deletion): every due time has
        # its row, and the tick that reaches a stale one deletes it.
        assert set(decided_clean.items()) <= set(crashed.store.items())
        for (key, _p), _raw in set(crashed.store.items()) - set(decided_clean.items()):
            assert key.startswith("\x00due/"), f"crash after {cut} writes: {key!r}"
        restarted.run([restarted.tick(late)])
        assert crashed.store == clean.store, f"crash after {cut} writes"


def test_a_crash_before_the_state_write_re_emits_byte_identical_outputs() -> None:
    h = Harness(registry(ONBOARD, QUICK))
    h.run([h.inbox(start("job-0", "quick"), at=T0)])
    records = [
        h.inbox(start("job-1"), at=T0),
        h.inbox(event("job-1", "id_uploaded", idempotency_key="u-1"), at=T0 + timedelta(hours=1)),
        h.inbox(b"garbage", key=b"job-1", at=T0 + timedelta(hours=1)),
        h.inbox(event("ghost", "x"), at=T0 + timedelta(hours=1)),
        h.tick(T0 + timedelta(hours=3)),
    ]
    # same engine, writes never applied
    first = h.run(records[:4], commit=False)
    second = h.run(records[:4], commit=False)
    assert first.outputs == second.outputs
    assert len(first.outputs) > 5

    # a new worker process after the crash, the due-time index read from the table
    runs = []
    for _ in range(2):
        worker = h.restart()
        worker.engine.assigned()
        runs.append(worker.run(records, commit=False))
    assert runs[0].outputs == runs[1].outputs
    assert [d.input.type for d in decisions(runs[0])][-1] == "tick"
    assert runs[0].writes() == runs[1].writes()


def test_a_retried_idempotency_key_gives_no_decision_and_no_output() -> None:
    h = Harness(registry(ONBOARD))
    h.run([h.inbox(start("job-1"), at=T0)])
    upload = event("job-1", "id_uploaded", idempotency_key="upload-1")
    first = h.run([h.inbox(upload, at=T0 + timedelta(minutes=1))])
    assert first.decisions == 1
    assert first.duplicates == 0
    stored = h.store[("job-1", 0)]

    retry = h.run([h.inbox(upload, at=T0 + timedelta(minutes=2))])
    assert retry.outputs == []
    assert (retry.duplicates, retry.decisions, retry.skipped) == (1, 0, 0)
    assert h.store[("job-1", 0)] == stored

    # a retry inside one batch, next to its original
    h.run([h.inbox(start("job-2"), at=T0)])
    both = event("job-2", "id_uploaded", idempotency_key="upload-2")
    batch = h.run(
        [
            h.inbox(both, at=T0 + timedelta(minutes=1)),
            h.inbox(both, at=T0 + timedelta(minutes=2)),
        ]
    )
    assert batch.decisions == 1
    assert batch.duplicates == 1
    assert [t.task_id for t in tasks(batch)] == ["job-2/collect", "job-2/activate"]


# -- refusals -----------------------------------------------------------------------


def test_an_event_for_an_unknown_job_is_refused() -> None:
    h = Harness(registry(ONBOARD))
    batch = h.run([h.inbox(event("ghost", "id_uploaded"), at=T0)])
    [d] = decisions(batch)
    assert (d.job_key, d.outcome) == ("ghost", "refused")
    assert d.refused == "unknown job: no job.start was applied"
    assert d.state_hash is None
    assert d.origin is not None
    assert d.origin.offset == 0
    assert tasks(batch) == []
    assert h.snapshots(batch) == []
    assert [o.key for o in on(batch, "decisions")] == [b"ghost"]


def test_a_start_on_an_unknown_playbook_is_refused() -> None:
    h = Harness(registry(ONBOARD))
    batch = h.run([h.inbox(start("job-6", "no-such-playbook"), at=T0)])
    [d] = decisions(batch)
    assert (d.job_key, d.outcome) == ("job-6", "refused")
    assert d.refused == "unknown playbook 'no-such-playbook'"
    assert tasks(batch) == []
    assert ("job-6", 0) not in h.store
    # the job does not exist afterwards
    later = h.run([h.inbox(event("job-6", "id_uploaded"), at=T0)])
    assert [d.refused for d in decisions(later)] == ["unknown job: no job.start was applied"]


def test_a_repeated_start_is_refused_and_changes_nothing() -> None:
    h = Harness(registry(ONBOARD))
    h.run([h.inbox(start("job-7"), at=T0)])
    state = h.state_bytes("job-7")
    again = h.inbox(start("job-7"), at=T0 + timedelta(minutes=1))
    batch = h.run([again])
    [d] = decisions(batch)
    assert (d.job_key, d.outcome) == ("job-7", "refused")
    assert d.refused == "job 'job-7' already exists"
    assert tasks(batch) == []
    assert h.state_bytes("job-7") == state
    # and it is not decided again when re-delivered
    redelivered = h.run([again])
    assert redelivered.outputs == []
    assert redelivered.skipped == 1


# -- dead letters ----------------------------------------------------------------------


def test_bad_records_become_dead_letters_and_the_next_good_record_is_decided() -> None:
    h = Harness(registry(ONBOARD))
    no_action = orjson.dumps({"type": "event", "key": "job-p"})
    launch = orjson.dumps({"type": "launch", "key": "job-p"})
    wrong_key = orjson.dumps(start("job-p"))
    records = [
        h.inbox(b"\xff\xfe not json at all", key=b"job-p", at=T0),
        h.inbox(no_action, key=b"job-p", at=T0),
        h.inbox(launch, key=b"job-p", at=T0),
        h.inbox(wrong_key, key=b"other", at=T0),
        h.inbox(None, key=b"job-p", at=T0),
        h.inbox(start("job-p"), at=T0 + timedelta(seconds=1)),
    ]
    batch = h.run(records)
    dead = letters(batch)
    assert batch.deadletters == 5
    assert [d.offset for d in dead] == [0, 1, 2, 3, 4]
    assert {(d.topic, d.partition) for d in dead} == {("test.inbox", 0)}
    # A dead letter's value and key are the original bytes, exactly.
    assert [d.value for d in dead] == [
        b"\xff\xfe not json at all",
        no_action,
        launch,
        wrong_key,
        None,
    ]
    assert [d.key for d in dead] == [
        b"job-p",
        b"job-p",
        b"job-p",
        b"other",
        b"job-p",
    ]
    assert dead[0].reason.startswith("not JSON")
    assert "action" in dead[1].reason
    assert "launch" in dead[2].reason
    assert dead[3].reason == "record key 'other' is not the job key 'job-p'"
    assert dead[4].reason == "empty record (no value)"
    # dated by the worker's clock; the record's own timestamp is kept beside it
    assert all(parse_iso(d.at) == WALL for d in dead)
    assert all(d.timestamp == ms(T0) for d in dead)
    # the dead letter keeps the original record key
    assert [o.key for o in on(batch, "deadletter")] == [
        b"job-p",
        b"job-p",
        b"job-p",
        b"other",
        b"job-p",
    ]
    [d] = decisions(batch)
    assert (d.job_key, d.outcome, d.seq) == ("job-p", "applied", 1)


def test_a_record_from_an_unexpected_topic_is_a_dead_letter() -> None:
    h = Harness(registry(ONBOARD))
    stray = Record("test.elsewhere", 1, 7, b"k", b"{}", ms(T0))
    batch = h.run([stray, h.inbox(start("job-1"), at=T0)])
    [dead] = letters(batch)
    assert (dead.topic, dead.partition, dead.offset) == ("test.elsewhere", 1, 7)
    assert "test.elsewhere" in dead.reason
    assert batch.decisions == 1


@pytest.mark.parametrize(
    "value",
    [
        b"not json",
        None,
        orjson.dumps({"type": "tick", "partition": 0}),
        orjson.dumps({"type": "tick", "partition": 0, "at": "yesterday"}),
        orjson.dumps({"type": "tick", "partition": 0, "at": "2026-01-05T12:00:00"}),
        orjson.dumps({"type": "tick", "partition": 0, "at": "2026-01-05T12:00:00Z", "x": 1}),
    ],
    ids=["not-json", "no-value", "no-at", "bad-at", "naive-at", "unknown-field"],
)
def test_an_invalid_tick_is_a_dead_letter_and_the_batch_goes_on(value: bytes | None) -> None:
    h = Harness(registry(QUICK))
    h.run([h.inbox(start("job-q", "quick"), at=T0)])
    bad = Record(TOPICS.ticks, 0, 5, b"tick", value, ms(T0 + timedelta(hours=3)))
    good = h.tick(T0 + timedelta(hours=3), offset=6)
    batch = h.run([bad, good])
    [dead] = letters(batch)
    assert dead.reason.startswith("invalid tick")
    assert (dead.topic, dead.partition, dead.offset) == ("test.ticks", 0, 5)
    assert (dead.key, dead.value) == (b"tick", value)
    assert [d.input.type for d in decisions(batch)] == ["tick"]


# -- ticks and timers ---------------------------------------------------------------------


def test_a_tick_past_a_within_deadline_fires_it() -> None:
    h = Harness(registry(QUICK), partitions=4)
    h.run([h.inbox(start("job-s", "quick"), at=T0)])  # job-s lives on partition 1

    early = h.run([h.tick(T0 + timedelta(hours=1), partition=1)])
    assert early.outputs == []
    other = h.run([h.tick(T0 + timedelta(hours=3), partition=0)])
    assert other.outputs == []

    at = T0 + timedelta(hours=3)
    fired = h.run([h.tick(at, partition=1, offset=9)])
    [d] = decisions(fired)
    assert d.input.type == "tick"
    assert d.job_key == "job-s"
    assert parse_iso(d.now) == at
    assert d.origin is not None
    assert (d.origin.topic, d.origin.partition, d.origin.offset) == ("test.ticks", 1, 9)
    assert [(f.kind, f.milestone) for f in d.fired] == [("settle", "reply")]
    assert parse_iso(d.fired[0].at) == T0 + timedelta(hours=2)
    assert d.seq == 2
    assert d.status == "failed"
    [closed] = tasks(fired)
    assert isinstance(closed, TaskClosedRecord)
    assert (closed.task_id, closed.outcome) == ("job-s/reply", "timed_out")
    [snap] = h.snapshots(fired)
    assert (snap.status, snap.milestones) == ("failed", {"reply": "knocked"})
    assert snap.seq == d.seq
    assert d.state_hash == sha(h.state_bytes("job-s", 1))
    # fired once: a later tick finds nothing due
    assert h.run([h.tick(T0 + timedelta(hours=4), partition=1)]).outputs == []


def test_a_due_task_is_emitted_by_the_first_tick_after_opening_plus_due() -> None:
    delayed = """\
key: delayed
version: 1
milestones:
  - id: call
    condition: called WITHIN 1d
    due: 1h
"""
    h = Harness(registry(delayed))
    started = h.run([h.inbox(start("job-d", "delayed"), at=T0)])
    assert tasks(started) == []
    assert h.run([h.tick(T0 + timedelta(minutes=30))]).outputs == []
    batch = h.run([h.tick(T0 + timedelta(hours=1, minutes=30))])
    [opened] = tasks(batch)
    assert isinstance(opened, TaskOpenedRecord)
    assert opened.task_id == "job-d/call"
    assert parse_iso(opened.at) == T0 + timedelta(hours=1)  # opening + due, not the tick
    assert parse_iso(opened.deadline) == T0 + timedelta(days=1)
    [d] = decisions(batch)
    assert [(f.kind, f.milestone) for f in d.fired] == [("due", "call")]
    # the settlement timer is still pending, and fires later
    late = h.run([h.tick(T0 + timedelta(days=2))])
    [closed] = tasks(late)
    assert isinstance(closed, TaskClosedRecord)
    assert (closed.task_id, closed.outcome) == ("job-d/call", "timed_out")


def test_a_tick_offset_is_not_taken_for_an_inbox_offset() -> None:
    """Ticks and the inbox have offsets of their own: after a tick decided a job,
    the job's next inbox record is still decided."""
    delayed = """\
key: delayed
version: 1
milestones:
  - id: call
    condition: called WITHIN 1d
    due: 1h
"""
    h = Harness(registry(delayed))
    h.run([h.inbox(start("job-d", "delayed"), at=T0)])
    fired = h.run([h.tick(T0 + timedelta(hours=2), offset=5_000)])
    assert fired.decisions == 1
    for restart in (False, True):
        worker = h.restart() if restart else h
        batch = worker.run(
            [worker.inbox(event("job-d", "called"), at=T0 + timedelta(hours=3))], commit=False
        )
        assert batch.skipped == 0
        [d] = decisions(batch)
        assert (d.outcome, d.seq, d.status) == ("applied", 3, "done")


def test_an_event_before_a_deadline_cancels_its_firing() -> None:
    h = Harness(registry(QUICK))
    h.run([h.inbox(start("job-t", "quick"), at=T0)])
    h.run([h.inbox(event("job-t", "customer_replied"), at=T0 + timedelta(hours=1))])
    assert h.run([h.tick(T0 + timedelta(hours=3))]).outputs == []


def test_stored_timers_fire_after_a_restart_with_nothing_rebuilt() -> None:
    h = Harness(registry(QUICK, ONBOARD))
    h.run(
        [
            h.inbox(start("job-t", "quick"), at=T0),
            h.inbox(start("job-u", "quick"), at=T0 + timedelta(hours=1)),
            h.inbox(start("job-v", "quick"), at=T0),
        ]
    )
    h.run([h.inbox(event("job-v", "customer_replied"), at=T0 + timedelta(minutes=5))])
    at = T0 + timedelta(hours=2, minutes=30)

    # The due-time index is in the table: job-v's timer left it with its event.
    assert [(kind, name) for _due, kind, name in h.due_rows()] == [("j", "job-t"), ("j", "job-u")]
    restarted = h.restart()  # a new process, nothing rebuilt
    loads = len(restarted.loads)
    batch = restarted.run([restarted.tick(at)])
    assert restarted.loads[loads:] == [("job-t", 0)]  # the due job alone is read
    assert [d.job_key for d in decisions(batch)] == ["job-t"]
    later = restarted.run([restarted.tick(T0 + timedelta(hours=3, minutes=30))])
    assert [d.job_key for d in decisions(later)] == ["job-u"]


def test_agent_events_decide_but_never_settle_a_milestone() -> None:
    h = Harness(registry(ONBOARD))
    h.run([h.inbox(start("job-1"), at=T0)])
    claim = h.run(
        [h.inbox(event("job-1", "id_uploaded", source="agent"), at=T0 + timedelta(minutes=1))]
    )
    [d] = decisions(claim)
    assert (d.outcome, d.seq, d.input.source) == ("applied", 2, "agent")
    assert d.transitions == []
    assert tasks(claim) == []
    [snap] = h.snapshots(claim)
    assert snap.milestones == {"collect": "open", "activate": "pending"}
    assert snap.events == 1

    proof = h.run(
        [h.inbox(event("job-1", "id_uploaded", source="tool"), at=T0 + timedelta(minutes=2))]
    )
    assert h.snapshots(proof)[0].milestones == {"collect": "done", "activate": "open"}


def test_the_now_of_an_inbox_decision_is_the_record_timestamp() -> None:
    h = Harness(registry(ONBOARD))
    started_at = T0 + timedelta(milliseconds=250)
    event_at = T0 + timedelta(hours=1, minutes=30, seconds=5, milliseconds=123)
    batch = h.run(
        [
            h.inbox(start("job-1"), at=started_at),
            h.inbox(event("job-1", "id_uploaded"), at=event_at),
        ]
    )
    d1, d2 = decisions(batch)
    assert parse_iso(d1.now) == started_at
    assert parse_iso(d2.now) == event_at
    [snap] = h.snapshots(batch)
    assert parse_iso(snap.started_at) == started_at
    assert snap.updated_at is not None
    assert parse_iso(snap.updated_at) == event_at
    _opened, closed, _opened_next = tasks(batch)
    assert isinstance(closed, TaskClosedRecord)
    assert parse_iso(closed.at) == event_at


def test_a_tick_record_encodes_like_the_ticker_writes_it() -> None:
    """The harness's tick bytes are what the TickRecord model accepts."""
    h = Harness(registry(QUICK))
    record = h.tick(T0, partition=3)
    tick = TickRecord.model_validate_json(record.value or b"")
    assert (tick.partition, parse_iso(tick.at)) == (3, T0)
