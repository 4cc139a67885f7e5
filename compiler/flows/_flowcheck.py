"""A flow's validation (docs/flows.md, "Rules"): every rule a flow file can
break, with file, line, column and the rule's code. A valid flow is compiled to
a ``Flow`` and its readiness checked (``_readiness.py``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Mapping
from typing import Any, Literal

from pydantic import ValidationError

from compiler._durations import parse_duration
from compiler._errors import LemongraphError
from compiler._source import Located, field_problem
from compiler.flows._flowfiles import file_channel_problems
from compiler.flows._flowschema import schema_problems
from compiler.flows._flowspec import (
    CHANNEL_NAME,
    END,
    HISTORY,
    RESERVED_IDS,
    AnyEdge,
    AnyNode,
    ApprovalNode,
    AskNode,
    ChannelSpec,
    ConditionalEdge,
    FanoutNode,
    Flow,
    FlowMilestone,
    FlowProblem,
    FlowSpec,
    FlowTool,
    FlowWorld,
    HandlerNode,
    LlmNode,
    Path,
    PlainEdge,
    ToolNode,
    ToolsNode,
    builtin_channels,
    output_of,
    reachable,
    template_reads,
)
from compiler.flows._readiness import Readiness
from compiler.flows._requires import check_requires
from compiler.flows.lgflow import lgflow_version, relocate, translate_lgflow
from compiler.jobs._state import canonical_json

__all__ = ["FlowChecker"]


class FlowChecker:
    """Checks one flow file's data against the rules, collecting ``problems``
    (and, for a valid flow, the readiness warnings)."""

    def __init__(self, source: str, name: str) -> None:
        self.source = source
        self.name = name
        self.located: Located | None = None
        self.problems: list[FlowProblem] = []

    # -- reporting ---------------------------------------------------------

    def at(
        self,
        rule: str,
        message: str,
        path: Path,
        node: str | None = None,
        offset: int | None = None,
        severity: Literal["error", "warning"] = "error",
    ) -> None:
        pos = self.located.position(path) if self.located else None
        line = pos.line if pos else None
        column = pos.column if pos else None
        if pos is not None and offset is not None and pos.style in (None, '"', "'"):
            # A template's {{ on the first line of a one-line scalar: point at it
            # (when the text there is the scalar's own, with no escape before it).
            assert self.located is not None
            row = self.located.text.splitlines()[pos.line - 1]
            at = pos.column - 1 + (1 if pos.style else 0) + offset
            if row[at : at + 2] == "{{":
                column = at + 1
        self.problems.append(FlowProblem(self.source, rule, message, line, column, severity, node))

    def warn(self, rule: str, message: str, path: Path, node: str | None = None) -> None:
        self.at(rule, message, path, node, severity="warning")

    def errors(self) -> bool:
        return any(p.severity == "error" for p in self.problems)

    # -- compile -----------------------------------------------------------

    def compile(
        self,
        data: Any,
        tools: Mapping[str, FlowTool] | None,
        handlers: Collection[str] | None,
        routers: Collection[str] | None,
        milestone: FlowMilestone | None,
        world: FlowWorld | None = None,
    ) -> Flow | None:
        if not isinstance(data, dict):
            self.at("INVALID_FIELD", "a flow must be a mapping with version, start and nodes", ())
            return None
        if "version" not in data:
            self.at("INVALID_FIELD", 'version: this field is required (version: "1")', ())
            return None
        if lgflow_version(data["version"]) is not None:
            data = self.lgflow(data)
            if data is None:
                return None
        elif data["version"] != "1":
            self.at(
                "BAD_VERSION",
                f"version {data['version']!r} is not one this build reads "
                '(say version: "1", quoted)',
                ("version",),
            )
            return None
        try:
            spec = FlowSpec.model_validate(data)
        except ValidationError as exc:
            for err in exc.errors():
                loc = _path(err["loc"])
                err["loc"] = loc
                self.at("INVALID_FIELD", field_problem(err, "flow", _known(loc)), loc)
            return None
        ids = self._names(spec)
        _References(self, spec, ids, tools, handlers, routers, milestone).check()
        if self.errors():
            return None
        nodes = {n.id: n for n in spec.nodes}
        edges = {e.from_: e for e in spec.edges}
        self._graph(spec, nodes, edges)
        if self.errors():
            return None
        flow = Flow(
            name=self.name,
            source=self.source,
            spec=spec,
            digest=hashlib.sha256(
                canonical_json(spec.model_dump(mode="json", by_alias=True))
            ).hexdigest()[:16],
            nodes=nodes,
            edges=edges,
        )
        Readiness(self, flow, tools, milestone).run()
        check_requires(self, flow, tools, world)
        return flow

    def lgflow(self, data: dict[str, Any]) -> dict[str, Any] | None:
        """An LGFlow file's data in this language, its positions those of the
        LGFlow file (docs/flows.md, "Coming from LGFlow"); None when refused."""
        translation = translate_lgflow(data)
        for refusal in translation.refusals:
            self.at(refusal.rule, refusal.message, refusal.path)
        if translation.refusals:
            return None
        self.warn(
            "LGFLOW_FILE",
            f"written for LGFlow {translation.version}, read with {len(translation.changes)} "
            "change(s): lemongraph flow import writes it in this format and lists them",
            ("version",),
        )
        if self.located is not None:
            self.located = relocate(self.located, translation)
        return translation.data

    def _names(self, spec: FlowSpec) -> set[str]:
        for name in spec.state:
            if name in builtin_channels(spec):
                every = "every conversational flow" if name == HISTORY else "every flow"
                self.at(
                    "RESERVED_NAME",
                    f"channel {name!r} is built in: {every} has it (docs/flows.md)",
                    ("state", name),
                )
            elif not re.match(CHANNEL_NAME, name):
                self.at(
                    "INVALID_FIELD",
                    f"state.{name}: a channel name is letters, digits and _ (no dots)",
                    ("state", name),
                )
        first: dict[str, int] = {}
        for i, node in enumerate(spec.nodes):
            if node.id in RESERVED_IDS:
                self.at(
                    "RESERVED_NAME",
                    f"{node.id!r} is reserved; a node cannot be called it",
                    ("nodes", i, "id"),
                    node.id,
                )
            if node.id in first:
                self.at(
                    "DUPLICATE_NODE",
                    f"duplicate node id {node.id!r} (first defined as node #{first[node.id] + 1})",
                    ("nodes", i, "id"),
                    node.id,
                )
            else:
                first[node.id] = i
        return set(first)

    def _graph(
        self, spec: FlowSpec, nodes: Mapping[str, AnyNode], edges: Mapping[str, AnyEdge]
    ) -> None:
        index = {n.id: i for i, n in enumerate(spec.nodes)}
        for node in spec.nodes:
            if isinstance(node, FanoutNode | ApprovalNode) or node.id in edges:
                continue
            self.at(
                "DEAD_END",
                f"node {node.id!r} has no way out: add an edge from it (to END to finish)",
                ("nodes", index[node.id], "id"),
                node.id,
            )
        seen = reachable(spec.start, nodes, edges)
        for node in spec.nodes:
            if node.id not in seen:
                self.at(
                    "UNREACHABLE_NODE",
                    f"node {node.id!r} is unreachable: no path from start "
                    f"({spec.start}) leads to it",
                    ("nodes", index[node.id], "id"),
                    node.id,
                )


class _References:
    """What a flow's fields name: nodes, channels, templates, tools, handlers,
    routers and routes, each checked against what exists (the rules in
    docs/flows.md, "Rules"), in the order of the file."""

    def __init__(
        self,
        checker: FlowChecker,
        spec: FlowSpec,
        ids: set[str],
        tools: Mapping[str, FlowTool] | None,
        handlers: Collection[str] | None,
        routers: Collection[str] | None,
        milestone: FlowMilestone | None,
    ) -> None:
        self.at = checker.at
        self.spec = spec
        self.ids = ids
        self.tools = tools
        self.handlers = handlers
        self.routers = routers
        self.milestone = milestone
        self.builtins = builtin_channels(spec)
        self.channels = {**{k: v.type for k, v in spec.state.items()}, **self.builtins}
        self.by_id = {n.id: n for n in spec.nodes}

    def check(self) -> None:
        self.flow_fields()
        self.file_channels()
        for i, node in enumerate(self.spec.nodes):
            self.node(("nodes", i), node)
        self.contract()
        seen: dict[str, int] = {}
        for k, edge in enumerate(self.spec.edges):
            self.edge(("edges", k), k, edge, seen)

    # -- what a name must be ---------------------------------------------------

    def node_ref(self, target: str, path: Path, node: str | None, what: str) -> None:
        if target != END and target not in self.ids:
            self.at("UNKNOWN_NODE", f"{what} {target!r} is not a node", path, node)

    def destination(self, target: str, path: Path, node: str | None, what: str) -> None:
        if target != END and target not in self.ids:
            known = ", ".join(sorted(self.ids))
            self.at(
                "ROUTE_TO_NOWHERE",
                f"{what} goes to {target!r}, which is not a node (nodes: {known}; or END)",
                path,
                node,
            )

    def channel_ref(self, name: str, path: Path, node: str | None, what: str) -> None:
        if name not in self.channels:
            self.at("UNKNOWN_CHANNEL", f"{what} {name!r} is not a declared channel", path, node)

    def written(self, name: str | None, path: Path, node: str) -> None:
        if name is None:
            return
        if name in self.builtins:
            self.at(
                "BUILTIN_CHANNEL_WRITTEN",
                f"{name!r} is built in and read-only: write a channel of your own",
                path,
                node,
            )
        else:
            self.channel_ref(name, path, node, "output")

    def template(self, text: str, path: Path, node: str | None) -> None:
        for name, offset in template_reads(text):
            if name not in self.channels:
                self.at(
                    "TEMPLATE_UNKNOWN_CHANNEL",
                    f"{{{{{name}}}}} reads {name!r}, which is not a declared channel",
                    path,
                    node,
                    offset,
                )

    def template_args(self, value: Any, path: Path, node: str) -> None:
        if isinstance(value, str):
            self.template(value, path, node)
        elif isinstance(value, dict):
            for k, v in value.items():
                self.template_args(v, (*path, str(k)), node)
        elif isinstance(value, list):
            for j, v in enumerate(value):
                self.template_args(v, (*path, j), node)

    def expires(self, value: str | None, path: Path, node: str) -> None:
        if value is None:
            return
        try:
            parse_duration(value)
        except (ValueError, LemongraphError) as exc:
            self.at("INVALID_FIELD", f"expires: {exc}", path, node)

    # -- the flow's own fields -----------------------------------------------------

    def flow_fields(self) -> None:
        spec = self.spec
        if spec.start != END and spec.start not in self.ids:
            self.node_ref(spec.start, ("start",), None, "start")
        elif spec.start == END:
            self.at("UNKNOWN_NODE", "start must name a node, not END", ("start",))
        for key in ("inputs", "outputs"):
            for j, name in enumerate(getattr(spec, key)):
                self.channel_ref(name, (key, j), None, key[:-1])
        if spec.reply is not None:
            self.channel_ref(spec.reply, ("reply",), None, "reply")
            if spec.reply in self.channels and spec.reply not in spec.outputs:
                listed = ", ".join(spec.outputs) or "none"
                self.at(
                    "REPLY_NOT_AN_OUTPUT",
                    f"reply {spec.reply!r} is not one of the flow's outputs ({listed}): "
                    f"add it to outputs",
                    ("reply",),
                )
        elif spec.conversation:
            # docs/flows.md, "Conversational flows": its reply answers the message.
            self.at(
                "CONVERSATION_NO_REPLY",
                "a conversational flow answers each message with its reply: name the output "
                "the person is told (reply: NAME, one of outputs)",
                ("conversation",),
            )

    def file_channels(self) -> None:
        """File channels' fields (docs/flows.md, "File channels")."""
        for name, channel in self.spec.state.items():
            for field_name, message in file_channel_problems(name, channel):
                self.at("FILE_CHANNEL", message, ("state", name, field_name))

    def contract(self) -> None:
        """The flow's tools: in the catalog, granted by the milestone's integrations."""
        tools, milestone = self.tools, self.milestone
        for j, tool in enumerate(self.spec.tools):
            if tools is not None and tool not in tools:
                self.at("UNKNOWN_TOOL", f"tool {tool!r} is not in the catalog", ("tools", j))
            elif milestone is not None and tool not in milestone.tools:
                granted = ", ".join(sorted(milestone.tools)) or "none"
                self.at(
                    "TOOL_NOT_IN_INTEGRATIONS",
                    f"tool {tool!r} is not granted by the integrations of milestone "
                    f"{milestone.milestone} of playbook {milestone.playbook} (granted: {granted})",
                    ("tools", j),
                )

    # -- nodes ---------------------------------------------------------------------

    def node(self, here: Path, node: AnyNode) -> None:
        if node.on_error is not None:
            self.destination(node.on_error, (*here, "onError"), node.id, "onError")
        if isinstance(node, LlmNode):
            self.template(node.prompt, (*here, "prompt"), node.id)
            self.written(node.output, (*here, "output"), node.id)
            if node.schema_ is not None:
                self.schema(node, (*here, "schema"))
        elif isinstance(node, ToolNode):
            self.tool_node(here, node)
        elif isinstance(node, ToolsNode):
            self.channel_ref(node.calls, (*here, "calls"), node.id, "calls")
            self.written(node.output, (*here, "output"), node.id)
        elif isinstance(node, AskNode):
            self.template(node.ask, (*here, "ask"), node.id)
            self.written(node.output, (*here, "output"), node.id)
            self.expires(node.expires, (*here, "expires"), node.id)
        elif isinstance(node, ApprovalNode):
            self.approval(here, node)
        elif isinstance(node, FanoutNode):
            self.fanout(here, node)
        elif isinstance(node, HandlerNode):
            self.handler(here, node)

    def tool_node(self, here: Path, node: ToolNode) -> None:
        if node.tool not in self.spec.tools:
            contract = ", ".join(self.spec.tools) or "none"
            self.at(
                "TOOL_OUTSIDE_CONTRACT",
                f"tool {node.tool!r} is not in the flow's tools ({contract})",
                (*here, "tool"),
                node.id,
            )
        self.template_args(node.args, (*here, "args"), node.id)
        self.written(node.output, (*here, "output"), node.id)

    def approval(self, here: Path, node: ApprovalNode) -> None:
        self.node_ref(node.before, (*here, "before"), node.id, "before")
        if node.before == END:
            self.at(
                "UNKNOWN_NODE",
                "before must name a node, not END",
                (*here, "before"),
                node.id,
            )
        self.destination(node.on_reject, (*here, "onReject"), node.id, "onReject")
        self.template(node.ask, (*here, "ask"), node.id)
        for j, name in enumerate(node.show):
            self.channel_ref(name, (*here, "show", j), node.id, "show")
        self.expires(node.expires, (*here, "expires"), node.id)

    def fanout(self, here: Path, node: FanoutNode) -> None:
        channels = self.channels
        self.channel_ref(node.over, (*here, "over"), node.id, "over")
        if node.over in channels and channels[node.over] != "list":
            self.at(
                "FANOUT_OVER_NOT_LIST",
                f"fan-out over {node.over!r}, a {channels[node.over]} channel: "
                "a fan-out spreads over a list",
                (*here, "over"),
                node.id,
            )
        self.written(node.as_, (*here, "as"), node.id)
        self.node_ref(node.to, (*here, "to"), node.id, "to")
        target = self.by_id.get(node.to)
        if node.to == node.id or isinstance(target, FanoutNode | ApprovalNode):
            self.at(
                "FANOUT_BAD_TARGET",
                "a fan-out's target runs once per item: it cannot be the fan-out "
                "itself, another fan-out or an approval",
                (*here, "to"),
                node.id,
            )
        elif target is not None:
            self.fanout_reducer(node, target)

    def handler(self, here: Path, node: HandlerNode) -> None:
        if self.handlers is not None and node.handler not in self.handlers:
            self.at(
                "UNKNOWN_HANDLER",
                f"handler {node.handler!r} is not registered",
                (*here, "handler"),
                node.id,
            )
        for j, name in enumerate(node.reads or ()):
            self.channel_ref(name, (*here, "reads", j), node.id, "reads")
        self.written(node.output, (*here, "output"), node.id)

    def schema(self, node: LlmNode, path: Path) -> None:
        assert node.schema_ is not None
        problems = schema_problems(node.schema_)
        for where, message in problems:
            self.at("SCHEMA_OUTSIDE_SUBSET", message, (*path, *where), node.id)
        channel = self.spec.state.get(node.output)
        kind = node.schema_.get("type")
        if problems or channel is None or channel.reducer == "append":
            return  # an append channel takes each answer as one item, of any type
        if kind != channel.type:
            self.at(
                "SCHEMA_CHANNEL_MISMATCH",
                f"schema type {kind!r} is incompatible with output channel "
                f"{node.output!r} of type {channel.type!r}",
                (*path, "type"),
                node.id,
            )

    def fanout_reducer(self, fanout: FanoutNode, target: AnyNode) -> None:
        spec = self.spec
        out = output_of(target)
        if out is None or out not in spec.state or spec.state[out].reducer is not None:
            return
        index = next(i for i, n in enumerate(spec.nodes) if n is target)
        self.at(
            "FANOUT_NEEDS_REDUCER",
            f"{target.id} writes {out!r} once per item of {fanout.over!r} (fan-out "
            f"{fanout.id}), so that channel needs a reducer - append collects the results",
            ("nodes", index, "output"),
            target.id,
        )

    # -- edges ---------------------------------------------------------------------

    def edge(self, here: Path, k: int, edge: AnyEdge, seen: dict[str, int]) -> None:
        self.node_ref(edge.from_, (*here, "from"), None, "from")
        source = self.by_id.get(edge.from_)
        if isinstance(source, FanoutNode | ApprovalNode):
            self.at(
                "IMPLICIT_WAY_OUT",
                f"{edge.from_!r} is a {source.type} node: it declares no edges of its own "
                + (
                    "(the copies follow the edge of its target)"
                    if isinstance(source, FanoutNode)
                    else "(yes goes to before, anything else to onReject)"
                ),
                (*here, "from"),
                edge.from_,
            )
        if edge.from_ in seen:
            self.at(
                "TWO_WAYS_OUT",
                f"a second edge from {edge.from_!r} (first: edge #{seen[edge.from_] + 1}); "
                "one edge per node: branch with a conditional edge, spread with a fan-out",
                (*here, "from"),
                edge.from_,
            )
        else:
            seen[edge.from_] = k
        if isinstance(edge, PlainEdge):
            self.destination(edge.to, (*here, "to"), edge.from_, "the edge")
        else:
            self.conditional(here, edge)

    def conditional(self, here: Path, edge: ConditionalEdge) -> None:
        if (edge.router is None) == (edge.when is None):
            self.at(
                "CONDITIONAL_ROUTER",
                "a conditional edge chooses its route by a router or by when, exactly one",
                here,
                edge.from_,
            )
        if edge.router is not None and self.routers is not None and edge.router not in self.routers:
            self.at(
                "UNKNOWN_ROUTER",
                f"router {edge.router!r} is not registered",
                (*here, "router"),
                edge.from_,
            )
        if edge.when is not None:
            self.channel_ref(edge.when.split(".")[0], (*here, "when"), edge.from_, "when reads")
        for j, name in enumerate(edge.reads or ()):
            self.channel_ref(name, (*here, "reads", j), edge.from_, "reads")
        for route, to in edge.routes.items():
            self.destination(to, (*here, "routes", route), edge.from_, f"route {route!r}")
        if edge.limits and not self.spec.state:
            self.at(
                "LIMIT_WITHOUT_STATE",
                "a route limit needs the flow to declare state (the run counts in it)",
                (*here, "limits"),
                edge.from_,
            )
        self.limits(here, edge)
        for route in edge.means:
            if route not in edge.routes:
                self.at(
                    "MEANS_UNKNOWN_ROUTE",
                    f"means says what route {route!r} means, and the edge has no such route "
                    f"(routes: {', '.join(edge.routes)})",
                    (*here, "means", route),
                    edge.from_,
                )

    def limits(self, here: Path, edge: ConditionalEdge) -> None:
        for route, limit in edge.limits.items():
            routes = ", ".join(edge.routes)
            if route not in edge.routes:
                self.at(
                    "LIMIT_UNKNOWN_ROUTE",
                    f"a limit on route {route!r}, which the edge lacks (routes: {routes})",
                    (*here, "limits", route),
                    edge.from_,
                )
            if limit.then not in edge.routes or limit.then == route:
                self.at(
                    "LIMIT_UNKNOWN_ROUTE",
                    f"then {limit.then!r} must name another route of the edge (routes: {routes})",
                    (*here, "limits", route, "then"),
                    edge.from_,
                )
            if limit.per is not None:
                self.node_ref(limit.per, (*here, "limits", route, "per"), edge.from_, "per")


def _path(loc: tuple[Any, ...]) -> Path:
    # pydantic names a union member by its tag ("llm", "plain") inside the path;
    # the file has no such level.
    out: list[str | int] = []
    for i, part in enumerate(loc):
        if i >= 2 and loc[0] in ("nodes", "edges") and i == 2 and isinstance(part, str):
            continue
        out.append(part if isinstance(part, int) else str(part))
    return tuple(out)


def _known(loc: Path) -> Collection[str]:
    if loc[:1] == ("state",) and len(loc) > 2:
        return {f.alias or n for n, f in ChannelSpec.model_fields.items()}
    if loc[:1] in (("nodes",), ("edges",)) and len(loc) > 2:
        names: set[str] = set()
        for model in (
            LlmNode,
            ToolNode,
            ToolsNode,
            AskNode,
            ApprovalNode,
            FanoutNode,
            HandlerNode,
            PlainEdge,
            ConditionalEdge,
        ):
            names.update(f.alias or n for n, f in model.model_fields.items())
        return names
    return {f.alias or n for n, f in FlowSpec.model_fields.items()}
