"""Conversational flows in the compiler (docs/flows.md, "Conversational
flows"): ``conversation: true`` gives the flow the built-in ``history``
channel, needs a ``reply`` (CONVERSATION_NO_REPLY), and is warned about when no
prompt reads what was said (CONVERSATION_UNREAD); the step function starts a
run with the history the runtime gives; an LGFlow conversation imports with its
history and the output that answers each message."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from compiler import CallModel, FlowRun, check_flow, load_flow
from compiler.flows.lgflow import translate_lgflow

CHAT = """\
version: "1"
description: Answer the customer's question about their order, in context.
conversation: true
inputs: [question]
outputs: [answer]
reply: answer
state:
  question: {type: string, description: What the customer just wrote.}
  answer: {type: string, description: What the customer is told.}
start: answer
nodes:
  - {id: answer, type: llm, prompt: "So far: {{history}}\\n\\nNow: {{question}}", output: answer}
edges:
  - {from: answer, to: END}
"""
NOW = datetime(2026, 1, 5, 9, tzinfo=UTC)
PAST = [{"at": "2026-01-05T08:00:00Z", "asked": "Where is A-17?", "answered": "In Ghent."}]


def _found(text: str) -> list[tuple[str, str, int | None, int | None]]:
    report = check_flow(text, "f.yaml")
    return [(p.severity, p.rule, p.line, p.column) for p in report.problems]


def test_a_conversational_flow_reads_its_history_and_answers_with_its_reply() -> None:
    assert _found(CHAT) == []
    flow = load_flow(CHAT, "f.yaml")
    state, actions = FlowRun(flow).start(
        "o-1/chat#1", {"question": "And the invoice?", "history": PAST}, NOW
    )
    [call] = actions
    assert isinstance(call, CallModel)
    assert call.prompt == f"So far: {json.dumps(PAST, sort_keys=True)}\n\nNow: And the invoice?"
    assert state.channels["history"] == PAST


def test_without_a_reply_it_is_refused_by_name() -> None:
    text = CHAT.replace("reply: answer\n", "")
    assert _found(text) == [("error", "CONVERSATION_NO_REPLY", 3, 15)]
    message = check_flow(text, "f.yaml").errors[0].message
    assert "reply: NAME" in message


def test_history_is_built_in_only_in_a_conversation() -> None:
    # Not a conversation: {{history}} reads no channel (a flow may declare its own).
    plain = CHAT.replace("conversation: true\n", "").replace("reply: answer\n", "")
    assert ("error", "TEMPLATE_UNKNOWN_CHANNEL", 10, 46) in _found(plain)
    # A conversation cannot declare it, nor write it.
    declared = CHAT.replace("state:\n", "state:\n  history: {type: list}\n")
    assert _found(declared) == [("error", "RESERVED_NAME", 8, 12)]
    written = CHAT.replace("output: answer}", "output: history}")
    assert _found(written) == [("error", "BUILTIN_CHANNEL_WRITTEN", 12, 89)]
    # The step function takes a history from the runtime only for a conversation.
    flow = load_flow(plain.replace("{{history}}", "{{conversation}}"), "f.yaml")
    with pytest.raises(ValueError, match="history is not an input"):
        FlowRun(flow).start("o-1/chat#1", {"question": "Hi", "history": PAST}, NOW)


@pytest.mark.parametrize(
    ("prompt", "warned"),
    [
        ("So far: {{history}}\\n\\nNow: {{question}}", False),
        ("So far: {{conversation}}\\n\\nNow: {{question}}", False),
        ("Now: {{question}}", True),
    ],
)
def test_a_conversation_whose_prompts_read_nothing_said_is_warned(
    prompt: str, warned: bool
) -> None:
    text = CHAT.replace("So far: {{history}}\\n\\nNow: {{question}}", prompt)
    report = check_flow(text, "f.yaml")
    assert report.errors == ()
    unread = [p for p in report.warnings if p.rule == "CONVERSATION_UNREAD"]
    assert bool(unread) == warned
    if warned:
        assert "{{conversation}} or {{history}}" in unread[0].message
        assert (unread[0].line, unread[0].column) == (12, 10)


def _lgflow(outputs: list[str], answer_type: str = "string") -> str:
    return json.dumps(
        {
            "version": "0.9",
            "conversation": True,
            "description": "Answer the customer's question about their order.",
            "inputs": ["question"],
            "outputs": outputs,
            "state": {
                "question": {"type": "string", "description": "What the customer wrote."},
                "answer": {"type": answer_type, "description": "What they are told."},
                "mood": {"type": "object", "description": "How the customer sounds."},
                "history": {"type": "list", "reducer": "append"},
            },
            "start": "answer",
            "nodes": [
                {"id": "answer", "type": "llm", "output": "answer",
                 "prompt": "So far: {{history}}\n\nNow: {{question}}"},
            ],
            "edges": [{"from": "answer", "to": "END"}],
        },
        indent=2,
    )  # fmt: skip


def test_an_lgflow_conversation_imports_with_its_history_and_its_answer() -> None:
    translation = translate_lgflow(json.loads(_lgflow(["answer", "mood"])))
    data = translation.data
    assert (data["conversation"], data["reply"]) == (True, "answer")
    assert "history" not in data["state"]  # built in here, as in LGFlow
    assert data["nodes"][0]["prompt"] == "So far: {{history}}\n\nNow: {{question}}"
    said = {c.path: c.now for c in translation.changes}
    assert said[("conversation",)] == "reply: answer (the answer each message gets)"
    assert said[("state", "history")].startswith("left out: a conversational flow has it")
    flow = load_flow(_lgflow(["answer", "mood"]), "f.json")
    assert flow.spec.reply == "answer"
    # Two outputs, neither a string: which answers is the author's to say.
    report = check_flow(_lgflow(["answer", "mood"], "object"), "f.json")
    assert [(p.rule, p.line) for p in report.errors] == [("CONVERSATION_NO_REPLY", 3)]
