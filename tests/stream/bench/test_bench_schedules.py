"""The schedules benchmark (stream/bench/schedules.py) measures what it says:
the ticks it times fire exactly the due schedules through the engine and its
schedules hook on a real RocksDB database, and the memory figures are of
stored schedules. Speed is not asserted (benchmarks print figures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stream.bench import schedules as bench
from stream.bench.schedules import schedule_memory, schedule_tick_ms


def test_ticks_fire_the_due_schedules_only(tmp_path: Path) -> None:
    small, large = schedule_tick_ms((10, 400), 10, tmp_path, repeats=2)
    assert small > 0
    assert large > 0
    assert list(tmp_path.iterdir()) == []  # the databases are removed


def test_a_tick_that_fires_fewer_than_due_fails_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every schedule daily: nothing is due in the measured ticks, so the check
    # that `due` schedules fired must stop the run.
    daily = bench._definition
    monkeypatch.setattr(bench, "_definition", lambda i, _due: daily(i, False))
    with pytest.raises(AssertionError, match="0 of 5 schedules fired"):
        schedule_tick_ms((5,), 5, tmp_path, repeats=1)


def test_memory_of_stored_schedules(tmp_path: Path) -> None:
    memory = schedule_memory(2_000, tmp_path)
    assert memory.count == 2_000
    # The due-time index is rows of the table (stream/engine/timers.py): the worker
    # holds nothing per schedule (less than the 20 bytes a key of its own
    # would cost); the rows are the encoded states and the index rows.
    assert memory.index_bytes < 2_000 * 20
    assert memory.row_bytes > 2_000 * 100
    assert 0 < memory.rocksdb_bytes < memory.row_bytes * 2
    assert memory.per_100k(memory.row_bytes) == memory.row_bytes * 50
    assert memory.rebuild_s > 0
