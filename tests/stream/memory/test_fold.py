"""The memory processor's pure fold (stream/memory/fold.py; docs/memory.md,
"How it is built"): versions, closing, redelivery, bounds, erasure, "as of"."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream.memory.fold import Bounds, Profile, as_of, fold_record, instant
from topics import SubjectProfile

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
S = "ada@example.com"


def iso(moment: datetime) -> str:
    text = moment.isoformat().replace("+00:00", "Z")
    return text


def fact(name: str, value: Any, minutes: float, event: str, job: str = "job-1") -> dict[str, Any]:
    return {
        "type": "memory.fact",
        "schema": 1,
        "subject": S,
        "name": name,
        "value": value,
        "properties": {},
        "source": "world",
        "event_id": event,
        "job_key": job,
        "at": iso(T0 + timedelta(minutes=minutes)),
    }


def erase(minutes: float) -> dict[str, Any]:
    return {
        "type": "memory.erase",
        "schema": 1,
        "subject": S,
        "at": iso(T0 + timedelta(minutes=minutes)),
        "request_id": "r1",
    }


DEFAULT = Bounds()


def fold(records: list[dict[str, Any]], bounds: Bounds = DEFAULT) -> bytes | None:
    profile: Profile | None = None
    erased: str | None = None
    for record in records:
        profile, erased, _ = fold_record(profile, erased, record, bounds)
    return profile.encode() if profile is not None else None


def versions(raw: bytes | None, name: str) -> list[tuple[Any, str, str | None]]:
    assert raw is not None
    data = orjson.loads(raw)
    return [
        (f["value"], f["valid_from"], f["valid_to"]) for f in data["facts"] if f["name"] == name
    ]


def test_a_newer_fact_closes_the_older_one() -> None:
    raw = fold([fact("plan_chosen", "pro", 0, "e1"), fact("plan_chosen", "team", 60, "e2")])
    assert versions(raw, "plan_chosen") == [
        ("pro", "2026-01-05T09:00:00Z", "2026-01-05T10:00:00Z"),
        ("team", "2026-01-05T10:00:00Z", None),
    ]
    profile = SubjectProfile.model_validate_json(raw or b"")  # the contract's record
    assert profile.updated_at == "2026-01-05T10:00:00Z"


def test_a_late_older_fact_takes_its_place_in_time() -> None:
    raw = fold([fact("plan_chosen", "team", 60, "e2"), fact("plan_chosen", "pro", 0, "e1")])
    assert raw == fold([fact("plan_chosen", "pro", 0, "e1"), fact("plan_chosen", "team", 60, "e2")])


def test_instants_compare_as_instants_not_as_text() -> None:
    # "09:00:00.5Z" sorts before "09:00:00Z" as text; it is later.
    later = fact("n", "b", 0.5 / 60, "e2")
    assert later["at"] == "2026-01-05T09:00:00.500000Z"
    raw = fold([later, fact("n", "a", 0, "e1")])
    assert [v[0] for v in versions(raw, "n")] == ["a", "b"]


def test_the_same_event_again_changes_nothing() -> None:
    once = fold([fact("plan_chosen", "pro", 0, "e1")])
    profile, erased, changed = fold_record(
        Profile.decode(once or b""), None, fact("plan_chosen", "pro", 0, "e1"), Bounds()
    )
    assert not changed
    assert profile is not None
    assert profile.encode() == once
    assert erased is None


def test_bounds_drop_the_oldest_closed_versions_then_the_stalest_names() -> None:
    bounds = Bounds(versions=3, names=2)
    records = [fact("a", i, i, f"a{i}") for i in range(10)]
    records += [fact("b", 0, 20, "b0"), fact("c", 0, 30, "c0")]
    raw = fold(records, bounds)
    data = orjson.loads(raw or b"")
    assert sorted({f["name"] for f in data["facts"]}) == ["b", "c"]  # a's newest is the oldest
    raw = fold([fact("a", i, i, f"a{i}") for i in range(10)], bounds)
    assert [v[0] for v in versions(raw, "a")] == [7, 8, 9]
    assert versions(raw, "a")[-1][2] is None


def test_a_fact_sent_again_after_its_name_was_dropped_stays_out() -> None:
    # One name at most: "plan" at 3 is dropped for "seats" at 5; "plan" comes back
    # at 7. The fact at 3, sent again, is at or before the floor (5) and stays out.
    bounds = Bounds(versions=3, names=1)
    first = [fact("seats", 1, 5, "a"), fact("plan", "x", 3, "b"), fact("plan", "y", 7, "c")]
    clean = fold(first, bounds)
    assert [(v[0], v[2]) for v in versions(clean, "plan")] == [("y", None)]
    assert fold([*first, first[1], first[0]], bounds) == clean


def test_a_new_name_dropped_at_once_still_raises_the_floor() -> None:
    bounds = Bounds(versions=3, names=1)
    profile, _, _ = fold_record(None, None, fact("seats", 1, 5, "a"), bounds)
    assert profile is not None
    before = profile.encode()
    profile, _, changed = fold_record(profile, None, fact("plan", "x", 3, "b"), bounds)
    assert profile is not None
    assert profile.encode() == before  # the facts are as they were
    assert changed  # but the floor moved, and the table must keep it
    assert profile.encode_floor() is not None
    kept = Profile.decode(profile.encode(), profile.encode_floor())
    assert kept.floor == profile.floor


def test_a_fact_of_an_erased_profile_sent_again_stays_out() -> None:
    # The erasure is stamped before the fact was decided (another clock): the
    # fact, sent again, is at or before the erased profile's newest and stays out.
    records = [fact("p", "pro", 30, "e1"), erase(10)]
    assert fold(records) is None
    assert fold([*records, records[0]]) is None
    assert fold([*records, fact("p", "team", 31, "e2")]) is not None


def test_an_erasure_removes_the_profile_and_a_late_older_fact() -> None:
    profile, erased, changed = fold_record(None, None, fact("p", "pro", 0, "e1"), Bounds())
    profile, erased, changed = fold_record(profile, erased, erase(10), Bounds())
    assert profile is None
    assert changed
    assert erased == "2026-01-05T09:10:00Z"
    late = fold_record(profile, erased, fact("p", "team", 5, "e2"), Bounds())
    assert late == (None, erased, False)
    at_the_instant = fold_record(None, erased, fact("p", "team", 10, "e3"), Bounds())
    assert at_the_instant[0] is None
    after = fold_record(None, erased, fact("p", "team", 11, "e4"), Bounds())
    assert after[0] is not None
    assert after[2]


def test_as_of_reads_the_version_that_held() -> None:
    raw = fold([fact("plan_chosen", "pro", 0, "e1"), fact("plan_chosen", "team", 60, "e2")])
    facts = orjson.loads(raw or b"")["facts"]
    assert as_of(facts, T0 - timedelta(seconds=1)) == []
    assert [f["value"] for f in as_of(facts, T0 + timedelta(minutes=59))] == ["pro"]
    assert [f["value"] for f in as_of(facts, T0 + timedelta(minutes=60))] == ["team"]


# -- properties ----------------------------------------------------------------------------

facts_ = st.builds(
    fact,
    st.sampled_from(["plan", "seats", "region", "tier"]),
    st.integers(0, 5),
    st.integers(0, 240),
    st.integers(0, 30).map(lambda i: f"e{i}"),
    st.sampled_from(["job-1", "job-2"]),
)
bounds_ = st.builds(Bounds, st.integers(1, 4), st.integers(1, 3))


def _unique(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per (job, event): a worker sends an event's fact byte for byte again."""
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for r in records:
        seen.setdefault((r["job_key"], r["event_id"]), r)
    return list(seen.values())


@settings(max_examples=150, deadline=None)
@given(st.lists(facts_, max_size=25), bounds_, st.data())
def test_duplicates_and_redeliveries_never_change_the_profile(
    records: list[dict[str, Any]], bounds: Bounds, data: st.DataObject
) -> None:
    records = _unique(records)
    clean = fold(records, bounds)
    # Any record again, anywhere after its first delivery (a re-decided batch, a
    # replay from an older offset), as often as it likes.
    noisy = list(records)
    for _ in range(data.draw(st.integers(0, 10))):
        if not records:
            break
        which = data.draw(st.integers(0, len(records) - 1))
        first = noisy.index(records[which])
        where = data.draw(st.integers(first + 1, len(noisy)))
        noisy.insert(where, records[which])
    assert fold(noisy, bounds) == clean


@settings(max_examples=150, deadline=None)
@given(st.lists(facts_, max_size=25), st.integers(-10, 250))
def test_as_of_an_instant_is_the_newest_version_not_after_it(
    records: list[dict[str, Any]], minutes: int
) -> None:
    records = _unique(records)
    big = Bounds(versions=100, names=100)  # nothing dropped: compare with every fact
    raw = fold(records, big)
    when = T0 + timedelta(minutes=minutes)
    held = as_of(orjson.loads(raw)["facts"], when) if raw else []
    expected: dict[str, Any] = {}
    for r in sorted(records, key=lambda r: (instant(r["at"]), r["event_id"], r["job_key"])):
        if instant(r["at"]) <= when:
            expected[r["name"]] = r["value"]
    assert {f["name"]: f["value"] for f in held} == expected
    assert len(held) == len({f["name"] for f in held})  # one version per name at a time


@settings(max_examples=100, deadline=None)
@given(st.lists(facts_, max_size=25), bounds_)
def test_a_profile_stays_within_its_bounds(records: list[dict[str, Any]], bounds: Bounds) -> None:
    raw = fold(_unique(records), bounds)
    if raw is None:
        return
    facts = orjson.loads(raw)["facts"]
    names = {f["name"] for f in facts}
    assert len(names) <= bounds.names
    assert all(sum(f["name"] == n for f in facts) <= bounds.versions for n in names)
    assert all(sum(f["valid_to"] is None for f in facts if f["name"] == n) == 1 for n in names)


@pytest.mark.parametrize("names", [20, 500])
def test_ten_thousand_facts_for_one_subject_stay_bounded(names: int, capsys: Any) -> None:
    bounds = Bounds()
    records = [fact(f"name{i % names}", i, i, f"e{i}") for i in range(10_000)]
    started = time.process_time()
    profile: Profile | None = None
    for record in records:
        profile, _, _ = fold_record(profile, None, record, bounds)
    spent = time.process_time() - started
    assert profile is not None
    raw = profile.encode()
    kept = min(names, bounds.names)
    assert sorted(profile.names) == sorted(f"name{i}" for i in range(names - kept, names))
    if names <= bounds.names:
        # Each name keeps its newest versions, the newest one current.
        assert len(profile) == names * bounds.versions
        assert [v[0] for v in versions(raw, "name0")] == list(range(9800, 10_000, names))
    else:
        # A name dropped for staler ones comes back with only what is newer.
        assert len(profile) == kept
    assert len(raw) < 400 * bounds.names * bounds.versions
    with capsys.disabled():
        print(
            f"\n10,000 facts of {names} names, one subject: profile {len(profile)} versions, "
            f"{len(raw)} bytes; fold {spent:.2f} s CPU"
        )


@settings(max_examples=100, deadline=None)
@given(st.lists(facts_, max_size=25), bounds_)
def test_a_profile_stored_and_read_back_folds_on_alike(
    records: list[dict[str, Any]], bounds: Bounds
) -> None:
    # What the table keeps (the profile's bytes and its floor) is all the fold
    # needs: a processor that stops after any record goes on to the same profile.
    profile: Profile | None = None
    for record in records:
        if profile is not None:
            profile = Profile.decode(profile.encode(), profile.encode_floor())
        profile, _, _ = fold_record(profile, None, record, bounds)
    assert (profile.encode() if profile is not None else None) == fold(records, bounds)
