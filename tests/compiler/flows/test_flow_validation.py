"""Flow validation (docs/flows.md, "Rules"): one invalid flow per rule, each
refused with the rule's code at the line and column written by hand here."""

from __future__ import annotations

import pytest

from compiler import FLOW_RULES, FlowError, FlowMilestone, FlowTool, check_flow, load_flow

#: A valid flow; every case below breaks it in one place.
BASE = """\
version: "1"
description: Classify a request, look it up, and answer.
inputs: [question]
outputs: [answer, summaries]
state:
  question: {type: string}
  kind: {type: object}
  answer: {type: string}
  found: {type: list, default: []}
  item: {type: object}
  summaries: {type: list, reducer: append, default: []}
tools: [lookup]
start: classify
nodes:
  - id: classify
    type: llm
    prompt: "Classify: {{question}}"
    output: kind
    schema: {type: object, properties: {label: {type: string}}, required: [label]}
  - {id: fetch, type: tool, tool: lookup, args: {q: "{{question}}"}, output: found}
  - {id: spread, type: fanout, over: found, to: summarise, as: item}
  - {id: summarise, type: handler, handler: summarise, reads: [item], output: summaries, description: Sum one document up.}
  - {id: reply, type: llm, prompt: "Answer {{question}} from {{summaries}}", output: answer}
edges:
  - from: classify
    type: conditional
    when: kind.label
    routes: {search: fetch, else: reply}
  - from: fetch
    type: conditional
    when: found
    routes: {nonempty: spread, else: reply}
  - {from: summarise, to: reply}
  - {from: reply, to: END}
"""  # noqa: E501 (a node on one line: its columns are the test)

NO_STATE = """\
version: "1"
start: a
nodes:
  - {id: a, type: handler, handler: h}
edges:
  - {from: a, type: conditional, router: r, routes: {again: a, done: END}, limits: {again: {max: 2, then: done}}}
"""  # noqa: E501 (one line of YAML: its columns are the test)

LOOKUP = {"lookup": FlowTool("lookup", writes=False, fact="found")}

# (rule, text, the line and column the rule names, keyword arguments of check_flow)
CASES: list[tuple[str, str, int, int, dict[str, object]]] = [
    (
        "INVALID_SOURCE",
        BASE.replace("  kind: {type: object}\n", "  kind: {type: object}\n  kind: {type: list}\n"),
        8,
        3,
        {},
    ),
    ("INVALID_FIELD", BASE.replace("description:", "descripton:"), 2, 13, {}),
    ("BAD_VERSION", BASE.replace('version: "1"', 'version: "2"'), 1, 10, {}),
    (
        "MEANS_UNKNOWN_ROUTE",
        BASE.replace(
            "routes: {search: fetch, else: reply}",
            "routes: {search: fetch, else: reply}\n    means: {serch: a search is asked for}",
        ),
        29,
        20,
        {},
    ),
    # An LGFlow file (tests/compiler/flows/test_lgflow.py has the translation).
    ("LGFLOW_FEATURE_VERSION", 'version: "0.1"\nstart: a\nstate: {}\nnodes: []\n', 3, 8, {}),
    (
        "LGFLOW_NOT_TRANSLATED",
        'version: "0.2"\nstart: a\nstate: {n: {reducer: add}}\nnodes: []\n',
        3,
        22,
        {},
    ),
    (
        "RESERVED_NAME",
        BASE.replace(
            "  item: {type: object}\n", "  item: {type: object}\n  last_error: {type: object}\n"
        ),
        11,
        15,
        {},
    ),
    ("DUPLICATE_NODE", BASE.replace("{id: reply,", "{id: fetch,"), 23, 10, {}),
    ("UNKNOWN_NODE", BASE.replace("start: classify", "start: classfy"), 13, 8, {}),
    ("UNKNOWN_CHANNEL", BASE.replace("output: kind", "output: knd"), 18, 13, {}),
    (
        "TEMPLATE_UNKNOWN_CHANNEL",
        BASE.replace("Classify: {{question}}", "Classify: {{questio}}"),
        17,
        24,
        {},
    ),
    ("BUILTIN_CHANNEL_WRITTEN", BASE.replace("output: kind", "output: last_error"), 18, 13, {}),
    (
        "SCHEMA_OUTSIDE_SUBSET",
        BASE.replace("{label: {type: string}}", "{label: {type: text}}"),
        19,
        55,
        {},
    ),
    (
        "SCHEMA_CHANNEL_MISMATCH",
        BASE.replace("kind: {type: object}", "kind: {type: string}"),
        19,
        20,
        {},
    ),
    (
        "FANOUT_OVER_NOT_LIST",
        BASE.replace("found: {type: list, default: []}", "found: {type: object, default: {}}"),
        21,
        38,
        {},
    ),
    ("FANOUT_BAD_TARGET", BASE.replace("to: summarise,", "to: spread,"), 21, 49, {}),
    (
        "FANOUT_NEEDS_REDUCER",
        BASE.replace("summaries: {type: list, reducer: append,", "summaries: {type: list,"),
        22,
        79,
        {},
    ),
    (
        "IMPLICIT_WAY_OUT",
        BASE.replace(
            "  - {from: summarise, to: reply}\n",
            "  - {from: spread, to: reply}\n  - {from: summarise, to: reply}\n",
        ),
        33,
        12,
        {},
    ),
    (
        "TWO_WAYS_OUT",
        BASE.replace(
            "  - {from: reply, to: END}\n",
            "  - {from: reply, to: END}\n  - {from: reply, to: fetch}\n",
        ),
        35,
        12,
        {},
    ),
    (
        "CONDITIONAL_ROUTER",
        BASE.replace("    when: kind.label\n", "    when: kind.label\n    router: pick\n"),
        25,
        5,
        {},
    ),
    ("ROUTE_TO_NOWHERE", BASE.replace("{search: fetch,", "{search: fech,"), 28, 22, {}),
    ("LIMIT_WITHOUT_STATE", NO_STATE, 6, 84, {}),
    (
        "LIMIT_UNKNOWN_ROUTE",
        BASE.replace(
            "    routes: {search: fetch, else: reply}\n",
            "    routes: {search: fetch, else: reply}\n"
            "    limits: {search: {max: 2, then: serch}}\n",
        ),
        29,
        37,
        {},
    ),
    (
        "UNREACHABLE_NODE",
        BASE.replace("edges:\n", "  - {id: orphan, type: handler, handler: h}\nedges:\n"),
        24,
        10,
        {},
    ),
    ("DEAD_END", BASE.replace("  - {from: summarise, to: reply}\n", ""), 22, 10, {}),
    (
        "REPLY_NOT_AN_OUTPUT",
        BASE.replace("outputs: [answer, summaries]", "outputs: [answer, summaries]\nreply: kind"),
        5,
        8,
        {},
    ),
    (
        "CONVERSATION_NO_REPLY",
        BASE.replace(
            "outputs: [answer, summaries]", "outputs: [answer, summaries]\nconversation: true"
        ),
        5,
        15,
        {},
    ),
    ("TOOL_OUTSIDE_CONTRACT", BASE.replace("tools: [lookup]", "tools: [search]"), 20, 35, {}),
    ("UNKNOWN_TOOL", BASE, 12, 9, {"tools": {}}),
    ("UNKNOWN_HANDLER", BASE, 22, 45, {"handlers": {"other"}}),
    (
        "UNKNOWN_ROUTER",
        BASE.replace("    when: found\n", "    router: pick\n"),
        31,
        13,
        {"routers": set()},
    ),
    (
        "FILE_CHANNEL",
        BASE.replace("  question: {type: string}", "  question: {type: string, accept: image/*}"),
        6,
        36,
        {},
    ),
    (
        "TOOL_NOT_IN_INTEGRATIONS",
        BASE,
        12,
        9,
        {"tools": LOOKUP, "milestone": FlowMilestone("shop", "answer", frozenset(), frozenset())},
    ),
]


def test_the_base_flow_is_valid_and_ready() -> None:
    report = check_flow(BASE, "base.yaml", tools=LOOKUP, handlers={"summarise"})
    assert report.problems == ()
    assert report.flow is not None
    assert report.flow.name == "base"
    assert report.flow.start == "classify"
    assert list(report.flow.nodes) == ["classify", "fetch", "spread", "summarise", "reply"]
    assert set(report.flow.edges) == {"classify", "fetch", "summarise", "reply"}


@pytest.mark.parametrize(
    ("rule", "text", "line", "column", "context"), CASES, ids=[c[0] for c in CASES]
)
def test_each_rule_is_refused_with_its_position(
    rule: str, text: str, line: int, column: int, context: dict[str, object]
) -> None:
    report = check_flow(text, "flows/f.yaml", **context)  # type: ignore[arg-type]
    assert report.flow is None
    found = [(p.rule, p.line, p.column) for p in report.errors]
    assert (rule, line, column) in found, found
    assert all(p.source == "flows/f.yaml" for p in report.errors)


def test_every_rule_has_a_case() -> None:
    # FLOW_NOT_FOUND is the shell's (a file that is not there) and APPROVAL_BYPASS the
    # playbook's (its milestones and flows together): tests/stream/cli/test_cli_flows.py.
    assert {c[0] for c in CASES} == set(FLOW_RULES) - {"FLOW_NOT_FOUND", "APPROVAL_BYPASS"}


def test_a_reply_names_one_of_the_outputs() -> None:
    with_reply = BASE.replace(
        "outputs: [answer, summaries]", "outputs: [answer, summaries]\nreply: answer"
    )
    flow = load_flow(with_reply, "f.yaml", tools=LOOKUP, handlers={"summarise"})
    assert flow.spec.reply == "answer"
    unknown = check_flow(with_reply.replace("reply: answer", "reply: anwser"), "f.yaml")
    assert [str(p) for p in unknown.errors] == [
        "f.yaml:5:8: error UNKNOWN_CHANNEL: reply 'anwser' is not a declared channel"
    ]
    outside = check_flow(with_reply.replace("reply: answer", "reply: kind"), "f.yaml")
    assert [str(p) for p in outside.errors] == [
        "f.yaml:5:8: error REPLY_NOT_AN_OUTPUT: reply 'kind' is not one of the flow's outputs "
        "(answer, summaries): add it to outputs"
    ]


def test_load_flow_raises_with_every_problem_in_file_order() -> None:
    text = BASE.replace("start: classify", "start: classfy").replace("output: kind", "output: k")
    with pytest.raises(FlowError) as caught:
        load_flow(text, "flows/f.yaml")
    assert str(caught.value).splitlines() == [
        "flows/f.yaml:13:8: error UNKNOWN_NODE: start 'classfy' is not a node",
        "flows/f.yaml:18:13: error UNKNOWN_CHANNEL: output 'k' is not a declared channel",
    ]


def test_a_version_written_as_a_number_is_refused_by_name() -> None:
    report = check_flow(BASE.replace('version: "1"', "version: 1"), "f.yaml")
    assert [str(p) for p in report.errors] == [
        "f.yaml:1:10: error BAD_VERSION: version 1 is not one this build reads "
        '(say version: "1", quoted)'
    ]


def test_an_unknown_field_gets_did_you_mean() -> None:
    report = check_flow(BASE.replace("output: kind", "outptu: kind"), "f.yaml")
    messages = [p.message for p in report.errors]
    assert "nodes.0.outptu: unknown field 'outptu' (did you mean 'output'?)" in messages


def test_the_issue_example_validates_given_its_functions() -> None:
    report = check_flow(
        PINNED, "flows/pinned.yaml", handlers={"review_note"}, routers={"route_decision"}
    )
    assert report.errors == ()
    assert report.flow is not None
    assert report.flow.version == "1"
    # The same text twice: the same digest; another text: another.
    again = load_flow(PINNED, "flows/pinned.yaml")
    assert again.digest == report.flow.digest
    assert load_flow(PINNED.replace("max: 3", "max: 4"), "x.yaml").digest != again.digest


PINNED = """\
version: "1"
description: Look the order up, then ask the customer what to do about it.
inputs: [order_id]
outputs: [decision]
state:
  order_id: {type: string, description: The order the customer wrote about.}
  order:    {type: object, description: The order as the shop returns it.}
  decision: {type: object, description: What the customer wants done.}
  notes:    {type: list, reducer: append, default: [], description: Findings so far.}
tools: [get_order]
start: lookup
nodes:
  - {id: lookup, type: tool, tool: get_order, args: {id: "{{order_id}}"}, output: order}
  - id: decide
    type: llm
    prompt: "Order: {{order}}. What should happen next?"
    output: decision
    schema: {type: object, properties: {action: {type: string, enum: [refund, resend, nothing]}}, required: [action]}
    retry: {max_attempts: 2}
    onError: END
  - {id: confirm, type: ask, ask: "Shall I go ahead with {{decision}}?", output: notes}
  - {id: spread, type: fanout, over: notes, to: review, as: order}
  - {id: review, type: handler, handler: review_note}
edges:
  - {from: lookup, to: decide}
  - from: decide
    type: conditional
    router: route_decision          # a registered function returning a route name
    routes: {act: confirm, done: END}
    limits: {act: {max: 3, then: done}}
  - {from: confirm, to: spread}
  - {from: review, to: END}
"""  # noqa: E501 (the issue's text as written)


GUARDED = """\
version: "1"
state:
  order_id: {type: string, default: A-1}
  order: {type: object}
  calls: {type: list, default: []}
  done: {type: list, reducer: append, default: []}
tools: [get_order, refund_order, note_order]
start: lookup
nodes:
  - {id: lookup, type: tool, tool: get_order, args: {id: "{{order_id}}"}, output: order}
  - {id: ok, type: approval, before: pay, show: [order], onReject: END}
  - {id: pay, type: tool, tool: refund_order, args: {id: "{{order_id}}"}, output: order}
  - {id: more, type: tools, calls: calls, output: done}
edges:
  - {from: lookup, to: ok}
  - {from: pay, to: more}
  - {from: more, to: END}
"""


def test_the_tools_a_flow_guards_are_those_an_approval_stands_before() -> None:
    # An approval before a tool node guards its tool; the tools node after it is
    # not guarded, and get_order before it neither.
    assert load_flow(GUARDED, "flows/g.yaml").guarded == {"refund_order"}
    # An approval before a tools node guards its whole contract.
    before_more = (
        GUARDED.replace("before: pay", "before: more")
        .replace("- {from: lookup, to: ok}", "- {from: lookup, to: pay}")
        .replace("- {from: pay, to: more}", "- {from: pay, to: ok}")
    )
    assert load_flow(before_more, "flows/g.yaml").guarded == {
        "get_order", "refund_order", "note_order"
    }  # fmt: skip
    assert load_flow(PINNED, "flows/pinned.yaml").guarded == frozenset()
