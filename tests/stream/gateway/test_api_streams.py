"""The gateway's live event stream and a person's message, through the real
server, a real worker and the real embedded broker (docs/api.md). The tests
share one worker and one gateway on a lane of their own (``worked``), each with
its own job key: the module holds only them, so the shared processes live (and
poll the broker, which costs CPU while they wait) only while these tests run."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import new_lane
from tests.stream.gateway.conftest import GatewayProcess, Lane, launch_gateway, wait_for
from tests.stream.gateway.test_api import error_of

pytestmark = [pytest.mark.broker, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def worked(
    kafka_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Lane, GatewayProcess]]:
    """A gateway and a worker on a lane of their own, shared by the tests that
    move jobs through a worker without testing either's life (each with job keys
    of its own, reading only what its jobs made): not ``shared_gateway``'s lane,
    where no job is ever made."""
    lane = new_lane(kafka_url, tmp_path_factory.mktemp("worked"))
    lane.start_worker()
    gateway = launch_gateway(lane)
    try:
        yield lane, gateway
    finally:
        gateway.stop()
        lane.kill_workers()


def start_onboarding(client: httpx.Client, key: str) -> None:
    started = client.post("/v1/jobs", json={"key": key, "playbook_key": "onboarding"})
    assert started.status_code == 202, started.text


def test_job_changes_arrive_as_server_sent_events(worked: tuple[Lane, GatewayProcess]) -> None:
    gateway, key = worked[1], "sse-j"  # the module's worker decides it
    token = gateway.token()
    with gateway.client(token) as client:
        start_onboarding(client, key)
        seen: list[tuple[str, dict[str, Any]]] = []
        # EventSource cannot send headers: the token rides in the query string.
        with httpx.stream(
            "GET", f"{gateway.api}/v1/jobs/{key}/events", params={"access_token": token}, timeout=60
        ) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            event = ""
            sent = False
            for line in stream.iter_lines():
                if line.startswith("event: "):
                    event = line[len("event: ") :]
                elif line.startswith("data: "):
                    seen.append((event, orjson.loads(line[len("data: ") :])))
                    if event == "job" and seen[-1][1]["status"] == "running" and not sent:
                        sent = True
                        posted = client.post(
                            "/v1/events", json={"key": key, "action": "id_uploaded"}
                        )
                        assert posted.status_code == 202
                    if event == "job" and any(
                        m["id"] == "collectIdentity" and m["state"] == "done"
                        for m in seen[-1][1]["milestones"]
                    ):
                        break
        kinds = [kind for kind, _ in seen]
        assert kinds[0] == "job"
        assert "decision" in kinds
        # A view is sent when it changed: never the same one twice in a row.
        views = [orjson.dumps(data) for kind, data in seen if kind == "job"]
        assert all(a != b for a, b in itertools.pairwise(views)), views


def _decisions_on_stream(
    gateway: GatewayProcess, key: str, token: str, count: int, **options: Any
) -> list[tuple[str, int]]:
    """The first ``count`` decisions of job ``key``'s event stream: (id, seq) each."""
    found: list[tuple[str, int]] = []
    ident = event = ""
    with httpx.stream(
        "GET", f"{gateway.api}/v1/jobs/{key}/events", timeout=30,
        params={"access_token": token, **options.get("params", {})},
        headers=options.get("headers", {}),
    ) as stream:  # fmt: skip
        assert stream.status_code == 200
        for line in stream.iter_lines():
            if line.startswith("id: "):
                ident = line[len("id: ") :]
            elif line.startswith("event: "):
                event = line[len("event: ") :]
            elif line.startswith("data: ") and event == "decision":
                found.append((ident, orjson.loads(line[len("data: ") :])["seq"]))
                if len(found) == count:
                    break
            elif not line:
                ident = event = ""
    return found


def test_the_event_stream_resumes_after_the_lists_or_its_last_event_id(
    worked: tuple[Lane, GatewayProcess],
) -> None:
    """What was read before a stream opened is not lost: ``after`` (the lists'
    totals) and ``Last-Event-ID`` (a record's id, as EventSource sends it back on
    a reconnect) resume the stream there, the records since coming first."""
    gateway, key = worked[1], "resumed-j"  # the module's worker decides it
    token = gateway.token()
    with gateway.client(token) as client:
        start_onboarding(client, key)
        posted = client.post("/v1/events", json={"key": key, "action": "id_uploaded"})
        assert posted.status_code == 202
        trail = wait_for(
            lambda: (t := client.get(f"/v1/jobs/{key}/decisions").json())["total"] == 2 and t,
            what="two decisions",
        )
        assert trail["kept"] == 2
        assert client.get(f"/v1/jobs/{key}/journal").json()["total"] == 0
        assert client.get(f"/v1/jobs/{key}/messages").json()["total"] == 0
    assert _decisions_on_stream(gateway, key, token, 2, params={"after": "0.0.0"}) == [
        ("1.0.0", 1),
        ("2.0.0", 2),
    ]
    assert _decisions_on_stream(gateway, key, token, 1, params={"after": "1.0.0"}) == [("2.0.0", 2)]
    # a reconnect's Last-Event-ID is where the stream was: it comes before `after`
    resumed = _decisions_on_stream(
        gateway, key, token, 1, params={"after": "0.0.0"}, headers={"Last-Event-ID": "1.0.0"}
    )
    assert resumed == [("2.0.0", 2)]
    with gateway.client(token) as client:
        bad = client.get(f"/v1/jobs/{key}/events", params={"after": "1.x"})
        assert bad.status_code == 422


def test_a_persons_message_goes_on_messages_and_the_inbox_once(
    worked: tuple[Lane, GatewayProcess],
) -> None:
    lane, gateway = worked  # the module's worker decides job-m
    with gateway.client(gateway.token()) as client:
        started = client.post(
            "/v1/jobs",
            json={"key": "job-m", "playbook_key": "onboarding",
                  "contacts": [{"name": "Ada", "email": "ada@example.com"}]},
        )  # fmt: skip
        assert started.status_code == 202
        wait_for(lambda: client.get("/v1/jobs/job-m").json()["seq"] >= 1, what="the start")
        text = "<script>window.__owned = 1</script> Tomorrow at ten works."
        sent = client.post(
            "/v1/jobs/job-m/messages",
            json={"text": text, "contact": "ada@example.com", "message_id": "m-1"},
        )
        assert sent.status_code == 202, sent.text
        body = sent.json()
        assert (body["message_id"], body["event_id"], body["duplicate"]) == (
            "m-1",
            "msg:m-1",
            False,
        )
        again = client.post("/v1/jobs/job-m/messages", json={"text": text, "message_id": "m-1"})
        assert (again.status_code, again.json()["duplicate"]) == (202, True)
        # the transcript: once, as sent
        talk = wait_for(
            lambda: (m := client.get("/v1/jobs/job-m/messages").json())["kept"] and m,
            what="the message",
        )
        [message] = talk["messages"]
        assert (message["direction"], message["channel"], message["contact"], message["text"]) == (
            "in", "web", "ada@example.com", text,
        )  # fmt: skip
        # the event: a world event (only a world token writes a person's message), once
        view = wait_for(
            lambda: (v := client.get("/v1/jobs/job-m").json())["events"] >= 1 and v,
            what="the event decided",
        )
        assert view["contacts"] == [{"name": "Ada", "email": "ada@example.com"}]
        trail = client.get("/v1/jobs/job-m/decisions").json()["decisions"]
        [event] = [d["input"] for d in trail if d["input"]["type"] == "event"]
        assert (event["action"], event["source"], event["idempotency_key"]) == (
            "message_received", "world", "msg:m-1",
        )  # fmt: skip
        assert event["properties"] == {
            "channel": "web", "contact": "ada@example.com", "text": text,
        }  # fmt: skip
        # without an id the gateway names one
        named = client.post("/v1/jobs/job-m/messages", json={"text": "Hello?"})
        assert named.status_code == 202
        assert named.json()["message_id"].startswith("web-")
        # what it refuses, and where
        assert (
            error_of(client.post("/v1/jobs/ghost/messages", json={"text": "hi"}))["code"]
            == "job_not_found"
        )
        for bad in (
            {"text": ""},
            {"text": "   "},
            {"text": "x" * 4001},
            {},
            {"text": 5},
            {"text": "hi", "source": "tool"},
            {"text": "hi", "message_id": "a b"},
        ):
            refused = client.post("/v1/jobs/job-m/messages", json=bad)
            assert refused.status_code == 422, (bad, refused.text)
        assert error_of(client.get("/v1/jobs/ghost/messages"))["code"] == "job_not_found"
    records = [r["value"] for r in lane.read("messages") if r["key"] == "job-m"]
    assert [r["message_id"] for r in records][:1] == ["m-1"]
    assert sum(1 for r in records if r["message_id"] == "m-1") == 1
