"""LGFlow's versions and what each one added (docs/flows.md, "Coming from
LGFlow"): a feature a file uses below the version that introduced it is
refused by name, as LGFlow refuses it ("declaring state requires version 0.2").

The table is read from LGFlow's own reference (the DSL's "— v0.N" headings).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FEATURE_VERSIONS",
    "LGFLOW_VERSIONS",
    "Feature",
    "features_used",
    "lgflow_version",
]

#: Every LGFlow version this build reads.
LGFLOW_VERSIONS = tuple(f"0.{n}" for n in range(1, 18))

#: Each feature, and the LGFlow version that introduced it.
FEATURE_VERSIONS: Mapping[str, str] = {
    "declaring state": "0.2",
    "a route limit": "0.2",
    "scoping a limit with per": "0.3",
    "an llm node": "0.3",
    "retry": "0.3",
    "onError": "0.3",
    "declaring tools": "0.4",
    "a tool node": "0.4",
    "a tools node": "0.4",
    "approval": "0.5",
    "a fanout node": "0.6",
    "describing a flow": "0.7",
    "describing a node": "0.7",
    "describing a channel": "0.7",
    "a channel type": "0.7",
    "route sentences (when)": "0.7",
    "declaring what a flow requires": "0.7",
    "describing a tool": "0.7",
    "an ask node": "0.8",
    "a file channel": "0.9",
    "conversation": "0.9",
    "remembers": "0.9",
    "requires.packages": "0.9",
    "requires.services": "0.9",
    "structured output (schema)": "0.15",
}

_NODE_TYPES = {
    "llm": "an llm node",
    "tool": "a tool node",
    "tools": "a tools node",
    "fanout": "a fanout node",
    "ask": "an ask node",
}

Path = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Feature:
    """A feature a file uses, and where."""

    name: str
    path: Path

    @property
    def version(self) -> str:
        return FEATURE_VERSIONS[self.name]


def lgflow_version(value: Any) -> tuple[int, int] | None:
    """``(0, N)`` for an LGFlow version this build reads (``"0.1"``–``"0.17"``)."""
    if not isinstance(value, str) or value not in LGFLOW_VERSIONS:
        return None
    found = re.fullmatch(r"(\d+)\.(\d+)", value)
    assert found is not None
    return int(found.group(1)), int(found.group(2))


def features_used(data: Mapping[str, Any]) -> Iterator[Feature]:
    """The versioned features an LGFlow file uses, in the order of the file."""
    for key, name in (
        ("description", "describing a flow"),
        ("inputs", "describing a flow"),
        ("outputs", "describing a flow"),
        ("state", "declaring state"),
        ("conversation", "conversation"),
    ):
        if key in data:
            yield Feature(name, (key,))
    yield from _requires(data.get("requires"))
    yield from _tools(data.get("tools"))
    state = data.get("state")
    for channel, spec in state.items() if isinstance(state, dict) else ():
        yield from _channel(channel, spec)
    nodes = data.get("nodes")
    for i, node in enumerate(nodes if isinstance(nodes, list) else ()):
        if isinstance(node, dict):
            yield from _node(i, node)
    edges = data.get("edges")
    for i, edge in enumerate(edges if isinstance(edges, list) else ()):
        if isinstance(edge, dict):
            yield from _edge(i, edge)


def _requires(requires: Any) -> Iterator[Feature]:
    if requires is None:
        return
    yield Feature("declaring what a flow requires", ("requires",))
    if isinstance(requires, dict):
        for key in ("packages", "services"):
            if key in requires:
                yield Feature(f"requires.{key}", ("requires", key))


def _tools(tools: Any) -> Iterator[Feature]:
    if tools is None:
        return
    yield Feature("declaring tools", ("tools",))
    for i, tool in enumerate(tools if isinstance(tools, list) else ()):
        if isinstance(tool, dict):
            yield Feature("describing a tool", ("tools", i))


def _channel(name: str, spec: Any) -> Iterator[Feature]:
    if not isinstance(spec, dict):
        return
    where = ("state", name)
    if "type" in spec:
        yield Feature("a channel type", (*where, "type"))
        if spec["type"] == "file":
            yield Feature("a file channel", (*where, "type"))
    if "description" in spec:
        yield Feature("describing a channel", (*where, "description"))
    if "remembers" in spec:
        yield Feature("remembers", (*where, "remembers"))


def _node(i: int, node: Mapping[str, Any]) -> Iterator[Feature]:
    where: Path = ("nodes", i)
    kind = node.get("type")
    if isinstance(kind, str) and kind in _NODE_TYPES:
        yield Feature(_NODE_TYPES[kind], (*where, "type"))
    for key, name in (
        ("retry", "retry"),
        ("onError", "onError"),
        ("approval", "approval"),
        ("description", "describing a node"),
        ("schema", "structured output (schema)"),
    ):
        if key in node:
            yield Feature(name, (*where, key))


def _edge(i: int, edge: Mapping[str, Any]) -> Iterator[Feature]:
    where: Path = ("edges", i)
    if "when" in edge:
        yield Feature("route sentences (when)", (*where, "when"))
    limits = edge.get("limits")
    if limits is None:
        return
    yield Feature("a route limit", (*where, "limits"))
    for route, limit in limits.items() if isinstance(limits, dict) else ():
        if isinstance(limit, dict) and "per" in limit:
            yield Feature("scoping a limit with per", (*where, "limits", route, "per"))
