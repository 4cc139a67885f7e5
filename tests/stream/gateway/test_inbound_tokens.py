"""The inbound email webhook through real gateways on the shared broker: short
reply tokens resolved from the outbound email on ``messages``, and a mail
delivered twice written once, by a gateway that did not take it the first time."""

from __future__ import annotations

import hmac
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
import pytest

from tests.stream.gateway.conftest import GatewayProcess, Lane, launch_gateway, wait_for
from topics import MessageRecord, encode
from topics.mail import inbound_message_id
from topics.replies import reply_address, reply_token, short_token

pytestmark = [pytest.mark.broker, pytest.mark.timeout(180)]

MAIL = {"LEMONGRAPH_INBOUND_SECRET": "hook-secret", "REPLY_TOKEN_SECRET": "reply-secret",
        "REPLY_DOMAIN": "reply.test"}  # fmt: skip


@pytest.fixture(scope="module")
def hooked(module_lane: Lane) -> Iterator[GatewayProcess]:
    """A worker and a gateway with the webhook on, for this module's own jobs."""
    module_lane.start_worker()
    gateway = launch_gateway(module_lane, **MAIL)
    yield gateway
    gateway.stop()


def post(api: str, payload: dict[str, Any]) -> httpx.Response:
    raw = orjson.dumps(payload)
    signature = "sha256=" + hmac.new(b"hook-secret", raw, "sha256").hexdigest()
    return httpx.post(
        f"{api}/v1/inbound/email", content=raw, timeout=30,
        headers={"X-Lemongraph-Signature": signature, "Content-Type": "application/json"},
    )  # fmt: skip


def started(gateway: GatewayProcess, key: str) -> None:
    """Job ``key`` started and decided (its snapshot read)."""
    with gateway.client(gateway.token()) as client:
        taken = client.post("/v1/jobs", json={"key": key, "playbook_key": "onboarding"})
        assert taken.status_code == 202, taken.text
        wait_for(
            lambda: client.get(f"/v1/jobs/{key}").json().get("status") == "running",
            what=f"{key} decided",
        )


def sent_email(lane: Lane, gateway: GatewayProcess, key: str, message_id: str) -> str:
    """An outbound email message of job ``key`` on ``messages``, once the gateway
    has read it; its reply address."""
    at = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    record = MessageRecord(
        job_key=key, message_id=message_id, direction="out", channel="email",
        contact="ada@example.com", text="When?", at=at,
    )  # fmt: skip
    lane.produce([(key.encode(), encode(record))], topic="messages")
    with gateway.client(gateway.token()) as client:
        wait_for(
            lambda: (
                message_id
                in [
                    m["message_id"]
                    for m in client.get(f"/v1/jobs/{key}/messages").json()["messages"]
                ]
            ),
            what="the outbound message read",
        )
    return reply_address(short_token("reply-secret", message_id), "reply.test")


def test_a_reply_to_a_short_token_is_a_message_of_its_job(
    module_lane: Lane, hooked: GatewayProcess
) -> None:
    started(hooked, "tok-1")
    address = sent_email(module_lane, hooked, "tok-1", "tok-1#out-1")
    assert address.startswith("reply+r2.")
    assert len(address.partition("@")[0]) <= 64
    reply = {"to": address, "from": "Ada <ada@example.com>", "message_id": "<t1@mail.example>",
             "text": "Tomorrow at ten.\n\nOn Tue, Agent wrote:\n> When?"}  # fmt: skip
    taken = post(hooked.api, reply)
    assert taken.status_code == 202, taken.text
    assert (taken.json()["key"], taken.json()["kind"]) == ("tok-1", "reply")
    bounce = short_token("reply-secret", "tok-1#out-1", "bounce")
    bounced = post(hooked.api, {"to": reply_address(bounce, "reply.test", "bounce"),
                                "message_id": "<b1@mx>", "reason": "5.1.1"})  # fmt: skip
    assert (bounced.status_code, bounced.json()["kind"]) == (202, "bounce")
    # a token no message read carries is refused, and writes nothing
    stranger = reply_address(short_token("reply-secret", "tok-1#never-sent"), "reply.test")
    refused = post(hooked.api, dict(reply, to=stranger, message_id="<t2@mail.example>"))
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "reply_refused"
    assert "unknown" in refused.json()["error"]["message"]
    with hooked.client(hooked.token()) as client:
        talk = wait_for(
            lambda: len(m := client.get("/v1/jobs/tok-1/messages").json()["messages"]) >= 2 and m,
            what="the reply",
        )
        trail = wait_for(
            lambda: len(d := client.get("/v1/jobs/tok-1/decisions").json()["decisions"]) >= 3 and d,
            what="the events decided",
        )
    assert [(m["direction"], m["text"]) for m in talk] == [
        ("out", "When?"),
        ("in", "Tomorrow at ten."),
    ]
    actions = [d["input"].get("action") for d in trail if d["input"]["type"] == "event"]
    assert actions == ["message_received", "email_bounced"]


def test_a_mail_delivered_twice_is_written_once(module_lane: Lane, hooked: GatewayProcess) -> None:
    started(hooked, "tok-2")
    # a long (v1) token, as mail sent before short tokens carries
    token = reply_token("reply-secret", "tok-2", "ada@example.com", int(time.time()) + 600)
    address = reply_address(token, "reply.test")
    reply = {"to": address, "from": "ada@example.com", "message_id": "<d1@mail.example>",
             "text": "Yes."}  # fmt: skip
    first = post(hooked.api, reply)
    assert (first.status_code, first.json()["duplicate"]) == (202, False), first.text
    # Another gateway, which reads messages back and keeps one job in memory: a
    # job started through it evicts tok-2, and with it what tok-2's entry knew.
    other = launch_gateway(module_lane, LEMONGRAPH_GATEWAY_JOBS="1", **MAIL)
    try:
        started(other, "tok-3")
        again = post(other.api, reply)
        assert (again.status_code, again.json()["duplicate"]) == (202, True), again.text
    finally:
        other.stop()
    mail_id = inbound_message_id("<d1@mail.example>", b"")
    written = [r["value"] for r in module_lane.read("messages")]
    assert sum(1 for r in written if r["message_id"] == mail_id) == 1


def test_an_automatic_reply_by_webhook_writes_nothing(
    module_lane: Lane, hooked: GatewayProcess
) -> None:
    started(hooked, "tok-auto")
    address = sent_email(module_lane, hooked, "tok-auto", "tok-auto#out-1")
    away = {"to": address, "from": "ada@example.com", "message_id": "<away@mail.example>",
            "text": "Away.", "headers": {"Auto-Submitted": "auto-replied"}}  # fmt: skip
    for payload in (away, dict(away, headers={"List-Id": "<news.example>"}, message_id="<l1@x>")):
        answer = post(hooked.api, payload)
        assert answer.status_code == 202, answer.text
        assert (answer.json()["kind"], answer.json()["event_id"]) == ("automatic", "")
    # a person's reply (headers that say so) is taken
    person = dict(away, headers={"Auto-Submitted": "no"}, message_id="<p1@x>", text="Yes.")
    assert post(hooked.api, person).json()["kind"] == "reply"

    def mails_journaled() -> list[dict[str, Any]]:
        return [
            r["value"]
            for r in module_lane.read("journal")
            if r["value"].get("job_key") == "tok-auto"
            and r["value"].get("type") == "journal.mail"
            and r["value"]["outcome"] in ("automatic", "received")
        ]

    journal = wait_for(lambda: mails_journaled()[2:] and mails_journaled(), what="3 journaled")
    assert [j["outcome"] for j in journal[-3:]].count("automatic") == 2
    ins = [r["value"]["text"] for r in module_lane.read("messages")
           if r["key"] == "tok-auto" and r["value"]["direction"] == "in"]  # fmt: skip
    assert ins == ["Yes."]
