"""Subjects through the real gateway, a real worker and the embedded broker
(docs/api.md, "Subjects"; docs/memory.md, "Reading it"): a profile now and as of
an instant, 404 for a subject never remembered or erased, 422 for a bad
``as_of``, who may read and erase, a subject's jobs, and an erasure that is one
``memory.erase`` record however often it is asked for.

The profiles are produced onto ``memory`` by the test (the memory processor that
folds them is another part's): before the gateway starts, so its health (which
waits for the subjects' read model to catch up) proves it has read them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from stream.runtime.broker import ensure_all_topics
from stream.runtime.config import Settings
from tests.stream.gateway.conftest import GatewayProcess, Lane, launch_gateway, wait_for
from tests.stream.gateway.test_schedules_api import error_of, ok
from topics import ProfileFact, ProfileNote, SubjectProfile, encode

pytestmark = [pytest.mark.broker, pytest.mark.timeout(180)]

T1 = "2026-12-01T09:00:00Z"
T1B = "2026-12-01T09:00:05.250000Z"
T2 = "2026-12-03T10:00:00Z"


def _fact(
    name: str, value: Any, event: str, job: str, since: str, until: str | None = None
) -> ProfileFact:
    return ProfileFact(
        name=name, value=value, source="world" if name == "plan_chosen" else "tool",
        event_id=event, job_key=job, valid_from=since, valid_to=until,
    )  # fmt: skip


ADA = SubjectProfile(
    subject="s-ada",
    facts=[
        _fact("account_activated", None, "e-18", "job-a", T1B),
        _fact("plan_chosen", "pro", "e-17", "job-a", T1, T2),
        _fact("plan_chosen", "team", "e-40", "job-b", T2),
    ],
    updated_at=T2,
    # A model's summary of job-b's conversation: kept beside the facts, never one
    # (docs/memory.md, "Summaries are claims").
    notes=[ProfileNote(job_key="job-b", note_id="job-b/summary/10", turn_from=1, turn_to=10,
                       text="NOTE: the customer said they are on enterprise", at=T2)],
)  # fmt: skip


@pytest.fixture(scope="module")
def gateway(module_lane: Lane) -> Iterator[GatewayProcess]:
    partitions = int(module_lane.env()["LEMONGRAPH_PARTITIONS"])
    settings = Settings(
        kafka_url=module_lane.kafka_url, topic_prefix=module_lane.prefix, partitions=partitions
    )
    asyncio.run(ensure_all_topics(settings))
    gone = SubjectProfile(subject="s-gone", facts=[_fact("plan_chosen", "pro", "e-1", "j", T1)])
    module_lane.produce(
        [
            (b"s-ada", encode(ADA)),
            (b"s-gone", encode(gone)),
            (b"s-gone", None),  # type: ignore[list-item]
            (b"s-notes", encode(SubjectProfile(subject="s-notes", notes=ADA.notes))),
        ],
        topic="memory",
    )
    started = launch_gateway(module_lane)
    yield started
    started.stop()


def _names(facts: list[dict[str, Any]]) -> set[tuple[str, Any]]:
    return {(f["name"], f["value"]) for f in facts}


def test_the_profile_now_and_as_of_an_instant(gateway: GatewayProcess) -> None:
    with gateway.client(gateway.token()) as client:
        now = ok(client.get("/v1/subjects/s-ada/profile"))
        assert set(now) == {"subject", "facts"}  # pinned: no notes, and no claim as a fact
        assert "enterprise" not in orjson.dumps(now).decode()
        # Only a summary kept: a profile with no facts, its words never in the body.
        only = ok(client.get("/v1/subjects/s-notes/profile"))
        assert only == {"subject": "s-notes", "facts": []}
        assert now["subject"] == "s-ada"
        assert _names(now["facts"]) == {("account_activated", None), ("plan_chosen", "team")}
        team = next(f for f in now["facts"] if f["value"] == "team")
        assert team == {
            "name": "plan_chosen", "value": "team", "properties": {}, "source": "world",
            "event_id": "e-40", "job_key": "job-b", "valid_from": T2, "valid_to": None,
        }  # fmt: skip
        # Before the newer fact closed the older one: pro, and the activation
        # (its fraction of a second is compared as an instant, not as text).
        then = ok(
            client.get("/v1/subjects/s-ada/profile", params={"as_of": "2026-12-02T00:00:00+02:00"})
        )
        assert _names(then["facts"]) == {("account_activated", None), ("plan_chosen", "pro")}
        edge = ok(
            client.get("/v1/subjects/s-ada/profile", params={"as_of": "2026-12-01T09:00:05Z"})
        )
        assert _names(edge["facts"]) == {("plan_chosen", "pro")}
        at_t2 = ok(client.get("/v1/subjects/s-ada/profile", params={"as_of": T2}))
        assert ("plan_chosen", "team") in _names(at_t2["facts"])
        assert ("plan_chosen", "pro") not in _names(at_t2["facts"])
        before = ok(
            client.get("/v1/subjects/s-ada/profile", params={"as_of": "2026-11-30T00:00:00Z"})
        )
        assert before["facts"] == []


def test_no_profile_is_404_and_a_bad_instant_is_422(gateway: GatewayProcess) -> None:
    with gateway.client(gateway.token()) as client:
        error_of(client.get("/v1/subjects/s-never/profile"), 404, "subject_not_found")
        error_of(client.get("/v1/subjects/s-gone/profile"), 404, "subject_not_found")  # erased
        for bad in ("yesterday", "2026-12-01T09:00:00", "2026-13-01T00:00:00Z"):
            detail = error_of(
                client.get("/v1/subjects/s-ada/profile", params={"as_of": bad}),
                422,
                "invalid_query",
            )
            assert "as_of" in detail["message"]


def test_who_may_read_and_erase(gateway: GatewayProcess) -> None:
    with gateway.client(gateway.token(source="tool")) as client:
        ok(client.get("/v1/subjects/s-ada/profile"))
        error_of(client.delete("/v1/subjects/s-ada"), 403, "source_not_allowed")
    with gateway.client(gateway.token(source="agent")) as client:
        error_of(client.get("/v1/subjects/s-ada/profile"), 403, "source_not_allowed")
        error_of(client.get("/v1/subjects/s-ada/jobs"), 403, "source_not_allowed")
        error_of(client.delete("/v1/subjects/s-ada"), 403, "source_not_allowed")
    with gateway.client() as client:
        error_of(client.get("/v1/subjects/s-ada/profile"), 401, "token_missing")
    spec = httpx.get(f"{gateway.api}/openapi.json").json()
    route = spec["paths"]["/v1/subjects/{subject}/profile"]["get"]["responses"]
    for status in ("401", "403", "404", "422", "503"):
        schema = route[status]["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/ErrorBody"}


def test_a_subjects_jobs(module_lane: Lane, gateway: GatewayProcess) -> None:
    module_lane.start_worker()
    with gateway.client(gateway.token()) as client:
        ok(client.post("/v1/jobs", json={"key": "sj-1", "playbook_key": "onboarding",
                                         "subject": {"id": "s-ada"}}), 202)  # fmt: skip
        ok(client.post("/v1/jobs", json={
            "key": "sj-2", "playbook_key": "onboarding",
            "contacts": [{"name": "Ada", "email": "Ada@Example.com"}],
        }), 202)  # fmt: skip

        def listed() -> Any:
            one = ok(client.get("/v1/subjects/s-ada/jobs"))
            two = ok(client.get("/v1/subjects/ada@example.com/jobs"))
            return (one, two) if one["jobs"] and two["jobs"] else None

        one, two = wait_for(listed, what="both jobs filed under their subjects")
        assert [j["key"] for j in one["jobs"]] == ["sj-1"]
        assert one["total"] == 1
        row = two["jobs"][0]
        assert row["key"] == "sj-2"
        assert row["playbook_key"] == "onboarding"
        assert row["status"] == "running"
        assert row["links"]["job"] == "/v1/jobs/sj-2"
        assert row["links"]["ui"] == "/jobs/sj-2"
        # the job's view names the key its subject's profile is under (the UI reads it)
        assert ok(client.get("/v1/jobs/sj-2"))["subject_key"] == "ada@example.com"
        assert ok(client.get("/v1/jobs/sj-1"))["subject_key"] == "s-ada"
        assert ok(client.get("/v1/subjects/s-nobody/jobs")) == {
            "subject": "s-nobody", "jobs": [], "total": 0,
        }  # fmt: skip


def test_an_erasure_is_one_record_and_says_what_remains(
    module_lane: Lane, gateway: GatewayProcess
) -> None:
    with gateway.client(gateway.token(name="ops")) as client:
        first = ok(client.delete("/v1/subjects/s-ada"), 202)
        again = ok(client.delete("/v1/subjects/s-ada"), 202)
    assert first["duplicate"] is False
    assert again["duplicate"] is True
    assert again["request_id"] == first["request_id"]
    assert again["at"] == first["at"]
    assert first["removes"]
    assert first["partition"] is not None
    remains = {r["topic"].removeprefix(module_lane.prefix): r for r in first["remains"]}
    assert set(remains) >= {
        "inbox", "decisions", "memory-facts", "messages", "journal", "engine-jobstate-changelog"
    }  # fmt: skip
    for r in remains.values():
        assert r["known_from"] in ("broker", "default")
        assert r["retention"]
        assert r["holds"]
    assert remains["engine-jobstate-changelog"]["cleanup_policy"].startswith("compact")
    assert "delete" in remains["inbox"]["cleanup_policy"]
    erasures = [
        r["value"] for r in module_lane.read("memory-facts")
        if r["key"] == "s-ada" and r["value"]["type"] == "memory.erase"
    ]  # fmt: skip
    assert len(erasures) == 1, erasures
    assert erasures[0]["request_id"] == first["request_id"]
    assert erasures[0]["subject"] == "s-ada"


def test_the_cli_shows_a_subjects_facts(module_lane: Lane, gateway: GatewayProcess) -> None:
    shown = module_lane.cli("subject", "show", "s-ada").stdout.splitlines()
    assert shown == [  # the facts only: never the profile's notes
        "s-ada: 2 facts now",
        f"  account_activated  (tool, since {T1B}, event e-18, job job-a)",
        f"  plan_chosen: team  (world, since {T2}, event e-40, job job-b)",
    ]
    then = module_lane.cli("subject", "show", "s-ada", "--as-of", "2026-12-02T00:00:00Z")
    assert f"  plan_chosen: pro  (world, since {T1} until {T2}, event e-17, job job-a)" in (
        then.stdout.splitlines()
    )
    body = orjson.loads(module_lane.cli("subject", "show", "s-ada", "--json").stdout)
    with gateway.client(gateway.token()) as client:
        assert body == ok(client.get("/v1/subjects/s-ada/profile"))
    gone = module_lane.cli("subject", "show", "s-gone", check=False)
    assert gone.returncode == 1
    assert "no profile" in gone.stderr
    bad = module_lane.cli("subject", "show", "s-ada", "--as-of", "soon", check=False)
    assert bad.returncode == 2
