"""The subjects' read model's bounds and rules (stream/gateway/readmodels/memory.py),
fed records directly: a tombstone forgets a profile, a profile past the byte
budget is marked not held (never answered as "no profile"), a subject's jobs
are kept newest, and an erasure stands until something newer is remembered."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from stream.gateway.readmodels.memory import SubjectModel, facts_as_of
from topics import ProfileFact, SubjectProfile, Topics, encode

TOPICS = Topics("m.")


def _profile(subject: str, updated: str = "2026-12-01T09:00:00Z", n: int = 1) -> bytes:
    facts = [
        ProfileFact(name=f"f{i}", value="v" * 50, source="world", event_id=f"e-{i}",
                    job_key="j", valid_from=updated)
        for i in range(n)
    ]  # fmt: skip
    return encode(SubjectProfile(subject=subject, facts=facts, updated_at=updated))


def test_a_tombstone_forgets_and_the_budget_marks_not_held() -> None:
    model = SubjectModel(TOPICS, profile_bytes=3000)
    model.apply(b"a", _profile("a", n=10))
    assert model.profile("a") is not None
    model.apply(b"a", None)
    assert model.profile("a") is None
    for name in ("b", "c", "d", "e"):
        model.apply(name.encode(), _profile(name, n=10))
    assert model.held_bytes <= 3000
    with pytest.raises(KeyError):
        model.profile("b")  # dropped for the budget: not "no profile"
    assert model.profile("e") is not None
    model.apply(b"b", None)  # erased: now truly none
    assert model.profile("b") is None


def test_a_subjects_jobs_are_kept_newest() -> None:
    model = SubjectModel(TOPICS, jobs_per_subject=2, subjects_kept=2)
    for n, subject in enumerate(["s", "s", "s", "t", "u"]):
        model.decided({"job_key": f"j{n}", "outcome": "applied",
                       "input": {"type": "job.start", "subject": {"id": subject}}})  # fmt: skip
    model.decided({"job_key": "refused", "outcome": "refused",
                   "input": {"type": "job.start", "subject": {"id": "u"}}})  # fmt: skip
    model.decided({"job_key": "mail", "outcome": "applied",
                   "input": {"type": "job.start", "contacts": ["<Ada@Example.com>"]}})  # fmt: skip
    assert model.jobs_of("s") == []  # the least recently filed subject went
    assert model.jobs_of("u") == ["j4"]
    assert model.jobs_of("ada@example.com") == ["mail"]


def test_an_erasure_stands_until_something_newer_is_remembered() -> None:
    model = SubjectModel(TOPICS)
    model.apply(b"s", _profile("s", "2026-12-01T09:00:00Z"))
    assert model.erasure("s") is None
    model.erasing("s", "2026-12-02T09:00:00Z", "erase-1")
    assert model.erasure("s") == ("2026-12-02T09:00:00Z", "erase-1")  # profile older
    model.apply(b"s", _profile("s", "2026-12-03T09:00:00.5Z"))
    assert model.erasure("s") is None  # remembered again since


def test_as_of_compares_instants_not_text() -> None:
    fact = ProfileFact(name="p", value=1, source="tool", event_id="e", job_key="j",
                       valid_from="2026-12-01T09:00:00.500000Z",
                       valid_to="2026-12-01T10:00:00Z")  # fmt: skip
    profile = SubjectProfile(subject="s", facts=[fact])
    at = datetime(2026, 12, 1, 9, 0, 0, 600000, tzinfo=UTC)
    assert len(facts_as_of(profile, at)) == 1
    assert facts_as_of(profile, datetime(2026, 12, 1, 9, 0, 0, 400000, tzinfo=UTC)) == []
    assert facts_as_of(profile, datetime(2026, 12, 1, 10, 0, tzinfo=UTC)) == []
