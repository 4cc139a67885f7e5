"""Grounded memory walked end to end (docs/memory.md), as ``lemongraph dev``
runs it: the engine worker, ``lemongraph memory``, ``lemongraph agents`` on the
stand-in model (recording what each request carried) and the gateway, on a
real broker. Job A of a subject hears a world fact, a tool result and an agent's
claim; job B of the same subject is told the two grounded facts, with job A's
event ids, and never the claim. A newer world fact closes the older one. After
the subject is erased through the API, its profile answers 404, a later job
hears nothing of it, and ``lemongraph replay --verify`` still passes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from aiokafka.partitioner import DefaultPartitioner

from agents.dev.serving import AppThread
from agents.dev.standin import build_standin
from stream.runtime.broker import free_port
from tests.agents.test_memory_service import Recording
from tests.lanes import Lane, wait_for
from tests.scrape import metrics_urls, scrape, value
from tests.stream.gateway.conftest import GatewayProcess, launch_gateway

pytestmark = [pytest.mark.broker, pytest.mark.timeout(300)]

PLAYBOOK = """\
key: remembering
version: 1
instructions: Look after the customer.
remember: [plan_chosen, account_activated]
milestones:
  - id: welcome
    instructions: Welcome the customer.
    condition: welcomed WITHIN 30d
    integrations: [email]
"""
CATALOG = "integrations: {email: {}}\nagents: {conversation: {instructions: Help.}}\n"
SUBJECT = "cust-s"


def same_partition_as(subject: str, partitions: int = 4) -> str:
    """Another subject whose records share ``subject``'s partition of the memory
    topics: a later profile of it proves that the agents read past ``subject``'s."""
    partitioner = DefaultPartitioner()
    home = partitioner(subject.encode(), list(range(partitions)), list(range(partitions)))
    return next(
        other
        for other in (f"cust-{n}" for n in range(1000))
        if other != subject
        and partitioner(other.encode(), list(range(partitions)), list(range(partitions))) == home
    )


@pytest.fixture(scope="module")
def walk(module_lane: Lane) -> Iterator[tuple[Lane, Recording, GatewayProcess, str]]:
    lane = module_lane
    (lane.playbooks / "remembering.yaml").write_text(PLAYBOOK)
    (lane.playbooks / "catalog.yaml").write_text(CATALOG)
    standin = Recording(build_standin())
    model = AppThread(standin, "127.0.0.1", free_port(), "stand-in model").start()
    lane.start_worker()
    memory = lane.start(["memory"], "memory: reading", LEMONGRAPH_METRICS_PORT="0")
    [metrics] = metrics_urls(memory.lines)["memory"]
    lane.start(
        ["agents"], "agents: ready", OPENAI_BASE_URL=f"{model.url}/v1", OPENAI_API_KEY="sk-test"
    )
    gateway = launch_gateway(lane)
    yield lane, standin, gateway, metrics
    gateway.stop()
    model.stop()


def start(lane: Lane, key: str, subject: dict[str, Any]) -> None:
    lane.send({"type": "job.start", "key": key, "playbook_key": "remembering", "subject": subject})


def event(lane: Lane, key: str, action: str, value: str | None, source: str) -> None:
    lane.send(
        {"type": "event", "key": key, "action": action, "value": value, "source": source,
         "idempotency_key": f"{key}-{action}-{value}-{source}"}
    )  # fmt: skip


def first_request(standin: Recording, marker: str) -> str:
    """The instructions of the first model request whose subject line carries ``marker``."""

    def found() -> str | None:
        return next(
            (str(b["instructions"]) for b in standin.bodies if marker in str(b["instructions"])),
            None,
        )

    return wait_for(found, timeout=120, what=f"a model request for {marker}")


def profile(gateway: GatewayProcess, subject: str, **params: str) -> Any:
    with gateway.client(gateway.token()) as client:
        return client.get(f"/v1/subjects/{subject}/profile", params=params)


def current(gateway: GatewayProcess, subject: str, facts: int) -> list[dict[str, Any]]:
    """The subject's current facts, once there are ``facts`` of them."""

    def found() -> list[dict[str, Any]] | None:
        response = profile(gateway, subject)
        if response.status_code != 200:
            return None
        held: list[dict[str, Any]] = response.json()["facts"]
        return held if len(held) == facts else None

    return wait_for(found, timeout=120, what=f"{facts} facts of {subject}")


def test_a_second_job_is_told_what_the_world_and_tools_said_never_a_claim(
    walk: tuple[Lane, Recording, GatewayProcess, str],
) -> None:
    lane, standin, gateway, _metrics = walk
    start(lane, "mw-a", {"id": SUBJECT})
    event(lane, "mw-a", "plan_chosen", "pro", "world")
    event(lane, "mw-a", "account_activated", None, "tool")
    event(lane, "mw-a", "plan_chosen", "enterprise", "agent")  # a model's claim
    facts = current(gateway, SUBJECT, 2)
    assert {(f["name"], f["value"], f["source"], f["event_id"], f["job_key"]) for f in facts} == {
        ("plan_chosen", "pro", "world", "mw-a-plan_chosen-pro-world", "mw-a"),
        ("account_activated", None, "tool", "mw-a-account_activated-None-tool", "mw-a"),
    }
    assert all(f["valid_to"] is None for f in facts)
    # The claim was decided (applied to job A's own state) but never remembered.
    decided = lane.wait_until(
        "decisions",
        lambda rs: any(r["value"]["input"].get("source") == "agent" for r in rs
                       if r["value"]["job_key"] == "mw-a"),
    )  # fmt: skip
    claim = next(r["value"] for r in decided if r["value"]["input"].get("source") == "agent")
    assert claim["outcome"] == "applied"
    assert not any(e["type"] == "fact.remembered" for e in claim["effects"])

    start(lane, "mw-b", {"id": SUBJECT, "name": "Ada second"})
    request = first_request(standin, "Ada second")
    lines = request.splitlines()
    section = lines[lines.index(f"What we know about {SUBJECT}:") + 1 :]
    told = section[:2]
    assert any(
        line.startswith("- plan_chosen: pro (world, ")
        and "event mw-a-plan_chosen-pro-world, job mw-a" in line
        for line in told
    ), told
    assert any(line.startswith("- account_activated (tool, ") for line in told), told
    assert "enterprise" not in request
    # The fact is a decision's effect, so `replay --verify` checks it like any other.
    decided = [r["value"] for r in lane.read("decisions") if r["value"]["job_key"] == "mw-a"]
    remembered = [e for d in decided for e in d["effects"] if e["type"] == "fact.remembered"]
    assert sorted((e["name"], e["source"], e["subject"]) for e in remembered) == [
        ("account_activated", "tool", SUBJECT),
        ("plan_chosen", "world", SUBJECT),
    ]


def test_a_newer_fact_closes_the_older_one(
    walk: tuple[Lane, Recording, GatewayProcess, str],
) -> None:
    lane, _standin, gateway, _metrics = walk
    subject = "cust-t"
    start(lane, "mw-t1", {"id": subject})
    event(lane, "mw-t1", "plan_chosen", "pro", "world")
    [pro] = current(gateway, subject, 1)
    event(lane, "mw-t1", "plan_chosen", "team", "world")

    def closed() -> dict[str, Any] | None:
        [fact] = profile(gateway, subject).json()["facts"]
        return fact if fact["value"] == "team" else None

    team = wait_for(closed, timeout=120, what="team to be the current plan")
    assert team["valid_from"] >= pro["valid_from"]
    before = profile(gateway, subject, as_of=pro["valid_from"]).json()["facts"]
    assert [(f["value"], f["valid_to"]) for f in before] == [("pro", team["valid_from"])]
    assert [f["value"] for f in profile(gateway, subject).json()["facts"]] == ["team"]


def test_an_erased_subject_is_gone_for_later_jobs_and_replay_still_verifies(
    walk: tuple[Lane, Recording, GatewayProcess, str],
) -> None:
    lane, standin, gateway, metrics = walk
    subject = "cust-e"
    start(lane, "mw-e1", {"id": subject})
    event(lane, "mw-e1", "plan_chosen", "pro", "world")
    current(gateway, subject, 1)
    with gateway.client(gateway.token()) as client:
        erased = client.delete(f"/v1/subjects/{subject}")
    assert erased.status_code == 202, erased.text
    wait_for(lambda: profile(gateway, subject).status_code == 404, timeout=120, what="the 404")
    # A subject on the same memory partition, remembered after the erasure: once a
    # job of it is told its fact, the agents have read past the erasure's tombstone.
    later = same_partition_as(subject)
    start(lane, "mw-e2", {"id": later, "name": "Marker"})
    event(lane, "mw-e2", "plan_chosen", "basic", "world")
    current(gateway, later, 1)
    start(lane, "mw-e3", {"id": later, "name": "Marker again"})
    assert "plan_chosen: basic" in first_request(standin, "Marker again")
    start(lane, "mw-e4", {"id": subject, "name": "After erasure"})
    request = first_request(standin, "After erasure")
    assert "What we know" not in request
    assert "pro" not in request.split("Subject:", 1)[-1]
    lane.cli("replay", "--verify")
    # The processor's table is what a fold of the log from its start gives.
    lane.cli("memory", "verify")
    tombstones = [r for r in lane.read("memory") if r["key"] == subject and r["value"] is None]
    assert tombstones
    # The processor's /metrics counts what it folded (docs/operations.md, "Metrics").
    samples = scrape(metrics)
    assert value(samples, "lemongraph_memory_records_total", kind="erasure") >= 1
    assert value(samples, "lemongraph_memory_records_total", kind="fact") >= 2


def say(lane: Lane, key: str, n: int, text: str) -> None:
    """What the person writes in the job's web conversation, as the gateway puts it."""
    record = {
        "type": "message", "job_key": key, "message_id": f"{key}-in-{n}", "direction": "in",
        "channel": "web", "contact": "ada@example.com", "text": text,
        "at": "2026-12-07T09:00:00Z",
    }  # fmt: skip
    lane.produce([(key.encode(), orjson.dumps(record))], topic="messages")


def asked_with(standin: Recording, *words: str) -> str:
    """The first model request (as sent) that carries every one of ``words``."""

    def found() -> str | None:
        return next((str(b) for b in standin.bodies if all(w in str(b) for w in words)), None)

    return wait_for(found, timeout=120, what=f"a model request with {words}")


def test_a_long_conversation_is_summarised_into_memory_as_a_claim_and_erased_with_it(
    walk: tuple[Lane, Recording, GatewayProcess, str],
) -> None:
    lane, standin, gateway, _metrics = walk
    subject, key = "cust-long", "mw-l"
    start(lane, key, {"id": subject, "name": "Long talker"})
    event(lane, key, "plan_chosen", "pro", "world")
    first_request(standin, "Long talker")
    for n in range(1, 31):  # 30 turns of the person's alone: at least 10 hidden
        say(lane, key, n, f"Question {n} about the invoice")

    def noted(records: list[dict[str, Any]]) -> bool:
        return any(r["key"] == subject and r["value"] and r["value"].get("notes") for r in records)

    profiles = lane.wait_until("memory", noted, timeout=120)
    [note] = next(r["value"] for r in reversed(profiles) if r["key"] == subject)["notes"]
    assert (note["source"], note["job_key"], note["turn_from"]) == ("agent", key, 1)
    assert note["note_id"] == f"{key}/summary/{note['turn_to']}"
    assert "Question 1 about" in note["text"]
    # Never a fact: the profile API and the CLI give the grounded fact only.
    [fact] = current(gateway, subject, 1)
    assert fact["name"] == "plan_chosen"
    assert note["text"] not in profile(gateway, subject).text
    assert note["text"] not in lane.cli("subject", "show", subject, "--json").stdout
    # A later turn is shown it, read back from memory, in its own labelled section.
    say(lane, key, 31, "Marker after the summary")
    request = asked_with(standin, "Marker after the summary", "Agent: conversation")
    earlier = "Earlier in this conversation (our own summary, not verified; turns 1-"
    assert earlier in request
    assert note["text"][:40] in request
    summaries = [
        r["value"] for r in lane.read("journal")
        if r["value"]["job_key"] == key and r["value"].get("agent") == "summary"
    ]  # fmt: skip
    assert summaries
    assert all(j["type"] == "journal.model_call" for j in summaries)
    # Erased with its subject: the profile and the note go; later turns are not shown it.
    with gateway.client(gateway.token()) as client:
        assert client.delete(f"/v1/subjects/{subject}").status_code == 202
    wait_for(lambda: profile(gateway, subject).status_code == 404, timeout=120, what="the 404")
    say(lane, key, 32, "Marker after the erasure")
    after = asked_with(standin, "Marker after the erasure", "Agent: conversation")
    assert "our own summary" not in after
    assert note["text"][:40] not in after
    # Rebuilt from memory-facts, the notes fold to the same bytes.
    lane.cli("memory", "verify")
