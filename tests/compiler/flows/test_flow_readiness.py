"""Readiness warnings (docs/flows.md, "Readiness warnings"): each shape warns
by its code, where written by hand here; the fixed shape does not warn; a
warning never refuses the flow."""

from __future__ import annotations

import pytest

from compiler import FLOW_WARNINGS, FlowMilestone, FlowTool, FlowWorld, check_flow

TOOLS = {
    "start_trial": FlowTool("start_trial", writes=True, fact="trial"),
    "get_plan": FlowTool("get_plan", writes=False, fact="plan_known"),
}
TRIAL = FlowMilestone("onboarding", "trial", frozenset(TOOLS), frozenset({"trial"}))

WRITE = """\
version: "1"
inputs: [plan]
outputs: [trial]
state:
  plan: {type: string}
  trial: {type: object}
tools: [start_trial]
start: begin
nodes:
  - {id: begin, type: tool, tool: start_trial, args: {plan: "{{plan}}"}, output: trial}
edges:
  - {from: begin, to: END}
"""
WRITE_APPROVED = WRITE.replace(
    "start: begin\nnodes:\n",
    "start: ok\nnodes:\n"
    '  - {id: ok, type: approval, before: begin, ask: "Start {{plan}}?", show: [plan],'
    " onReject: END}\n",
)

TALK = """\
version: "1"
outputs: [answer]
state:
  topic: {type: string, default: ""}
  answer: {type: string}
start: ask
nodes:
  - {id: ask, type: ask, ask: "What about?", output: topic}
  - {id: answer, type: llm, prompt: "Tell me about {{topic}}", output: answer}
edges:
  - {from: ask, to: answer}
  - {from: answer, to: END}
"""
TALK_READ = TALK.replace("Tell me about {{topic}}", "{{conversation}} Tell me about {{topic}}")

SPREAD = """\
version: "1"
inputs: [items]
outputs: [notes]
state:
  items: {type: list}
  item: {type: string}
  notes: {type: list, reducer: append, default: []}
start: spread
nodes:
  - {id: spread, type: fanout, over: items, to: note, as: item}
  - {id: note, type: llm, prompt: "Note on {{item}}", output: notes}
edges:
  - {from: note, to: END}
"""
SPREAD_GUARDED = SPREAD.replace(
    "start: spread\nnodes:\n",
    "start: gate\nnodes:\n  - {id: gate, type: handler, handler: pass_on, reads: [items],"
    " description: Pass the items on.}\n",
).replace(
    "edges:\n",
    "edges:\n  - {from: gate, type: conditional, when: items,"
    " routes: {nonempty: spread, empty: END}}\n",
)

COUNT = """\
version: "1"
outputs: [total]
state:
  total: {type: number}
start: add
nodes:
  - {id: add, type: handler, handler: add_up, reads: [total], output: total, description: Add one to it.}
edges:
  - {from: add, to: END}
"""  # noqa: E501 (a node on one line: its columns are the test)

UNFILLED = """\
version: "1"
outputs: [answer]
state:
  topic: {type: string}
  answer: {type: string}
start: a
nodes:
  - {id: a, type: llm, prompt: "Tell me about {{topic}}", output: answer}
edges:
  - {from: a, to: END}
"""

UNREAD = """\
version: "1"
inputs: [topic]
outputs: [answer]
state:
  topic: {type: string}
  answer: {type: string}
  scratch: {type: string}
start: a
nodes:
  - {id: a, type: llm, prompt: "Tell me about {{topic}}", output: answer}
  - {id: b, type: llm, prompt: "And {{answer}}?", output: scratch}
edges:
  - {from: a, to: b}
  - {from: b, to: END}
"""

SHOWN = """\
version: "1"
inputs: [plan]
outputs: [trial]
state:
  plan: {type: string}
  price: {type: number}
  trial: {type: object}
tools: [start_trial]
start: ok
nodes:
  - {id: ok, type: approval, before: begin, show: [plan, price], onReject: END}
  - {id: begin, type: tool, tool: start_trial, args: {plan: "{{plan}}"}, output: trial}
edges:
  - {from: begin, to: END}
"""

CLAIM = """\
version: "1"
inputs: [plan]
outputs: [known]
state:
  plan: {type: string}
  known: {type: object}
tools: [get_plan]
start: look
nodes:
  - {id: look, type: tool, tool: get_plan, args: {plan: "{{plan}}"}, output: known}
edges:
  - {from: look, to: END}
"""

#: A flow written for LGFlow (docs/flows.md, "Coming from LGFlow").
LGFLOW = """\
version: "0.7"
start: a
nodes:
  - {id: a, handler: h, description: Do what the handler does.}
edges:
  - {from: a, to: END}
"""

#: A flow that requires things (docs/flows.md, "What a flow requires"), checked
#: against a world given by hand: what is set, installed, and the catalog's servers.
REQUIRES = """\
version: "1"
outputs: [now]
requires:
  env: [CLOCK_TZ]
  packages: {mcp-server-time: ">=2025.1"}
  mcp:
    clock: {package: mcp-server-time}
state:
  now: {type: object}
tools: [get_time]
start: ask
nodes:
  - {id: ask, type: tool, tool: get_time, args: {}, output: now}
edges:
  - {from: ask, to: END}
"""
CLOCK = {"get_time": FlowTool("get_time", writes=False, server="clock")}
EVERYTHING = FlowWorld(frozenset({"CLOCK_TZ"}), frozenset({"mcp-server-time"}), {"clock": True})
NOTHING = FlowWorld(frozenset(), frozenset(), {"clock": True})

#: What a person is asked, and what a model fills (LGFlow's readiness too).
PERSON = """\
version: "1"
description: Ask the customer about the order, and read what they want.
inputs: [order, note]
outputs: [wish]
state:
  order: {type: object, description: The order as the shop returns it.}
  note: {type: string, description: What the customer wrote first.}
  wish: {type: object, description: What the customer wants done about it.}
start: ask
nodes:
  - {id: ask, type: ask, ask: "About {{order.id}}: what now?", output: note}
  - {id: read, type: llm, prompt: "{{conversation}} What do they want? {{note}}", output: wish}
edges:
  - {from: ask, to: read}
  - {from: read, to: END}
"""
PERSON_FIXED = (
    PERSON.replace("output: note}", "output: answer}")
    .replace("{{note}}", "{{note}} {{answer}}")
    .replace(
        "  wish:",
        "  answer: {type: string, description: The customer's answer to the question.}\n  wish:",
    )
    .replace("output: wish}", "output: wish, schema: {type: object}}")
)

#: Code and routes described, or not (a router's routes need a sentence each).
DESCRIBED = """\
version: "1"
description: Route a ticket by what a registered function makes of it.
inputs: [ticket]
outputs: [ticket]
state:
  ticket: {type: string, description: The ticket.}
start: clean
nodes:
  - {id: clean, type: handler, handler: clean, reads: [ticket], output: ticket}
edges:
  - {from: clean, type: conditional, router: pick, reads: [ticket], routes: {done: END}}
"""
DESCRIBED_FIXED = (
    DESCRIBED.replace("description: The ticket.}", "description: The ticket as it was sent.}")
    .replace("output: ticket}", "output: ticket, description: Strip the quoted mail away.}")
    .replace("routes: {done: END}}", "routes: {done: END}, means: {done: the ticket is clean now}}")
)

# (name, text, expected warnings as (code, line, column), check_flow keywords)
CASES: list[tuple[str, str, list[tuple[str, int, int]], dict[str, object]]] = [
    ("write", WRITE, [("WRITE_WITHOUT_APPROVAL", 10, 10)], {"tools": TOOLS}),
    ("write approved", WRITE_APPROVED, [], {"tools": TOOLS}),
    ("write, no catalog: unknown, no warning", WRITE, [], {}),
    ("talk", TALK, [("CONVERSATION_UNREAD", 9, 10)], {}),
    ("talk, reads the conversation", TALK_READ, [], {}),
    ("spread", SPREAD, [("FANOUT_MAY_SILENCE_THE_TAIL", 10, 10)], {}),
    ("spread, guarded", SPREAD_GUARDED, [], {}),
    ("count", COUNT, [("CHANNEL_FORGETS_BETWEEN_TURNS", 7, 10)], {}),
    (
        "count, remembered",
        COUNT.replace("{type: number}", "{type: number, remembers: true}"),
        [],
        {},
    ),
    (
        "count, with a default",
        COUNT.replace("{type: number}", "{type: number, default: 0}"),
        [],
        {},
    ),
    ("unfilled", UNFILLED, [("CHANNEL_NEVER_WRITTEN", 4, 10)], {}),
    ("unread", UNREAD, [("CHANNEL_NEVER_READ", 7, 12)], {}),
    ("shown", SHOWN, [("VIEW_NEVER_SHOWN", 11, 58)], {"tools": TOOLS}),
    ("claim only", CLAIM, [("CLAIM_ONLY_PATH", 7, 8)], {"tools": TOOLS, "milestone": TRIAL}),
    ("the tool records the fact", WRITE_APPROVED, [], {"tools": TOOLS, "milestone": TRIAL}),
    ("an LGFlow file", LGFLOW, [("LGFLOW_FILE", 1, 10)], {}),
    (
        "an ask over an input, a model filling an object",
        PERSON,
        [("ASK_OVERWRITES_INPUT", 11, 72), ("SCHEMA_MISSING", 12, 10)],
        {},
    ),
    (
        "a whole object in a question",
        PERSON_FIXED.replace("{{order.id}}", "{{order}}"),
        [("VIEW_SHOWS_RAW_DATA", 12, 31)],
        {},
    ),
    ("asked into its own channel, the shape said", PERSON_FIXED, [], {}),
    (
        "nothing described",
        DESCRIBED,
        [
            ("DESCRIPTION_THIN", 6, 39),
            ("DESCRIPTION_MISSING", 9, 10),
            ("DESCRIPTION_MISSING", 11, 46),
        ],
        {},
    ),
    ("described", DESCRIBED_FIXED, [], {}),
    ("requires, all there", REQUIRES, [], {"tools": CLOCK, "world": EVERYTHING}),
    ("requires, not checked without a world", REQUIRES, [], {"tools": CLOCK}),
    (
        "requires, nothing here",
        REQUIRES,
        [("ENV_NOT_SET", 4, 9), ("PACKAGE_MISSING", 5, 31), ("MCP_PACKAGE_MISSING", 7, 22)],
        {"tools": CLOCK, "world": NOTHING},
    ),
    (
        "requires a server the catalog lacks",
        REQUIRES,
        [("SERVICE_NOT_DECLARED", 7, 12)],
        {"tools": CLOCK, "world": FlowWorld(servers={})},
    ),
    (
        "a server started by a command, no package named",
        REQUIRES.replace("{package: mcp-server-time}", "{}"),
        [("MCP_PACKAGE_MISSING", 7, 12)],
        {"tools": CLOCK, "world": FlowWorld(servers={"clock": True})},
    ),
    (
        "an MCP tool of a server requires does not name",
        REQUIRES,
        [("SERVICE_NOT_DECLARED", 13, 10)],
        {
            "tools": {"get_time": FlowTool("get_time", writes=False, server="tz")},
            "world": FlowWorld(servers={"clock": False, "tz": False}),
        },
    ),
]


@pytest.mark.parametrize(("name", "text", "expected", "context"), CASES, ids=[c[0] for c in CASES])
def test_readiness_warnings(
    name: str, text: str, expected: list[tuple[str, int, int]], context: dict[str, object]
) -> None:
    report = check_flow(text, "flows/f.yaml", **context)  # type: ignore[arg-type]
    assert report.errors == (), [str(p) for p in report.errors]
    assert report.flow is not None  # a warning never refuses
    assert [(p.rule, p.line, p.column) for p in report.warnings] == expected


def test_every_warning_has_a_case() -> None:
    assert {w for c in CASES for w, _, _ in c[2]} == set(FLOW_WARNINGS)


def test_a_warning_reads_as_one_line_with_its_code() -> None:
    (warning,) = check_flow(COUNT, "flows/count.yaml").warnings
    assert str(warning) == (
        "flows/count.yaml:7:10: warning CHANNEL_FORGETS_BETWEEN_TURNS: add reads 'total', "
        "and a path reaches it before anything in the run writes it; a run starts from "
        "defaults and inputs, so without remembers (or a default) it is empty there"
    )


def test_a_write_reachable_around_its_approval_warns() -> None:
    # The approval guards one way in; the other (from look, straight to begin) does not.
    text = (
        WRITE_APPROVED.replace("start: ok", "start: look")
        .replace(
            "nodes:\n",
            "nodes:\n  - {id: look, type: handler, handler: h, reads: [plan],"
            " description: Look at the plan first.}\n",
        )
        .replace(
            "edges:\n",
            "edges:\n  - {from: look, type: conditional, router: r,"
            " routes: {ask: ok, go: begin},"
            " means: {ask: the plan needs a person's yes, go: the plan is a small one}}\n",
        )
    )
    report = check_flow(text, "f.yaml", tools=TOOLS)
    assert [p.rule for p in report.warnings] == ["WRITE_WITHOUT_APPROVAL"]
