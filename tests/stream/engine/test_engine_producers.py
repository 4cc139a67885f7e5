"""The engine against producers it did not write (docs/kafka.md, "Partitioning"
and "Dead letters"): records on the wrong partition, keyless records, records
that make deciding fail, clocks that run ahead. Without a broker: the harness of
tests/stream/engine/engine_harness.py (a dict for the table, committed as the Faust layer commits).
The same cases against the real broker are in tests/stream/engine/test_producers.py."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import orjson
import pytest

from stream.engine.engine import MAX_INSTANT_MS, Record, StorageError
from stream.runtime.partitions import HOMES_KEPT, home_partition
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
    start,
    tasks,
)
from topics import FORWARDED_FROM_HEADER

# job-2 lives on partition 2 of 4, job-1 on partition 0 (murmur2).
assert home_partition(b"job-2", 4) == 2
assert home_partition(b"job-1", 4) == 0


def forwarded_copy(h: Harness, forward: Any) -> Record:
    """The record a broker would deliver for a forward the engine produced."""
    partition = forward.partition
    offset = h.next_offset.get(partition, 0)
    h.next_offset[partition] = offset + 1
    assert forward.timestamp_ms is not None
    return Record(
        TOPICS.inbox,
        partition,
        offset,
        forward.key,
        forward.value,
        forward.timestamp_ms,
        list(forward.headers or []),
    )


# -- partitioning -----------------------------------------------------------------------


def test_the_engine_s_home_partitions_are_murmur2_s_and_it_remembers_a_bounded_number() -> None:
    h = Harness(registry(ONBOARD), partitions=4)
    engine = h.engine
    # Written out above: job-2 on partition 2, job-1 on 0; asked twice (the
    # second answer is the remembered one).
    assert [engine.home(b"job-2"), engine.home(b"job-1")] * 2 == [2, 0, 2, 0]
    keys = [b"job-%d" % i for i in range(HOMES_KEPT + 10)]
    assert [engine.home(k) for k in keys] == [home_partition(k, 4) for k in keys]
    assert len(engine._homes) <= HOMES_KEPT
    assert [engine.home(k) for k in keys[:100]] == [home_partition(k, 4) for k in keys[:100]]


def test_a_record_on_the_wrong_partition_is_forwarded_home_and_decided_there_once() -> None:
    h = Harness(registry(ONBOARD), partitions=4)
    h.run([h.inbox(start("job-2"), at=T0)])
    stray = h.inbox(event("job-2", "id_uploaded"), at=T0 + timedelta(hours=1), partition=0)
    batch = h.run([stray])
    assert (batch.forwarded, batch.decisions, batch.deadletters) == (1, 0, 0)
    [forward] = on(batch, "inbox")
    assert (forward.partition, forward.key, forward.value) == (2, b"job-2", stray.value)
    assert forward.timestamp_ms == ms(T0 + timedelta(hours=1))  # decided at its own time
    assert forward.headers == [(FORWARDED_FROM_HEADER, b"p0@%d" % stray.offset)]

    copy = forwarded_copy(h, forward)
    decided = h.run([copy])
    [d] = decisions(decided)
    assert (d.outcome, d.seq) == ("applied", 2)
    assert d.origin is not None
    assert (d.origin.topic, d.origin.partition, d.origin.offset) == ("test.inbox", 0, 0)
    assert d.origin.forwarded is not None
    assert (d.origin.forwarded.partition, d.origin.forwarded.offset) == (2, copy.offset)
    # the occurrence is named by where the producer put it
    [verdict] = [v for v in d.verdicts if v.milestone == "collect"]
    assert verdict.atoms[0].evidence == ["p0@0"]
    assert [t.milestone for t in tasks(decided)] == ["collect", "activate"]

    # Forwarded twice (a crash between the forward and the origin's commit):
    # the second copy is recognised by where it came from, not by its offset.
    again = h.run([forwarded_copy(h, forward)])
    assert (again.decisions, again.skipped, again.outputs) == (0, 1, [])


def test_an_offset_is_never_compared_with_an_offset_of_another_partition() -> None:
    # The job has applied offsets 0..5 of its home partition 2; a record that a
    # producer put on partition 1 at offset 3 is a new record, not a re-delivery.
    h = Harness(registry(QUICK), partitions=4)
    h.next_offset[2] = 5
    h.run([h.inbox(start("job-2", "quick"), at=T0)])  # offset 5 of partition 2
    h.next_offset[1] = 3
    stray = h.inbox(event("job-2", "customer_replied"), at=T0 + timedelta(minutes=1), partition=1)
    [forward] = on(h.run([stray]), "inbox")
    batch = h.run([forwarded_copy(h, forward)])
    [d] = decisions(batch)
    assert (d.outcome, d.status) == ("applied", "done")
    assert d.origin is not None
    assert (d.origin.partition, d.origin.offset) == (1, 3)


def test_the_same_offset_of_two_partitions_is_two_records() -> None:
    h = Harness(registry(ONBOARD), partitions=4)
    h.run([h.inbox(start("job-2"), at=T0)])
    h.next_offset[0] = h.next_offset[3] = 7
    first = h.inbox(event("job-2", "noted"), at=T0 + timedelta(minutes=1), partition=0)
    second = h.inbox(event("job-2", "noted"), at=T0 + timedelta(minutes=2), partition=3)
    assert first.offset == second.offset == 7
    forwards = on(h.run([first]), "inbox") + on(h.run([second]), "inbox")
    batch = h.run([forwarded_copy(h, f) for f in forwards])
    assert [d.seq for d in decisions(batch)] == [2, 3]


def test_a_keyless_record_is_a_dead_letter_naming_why() -> None:
    h = Harness(registry(ONBOARD), partitions=4)
    batch = h.run([h.inbox(start("job-1"), key=None, partition=3)])
    [dead] = letters(batch)
    assert dead.reason == "no record key: an inbox record's key must be its job key"
    assert (dead.partition, dead.key, dead.value) == (3, None, orjson.dumps(start("job-1")))
    assert batch.decisions == 0
    assert ("job-1", 0) not in h.store


def test_a_forwarded_from_header_naming_its_own_or_no_partition_is_not_believed() -> None:
    h = Harness(registry(ONBOARD), partitions=4)
    h.run([h.inbox(start("job-2"), at=T0)])
    for forged in (b"p2@0", b"p9@0", b"p1@-4", b"nonsense"):
        record = h.inbox(
            event("job-2", "noted"),
            at=T0 + timedelta(minutes=1),
            headers=[(FORWARDED_FROM_HEADER, forged)],
        )
        [d] = decisions(h.run([record]))
        assert d.origin is not None
        assert (d.origin.partition, d.origin.offset, d.origin.forwarded) == (
            2,
            record.offset,
            None,
        ), forged


def test_a_record_too_large_to_forward_is_a_dead_letter_where_it_was() -> None:
    h = Harness(registry(ONBOARD), partitions=4)
    big = b'{"type":"event","key":"job-2","action":"a","value":"' + b"x" * 1_000_000 + b'"}'
    batch = h.run([h.inbox(big, key=b"job-2", partition=0)])
    [dead] = letters(batch)
    assert dead.reason.startswith("record of 1,000,")
    assert dead.reason.endswith("bytes is larger than the limit of 1,000,000")
    assert batch.forwarded == 0


# -- poison isolation --------------------------------------------------------------------


def corrupt(h: Harness, key: str, partition: int = 0) -> Harness:
    """Garble a stored job's state (its header stays readable), and return a
    restarted engine that must read it from the table: deciding that job fails."""
    raw = h.store[(key, partition)]
    h.store[(key, partition)] = raw[: raw.index(b"\n") + 1] + b'{"garbled": '
    restarted = h.restart()
    restarted.engine.assigned()
    return restarted


def test_a_record_that_makes_deciding_fail_is_a_dead_letter_and_the_batch_goes_on() -> None:
    h = Harness(registry(ONBOARD))
    h.run([h.inbox(start("job-1"), at=T0), h.inbox(start("job-3"), at=T0)])
    h = corrupt(h, "job-1")
    records = [
        h.inbox(event("job-1", "id_uploaded"), at=T0 + timedelta(minutes=1)),
        h.inbox(event("job-3", "id_uploaded"), at=T0 + timedelta(minutes=2)),
    ]
    batch = h.run(records)
    [dead] = letters(batch)
    assert dead.offset == records[0].offset
    assert dead.reason.startswith("could not be decided: JSONDecodeError: ")
    assert dead.value == records[0].value
    [d] = decisions(batch)
    assert (d.job_key, d.input.action, d.seq) == ("job-3", "id_uploaded", 2)
    # nothing of the failed record reached the batch: one decision, one state
    assert [key for key, _p, _raw in batch.writes() if not key.startswith("\x00")] == ["job-3"]


def test_nested_and_huge_records_are_dead_letters_with_reasons_and_good_ones_follow() -> None:
    h = Harness(registry(ONBOARD))
    deep = b'{"type":"event","key":"job-1","action":"a","properties":' + b'{"a":' * 252
    deep += b"1" + b"}" * 253
    huge_int = b'{"type":"event","key":"job-1","action":"a","value":1180591620717411303424}'
    control = bytes(range(32)) * (1 << 15)  # 1 MiB of control bytes
    records = [
        h.inbox(start("job-1"), at=T0),
        h.inbox(deep, key=b"job-1"),
        h.inbox(huge_int, key=b"job-1"),
        h.inbox(control, key=b"job-1"),
        h.inbox(event("job-1", "id_uploaded"), at=T0 + timedelta(minutes=1)),
    ]
    batch = h.run(records)
    reasons = [d.reason for d in letters(batch)]
    assert "nested deeper than 32 levels" in reasons[0]
    assert reasons[1] == "integer 1180591620717411303424 is beyond 64 bits"
    assert reasons[2] == "record of 1,048,576 bytes is larger than the limit of 1,000,000"
    assert [d.seq for d in decisions(batch)] == [1, 2]


def test_a_dead_letter_is_the_original_bytes_plus_small_headers() -> None:
    h = Harness(registry(ONBOARD))
    control = bytes(range(32)) * (1 << 15)
    [out] = on(h.run([h.inbox(control, key=b"job-1")]), "deadletter")
    assert out.value == control
    size = len(out.value) + len(out.key or b"") + sum(len(n) + len(v) for n, v in out.headers or [])
    assert size <= len(control) + len(b"job-1") + 1024


# -- clocks ------------------------------------------------------------------------------


def test_an_event_stamped_far_ahead_is_decided_at_the_worker_clock_plus_the_skew() -> None:
    h = Harness(registry(QUICK))
    h.wall = T0 + timedelta(minutes=10)
    h.run([h.inbox(start("job-1", "quick"), at=T0)])
    year_9000 = h.inbox(event("job-1", "noted"), at=ms(T0.replace(year=9000)))
    batch = h.run([year_9000])
    [d] = decisions(batch)
    bounded = T0 + timedelta(minutes=15)  # the worker's clock + 5 minutes
    assert parse_iso(d.now) == bounded
    assert d.clock is not None
    assert (d.clock.bound, d.clock.record_timestamp) == ("worker_clock", ms(T0.replace(year=9000)))
    assert d.status == "running"  # the reply window (2h) did not close
    assert batch.bounded == 1


def test_a_timestamp_past_year_9999_is_a_dead_letter() -> None:
    h = Harness(registry(QUICK))
    h.run([h.inbox(start("job-1", "quick"), at=T0)])
    batch = h.run([h.inbox(event("job-1", "noted"), at=MAX_INSTANT_MS + 1)])
    [dead] = letters(batch)
    assert "not an instant a decision can be made at" in dead.reason
    assert dead.timestamp == MAX_INSTANT_MS + 1
    assert batch.decisions == 0


def test_a_record_without_a_timestamp_is_decided_at_the_worker_clock() -> None:
    h = Harness(registry(QUICK))
    batch = h.run([h.inbox(start("job-1", "quick"), at=-1)])
    [d] = decisions(batch)
    assert parse_iso(d.now) == WALL
    assert d.clock is not None
    assert d.clock.bound == "no_timestamp"


def test_an_event_stamped_before_the_job_clock_is_decided_at_the_job_clock() -> None:
    h = Harness(registry(QUICK))
    h.run([h.inbox(start("job-1", "quick"), at=T0 + timedelta(hours=1))])
    [d] = decisions(h.run([h.inbox(event("job-1", "noted"), at=T0)]))
    assert parse_iso(d.now) == T0 + timedelta(hours=1)
    assert d.clock is not None
    assert (d.clock.bound, d.clock.record_timestamp) == ("job_clock", ms(T0))


def test_a_decision_within_the_skew_records_no_clock_bound() -> None:
    h = Harness(registry(QUICK))
    h.wall = T0
    [d] = decisions(h.run([h.inbox(start("job-1", "quick"), at=T0 + timedelta(minutes=4))]))
    assert parse_iso(d.now) == T0 + timedelta(minutes=4)
    assert d.clock is None


def test_a_tick_from_the_future_is_a_dead_letter_and_fails_no_job() -> None:
    h = Harness(registry(QUICK))
    h.wall = T0 + timedelta(minutes=1)
    h.run([h.inbox(start("job-1", "quick"), at=T0)])
    batch = h.run([h.tick(T0.replace(year=2099))])
    [dead] = letters(batch)
    assert dead.reason.startswith("tick at 2099-01-05T09:00:00")
    assert "LEMONGRAPH_MAX_CLOCK_SKEW" in dead.reason
    assert batch.decisions == 0
    # the job still waits for its reply; an honest tick past its window fires it
    h.wall = T0 + timedelta(hours=3)
    [d] = decisions(h.run([h.tick(T0 + timedelta(hours=3), offset=1)]))
    assert d.status == "failed"
    assert [f.kind for f in d.fired] == ["settle"]


def test_a_job_whose_tick_decision_fails_is_a_dead_letter_and_the_other_jobs_fire() -> None:
    h = Harness(registry(QUICK))
    h.run([h.inbox(start("job-a", "quick"), at=T0), h.inbox(start("job-b", "quick"), at=T0)])
    h = corrupt(h, "job-a")
    batch = h.run([h.tick(T0 + timedelta(hours=3))])
    [dead] = letters(batch)
    assert dead.reason.startswith("deciding job 'job-a' on this tick failed: JSONDecodeError")
    assert [(d.job_key, d.status) for d in decisions(batch)] == [("job-b", "failed")]


def test_a_table_that_cannot_be_read_stops_the_batch_instead_of_dead_lettering() -> None:
    h = Harness(registry(ONBOARD))
    h.run([h.inbox(start("job-1"), at=T0)])
    h = h.restart()  # nothing cached: the next event must read the table

    def broken(key: str, partition: int) -> bytes | None:
        if key == "job-1":
            raise OSError("IO error: the disk went away")
        return h.store.get((key, partition))

    h.engine.load = broken
    with pytest.raises(StorageError, match="cannot read job 'job-1' of partition 0: IO error"):
        h.run([h.inbox(event("job-1", "id_uploaded"), at=T0 + timedelta(minutes=1))])


def test_a_dead_letter_of_a_forwarded_copy_can_be_retried_as_a_new_record() -> None:
    h = Harness(registry(ONBOARD), partitions=4)
    stray = h.inbox(b"not json", key=b"job-2", partition=0)
    [forward] = on(h.run([stray]), "inbox")
    [out] = on(h.run([forwarded_copy(h, forward)]), "deadletter")
    names = dict(out.headers or [])
    assert FORWARDED_FROM_HEADER not in names  # a retry with these headers is a new record
    assert names["lemongraph.dlq.forwarded-from"] == b"p0@0"


def test_a_refusal_decided_at_a_bounded_clock_says_so() -> None:
    h = Harness(registry(ONBOARD))
    h.wall = T0
    [d] = decisions(h.run([h.inbox(event("job-9", "noted"), at=T0 + timedelta(days=1))]))
    assert (d.outcome, d.refused) == ("refused", "unknown job: no job.start was applied")
    assert d.clock is not None
    assert d.clock.bound == "worker_clock"
    assert parse_iso(d.now) == T0 + timedelta(minutes=5)
