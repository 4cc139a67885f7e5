"""The built-in ``memory`` channel (docs/flows.md, "Channels"): a prompt reads
the job's subject's current facts as ``{{memory}}``; no node writes it and no
flow declares it (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from compiler import CallModel, FlowRun, LemongraphError, load_flow

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
RECALL = """\
version: "1"
outputs: [answer]
state:
  answer: {type: string}
start: answer
nodes:
  - {id: answer, type: llm, prompt: "Known: {{memory}}", output: answer}
edges:
  - {from: answer, to: END}
"""
FACT = {"name": "plan_chosen", "value": "pro", "properties": {}, "source": "world",
        "event_id": "e-17", "job_key": "job-a", "since": "2026-12-01T09:00:00Z"}  # fmt: skip


def test_a_prompt_reads_the_subjects_facts() -> None:
    run = FlowRun(load_flow(RECALL, "t.yaml"))
    _, actions = run.start("r", {"memory": [FACT]}, NOW)
    [call] = actions
    assert isinstance(call, CallModel)
    assert '"event_id":"e-17"' in call.prompt.replace(" ", "")
    assert '"value":"pro"' in call.prompt.replace(" ", "")
    _, none = FlowRun(load_flow(RECALL, "t.yaml")).start("r", {}, NOW)
    assert isinstance(none[0], CallModel)
    assert none[0].prompt == "Known: []"


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        (RECALL.replace("output: answer}", "output: memory}"), "BUILTIN_CHANNEL_WRITTEN"),
        (RECALL.replace("state:\n", "state:\n  memory: {type: list}\n"), "RESERVED_NAME"),
    ],
)
def test_memory_is_built_in_and_read_only(text: str, rule: str) -> None:
    with pytest.raises(LemongraphError) as caught:
        load_flow(text, "t.yaml")
    assert rule in str(caught.value)
