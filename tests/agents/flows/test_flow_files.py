"""File channels end to end (docs/flows.md, "File channels" and "A model reads a
file"): the real worker, ``lemongraph agents`` and ``lemongraph gateway`` on the
shared broker, the stand-in model behind the real ``openai`` client. A flow asks
for a photo; its question says it expects a file; the gateway refuses an answer
that is not the value of an uploaded image; the photo is uploaded and its value
answers; the llm node that names the photo gets it as an image (the stand-in
answers only when it sees one of that size), and the run finishes with the
model's words."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agents.dev.standin import StandinScript, build_standin
from tests.agents.flows.test_flow_service import journal_of
from tests.lanes import Lane, wait_for
from tests.stream.gateway.conftest import GatewayProcess, start_gateway
from tests.stream.gateway.test_files import PNG

__all__ = ["start_gateway"]  # the fixture, shared

CATALOG = """\
integrations:
  email: {}
agents:
  conversation: {instructions: Help the customer.}
"""
PLAYBOOK = """\
key: claims
version: 1
instructions: Help the customer with their claim.
milestones:
  - id: assess
    instructions: Assess the damage.
    condition: damage_assessed
    integrations: [email]
    flow: photo
"""
FLOW = """\
version: "1"
description: Ask for a photo of the damage, then describe it.
outputs: [description]
state:
  photo: {type: file, accept: "image/*", description: The photo of the damage.}
  description: {type: string, description: What the photo shows.}
start: ask_photo
nodes:
  - {id: ask_photo, type: ask, ask: Please send a photo of the damage., output: photo}
  - id: describe
    type: llm
    prompt: "The conversation: {{conversation}}. Describe the damage in this photo: {{photo}}"
    output: description
edges:
  - {from: ask_photo, to: describe}
  - {from: describe, to: END}
"""
SEEN = f"[image image/png, {len(PNG)} bytes]"
SCRIPT = StandinScript.model_validate(
    {
        "rules": [
            {"when": {"flow": "photo", "prompt_contains": SEEN}, "say": "A dented bumper."},
            {"when": {"flow": "photo"}, "say": "I was shown no image."},
        ]
    }
)


@pytest.mark.broker
@pytest.mark.timeout(240)
def test_an_ask_expecting_a_file_is_answered_by_an_upload_and_the_model_sees_the_image(
    lane: Lane, serve: Callable[[Any], str], start_gateway: Callable[..., GatewayProcess]
) -> None:
    for path in lane.playbooks.glob("*.yaml"):
        path.unlink()  # only this test's playbook
    (lane.playbooks / "catalog.yaml").write_text(CATALOG)
    (lane.playbooks / "claims.yaml").write_text(PLAYBOOK)
    (lane.playbooks / "flows").mkdir()
    (lane.playbooks / "flows" / "photo.yaml").write_text(FLOW)
    lane.start_worker()
    lane.start(
        ["agents"], "agents: ready", OPENAI_BASE_URL=f"{serve(build_standin(SCRIPT))}/v1",
        OPENAI_API_KEY="sk-test",
    )  # fmt: skip
    gateway = start_gateway()
    lane.send({"type": "job.start", "key": "c-1", "playbook_key": "claims", "subject": {}})
    with gateway.client(gateway.token(name="person")) as client:
        [asked] = wait_for(
            lambda: client.get("/v1/jobs/c-1/interrupts").json().get("interrupts"),
            timeout=120,
            what="the question",
        )
        assert (asked["expects"], asked["accept"]) == ("file", "image/*")
        iid = asked["interrupt_id"]
        text = client.post("/v1/jobs/c-1/answers", json={"interrupt_id": iid, "answer": "a"})
        assert text.status_code == 422, text.text
        listed = client.post("/v1/files", files={"file": ("rows.csv", b"a,b\n1,2\n", "text/csv")})
        wrong_type = client.post(
            "/v1/jobs/c-1/answers", json={"interrupt_id": iid, "answer": listed.json()}
        )
        assert wrong_type.status_code == 422, wrong_type.text
        assert "accepts image/*" in wrong_type.json()["error"]["message"]
        never = {**listed.json(), "id": "1" * 64, "url": "/v1/files/" + "1" * 64}
        never["mediaType"] = "image/png"
        unknown = client.post("/v1/jobs/c-1/answers", json={"interrupt_id": iid, "answer": never})
        assert unknown.status_code == 422, unknown.text
        assert "no file" in unknown.json()["error"]["message"]
        photo = client.post("/v1/files", files={"file": ("dent.png", PNG, "image/png")}).json()
        answered = client.post("/v1/jobs/c-1/answers", json={"interrupt_id": iid, "answer": photo})
        assert answered.status_code == 202, answered.text
    finished = lane.wait_until(
        "journal",
        lambda rs: [r["value"] for r in rs if r["value"]["type"] == "journal.flow"
                    and r["value"]["event"] == "finished"],
        timeout=120,
    )  # fmt: skip
    assert finished
    [model_call] = journal_of(lane, "journal.model_call")
    assert model_call["response"] == "A dented bumper."
    [closed] = [r for r in journal_of(lane, "journal.interrupt") if r["status"] == "answered"]
    assert closed["answer"] == photo
