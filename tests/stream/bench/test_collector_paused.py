"""``collector_paused`` (stream/runtime/processes.py): a timed load is produced with
the bench process's collector off, and everything is as before afterwards."""

from __future__ import annotations

import gc

import pytest

from stream.runtime.processes import collector_paused


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_no_collection_runs_inside_and_the_collector_is_back_after() -> None:
    runs: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            runs.append(info["generation"])

    gc.callbacks.append(seen)
    try:
        with collector_paused():
            assert not gc.isenabled()
            frozen = gc.get_freeze_count()
            assert frozen > 0  # what existed before is out of the collector's sight
            runs.clear()
            # Far past the young generation's threshold: a collection would run.
            garbage = [_Cycle() for _ in range(3 * gc.get_threshold()[0] + 1000)]
            del garbage
            assert runs == []
        assert gc.isenabled()
        assert gc.get_freeze_count() == 0
        gc.collect()  # and it collects again
        assert runs
    finally:
        gc.callbacks.remove(seen)


def test_a_collector_that_was_off_stays_off_and_an_error_restores_it() -> None:
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("the load failed")
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
