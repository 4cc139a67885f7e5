"""The agents service's read model of ``memory`` (agents/memory/profiles.py),
fed records directly: current grounded facts only, the newest per subject, a
tombstone drops a subject, and the bytes and subjects bounds drop the least
recently used; its settings refuse what is not a count."""

from __future__ import annotations

import pytest

from agents.memory.profiles import Profiles
from topics import ProfileFact, SubjectProfile, Topics, encode

TOPICS = Topics("p.")


def _fact(i: int, *, until: str | None = None, source: str = "world") -> ProfileFact:
    return ProfileFact.model_construct(
        name=f"f{i}", value="v" * 40, properties={}, source=source, event_id=f"e-{i}",
        job_key="j", valid_from=f"2026-11-01T09:00:{i % 60:02d}Z", valid_to=until,
    )  # fmt: skip


def _record(subject: str, facts: list[ProfileFact]) -> bytes:
    return encode(SubjectProfile.model_construct(subject=subject, facts=facts, updated_at=None))


def test_current_grounded_facts_the_newest_per_subject() -> None:
    held = Profiles(TOPICS, facts_per_subject=2)
    facts = [_fact(1, until="2026-11-02T00:00:00Z"), _fact(3), _fact(4), _fact(5)]
    held.apply(b"s", _record("s", facts))
    assert [f.event_id for f in held.facts("s")] == ["e-4", "e-5"]
    # A profile holding a model's claim is not a profile (topics: world or tool only)
    held.apply(b"c", _record("c", [_fact(2, source="agent")]))
    assert held.facts("c") == ()
    assert held.skipped == 1
    assert held.facts("s") is held.facts("s")  # parsed once while asked for
    held.apply(b"s", None)
    assert held.facts("s") == ()
    assert held.held_bytes == 0
    assert held.of_job({}, ["<S@x.org>"]) == ("s@x.org", ())
    assert held.of_job({}, []) is None


def test_the_bounds_drop_the_least_recently_used() -> None:
    probe = Profiles(TOPICS)
    probe.apply(b"a", _record("a", [_fact(1)]))
    one = probe.held_bytes  # one subject's facts as held
    held = Profiles(TOPICS, memory_bytes=3 * one, subjects_kept=10)
    for name in "abcd":
        held.apply(name.encode(), _record(name, [_fact(1)]))
        held.facts("a")  # a stays in use
    assert set(held.held) == {"a", "c", "d"}
    assert held.dropped == 1
    assert held.held_bytes <= 3 * one
    fewer = Profiles(TOPICS, subjects_kept=2)
    for name in "abc":
        fewer.apply(name.encode(), _record(name, [_fact(1)]))
    assert list(fewer.held) == ["b", "c"]


@pytest.mark.parametrize("name", ["LEMONGRAPH_MEMORY_TOKENS", "LEMONGRAPH_MEMORY_BYTES"])
def test_its_settings_are_counts(name: str) -> None:
    assert Profiles.from_env(TOPICS, {name: "300"}) is not None
    with pytest.raises(ValueError, match=name):
        Profiles.from_env(TOPICS, {name: "0"})
