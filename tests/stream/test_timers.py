"""``stream.timers.TimerIndex``: what is due, per partition, earliest first.

The property test compares it with the obvious reference model: a dict of
job → (partition, due) scanned in full on every pop."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from stream.timers import TimerIndex


def test_pop_due_returns_what_is_due_earliest_first_and_no_more() -> None:
    index = TimerIndex()
    index.set(0, "c", 300)
    index.set(0, "a", 100)
    index.set(0, "d", 400)
    index.set(0, "b", 200)
    assert len(index) == 4
    assert index.pop_due(0, 50) == []
    assert index.pop_due(0, 300) == ["a", "b", "c"]  # the bound is inclusive
    assert len(index) == 1
    assert index.next_due("a") is None
    assert index.next_due("d") == 400
    assert index.pop_due(0, 300) == []  # popped jobs left the index
    assert index.pop_due(0, 10_000) == ["d"]
    assert len(index) == 0


def test_jobs_due_at_the_same_instant_come_out_in_a_stable_order() -> None:
    index = TimerIndex()
    for job in ["m", "b", "x", "a"]:
        index.set(0, job, 100)
    assert index.pop_due(0, 100) == ["a", "b", "m", "x"]


def test_rescheduling_skips_the_stale_entry() -> None:
    index = TimerIndex()
    index.set(0, "a", 100)
    index.set(0, "a", 500)  # later
    index.set(0, "b", 200)
    assert index.next_due("a") == 500
    assert index.pop_due(0, 300) == ["b"]
    index.set(0, "b", 50)  # earlier, after being popped
    index.set(0, "a", 150)  # earlier than its stale entry at 500
    assert index.pop_due(0, 160) == ["b", "a"]
    assert index.pop_due(0, 1_000) == []  # the stale 500 entry of "a" is not a timer
    assert len(index) == 0


def test_setting_the_same_due_twice_pops_it_once() -> None:
    index = TimerIndex()
    index.set(0, "a", 100)
    index.set(0, "a", 100)
    index.set(0, "a", None)
    index.set(0, "a", 100)
    assert index.pop_due(0, 100) == ["a"]
    assert index.pop_due(0, 100) == []


def test_clearing_a_jobs_timer_with_none() -> None:
    index = TimerIndex()
    index.set(0, "a", 100)
    index.set(0, "b", 100)
    index.set(0, "a", None)
    index.set(0, "never", None)  # clearing what was never set is fine
    assert index.next_due("a") is None
    assert len(index) == 1
    assert index.pop_due(0, 1_000) == ["b"]


def test_partitions_are_independent() -> None:
    index = TimerIndex()
    index.set(0, "a", 100)
    index.set(1, "b", 100)
    index.set(2, "c", 50)
    assert index.pop_due(1, 1_000) == ["b"]
    assert index.pop_due(3, 1_000) == []
    assert index.next_due("a") == 100
    assert index.pop_due(0, 1_000) == ["a"]
    assert index.pop_due(2, 49) == []
    assert index.pop_due(2, 50) == ["c"]


def test_clear_forgets_everything() -> None:
    index = TimerIndex()
    index.set(0, "a", 100)
    index.set(1, "b", 100)
    index.clear()
    assert len(index) == 0
    assert index.pop_due(0, 1_000) == []
    assert index.pop_due(1, 1_000) == []
    index.set(0, "a", 200)
    assert index.pop_due(0, 1_000) == ["a"]


# -- against a reference model -----------------------------------------------------------

JOBS = ["j0", "j1", "j2", "j3", "j4", "j5", "j6"]
PARTITIONS = 3


def partition_of(job: str) -> int:
    """A job lives in one partition, as it does under Kafka's key partitioning."""
    return int(job[1:]) % PARTITIONS


@dataclass
class Model:
    due: dict[str, int] = field(default_factory=dict)

    def set(self, job: str, due_ms: int | None) -> None:
        if due_ms is None:
            self.due.pop(job, None)
        else:
            self.due[job] = due_ms

    def pop_due(self, partition: int, now_ms: int) -> list[str]:
        hits = sorted(
            (d, j) for j, d in self.due.items() if partition_of(j) == partition and d <= now_ms
        )
        for _d, job in hits:
            del self.due[job]
        return [job for _d, job in hits]


sets = st.tuples(
    st.just("set"), st.sampled_from(JOBS), st.none() | st.integers(min_value=0, max_value=50)
)
pops = st.tuples(
    st.just("pop"),
    st.integers(min_value=0, max_value=PARTITIONS),  # PARTITIONS itself: an empty one
    st.integers(min_value=-1, max_value=60),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(sets | pops, max_size=60))
def test_the_index_agrees_with_a_full_scan(ops: list[tuple[str, object, object]]) -> None:
    index = TimerIndex()
    model = Model()
    for op in ops:
        if op[0] == "set":
            _, job, due = op
            assert isinstance(job, str)
            assert due is None or isinstance(due, int)
            index.set(partition_of(job), job, due)
            model.set(job, due)
        else:
            _, partition, now = op
            assert isinstance(partition, int)
            assert isinstance(now, int)
            assert index.pop_due(partition, now) == model.pop_due(partition, now)
        assert len(index) == len(model.due)
        for job in JOBS:
            assert index.next_due(job) == model.due.get(job)
