"""A token's source is a capability, and an approval needs an approver
(docs/api.md, "Sources and what they may do" and "Approvals"), through the real
gateway, worker and embedded broker: every write route against world, agent
and tool tokens; what a refusal writes (nothing, but the journal's note of who
tried an approval); and one approver's answer taken once, carrying who it was.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.stream.gateway.conftest import GatewayProcess, Lane, wait_for
from topics import JournalInterrupt, encode

pytestmark = [pytest.mark.broker, pytest.mark.timeout(240)]

KEY = "src-1"
APPROVAL = "int-approval"
ASK = "int-ask"
SCHEDULE = {
    "id": "nightly",
    "name": "Nightly",
    "schedule": "weekdays at 09:30",
    "timezone": "UTC",
    "action": {"type": "start_job", "playbook_key": "onboarding"},
}


def _interrupt(interrupt_id: str, kind: str, **fields: Any) -> JournalInterrupt:
    return JournalInterrupt(
        job_key=KEY, run_id=f"{KEY}#1", flow="approve-refund", node=interrupt_id,
        interrupt_id=interrupt_id, kind=kind, at="2026-12-04T10:00:00Z", status="open",
        question="May I refund?", **fields,
    )  # fmt: skip


def _code(response: httpx.Response) -> tuple[int, str | None]:
    if response.status_code < 400:
        return response.status_code, None
    return response.status_code, response.json()["error"]["code"]


def _writes(client: httpx.Client, n: int) -> dict[str, tuple[int, str | None]]:
    """Every write route once, with a body it would take from a world token."""
    return {
        "POST /v1/jobs": _code(
            client.post("/v1/jobs", json={"key": f"new-{n}", "playbook_key": "onboarding"})
        ),
        "POST /v1/events": _code(
            client.post(
                "/v1/events", json={"key": KEY, "action": "id_uploaded", "idempotency_key": f"e{n}"}
            )
        ),
        "POST messages": _code(
            client.post(f"/v1/jobs/{KEY}/messages", json={"text": "yes", "message_id": f"m{n}"})
        ),
        "POST answers (approval)": _code(
            client.post(f"/v1/jobs/{KEY}/answers", json={"interrupt_id": APPROVAL, "answer": "yes"})
        ),
        "POST /v1/schedules": _code(
            client.post("/v1/schedules", json={**SCHEDULE, "id": f"nightly-{n}"})
        ),
    }


FORBIDDEN = (403, "source_not_allowed")
TABLE = {
    # source: what each write route answers it
    "agent": {
        "POST /v1/jobs": FORBIDDEN,
        "POST /v1/events": (202, None),  # stamped agent: a claim, never evidence
        "POST messages": FORBIDDEN,
        "POST answers (approval)": FORBIDDEN,
        "POST /v1/schedules": FORBIDDEN,
    },
    "tool": {
        "POST /v1/jobs": FORBIDDEN,
        "POST /v1/events": (202, None),
        "POST messages": FORBIDDEN,
        "POST answers (approval)": FORBIDDEN,
        "POST /v1/schedules": FORBIDDEN,
    },
    "world": {
        "POST /v1/jobs": (202, None),
        "POST /v1/events": (202, None),
        "POST messages": (202, None),
        "POST answers (approval)": (403, "not_an_approver"),
        "POST /v1/schedules": (201, None),
    },
}


def test_each_source_may_do_what_the_table_says_and_only_an_approver_approves(
    lane: Lane, gateway: GatewayProcess
) -> None:
    lane.start_worker()
    operator = gateway.client(gateway.token(name="operator", approver=True))
    with operator:
        started = operator.post("/v1/jobs", json={"key": KEY, "playbook_key": "onboarding"})
        assert started.status_code == 202, started.text
        wait_for(lambda: operator.get(f"/v1/jobs/{KEY}").status_code == 200, what="the job")
        lane.produce(
            [(KEY.encode(), encode(_interrupt(APPROVAL, "approval"))),
             (KEY.encode(), encode(_interrupt(ASK, "ask")))],
            topic="journal",
        )  # fmt: skip

        def open_ids() -> set[str]:
            listed = operator.get(f"/v1/jobs/{KEY}/interrupts").json()["interrupts"]
            return {i["interrupt_id"] for i in listed}

        wait_for(lambda: open_ids() == {APPROVAL, ASK}, what="two open interrupts")

        seen = {}
        for n, source in enumerate(TABLE):
            with gateway.client(gateway.token(name=f"a-{source}", source=source)) as client:
                seen[source] = _writes(client, n)
                # a question (not an approval) is a world token's to answer too
                if source != "world":
                    ask = client.post(
                        f"/v1/jobs/{KEY}/answers", json={"interrupt_id": ASK, "answer": "later"}
                    )
                    assert _code(ask) == FORBIDDEN, source
        for source, routes in TABLE.items():
            assert seen[source] == routes, source
        # an agent or tool token is refused even an interrupt that is not open
        with gateway.client(gateway.token(source="agent")) as agent:
            gone = agent.post(f"/v1/jobs/{KEY}/answers", json={"interrupt_id": "x", "answer": "y"})
            assert _code(gone) == FORBIDDEN
        assert open_ids() == {APPROVAL, ASK}  # no refusal answered anything

        # the approver: accepted once, with who answered; the second is 409
        taken = operator.post(
            f"/v1/jobs/{KEY}/answers", json={"interrupt_id": APPROVAL, "answer": "yes"}
        )
        assert taken.status_code == 202, taken.text
        again = operator.post(
            f"/v1/jobs/{KEY}/answers", json={"interrupt_id": APPROVAL, "answer": "yes"}
        )
        assert _code(again) == (409, "interrupt_not_open")

    # what reached the topics: no job started, no person's message but the world's
    inbox = [r["value"] for r in lane.read("inbox")]
    starts = [m["key"] for m in inbox if m["type"] == "job.start"]
    assert starts == [KEY, "new-2"]  # the operator's and the world token's
    events = sorted((m["source"], m["action"]) for m in inbox if m["type"] == "event")
    assert events == [
        ("agent", "id_uploaded"),
        ("tool", "id_uploaded"),
        ("world", "id_uploaded"),
        ("world", "message_received"),
    ]
    messages = [r["value"] for r in lane.read("messages") if r["key"] == KEY]
    assert [(m["text"], m.get("interrupt_id")) for m in messages] == [
        ("yes", None),  # the world token's message
        ("yes", APPROVAL),  # the approver's answer
    ]
    assert messages[1]["by"] == {
        "source": "world", "name": "operator", "approver": True, "contact": None,
        "channel": None,
    }  # fmt: skip
    # each refusal of an open interrupt is journaled with who tried; the open
    # interrupt of an agent's refused answer to "x" (not open) is not
    refused = [
        (r["value"]["interrupt_id"], r["value"]["by"]["source"], r["value"]["approvers"])
        for r in lane.read("journal")
        if r["value"].get("type") == "journal.interrupt" and r["value"]["status"] == "refused"
    ]
    assert sorted(refused) == [
        (APPROVAL, "agent", ["operators"]),
        (APPROVAL, "tool", ["operators"]),
        (APPROVAL, "world", ["operators"]),
        (ASK, "agent", []),
        (ASK, "tool", []),
    ]


def test_an_approval_for_contacts_is_not_answered_through_the_api(
    lane: Lane, gateway: GatewayProcess
) -> None:
    lane.start_worker()
    with gateway.client(gateway.token(name="operator", approver=True)) as operator:
        assert operator.post("/v1/jobs", json={"key": KEY, "playbook_key": "onboarding"}).is_success
        wait_for(lambda: operator.get(f"/v1/jobs/{KEY}").status_code == 200, what="the job")
        lane.produce(
            [(KEY.encode(),
              encode(_interrupt(APPROVAL, "approval", approvers=["contacts"])))],
            topic="journal",
        )  # fmt: skip
        wait_for(
            lambda: operator.get(f"/v1/jobs/{KEY}/interrupts").json()["interrupts"],
            what="the open approval",
        )
        refused = operator.post(
            f"/v1/jobs/{KEY}/answers", json={"interrupt_id": APPROVAL, "answer": "yes"}
        )
        assert _code(refused) == (403, "not_an_approver")
        assert "contacts" in refused.json()["error"]["message"]
    assert not [r for r in lane.read("messages") if r["key"] == KEY]
