"""The core's instant codec (compiler/_time.py): ``to_iso`` formats an instant
from its fields, with the day's text remembered; it must write exactly what
``isoformat()`` writes for the instant in UTC, with ``Z`` for ``+00:00``, since
every decision record and job state holds its text (a changed byte would change
a state hash)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from compiler import from_iso, to_iso
from compiler._time import DAYS_KEPT


def _reference(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


#: UTC (``timezone(timedelta(0))`` is the same object), and two offsets that
#: go through ``astimezone``.
OFFSETS = st.sampled_from(
    [
        UTC,
        timezone(timedelta(0)),
        timezone(timedelta(hours=5, minutes=30)),
        timezone(timedelta(hours=-8)),
    ]
)


@given(
    st.datetimes(
        min_value=datetime(2, 1, 1),
        max_value=datetime(9998, 12, 31),
        timezones=OFFSETS,
    )
)
def test_to_iso_writes_what_isoformat_writes_in_utc(instant: datetime) -> None:
    text = to_iso(instant)
    assert text == _reference(instant)
    assert to_iso(instant) == text  # again: the one just written
    assert from_iso(text) == instant


@given(
    st.lists(
        st.datetimes(
            min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31), timezones=OFFSETS
        ),
        min_size=2,
        max_size=4,
    ),
    st.lists(st.integers(0, 3), max_size=12),
)
def test_to_iso_alternating_between_instants_writes_each_its_own(
    instants: list[datetime], order: list[int]
) -> None:
    # The last two instants are found by identity: a decision alternates between
    # its now and a deadline; every order must still give each instant its text.
    for i in order:
        instant = instants[i % len(instants)]
        assert to_iso(instant) == _reference(instant)


def test_to_iso_of_edge_instants() -> None:
    for instant in [
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
        datetime(2026, 1, 5, 9, tzinfo=UTC),
        datetime(2026, 1, 5, 9, 0, 0, 1, tzinfo=UTC),
        datetime(2026, 1, 5, 9, 0, 0, 100_000, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
        datetime(2026, 1, 5, 1, tzinfo=timezone(timedelta(hours=3))),  # the day before in UTC
    ]:
        assert to_iso(instant) == _reference(instant)


def test_to_iso_forgets_days_without_changing_a_text() -> None:
    start = datetime(2026, 1, 5, 9, 30, tzinfo=UTC)
    days = [start + timedelta(days=i, seconds=i) for i in range(DAYS_KEPT + 10)]
    for instant in days + days[:20]:
        assert to_iso(instant) == _reference(instant)


def test_to_iso_from_several_threads_at_once() -> None:
    # The instant formatted last is remembered for the next call: a thread must
    # never get another thread's text.
    start = datetime(2026, 1, 5, 9, tzinfo=UTC)
    wrong: list[str] = []

    def work(offset: int) -> None:
        instants = [start + timedelta(minutes=offset, seconds=i) for i in range(2000)]
        for instant in instants * 3:
            if to_iso(instant) != _reference(instant):
                wrong.append(to_iso(instant))

    threads = [threading.Thread(target=work, args=(n * 100,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []
