"""The scale-out run's judgement (stream/bench/rebalance.py): lost records, records
decided two ways, re-deliveries, tasks by id, pauses and latency, from records."""

from __future__ import annotations

from stream.bench.rebalance import (
    Decided,
    Rebalance,
    Sent,
    check_decisions,
    check_tasks,
    latencies_ms,
    pauses,
    percentile,
)


def sent(partition: int, offset: int, key: str = "job-1", at_ms: int = 1_000) -> Sent:
    return Sent(partition, offset, key, at_ms)


def decided(
    partition: int, offset: int, value: bytes = b"{}", key: str = "job-1", at_ms: int = 1_010
) -> Decided:
    return Decided(key, partition, offset, at_ms, value)


def test_every_record_decided_once_is_neither_lost_nor_twice() -> None:
    out = check_decisions([sent(0, 0), sent(1, 5)], [decided(0, 0), decided(1, 5)])
    assert out.lost == []
    assert out.copies.differing == []
    assert out.copies.redelivered == 0
    assert out.copies.distinct == 2


def test_a_record_without_a_decision_is_lost() -> None:
    out = check_decisions([sent(0, 0), sent(0, 1, "job-2")], [decided(0, 0)])
    assert out.lost == ["p0@1 job-2"]


def test_a_retried_key_makes_no_decision_and_is_not_lost() -> None:
    retried = Sent(0, 1, "job-1", 1_000, decides=False)
    assert check_decisions([sent(0, 0), retried], [decided(0, 0)]).lost == []


def test_an_equal_copy_is_a_redelivery_not_a_second_decision() -> None:
    out = check_decisions([sent(2, 7)], [decided(2, 7, b"a"), decided(2, 7, b"a", at_ms=9_000)])
    assert out.copies.differing == []
    assert out.copies.redelivered == 1
    assert out.copies.distinct == 1
    assert out.first_ms == {(2, 7): 1_010}  # the first copy's instant


def test_a_record_decided_two_different_ways_is_named() -> None:
    out = check_decisions([sent(2, 7)], [decided(2, 7, b"a"), decided(2, 7, b"b")])
    assert out.copies.differing == ["p2@7 job-1"]
    assert out.copies.redelivered == 0


def test_two_forwarded_copies_decided_differently_count_as_one_record_decided_twice() -> None:
    first = Decided("job-1", 1, 3, 1_010, b"a", forwarded=(0, 10))
    second = Decided("job-1", 1, 3, 1_020, b"b", forwarded=(0, 11))
    assert check_decisions([sent(1, 3)], [first, second]).copies.differing == ["p1@3 job-1"]


def test_decisions_of_records_not_sent_here_are_not_counted() -> None:
    # A warm-up record's decision, and one whose job is not the sent record's.
    out = check_decisions([sent(0, 5)], [decided(0, 1), decided(0, 5, key="other")])
    assert out.lost == ["p0@5 job-1"]
    assert out.copies.distinct == 0


def test_tasks_by_id_and_type() -> None:
    tasks = [
        ("job-1/a", "task.opened", b"1"),
        ("job-1/a", "task.opened", b"1"),  # re-delivered
        ("job-1/a", "task.closed", b"2"),
        ("job-2/a", "task.opened", b"3"),
        ("job-2/a", "task.opened", b"4"),  # a different record for one task
    ]
    out = check_tasks(tasks)
    assert out.distinct == 3
    assert out.redelivered == 1
    assert out.differing == ["task.opened job-2/a"]


def test_a_killed_partition_pauses_until_its_next_decision() -> None:
    # Decisions every 100 ms on partitions 0 and 1; partition 1 stops at 1.95 s
    # (its worker killed at 2 s) and decides again at 6.5 s.
    every = list(range(0, 10_000, 100))
    stamps = {0: every, 1: [t for t in every if t < 2_000 or t >= 6_500]}
    kill, restart = Rebalance("kill worker 1", 2_000), Rebalance("restart worker 1", 8_000)
    out = pauses([restart, kill], stamps, started_ms=0, end_ms=10_000)
    assert [p.what for p in out] == ["kill worker 1", "restart worker 1"]
    assert out[0].at_s == 2.0
    assert out[0].by_partition == {0: 0.1, 1: 4.5}
    assert out[0].paused == [1]
    assert out[0].max_s == 4.5
    assert out[1].paused == []  # nothing stopped after the restart
    assert out[0].silent == out[1].silent == []


def test_a_partition_silent_until_the_next_rebalance_paused_all_of_it() -> None:
    stamps = {0: [0, 100, 200], 1: [0, 100, 200, 3_000, 3_100]}
    out = pauses([Rebalance("kill worker 0", 250)], stamps, 0, end_ms=3_250)
    assert out[0].by_partition == {0: 3.0, 1: 2.75}
    assert out[0].paused == [0, 1]
    assert out[0].silent == [0]  # at least 3 s: the run ended first


def test_latency_is_from_each_record_to_its_first_decision() -> None:
    records = [sent(0, 0, at_ms=1_000), sent(0, 1, at_ms=1_100), sent(0, 2, at_ms=1_200)]
    out = check_decisions(
        records,
        [decided(0, 0, at_ms=1_020), decided(0, 1, at_ms=1_500), decided(0, 1, at_ms=1_150)],
    )
    assert latencies_ms(records, out.first_ms) == [20.0, 50.0]
    assert percentile([20.0, 50.0], 0.5) == 50.0
    assert percentile([], 0.99) == 0.0
