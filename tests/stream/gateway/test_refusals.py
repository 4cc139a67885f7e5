"""What the gateway refuses, and how, through the real server and broker: a
token in the query string of anything but the event stream, keys that could not
be read back or that pass for others (at the gateway and, from any producer, on
the inbox), bodies that are not readable JSON, and writes while the broker is
down."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from stream.runtime.broker import EmbeddedBroker
from tests.conftest import new_lane
from tests.stream.gateway.conftest import GatewayProcess, Lane, gateways_on, wait_for
from topics import JobKeyError, check_key, check_label

pytestmark = [pytest.mark.broker, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def decided(kafka_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lane]:
    """A second lane of the module's, with one worker, for the tests that need
    their writes decided and a gateway of their own (a setting read at its
    start, a restart); each keeps to its own job keys. The module's lane (its
    ``shared_gateway``) has no worker: its tests read writes still undecided."""
    lane = new_lane(kafka_url, Path(tmp_path_factory.mktemp("decided")))
    lane.start_worker()
    yield lane
    lane.kill_workers()
    lane.drop_topics()


@pytest.fixture
def start_decided_gateway(decided: Lane) -> Iterator[Callable[..., GatewayProcess]]:
    """Gateways on the ``decided`` lane for one test; each stops at its end."""
    yield from gateways_on(decided)


def error_of(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    detail: dict[str, Any] = body["error"]
    return detail


def test_a_query_token_counts_only_on_the_event_stream_get(shared_gateway: GatewayProcess) -> None:
    gateway = shared_gateway  # its own job key, job-q
    token = gateway.token()
    with gateway.client(token) as client:
        body = {"key": "job-q", "playbook_key": "onboarding"}
        assert client.post("/v1/jobs", json=body).status_code == 202
    query = {"access_token": token}
    anonymous = httpx.Client(base_url=gateway.api, timeout=30)
    refused = [
        anonymous.post("/v1/events", params=query, json={"key": "job-q", "action": "paid"}),
        anonymous.post("/v1/jobs", params=query, json={"key": "job-r", "playbook_key": "x"}),
        anonymous.post("/v1/jobs/job-q/messages", params=query, json={"text": "hi"}),
        anonymous.get("/v1/jobs", params=query),
        anonymous.get("/v1/jobs/job-q", params=query),
        anonymous.get("/v1/jobs/job-q/decisions/events", params=query),
        anonymous.request("DELETE", "/v1/jobs/job-q/events", params=query),
    ]
    for response in refused:
        assert response.status_code == 401, (response.request.url, response.text)
        assert error_of(response)["code"] == "token_missing"
    # The event stream's GET still takes it (EventSource cannot send headers).
    assert error_of(anonymous.get("/v1/jobs/ghost/events", params=query))["code"] == (
        "job_not_found"
    )
    with anonymous.stream("GET", "/v1/jobs/job-q/events", params=query) as stream:
        assert stream.status_code == 200
    with gateway.client(token) as client:
        assert client.get("/v1/jobs/job-q").json()["pending_writes"][-1]["type"] == "job.start"
        assert len(client.get("/v1/jobs/job-q").json()["pending_writes"]) == 1  # nothing else


BAD_KEYS = [
    "a/b",
    "pay\u202egpj.exe",
    "job\u200b1",
    "job\n1",
    "\ufeffjob",
    " job",
    "..",
    "x\x7f",
    "key\ufe0f",
    "cafe\u0301",
]


def test_keys_that_break_the_rule_are_refused_at_the_gateway_and_on_the_inbox(
    decided: Lane, start_decided_gateway: Callable[..., GatewayProcess]
) -> None:
    # On the module's worker: its own keys, and the dead letters after its start.
    lane, gateway = decided, start_decided_gateway()
    earlier = {(r["partition"], r["offset"]) for r in lane.read("deadletter")}
    with gateway.client(gateway.token()) as client:
        before = client.get("/v1/jobs").json()["total"]
        for key in BAD_KEYS:
            with pytest.raises(JobKeyError) as rule:
                check_key(key)
            started = client.post("/v1/jobs", json={"key": key, "playbook_key": "onboarding"})
            assert started.status_code == 422, (key, started.text)
            error = error_of(started)
            assert error["code"] == "invalid_body"
            assert error["message"] == f"key: {rule.value}", error
            event = client.post("/v1/events", json={"key": key, "action": "paid"})
            assert event.status_code == 422
            assert error_of(event)["message"] == f"key: {rule.value}"
        assert (
            "'/' at position 1"
            in error_of(client.post("/v1/jobs", json={"key": "a/b", "playbook_key": "onboarding"}))[
                "message"
            ]
        )
        assert client.get("/v1/jobs").json()["total"] == before
        assert (
            client.post(
                "/v1/jobs", json={"key": "日本-1", "playbook_key": "onboarding"}
            ).status_code
            == 202
        )

    # A producer we did not write puts the same keys on the inbox: each is
    # dead-lettered with the rule's reason, and the worker goes on.
    starts = [{"type": "job.start", "key": k, "playbook_key": "onboarding"} for k in BAD_KEYS]
    lane.produce([(s["key"].encode(), orjson.dumps(s)) for s in starts])
    lane.send({"type": "job.start", "key": "after-the-bad-ones", "playbook_key": "onboarding"})
    letters = lane.wait_until(
        "deadletter",
        lambda rs: (
            len([r for r in rs if (r["partition"], r["offset"]) not in earlier]) >= len(BAD_KEYS)
        ),
    )
    letters = [r for r in letters if (r["partition"], r["offset"]) not in earlier]
    reasons = sorted(r["value"]["reason"] for r in letters)
    expected = []
    for key in BAD_KEYS:
        with pytest.raises(JobKeyError) as rule:
            check_key(key)
        expected.append(f"job.start.key: {rule.value}")
    assert reasons == sorted(expected)
    decisions = lane.wait_until(
        "decisions", lambda rs: {"after-the-bad-ones", "日本-1"} <= {r["key"] for r in rs}
    )
    ours = [r for r in decisions if r["key"] in ("after-the-bad-ones", "日本-1")]
    assert {r["value"]["outcome"] for r in ours} == {"applied"}
    assert all(w.proc.poll() is None for w in lane.workers)


def test_bidi_and_zero_width_contacts_and_idempotency_keys_answer_422_naming_them(
    shared_gateway: GatewayProcess,
) -> None:
    """The key rule (topics/_keys.py) on what the UI shows of a person and of an
    event: a message's contact, a job's contacts, an event's idempotency key."""
    gateway = shared_gateway  # refusals only: nothing written
    bidi, zero_width = "ada\u202e@example.com", "pay\u200b-1"
    refused = [
        ("/v1/jobs/job-c/messages", {"text": "hi", "contact": bidi}, "contact: contact", bidi),
        (
            "/v1/jobs",
            {"key": "job-c", "playbook_key": "onboarding", "contacts": [{"email": bidi}]},
            "contacts: contact 0.email",
            bidi,
        ),
        (
            "/v1/events",
            {"key": "job-c", "action": "paid", "idempotency_key": zero_width},
            "idempotency_key: idempotency key",
            zero_width,
        ),
    ]
    messages = []
    with gateway.client(gateway.token()) as client:
        for path, body, where, value in refused:
            with pytest.raises(JobKeyError) as rule:
                check_label(value)
            response = client.post(path, json=body)
            assert response.status_code == 422, (path, response.text)
            error = error_of(response)
            assert error["code"] == "invalid_body"
            assert error["message"] == f"{where} {str(rule.value).removeprefix('value ')}"
            messages.append(error["message"])
        assert client.get("/v1/jobs/job-c").status_code == 404  # nothing was written
    assert "has U+202E (RIGHT-TO-LEFT OVERRIDE) at position 3" in messages[0]
    assert "has U+200B (ZERO WIDTH SPACE) at position 3" in messages[2]


def test_bodies_that_are_not_readable_json_answer_malformed_json(
    shared_gateway: GatewayProcess,
) -> None:
    gateway = shared_gateway  # refusals only: nothing written
    json_type = {"Content-Type": "application/json"}
    deep = b"[" * 20_000 + b"]" * 20_000
    with gateway.client(gateway.token()) as client:
        for path in ("/v1/jobs", "/v1/events", "/v1/jobs/x/messages"):
            for body in (b'{"key": "\xff\xfe", "playbook_key": "onboarding"}', deep):
                response = client.post(path, content=body, headers=json_type)
                assert response.status_code == 400, (path, body[:10], response.text)
                error = error_of(response)
                assert error["code"] == "malformed_json", error
                assert "UTF-8" in error["message"]


def test_a_write_while_the_broker_is_down_answers_503_within_two_seconds(
    start_gateway: Callable[..., GatewayProcess],
) -> None:
    with EmbeddedBroker() as broker:
        # The default (1.5 s) answers within 2 s; the setting moves it.
        gateway = start_gateway(
            LEMONGRAPH_KAFKA_URL=broker.url, LEMONGRAPH_GATEWAY_WRITE_TIMEOUT="700ms"
        )
        client = gateway.client(gateway.token())
        body = {"key": "job-d", "playbook_key": "onboarding"}
        assert client.post("/v1/jobs", json=body).status_code == 202
        broker.stop()
        writes: list[tuple[str, dict[str, Any]]] = [
            ("/v1/events", {"key": "job-d", "action": "paid", "idempotency_key": "pay-1"}),
            ("/v1/jobs", {"key": "job-e", "playbook_key": "onboarding"}),
            ("/v1/jobs/job-d/messages", {"text": "hello"}),
        ]
        for path, payload in writes:
            began = time.monotonic()
            response = client.post(path, json=payload)
            took = time.monotonic() - began
            assert response.status_code == 503, response.text
            assert took < 1.4, f"{path}: {took:.2f}s"
            error = error_of(response)
            assert error["code"] == "broker_unavailable"
            assert "within 0.7s" in error["message"]
            assert "may or may not have been accepted" in error["message"]
            if path == "/v1/jobs":
                # A retry of a start that did land is refused as the client's own job.
                assert "409 job_exists for this very job" in error["message"]
            else:
                assert "idempotency_key" in error["message"]
            assert "Error(" not in error["message"]
        wait_for(
            lambda: any("was not acknowledged" in line for line in gateway.lines),
            what="the detail in the gateway's log",
        )
        client.close()
        gateway.stop()


def test_jobs_past_the_memory_limit_answer_their_summary_not_a_404(
    start_decided_gateway: Callable[..., GatewayProcess],
) -> None:
    # On the module's worker, which other tests' jobs share: it looks at its own.
    gateway = start_decided_gateway(LEMONGRAPH_GATEWAY_JOBS="3")
    keys = [f"job-{i:02}" for i in range(12)]
    with gateway.client(gateway.token()) as client:

        def ours() -> list[dict[str, Any]]:
            return [j for j in client.get("/v1/jobs").json()["jobs"] if j["key"] in keys]

        def start_running(chosen: list[str]) -> None:
            for key in chosen:
                started = client.post("/v1/jobs", json={"key": key, "playbook_key": "onboarding"})
                assert started.status_code == 202
            wait_for(
                lambda: (
                    all(j["status"] == "running" for j in ours())
                    and len(ours()) == keys.index(chosen[-1]) + 1
                ),
                what=f"{chosen[-1]} and the jobs before it running",
            )

        # The first six, then six more: a record of an early job read after its
        # eviction (the decisions and the jobs' states keep no order between them)
        # brings that record back, and the six later jobs evict it again.
        start_running(keys[:6])
        start_running(keys[6:])
        listed = ours()
        assert [j["key"] for j in listed] == keys  # evicted or not, every job is listed
        assert sum(not j["in_memory"] for j in listed) >= 9
        gone = keys[0]
        assert not listed[0]["in_memory"]
        view = client.get(f"/v1/jobs/{gone}").json()
        assert view["in_memory"] is False
        assert view["status"] == "running"
        assert {m["id"]: m["state"] for m in view["milestones"]}["collectIdentity"] == "open"
        assert client.get(f"/v1/jobs/{gone}/decisions").json()["kept"] == 0
        # A write to it is taken, and its next snapshot brings it back in full.
        moved = client.post("/v1/events", json={"key": gone, "action": "id_uploaded"})
        assert moved.status_code == 202
        back = wait_for(
            lambda: (v := client.get(f"/v1/jobs/{gone}").json())["in_memory"] and v,
            what="the job back in memory",
        )
        states = {m["id"]: m["state"] for m in back["milestones"]}
        assert states["collectIdentity"] == "done"
        assert back["pending_writes"] == []


def test_a_retry_after_a_gateway_restart_is_a_duplicate_and_leaves_nothing_pending(
    start_decided_gateway: Callable[..., GatewayProcess],
) -> None:
    first = start_decided_gateway()  # its own job key, job-r, on the module's worker
    event = {"key": "job-r", "action": "id_uploaded", "idempotency_key": "upload-1"}
    with first.client(first.token()) as client:
        assert (
            client.post("/v1/jobs", json={"key": "job-r", "playbook_key": "onboarding"}).status_code
            == 202
        )
        assert client.post("/v1/events", json=event).status_code == 202
        wait_for(
            lambda: client.get("/v1/jobs/job-r/decisions").json()["kept"] == 2, what="two decisions"
        )
    first.stop()
    second = start_decided_gateway()
    with second.client(second.token()) as client:
        wait_for(lambda: client.get("/v1/jobs/job-r").status_code == 200, what="the job read back")
        retry = client.post("/v1/events", json=event)
        assert retry.status_code == 202
        assert retry.json()["duplicate"] is True
        assert client.get("/v1/jobs/job-r").json()["pending_writes"] == []
        # The same key from another source is its own (the engine remembers keys per source).
        tool = second.client(second.token(source="tool"))
        assert tool.post("/v1/events", json=event).json()["duplicate"] is False
        tool.close()


def test_writes_wait_while_undecided_ones_fill_their_memory(
    start_gateway: Callable[..., GatewayProcess],
) -> None:
    # No worker: every start stays undecided. 1 MiB of memory leaves 256 KiB
    # for undecided writes: a few starts of 60 KB fill it.
    gateway = start_gateway(LEMONGRAPH_GATEWAY_MEMORY="1048576")
    subject = {"note": "x" * 60_000}
    with gateway.client(gateway.token()) as client:
        statuses = []
        for i in range(8):
            body = {"key": f"full-{i}", "playbook_key": "onboarding", "subject": subject}
            response = client.post("/v1/jobs", json=body)
            statuses.append(response.status_code)
            if response.status_code == 503:
                break
        assert statuses[:4] == [202] * 4, statuses
        assert statuses[-1] == 503, statuses
        error = error_of(response)
        assert error["code"] == "gateway_full"
        assert "nothing was written" in error["message"]
        assert int(response.headers["retry-after"]) >= 1
        refused = client.post("/v1/events", json={"key": "full-0", "action": "paid"})
        assert error_of(refused)["code"] == "gateway_full"
        # What was taken is still read back, subject and all.
        job = client.get("/v1/jobs/full-0").json()
        assert (job["status"], job["subject"]) == ("starting", subject)
