"""The due-time index (``stream/engine/timers.py``): its keys order timers by due time,
a tick reads the range up to its ``now`` and nothing else, and the index stays
exact: after every committed batch its rows are exactly the due times in the
stored jobs' and schedules' headers.

The property test drives the engine with random starts, events and ticks
(some batches lost in a crash, as between the acks and the state write) and
compares the index with the obvious reference: every stored header scanned."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from stream.engine.batch import Batch, Record
from stream.engine.store import peek_header
from stream.engine.timers import (
    DUE_PREFIX,
    DUE_VALUE,
    INDEX_MARK,
    JOBS,
    SCHEDULES,
    due_key,
    due_range,
    parse_due_key,
)
from tests.stream.engine.engine_harness import (
    ONBOARD,
    QUICK,
    T0,
    Harness,
    decisions,
    event,
    ms,
    registry,
    start,
)


def test_keys_sort_by_due_time_then_name_and_parse_back() -> None:
    keys = [
        due_key(JOBS, 10_000, "b"),
        due_key(JOBS, 9_999, "z"),
        due_key(JOBS, 10_000, "a"),
        due_key(JOBS, 253_402_300_799_999, "last"),
        due_key(JOBS, 0, "first"),
    ]
    assert [parse_due_key(k) for k in sorted(keys)] == [
        (0, "first"),
        (9_999, "z"),
        (10_000, "a"),
        (10_000, "b"),
        (253_402_300_799_999, "last"),
    ]
    assert due_key(JOBS, 5, "job") == "\x00due/j/000000000000005/job"
    assert parse_due_key(due_key(SCHEDULES, 7, "a/b c")) == (7, "a/b c")
    assert due_key(JOBS, -5, "x") == due_key(JOBS, 0, "x")  # clamped, still ordered


def test_the_range_up_to_now_holds_what_is_due_and_nothing_else() -> None:
    keys = [due_key(JOBS, d, n) for d, n in [(99, "a"), (100, "b"), (100, "c"), (101, "d")]]
    keys += [due_key(SCHEDULES, 50, "s"), INDEX_MARK, "job", "\x00inbox-watermark-0"]
    low, high = due_range(JOBS, 100)
    assert [k for k in sorted(keys) if low <= k < high] == keys[:3]  # the bound is inclusive
    low, high = due_range(SCHEDULES, 10**16)
    assert [k for k in sorted(keys) if low <= k < high] == [due_key(SCHEDULES, 50, "s")]


# -- in the engine ------------------------------------------------------------------------


def index_of(h: Harness, partition: int = 0) -> set[tuple[int, str]]:
    """The job timers the index holds: (due ms, job)."""
    return {(due, name) for due, kind, name in h.due_rows(partition) if kind == JOBS}


def headers_of(h: Harness, partition: int = 0) -> set[tuple[int, str]]:
    """The job timers the stored headers hold (the reference)."""
    out = set()
    for (key, p), raw in h.store.items():
        if p == partition and not key.startswith("\x00"):
            _home, due = peek_header(raw)
            if due is not None:
                out.add((due, key))
    return out


def test_a_decision_moves_the_jobs_row_in_the_same_write() -> None:
    h = Harness(registry(QUICK))
    first = h.run([h.inbox(start("job-1", "quick"), at=T0)])
    due = ms(T0 + timedelta(hours=2))
    assert [w for w in first.writes() if w[0].startswith(DUE_PREFIX)] == [
        (due_key(JOBS, due, "job-1"), 0, DUE_VALUE)
    ]
    assert index_of(h) == {(due, "job-1")}
    replied = h.run([h.inbox(event("job-1", "customer_replied"), at=T0 + timedelta(minutes=5))])
    # the row is deleted in the batch that cleared the timer, after the state
    rows = replied.writes()
    assert (due_key(JOBS, due, "job-1"), 0, None) in rows
    keys = [k for k, _p, _r in rows]
    assert keys.index("job-1") < keys.index(due_key(JOBS, due, "job-1"))
    assert index_of(h) == set() == headers_of(h)


def test_two_due_times_that_share_one_key_are_not_moved() -> None:
    """Due times before 1970 all clamp to the first key: a timer moving from one
    to another keeps its row (a put and a delete of one key would lose it)."""
    batch = Batch()
    batch.timers[(0, JOBS, "old")] = (-5_000, -3_000)
    batch.timers[(0, JOBS, "moved")] = (-5_000, 7)
    rows = [(k, r) for k, _p, r in batch.writes() if k.startswith(DUE_PREFIX)]
    assert rows == [
        (due_key(JOBS, 7, "moved"), DUE_VALUE),
        (due_key(JOBS, 0, "moved"), None),
    ]


def test_a_tick_reads_only_the_due_jobs() -> None:
    h = Harness(registry(QUICK))
    h.run([h.inbox(start(f"job-{i}", "quick"), at=T0 + timedelta(minutes=i)) for i in range(50)])
    restarted = h.restart()
    before = len(restarted.loads)
    scans: list[tuple[str, str]] = []
    scan = restarted.scan

    def counting(partition: int, low: str, high: str) -> list[tuple[str, bytes]]:
        scans.append((low, high))
        return scan(partition, low, high)

    restarted.engine.scan = counting
    at = T0 + timedelta(hours=2, minutes=2, seconds=30)  # job-0, job-1 and job-2 are due
    batch = restarted.run([restarted.tick(at)])
    assert [d.job_key for d in decisions(batch)] == ["job-0", "job-1", "job-2"]
    assert restarted.loads[before:] == [("job-0", 0), ("job-1", 0), ("job-2", 0)]
    assert scans == [due_range(JOBS, ms(at))]
    assert index_of(restarted) == headers_of(restarted)
    # The next tick reads from where nothing can be due before (the rows of the
    # fired timers, deleted, are behind it), and the batch's own rows lower it.
    later = at + timedelta(minutes=1)
    fired = restarted.run([restarted.tick(later)])
    assert [d.job_key for d in decisions(fired)] == ["job-3"]
    assert scans[1] == (due_key(JOBS, ms(at) + 1, ""), due_range(JOBS, ms(later))[1])
    restarted.run([restarted.inbox(start("late", "quick"), at=T0)])  # due before the floor
    again = restarted.run([restarted.tick(later + timedelta(seconds=1))])
    assert [d.job_key for d in decisions(again)] == ["late"]
    assert scans[2][0] == due_key(JOBS, ms(T0 + timedelta(hours=2)), "")


def test_a_stale_row_is_skipped_and_deleted_by_the_tick_that_reads_it() -> None:
    h = Harness(registry(QUICK))
    h.run([h.inbox(start("job-1", "quick"), at=T0)])
    stale = due_key(JOBS, ms(T0 + timedelta(minutes=30)), "job-1")
    h.store[(stale, 0)] = DUE_VALUE  # as a changelog applied part-way could leave it
    batch = h.run([h.tick(T0 + timedelta(hours=1))])
    assert batch.decisions == 0
    assert (stale, 0) not in h.store
    assert index_of(h) == headers_of(h)
    fired = h.run([h.tick(T0 + timedelta(hours=2))])
    assert [d.job_key for d in decisions(fired)] == ["job-1"]


def test_a_job_whose_playbook_is_missing_is_parked_until_one_is_registered() -> None:
    """A timer that cannot fire for want of its playbook is read once, does not
    hold back where later ticks read from (it would be read and parsed on every
    tick), and fires at the first tick after a playbook is registered."""
    from compiler import load_playbook

    h = Harness(registry(QUICK))
    h.run([h.inbox(start("job-1", "quick"), at=T0)])
    missing = Harness(registry(ONBOARD), h.store)  # a worker without "quick"
    scans: list[str] = []
    scan = missing.scan

    def counting(partition: int, low: str, high: str) -> list[tuple[str, bytes]]:
        scans.append(low)
        return scan(partition, low, high)

    missing.engine.scan = counting
    at = T0 + timedelta(hours=3)
    loads = len(missing.loads)
    assert missing.run([missing.tick(at)]).decisions == 0
    assert missing.loads[loads:] == [("job-1", 0)]
    later = missing.run([missing.tick(at + timedelta(minutes=1))])
    assert later.decisions == 0
    assert missing.loads[loads:] == [("job-1", 0)]  # not read again
    assert scans[1] == due_key(JOBS, ms(at) + 1, "")  # past the parked row
    missing.registry.add(load_playbook(QUICK))
    fired = missing.run([missing.tick(at + timedelta(minutes=2))])
    assert [d.job_key for d in decisions(fired)] == ["job-1"]
    assert index_of(missing) == headers_of(missing) == set()


def test_a_tick_fires_at_most_its_budget_and_the_next_tick_the_rest() -> None:
    """After downtime with every job due, one tick is not one batch of every
    job's decisions: it reads and fires ``tick_budget`` timers, the next the rest."""
    h = Harness(registry(QUICK))
    h.run([h.inbox(start(f"job-{i:02}", "quick"), at=T0) for i in range(25)])
    restarted = h.restart()
    restarted.engine.tick_budget = 10
    at = T0 + timedelta(hours=3)
    fired = [
        sorted(
            d.job_key for d in decisions(restarted.run([restarted.tick(at + timedelta(seconds=n))]))
        )
        for n in range(4)
    ]
    assert [len(f) for f in fired] == [10, 10, 5, 0]
    assert sorted(k for f in fired for k in f) == [f"job-{i:02}" for i in range(25)]
    assert index_of(restarted) == headers_of(restarted) == set()


def test_a_job_due_in_the_same_batch_is_fired_by_that_batchs_tick() -> None:
    h = Harness(registry(QUICK))
    batch = h.run(
        [h.inbox(start("job-1", "quick"), at=T0), h.tick(T0 + timedelta(hours=2, seconds=1))]
    )
    assert [d.input.type for d in decisions(batch)] == ["job.start", "tick"]
    assert index_of(h) == headers_of(h) == set()


def test_index_rows_index_a_table_stored_before_the_index_existed() -> None:
    h = Harness(registry(QUICK, ONBOARD))
    h.run(
        [
            h.inbox(start("job-1", "quick"), at=T0),
            h.inbox(start("job-2"), at=T0),
            h.inbox(start("job-3", "quick"), at=T0),
        ]
    )
    h.run([h.inbox(event("job-3", "customer_replied"), at=T0 + timedelta(minutes=1))])
    expected = index_of(h)
    assert len(expected) == 2
    old = {k: v for k, v in h.store.items() if not k[0].startswith(DUE_PREFIX)}
    rows = h.engine.index_rows(0, [(k, v) for (k, _p), v in old.items()])
    assert rows[-1] == (INDEX_MARK, 0, DUE_VALUE)
    assert {parse_due_key(k) for k, _p, _v in rows[:-1]} == expected
    # a row whose header cannot be read is left out (and logged), not fatal
    broken = [("job-9", b"not a stored job\n{}"), *[(k, v) for (k, _p), v in old.items()]]
    assert h.engine.index_rows(0, broken) == rows


OPS = st.lists(
    st.tuples(
        st.sampled_from(["start", "start-quick", "reply", "upload", "tick"]),
        st.integers(min_value=0, max_value=4),  # which job
        st.integers(min_value=0, max_value=240),  # hours after T0
        st.booleans(),  # this batch is lost in a crash (acked, never stored)
    ),
    max_size=25,
)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_the_index_is_exactly_the_stored_headers_after_every_batch(
    ops: list[tuple[str, int, int, bool]],
) -> None:
    h = Harness(registry(QUICK, ONBOARD))
    for kind, job, hours, lost in ops:
        at = T0 + timedelta(hours=hours)
        key = f"job-{job}"
        record: Record
        if kind == "tick":
            record = h.tick(at)
        elif kind == "start":
            record = h.inbox(start(key), at=at)
        elif kind == "start-quick":
            record = h.inbox(start(key, "quick"), at=at)
        elif kind == "reply":
            record = h.inbox(event(key, "customer_replied"), at=at)
        else:
            record = h.inbox(event(key, "id_uploaded"), at=at)
        if lost:
            h.run([record], commit=False)
            h = h.restart()
            h.engine.assigned()
            continue
        due = sorted((d, j) for d, j in headers_of(h) if d <= ms(at))
        batch = h.run([record])
        assert index_of(h) == headers_of(h)
        if kind == "tick":  # it fires what the headers say is due, earliest first
            assert [d.job_key for d in decisions(batch)] == [j for _d, j in due]
