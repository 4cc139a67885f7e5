"""Notes in the memory processor's pure fold (stream/memory/fold.py; docs/memory.md,
"Summaries are claims"): a job's rolling summary is kept beside the facts, never
among them, the newest per job, bounded per subject, erased with the subject, and
unchanged by redelivery."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from stream.memory.fold import Bounds, Profile, fold_record
from tests.stream.memory.test_fold import DEFAULT, T0, S, erase, fact, iso
from topics import SubjectProfile


def note(job: str, turn_to: int, minutes: float, text: str = "") -> dict[str, Any]:
    return {
        "type": "memory.note",
        "schema": 1,
        "subject": S,
        "kind": "summary",
        "source": "agent",
        "job_key": job,
        "note_id": f"{job}/summary/{turn_to}",
        "text": text or f"{job} turns 1-{turn_to}",
        "turn_from": 1,
        "turn_to": turn_to,
        "at": iso(T0 + timedelta(minutes=minutes)),
        "run_id": f"{job}#1",
    }


def folded(
    records: list[dict[str, Any]], bounds: Bounds = DEFAULT, stored: bool = False
) -> tuple[Profile | None, str | None]:
    """The profile after ``records``; ``stored``: encoded and decoded after each
    record, as the processor's table keeps it between batches."""
    profile: Profile | None = None
    erased: str | None = None
    for record in records:
        profile, erased, _ = fold_record(profile, erased, record, bounds)
        if stored and profile is not None:
            profile = Profile.decode(profile.encode(), profile.encode_floor())
    return profile, erased


def test_a_note_is_kept_beside_the_facts_never_among_them() -> None:
    profile, _ = folded([fact("plan_chosen", "pro", 0, "e1"), note("job-1", 10, 5)])
    assert profile is not None
    record = SubjectProfile.model_validate_json(profile.encode())
    assert [f.name for f in record.facts] == ["plan_chosen"]
    [kept] = record.notes
    assert (kept.source, kept.job_key, kept.turn_from, kept.turn_to) == ("agent", "job-1", 1, 10)
    assert record.updated_at == iso(T0 + timedelta(minutes=5))


def test_a_profile_without_notes_is_the_bytes_it_was() -> None:
    profile, _ = folded([fact("plan_chosen", "pro", 0, "e1")])
    assert profile is not None
    assert b'"notes"' not in profile.encode()
    assert list(orjson.loads(profile.encode())) == [
        "schema", "type", "subject", "facts", "updated_at",
    ]  # fmt: skip


def test_the_newest_summary_of_a_job_replaces_the_older_and_an_older_one_changes_nothing() -> None:
    records = [note("job-1", 10, 1), note("job-1", 20, 2)]
    profile, _ = folded(records)
    assert profile is not None
    newest = profile.encode()
    assert [n["turn_to"] for n in orjson.loads(newest)["notes"]] == [20]
    again, _ = folded([*records, note("job-1", 10, 1), note("job-1", 20, 2)])
    assert again is not None
    assert again.encode() == newest


def test_notes_are_bounded_per_subject_and_a_dropped_one_stays_out() -> None:
    bounds = Bounds(notes=2)
    records = [note("job-1", 10, 1), note("job-2", 10, 2), note("job-3", 10, 3)]
    profile, _ = folded(records, bounds, stored=True)
    assert profile is not None
    kept = profile.encode()
    assert [n["job_key"] for n in orjson.loads(kept)["notes"]] == ["job-2", "job-3"]
    again, _ = folded([*records, note("job-1", 10, 1)], bounds, stored=True)
    assert again is not None
    assert again.encode() == kept


def test_an_erasure_removes_the_notes_and_a_late_older_note_stays_out() -> None:
    profile, erased = folded([note("job-1", 10, 1), erase(2), note("job-1", 20, 1.5)])
    assert profile is None
    assert erased is not None
    later, _ = folded([note("job-1", 10, 1), erase(2), note("job-1", 20, 3)])
    assert later is not None
    assert [n["turn_to"] for n in orjson.loads(later.encode())["notes"]] == [20]


RECORDS = st.lists(
    st.one_of(
        st.builds(
            note,
            st.sampled_from(["job-1", "job-2", "job-3"]),
            st.integers(10, 40),
            st.integers(0, 30),
        ),
        st.builds(
            lambda m, e: fact("plan_chosen", e, m, f"e{e}"),
            st.integers(0, 30),
            st.integers(0, 5),
        ),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(RECORDS, st.integers(0, 25), st.integers(1, 3))
# Found by a fresh-clone run: job-1's later note of fewer turns, set aside for its
# earlier one of more, came back once job-1 was dropped for the bound.
@example(
    [
        note("job-1", 11, 0),
        fact("plan_chosen", 0, 0, "e0"),
        note("job-1", 10, 1),
        note("job-2", 10, 0),
    ],
    3,
    1,
)
def test_redelivery_never_changes_a_profile_with_notes(
    records: list[dict[str, Any]], cut: int, bound: int
) -> None:
    """Sending again any prefix of what was folded (a worker or an agents
    service that re-sent a batch after a crash) changes nothing."""
    bounds = Bounds(notes=bound)
    once, _ = folded(records, bounds, stored=True)
    twice, _ = folded([*records, *records[:cut]], bounds, stored=True)
    assert (once.encode() if once else None) == (twice.encode() if twice else None)
    if once is not None:
        assert len(orjson.loads(once.encode()).get("notes", [])) <= bound
