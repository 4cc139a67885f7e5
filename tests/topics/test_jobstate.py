"""``topics.stored_job_state``: a job's state from a row of the workers' table
changelog (docs/kafka.md, "The job table's changelog"), as the engine stores it."""

from __future__ import annotations

from datetime import UTC, datetime

from compiler import JobGraph, JobState, Start, compile_playbook
from stream.engine.store import Applied, encode_stored
from stream.engine.timers import DUE_VALUE, INDEX_MARK, due_key
from topics import stored_job_state

PLAYBOOK = compile_playbook(
    {"key": "p", "version": 1, "milestones": [{"id": "m", "condition": "x WITHIN 1d"}]}
)
T0 = datetime(2026, 1, 5, 9, tzinfo=UTC)


def test_a_job_row_gives_its_state_as_the_engine_stored_it() -> None:
    state = JobGraph(PLAYBOOK).next(None, T0, Start("job-1", "p")).state
    assert state is not None
    raw = encode_stored(2, Applied({2: 7, 0: 3}), state)
    found = stored_job_state(b"job-1", raw)
    assert found == state.to_bytes()
    assert JobState.from_bytes(found) == state


def test_an_older_header_is_read_too() -> None:
    assert stored_job_state(b"job-1", b'LG1 0 5 -\n{"key":"job-1"}') == b'{"key":"job-1"}'


def test_the_workers_own_rows_and_tombstones_are_not_jobs() -> None:
    due = due_key("j", 1_767_603_600_000, "job-1")
    assert due.startswith("\x00")
    assert stored_job_state(due.encode(), DUE_VALUE) is None
    assert stored_job_state(INDEX_MARK.encode(), DUE_VALUE) is None
    assert stored_job_state(b"\x00schedule/s-1", b'LG2 0 - 0:1\n{"key":"s-1"}') is None
    assert stored_job_state(b"job-1", None) is None  # a tombstone
    assert stored_job_state(None, b"LG2 0 - 0:1\n{}") is None


def test_a_value_in_no_format_this_code_reads_is_not_a_state() -> None:
    for value in (b"", b"{}", b"LG3 0 - 0:1\n{}", b"LG2 0 - 0:1", b"\xff\xfe"):
        assert stored_job_state(b"job-1", value) is None, value
