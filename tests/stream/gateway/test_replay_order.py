"""The order a gateway re-reads its topics in after a restart
(stream/gateway/follow.py, "The order of the catch-up"): an answer on
``messages`` is never applied before the question it answers on ``journal``,
however the fetches interleave the two topics, so an answered question does
not stand open after a restart."""

from __future__ import annotations

import httpx
import pytest

from tests.stream.gateway.conftest import Lane, launch_gateway, wait_for
from topics import JobSnapshot, JournalInterrupt, MessageRecord, encode

pytestmark = [pytest.mark.broker, pytest.mark.timeout(180)]

KEY = "replay-1"
AT = "2026-12-04T10:00:00Z"
#: Journal records before the question: more than one fetch of the partition
#: holds (1 MiB), so the answer on ``messages`` arrives fetches ahead of it.
FILLER = 4000


def interrupt(interrupt_id: str, status: str) -> JournalInterrupt:
    return JournalInterrupt(
        job_key=KEY, run_id=f"{KEY}#1", flow="approve-refund", node="ask", kind="ask",
        interrupt_id=interrupt_id, at=AT, status=status,  # type: ignore[arg-type]
        question="Which order is it about? " + "x" * 200,
    )  # fmt: skip


def open_questions(client: httpx.Client) -> list[str]:
    response = client.get(f"/v1/jobs/{KEY}/interrupts")
    assert response.status_code == 200, response.text
    return [i["interrupt_id"] for i in response.json()["interrupts"]]


def test_an_answered_question_stays_answered_after_a_restart(module_lane: Lane) -> None:
    lane = module_lane
    snapshot = JobSnapshot(
        key=KEY, status="running", playbook_key="onboarding", playbook_version=1, seq=1,
        started_at=AT, updated_at=AT, milestones={}, detail={}, frontier=[], timers=[],
        state_hash="0",
    )  # fmt: skip
    lane.produce([(KEY.encode(), encode(snapshot))], "jobs")
    # Questions that expired, then the one answered below (no journal record
    # says it was answered: the answer on messages is all that closes it).
    filler = [(KEY.encode(), encode(interrupt(f"old-{n}", "expired"))) for n in range(FILLER)]
    lane.produce([*filler, (KEY.encode(), encode(interrupt("q-1", "open")))], "journal")
    answer = MessageRecord(
        job_key=KEY, message_id="answer-q-1", direction="in", channel="web", text="A-17",
        at=AT, interrupt_id="q-1", answer="A-17",
    )  # fmt: skip
    lane.produce([(KEY.encode(), encode(answer))], "messages")
    for _restart in range(2):
        gateway = launch_gateway(lane)  # healthy: caught up with every topic
        try:
            with gateway.client(gateway.token()) as client:
                wait_for(lambda c=client: c.get(f"/v1/jobs/{KEY}").status_code == 200, what="job")
                assert open_questions(client) == []
        finally:
            gateway.stop()
