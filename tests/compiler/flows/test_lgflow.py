"""LGFlow's files (docs/flows.md, "Coming from LGFlow"): every version from 0.1
to 0.17 reads; a feature used below its version is refused by name; each shape
LGFlow writes otherwise is translated, said at its line, and the translation is
a flow of this language that checks as it is."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler import check_flow, load_flow
from compiler.flows.lgflow import (
    FEATURE_VERSIONS,
    LGFLOW_VERSIONS,
    dump_flow,
    features_used,
    translate_lgflow,
)

#: A v0.1 flow: untyped handler nodes, a router, and the schema in code.
V01 = {
    "version": "0.1",
    "start": "classify",
    "nodes": [
        {"id": "classify", "handler": "classifyRequest"},
        {"id": "billing", "handler": "solveBilling"},
        {"id": "general", "handler": "solveGeneral"},
    ],
    "edges": [
        {
            "from": "classify",
            "type": "conditional",
            "router": "routeRequest",
            "routes": {"billing": "billing", "general": "general"},
        },
        {"from": "billing", "to": "END"},
        {"from": "general", "to": "END"},
    ],
}

#: The seed's "Describing a flow" example (0.7), with the nodes it elides.
RESEARCH = {
    "version": "0.7",
    "description": "Research a subject on the web and show the user a short summary of it.",
    "inputs": ["subject"],
    "outputs": ["summary"],
    "tools": [
        {
            "name": "web_search",
            "description": "Search the web and return title, url and snippet for each result.",
        }
    ],
    "state": {
        "subject": {"type": "string", "description": "What the user wants to know about."},
        "results": {"type": "list", "description": "Search results, each { title, url, snippet }."},
        "summary": {"type": "string", "description": "Five sentences at most, with sources."},
    },
    "start": "search",
    "nodes": [
        {
            "id": "search",
            "type": "tool",
            "tool": "web_search",
            "args": {"q": "{{subject}}"},
            "output": "results",
        },
        {"id": "check", "handler": "checkSources", "description": "Drop results without a url."},
        {
            "id": "summarize",
            "type": "llm",
            "prompt": "Summarise {{results}}",
            "output": "summary",
            "retry": {"maxAttempts": 2},
            "approval": {"ask": "Summarise these?", "show": ["results"]},
        },
    ],
    "edges": [
        {"from": "search", "to": "check"},
        {
            "from": "check",
            "type": "conditional",
            "router": "routeSources",
            "routes": {"enough": "summarize", "none": "END"},
            "when": {
                "enough": "at least one result survived the check",
                "none": "nothing usable was found",
            },
        },
        {"from": "summarize", "to": "END"},
    ],
}


def _text(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2)


@pytest.mark.parametrize("version", LGFLOW_VERSIONS)
def test_every_lgflow_version_reads(version: str) -> None:
    flow = load_flow(_text({**V01, "version": version}), "flows/support.json")
    assert flow.version == "1"
    assert [n.type for n in flow.spec.nodes] == ["handler", "handler", "handler"]
    assert flow.edges["classify"].router == "routeRequest"  # type: ignore[union-attr]


@pytest.mark.parametrize("version", ["0.0", "0.18", "2.0", "1.0"])
def test_other_versions_are_still_refused(version: str) -> None:
    report = check_flow(_text({**V01, "version": version}), "f.json")
    assert [p.rule for p in report.errors] == ["BAD_VERSION"]


@settings(deadline=None)
@given(st.integers(min_value=1, max_value=17))
def test_a_file_reads_exactly_from_the_version_of_its_newest_feature(n: int) -> None:
    report = check_flow(_text({**RESEARCH, "version": f"0.{n}"}), "f.json")
    newest = max(int(FEATURE_VERSIONS[f.name].split(".")[1]) for f in features_used(RESEARCH))
    assert newest == 7
    assert (report.flow is not None) == (n >= newest)
    refused = {p.rule for p in report.errors}
    assert refused == (set() if n >= newest else {"LGFLOW_FEATURE_VERSION"})


def test_a_feature_below_its_version_is_refused_by_name_where_written() -> None:
    text = 'version: "0.1"\nstart: a\nstate:\n  n: {default: 0}\nnodes:\n  - {id: a, handler: h}\n'
    (problem,) = check_flow(text, "flows/f.yaml").problems
    assert str(problem) == (
        "flows/f.yaml:4:3: error LGFLOW_FEATURE_VERSION: "
        'declaring state requires version "0.2" or later (the file says "0.1")'
    )
    schema = {**RESEARCH, "version": "0.14"}
    schema["nodes"] = [
        *RESEARCH["nodes"][:2],
        {**RESEARCH["nodes"][2], "schema": {"type": "string"}},
    ]  # type: ignore[index]
    messages = [p.message for p in check_flow(_text(schema), "f.json").errors]
    assert messages == [
        'structured output (schema) requires version "0.15" or later (the file says "0.14")'
    ]


def test_the_feature_table_covers_what_the_reader_looks_for() -> None:
    assert set(LGFLOW_VERSIONS) == {f"0.{n}" for n in range(1, 18)}
    for version in FEATURE_VERSIONS.values():
        assert version in LGFLOW_VERSIONS


def test_each_shape_is_translated_and_said() -> None:
    t = translate_lgflow(RESEARCH)
    assert t.refusals == ()
    data = t.data
    assert data["version"] == "1"
    assert data["tools"] == ["web_search"]
    assert [n["id"] for n in data["nodes"]] == [
        "search",
        "check",
        "summarize_approval",
        "summarize",
    ]
    assert data["nodes"][1] == {
        "id": "check",
        "type": "handler",
        "handler": "checkSources",
        "description": "Drop results without a url.",
    }
    assert data["nodes"][2] == {
        "id": "summarize_approval",
        "type": "approval",
        "before": "summarize",
        "ask": "Summarise these?",
        "show": ["results"],
        "onReject": "END",
    }
    assert data["nodes"][3]["retry"] == {"max_attempts": 2}
    assert "approval" not in data["nodes"][3]
    check = data["edges"][1]
    assert check["routes"] == {"enough": "summarize_approval", "none": "END"}
    assert check["means"] == RESEARCH["edges"][1]["when"]  # type: ignore[index]
    assert "when" not in check
    said = [(c.path, c.was.split(":")[0]) for c in t.changes]
    assert said == [
        (("version",), 'version "0.7" (LGFlow)'),
        (("tools", 0), "tool object web_search with its description"),
        (("nodes", 1), "node check"),
        (("nodes", 2, "approval"), "node summarize"),
        (("nodes", 2, "retry"), "node summarize"),
        (("edges", 1, "when"), "edge from check"),
    ]
    assert "tools.web_search.description" in t.changes[1].now


def test_the_translation_checks_as_a_flow_of_ours() -> None:
    t = translate_lgflow(RESEARCH)
    text = dump_flow(t.data)
    report = check_flow(text, "flows/research.yaml")
    assert report.errors == ()
    assert report.flow is not None
    # Read directly, the LGFlow file is the same flow (and says it is LGFlow's).
    direct = check_flow(_text(RESEARCH), "flows/research.json")
    assert direct.flow is not None
    assert direct.flow.spec == report.flow.spec
    assert [p.rule for p in direct.warnings if p.rule == "LGFLOW_FILE"] == ["LGFLOW_FILE"]


def test_a_problem_of_the_translation_is_at_its_line_in_the_lgflow_file() -> None:
    text = _text({**RESEARCH, "start": "serch"})
    (problem,) = check_flow(text, "f.json").errors
    assert problem.rule == "UNKNOWN_NODE"
    assert text.splitlines()[problem.line - 1].strip() == '"start": "serch",'  # type: ignore[operator]
    # A route into the node with an approval: the route now names the approval node,
    # and a mistake after it is still at its own line.
    broken = json.loads(_text(RESEARCH))
    broken["edges"][2]["to"] = "ned"
    text = _text(broken)
    (problem,) = check_flow(text, "f.json").errors
    assert problem.rule == "ROUTE_TO_NOWHERE"
    assert text.splitlines()[problem.line - 1].strip() == '"to": "ned"'  # type: ignore[operator]


def test_two_plain_edges_out_of_one_node_run_one_after_the_other() -> None:
    data = {
        "version": "0.3",
        "start": "gather",
        "state": {"notes": {"reducer": "append", "default": []}, "q": {}},
        "nodes": [
            {"id": "gather", "handler": "gather"},
            {"id": "legal", "type": "llm", "prompt": "Legal view of {{q}}", "output": "notes"},
            {"id": "tech", "type": "llm", "prompt": "Tech view of {{q}}", "output": "notes"},
            {"id": "report", "handler": "report"},
        ],
        "edges": [
            {"from": "gather", "to": "legal"},
            {"from": "gather", "to": "tech"},
            {"from": "legal", "to": "report"},
            {"from": "tech", "to": "report"},
            {"from": "report", "to": "END"},
        ],
    }
    t = translate_lgflow(data)
    assert t.refusals == ()
    assert [(e["from"], e["to"]) for e in t.data["edges"]] == [
        ("gather", "legal"),
        ("legal", "tech"),
        ("tech", "report"),
        ("report", "END"),
    ]
    said = [c for c in t.changes if c.path == ("edges", 1)]
    assert said[0].now.startswith("legal then tech, one after the other, then report")
    assert t.data["state"]["notes"]["type"] == "list"  # guessed from append, and said
    assert t.data["state"]["q"]["type"] == "string"
    flow = load_flow(_text(data), "f.json", handlers={"gather", "report"})
    assert flow.edges["legal"].to == "tech"  # type: ignore[union-attr]
    # A branch that is no chain of plain edges has no translation.
    data["edges"][3] = {
        "from": "tech",
        "type": "conditional",
        "router": "again",
        "routes": {"again": "tech", "done": "report"},
    }
    refused = translate_lgflow(data).refusals
    assert [(r.rule, r.path) for r in refused] == [("LGFLOW_NOT_TRANSLATED", ("edges", 1))]


def test_a_conversation_keeps_its_history_and_answers_with_its_output() -> None:
    data = {
        "version": "0.9",
        "conversation": True,
        "start": "decide",
        "state": {"plan": {"type": "string"}, "question": {"type": "string"}},
        "inputs": ["question"],
        "outputs": ["plan"],
        "nodes": [
            {
                "id": "decide",
                "type": "llm",
                "prompt": "So far: {{history}}\n\nNow: {{question}}",
                "output": "plan",
            }
        ],
        "edges": [{"from": "decide", "to": "END"}],
    }
    flow = load_flow(_text(data), "f.json")
    # {{history}} is built in here too (docs/flows.md, "Conversational flows")
    assert flow.nodes["decide"].prompt == "So far: {{history}}\n\nNow: {{question}}"  # type: ignore[union-attr]
    assert (flow.spec.conversation, flow.spec.reply) == (True, "plan")


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=3), min_size=2, max_size=4))
def test_branches_side_by_side_become_one_chain_through_every_node(lengths: list[int]) -> None:
    """Any number of plain branches out of one node, each a chain of any length
    to one node they meet at, read as one chain: every branch node once, each
    branch in order, then the node they meet at."""
    nodes: list[dict[str, Any]] = [{"id": "fork", "handler": "h"}, {"id": "join", "handler": "h"}]
    edges: list[dict[str, Any]] = []
    branches = [[f"b{i}_{j}" for j in range(n)] for i, n in enumerate(lengths)]
    for chain in branches:
        nodes.extend({"id": name, "handler": "h"} for name in chain)
        edges.append({"from": "fork", "to": chain[0]})
        edges.extend({"from": a, "to": b} for a, b in zip(chain, [*chain[1:], "join"], strict=True))
    edges.append({"from": "join", "to": "END"})
    data = {"version": "0.1", "start": "fork", "nodes": nodes, "edges": edges}
    flow = load_flow(_text(data), "f.json", handlers={"h"})
    path, here = [], "fork"
    while here != "END":
        path.append(here)
        here = flow.edges[here].to  # type: ignore[union-attr]
    assert path == ["fork", *(name for chain in branches for name in chain), "join"]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.fixed_dictionaries(
        {"version": st.sampled_from(LGFLOW_VERSIONS)},
        optional={
            "start": _JSON,
            "state": _JSON,
            "tools": _JSON,
            "nodes": st.lists(
                st.dictionaries(
                    st.sampled_from(["id", "handler", "type", "approval", "onError", "retry"]),
                    _JSON,
                ),
                max_size=4,
            )
            | _JSON,
            "edges": st.lists(
                st.dictionaries(
                    st.sampled_from(["from", "to", "type", "router", "routes", "when"]), _JSON
                ),
                max_size=4,
            )
            | _JSON,
        },
    )
)
def test_any_lgflow_shaped_data_is_read_or_refused_never_crashes(data: dict[str, Any]) -> None:
    report = check_flow(json.dumps(data), "f.json")
    assert report.flow is not None or report.errors


def test_nodes_that_are_not_a_list_beside_an_untyped_channel_are_refused_not_a_crash() -> None:
    # Hypothesis found it: a channel without a type had its type guessed from the
    # nodes, and a `nodes: true` crashed the guess (TypeError) instead of refusing.
    data = {"version": "0.7", "name": "f", "state": {"x": {}}, "nodes": True, "edges": []}
    report = check_flow(json.dumps(data), "f.json")
    assert report.flow is None
    assert report.errors
