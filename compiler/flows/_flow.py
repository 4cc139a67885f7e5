"""Flows: a milestone's work described as data (docs/flows.md).

The model of a flow file as authors write it (``FlowSpec``), its validation
with file, line, column and a named rule, the readiness warnings, and the
compiled ``Flow`` that the step function (``FlowRun``) runs. Pure: the text is
passed in; files are read in stream/.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictInt,
    Tag,
    ValidationError,
)
from topics import Approver

from compiler._durations import parse_duration
from compiler._errors import LemongraphError
from compiler._source import Located, field_problem, load_located
from compiler.flows._flowschema import schema_problems
from compiler.jobs._state import canonical_json

__all__ = [
    "BUILTIN_CHANNELS",
    "END",
    "FLOW_RULES",
    "FLOW_WARNINGS",
    "ApprovalNode",
    "AskNode",
    "ChannelSpec",
    "ConditionalEdge",
    "FanoutNode",
    "Flow",
    "FlowError",
    "FlowMilestone",
    "FlowProblem",
    "FlowReport",
    "FlowSpec",
    "FlowTool",
    "HandlerNode",
    "Limit",
    "LlmNode",
    "PlainEdge",
    "Retry",
    "ToolNode",
    "ToolsNode",
    "check_flow",
    "load_flow",
    "template_reads",
]

#: The reserved destination: the run finishes.
END = "END"
#: Channels every flow has without declaring them (docs/flows.md, "Built-in
#: channels"): the job's conversation so far, and the last failure.
BUILTIN_CHANNELS: Mapping[str, str] = {"conversation": "list", "last_error": "object"}
_RESERVED_IDS = (END, "START")

#: Every rule a flow can break (docs/flows.md, "Rules"), by its stable code.
FLOW_RULES: Mapping[str, str] = {
    "INVALID_SOURCE": "the text is not well-formed YAML or JSON",
    "INVALID_FIELD": "a field is missing, unknown or of the wrong type",
    "BAD_VERSION": "the version is not one this build reads",
    "RESERVED_NAME": "a node id or channel name that is reserved",
    "DUPLICATE_NODE": "two nodes share an id",
    "UNKNOWN_NODE": "a node id that names no node",
    "UNKNOWN_CHANNEL": "a channel that is not declared",
    "TEMPLATE_UNKNOWN_CHANNEL": "a {{template}} reads a channel that is not declared",
    "BUILTIN_CHANNEL_WRITTEN": "a node writes a built-in channel",
    "SCHEMA_OUTSIDE_SUBSET": "a schema uses what the subset does not have",
    "SCHEMA_CHANNEL_MISMATCH": "a schema's type disagrees with its output channel's",
    "FANOUT_OVER_NOT_LIST": "a fan-out spreads over a channel that is not a list",
    "FANOUT_BAD_TARGET": "a fan-out targets itself or another fan-out or approval",
    "FANOUT_NEEDS_REDUCER": "a fan-out target writes a channel with no reducer",
    "IMPLICIT_WAY_OUT": "an edge from a fan-out or approval node (their ways out are implicit)",
    "TWO_WAYS_OUT": "more than one edge from one node",
    "CONDITIONAL_ROUTER": "a conditional edge without exactly one of router and when",
    "ROUTE_TO_NOWHERE": "an edge or route to a node that does not exist",
    "LIMIT_WITHOUT_STATE": "a route limit in a flow that declares no state",
    "LIMIT_UNKNOWN_ROUTE": "a limit on, or a then naming, a route the edge lacks",
    "UNREACHABLE_NODE": "a node no path from start reaches",
    "DEAD_END": "a node with no way out (no edge; END must be said)",
    "REPLY_NOT_AN_OUTPUT": "the reply names a channel that is not one of the flow's outputs",
    "TOOL_OUTSIDE_CONTRACT": "a tool node names a tool not in the flow's tools",
    "UNKNOWN_TOOL": "a tool the catalog does not have",
    "UNKNOWN_HANDLER": "a handler that is not registered",
    "UNKNOWN_ROUTER": "a router that is not registered",
    "TOOL_NOT_IN_INTEGRATIONS": "a flow tool its milestone's integrations do not grant",
    "FLOW_NOT_FOUND": "a milestone names a flow there is no file for",
    "APPROVAL_BYPASS": "a tool a flow guards with an approval, granted to another milestone's "
    "agent or called by another flow of the playbook",
}

#: Every readiness warning (docs/flows.md, "Readiness warnings"), by code.
FLOW_WARNINGS: Mapping[str, str] = {
    "WRITE_WITHOUT_APPROVAL": "a tool that writes, reachable with no approval before it",
    "CONVERSATION_UNREAD": "a flow that talks to the person and no prompt reads the conversation",
    "FANOUT_MAY_SILENCE_THE_TAIL": "a fan-out over a list that may be empty, with no way round",
    "CHANNEL_FORGETS_BETWEEN_TURNS": "a channel read before the run writes it, with nothing "
    "to carry it (no remembers, default or input)",
    "CHANNEL_NEVER_WRITTEN": "a channel read that nothing fills",
    "CHANNEL_NEVER_READ": "a channel written that nothing reads and no output names",
    "VIEW_NEVER_SHOWN": "an approval shows a channel nothing fills",
    "CLAIM_ONLY_PATH": "no tool on any path records a fact the milestone's condition reads",
}

_IDENT = r"^[A-Za-z_][A-Za-z0-9_\-]*$"
_CHANNEL = r"^[A-Za-z_][A-Za-z0-9_]*$"
#: ``{{name}}`` or ``{{name.path}}``: the channel is the first name.
TEMPLATE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)((?:\.[A-Za-z0-9_]+)*)\s*\}\}")

Path = tuple[str | int, ...]


# ---------------------------------------------------------------------------
# The model, as written


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


ChannelType: TypeAlias = Literal["string", "number", "boolean", "list", "object", "file"]


class ChannelSpec(_Spec):
    """A state channel: its type, its start value, how two writes combine."""

    type: ChannelType
    default: Any = None
    reducer: Literal["append", "merge"] | None = None
    remembers: StrictBool = False
    description: str = ""
    #: File channels: the media types an answer may have (``image/*``).
    accept: str | None = None


class Retry(_Spec):
    """How many goes a node gets before its failure counts."""

    max_attempts: StrictInt = Field(ge=1, le=100)


class _NodeSpec(_Spec):
    id: str = Field(pattern=_IDENT, max_length=100)
    description: str = ""
    retry: Retry | None = None
    on_error: str | None = Field(None, alias="onError")


class LlmNode(_NodeSpec):
    """Ask the model ``prompt``; write the answer (checked by ``schema``) to ``output``."""

    type: Literal["llm"]
    prompt: str = Field(min_length=1)
    output: str
    schema_: dict[str, Any] | None = Field(None, alias="schema")


class ToolNode(_NodeSpec):
    """Call ``tool`` with templated ``args``; write its result to ``output``."""

    type: Literal["tool"]
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    output: str | None = None


class ToolsNode(_NodeSpec):
    """Run the calls in ``calls`` (``{name, args, id}`` each, chosen by a model);
    write their results (``{id, name, result, error}``) to ``output``."""

    type: Literal["tools"]
    calls: str
    output: str


class AskNode(_NodeSpec):
    """Put ``ask`` to the person and wait; write the answer to ``output``."""

    type: Literal["ask"]
    ask: str = Field(min_length=1)
    output: str
    answers: tuple[str, ...] = ()
    expires: str | None = None


class ApprovalNode(_NodeSpec):
    """Stop before node ``before``, show the ``show`` channels and wait: yes runs
    ``before``, anything else goes to ``onReject``."""

    type: Literal["approval"]
    before: str
    ask: str = ""
    show: tuple[str, ...] = ()
    on_reject: str = Field(alias="onReject")
    expires: str | None = None
    #: Who may answer (docs/flows.md, "Who approves"); empty: the catalog's
    #: ``approvers``, by default the operators.
    approvers: tuple[Approver, ...] = ()


class FanoutNode(_NodeSpec):
    """Run ``to`` once per item of the list ``over``, each copy seeing its item in ``as``."""

    type: Literal["fanout"]
    over: str
    to: str
    as_: str = Field(alias="as")


class HandlerNode(_NodeSpec):
    """Run the registered function ``handler`` on the ``reads`` channels (all
    when not said); write what it returns to ``output``."""

    type: Literal["handler"]
    handler: str
    reads: tuple[str, ...] | None = None
    output: str | None = None


Node: TypeAlias = Annotated[
    LlmNode | ToolNode | ToolsNode | AskNode | ApprovalNode | FanoutNode | HandlerNode,
    Field(discriminator="type"),
]


class PlainEdge(_Spec):
    """Go from ``from`` to ``to`` (a node, or END)."""

    from_: str = Field(alias="from")
    to: str
    description: str = ""


class Limit(_Spec):
    """Take the route at most ``max`` times (since ``per`` last ran, when
    given), then take route ``then`` instead."""

    max: StrictInt = Field(ge=1)
    per: str | None = None
    then: str


class ConditionalEdge(_Spec):
    """Go from ``from`` to the node of the route chosen by ``router`` (a
    registered function) or by the value at ``when`` (a channel, or a path into
    one)."""

    from_: str = Field(alias="from")
    type: Literal["conditional"]
    router: str | None = None
    when: str | None = None
    routes: dict[str, str] = Field(min_length=1)
    limits: dict[str, Limit] = Field(default_factory=dict)
    #: Channels a router reads (all when not said).
    reads: tuple[str, ...] | None = None
    description: str = ""


def _edge_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return "conditional" if kind is not None else "plain"


Edge: TypeAlias = Annotated[
    Annotated[PlainEdge, Tag("plain")] | Annotated[ConditionalEdge, Tag("conditional")],
    Discriminator(_edge_kind),
]


class FlowSpec(_Spec):
    """A flow file as written (docs/flows.md)."""

    version: str
    description: str = ""
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    #: The output the person is told when the run finishes (docs/flows.md,
    #: "A reply to the person"): one of ``outputs``.
    reply: str | None = None
    #: The flow is a conversation with the person (readiness reads it).
    conversation: StrictBool = False
    state: dict[str, ChannelSpec] = Field(default_factory=dict)
    tools: tuple[str, ...] = ()
    start: str
    nodes: tuple[Node, ...] = Field(min_length=1)
    edges: tuple[Edge, ...] = ()


AnyNode: TypeAlias = (
    LlmNode | ToolNode | ToolsNode | AskNode | ApprovalNode | FanoutNode | HandlerNode
)
AnyEdge: TypeAlias = PlainEdge | ConditionalEdge


# ---------------------------------------------------------------------------
# What the compiler is told about the world (all optional)


@dataclass(frozen=True, slots=True)
class FlowTool:
    """A catalog tool as the flow compiler sees it: whether it changes
    something (``writes``) and the fact it records on success."""

    name: str
    writes: bool = True
    fact: str | None = None


@dataclass(frozen=True, slots=True)
class FlowMilestone:
    """The milestone that names the flow: the tools its integrations grant and
    the facts its condition reads."""

    playbook: str
    milestone: str
    tools: frozenset[str]
    facts: frozenset[str]


# ---------------------------------------------------------------------------
# Problems


@dataclass(frozen=True, slots=True)
class FlowProblem:
    """One rule broken (``severity`` error) or one readiness warning, and where."""

    source: str
    rule: str
    message: str
    line: int | None = None
    column: int | None = None
    severity: Literal["error", "warning"] = "error"
    node: str | None = None

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}:{self.column}"
        return f"{where}: {self.severity} {self.rule}: {self.message}"


class FlowError(LemongraphError):
    """A flow that is refused. ``problems`` lists every rule broken."""

    code = "invalid_flow"

    def __init__(self, problems: list[FlowProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in problems))


@dataclass(frozen=True)
class FlowReport:
    """What checking a flow found: the compiled flow (None when refused), the
    errors and the readiness warnings."""

    flow: Flow | None
    problems: tuple[FlowProblem, ...]

    @property
    def errors(self) -> tuple[FlowProblem, ...]:
        return tuple(p for p in self.problems if p.severity == "error")

    @property
    def warnings(self) -> tuple[FlowProblem, ...]:
        return tuple(p for p in self.problems if p.severity == "warning")


# ---------------------------------------------------------------------------
# The compiled flow


@dataclass(frozen=True)
class Flow:
    """A validated flow, ready for ``FlowRun``."""

    name: str
    source: str
    spec: FlowSpec
    #: A hash of the canonical spec: a run is only stepped by the flow it started on.
    digest: str
    nodes: Mapping[str, AnyNode] = field(repr=False)
    #: The one edge out of each node that has one, by its ``from``.
    edges: Mapping[str, AnyEdge] = field(repr=False)

    @property
    def version(self) -> str:
        return self.spec.version

    @property
    def start(self) -> str:
        return self.spec.start

    @property
    def channels(self) -> Mapping[str, ChannelSpec]:
        """The declared channels (the built-ins are in ``BUILTIN_CHANNELS``)."""
        return self.spec.state

    @property
    def tools(self) -> tuple[str, ...]:
        return self.spec.tools

    @property
    def guarded(self) -> frozenset[str]:
        """The tools this flow guards with an approval: those of the nodes an
        approval node stands ``before`` (a ``tools`` node's: its whole
        contract). In a playbook, only the flows that guard a tool call it
        (docs/flows.md, "An approval cannot be walked around")."""
        before = {n.before for n in self.spec.nodes if isinstance(n, ApprovalNode)}
        found: set[str] = set()
        for node in self.spec.nodes:
            if node.id not in before:
                continue
            if isinstance(node, ToolNode):
                found.add(node.tool)
            elif isinstance(node, ToolsNode):
                found.update(self.spec.tools)
        return frozenset(found)

    def to_json(self) -> dict[str, Any]:
        """The spec as JSON-ready data, in the file's own field names."""
        return self.spec.model_dump(mode="json", by_alias=True, exclude_defaults=True)


def template_reads(text: str) -> list[tuple[str, int]]:
    """The channels a template reads, with each ``{{`` offset in ``text``."""
    return [(m.group(1), m.start()) for m in TEMPLATE.finditer(text)]


def _name_of(source: str) -> str:
    base = re.split(r"[\\/]", source)[-1]
    for suffix in (".yaml", ".yml", ".json"):
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base


def load_flow(
    text: str,
    source: str = "<flow>",
    name: str | None = None,
    *,
    tools: Mapping[str, FlowTool] | None = None,
    handlers: Collection[str] | None = None,
    routers: Collection[str] | None = None,
    milestone: FlowMilestone | None = None,
) -> Flow:
    """Parse and compile a flow; raises :class:`FlowError` listing every rule
    broken (warnings do not refuse: see :func:`check_flow`)."""
    report = check_flow(
        text, source, name, tools=tools, handlers=handlers, routers=routers, milestone=milestone
    )
    if report.flow is None:
        raise FlowError(list(report.errors))
    return report.flow


def check_flow(
    text: str,
    source: str = "<flow>",
    name: str | None = None,
    *,
    tools: Mapping[str, FlowTool] | None = None,
    handlers: Collection[str] | None = None,
    routers: Collection[str] | None = None,
    milestone: FlowMilestone | None = None,
) -> FlowReport:
    """Validate a flow's text and check its readiness.

    ``name`` defaults to the file name without its suffix. ``tools`` (the
    catalog's), ``handlers`` and ``routers`` (the registered names) are
    checked when given; ``milestone`` adds the checks against the milestone
    that names the flow. Readiness warnings are only looked for in a valid flow.
    """
    checker = _Checker(source, name if name is not None else _name_of(source))
    try:
        located = load_located(text, source)
    except LemongraphError as exc:
        line, column = getattr(exc, "line", None), getattr(exc, "column", None)
        reason = getattr(exc, "reason", exc.message)
        return FlowReport(None, (FlowProblem(source, "INVALID_SOURCE", reason, line, column),))
    checker.located = located
    flow = checker.compile(located.data, tools, handlers, routers, milestone)
    # In the order of the file, as a reader meets them.
    ordered = sorted(checker.problems, key=lambda p: (p.line or 0, p.column or 0))
    return FlowReport(flow, tuple(ordered))


class _Checker:
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
    ) -> Flow | None:
        if not isinstance(data, dict):
            self.at("INVALID_FIELD", "a flow must be a mapping with version, start and nodes", ())
            return None
        if "version" not in data:
            self.at("INVALID_FIELD", 'version: this field is required (version: "1")', ())
            return None
        if data["version"] != "1":
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
        self._references(spec, ids, tools, handlers, routers, milestone)
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
        _Readiness(self, flow, tools, milestone).run()
        return flow

    def _names(self, spec: FlowSpec) -> set[str]:
        for name in spec.state:
            if name in BUILTIN_CHANNELS:
                self.at(
                    "RESERVED_NAME",
                    f"channel {name!r} is built in: every flow has it (docs/flows.md)",
                    ("state", name),
                )
            elif not re.match(_CHANNEL, name):
                self.at(
                    "INVALID_FIELD",
                    f"state.{name}: a channel name is letters, digits and _ (no dots)",
                    ("state", name),
                )
        first: dict[str, int] = {}
        for i, node in enumerate(spec.nodes):
            if node.id in _RESERVED_IDS:
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

    def _references(
        self,
        spec: FlowSpec,
        ids: set[str],
        tools: Mapping[str, FlowTool] | None,
        handlers: Collection[str] | None,
        routers: Collection[str] | None,
        milestone: FlowMilestone | None,
    ) -> None:
        channels = {**{k: v.type for k, v in spec.state.items()}, **BUILTIN_CHANNELS}

        def node_ref(target: str, path: Path, node: str | None, what: str) -> None:
            if target != END and target not in ids:
                self.at("UNKNOWN_NODE", f"{what} {target!r} is not a node", path, node)

        def destination(target: str, path: Path, node: str | None, what: str) -> None:
            if target != END and target not in ids:
                known = ", ".join(sorted(ids))
                self.at(
                    "ROUTE_TO_NOWHERE",
                    f"{what} goes to {target!r}, which is not a node (nodes: {known}; or END)",
                    path,
                    node,
                )

        def channel_ref(name: str, path: Path, node: str | None, what: str) -> None:
            if name not in channels:
                self.at("UNKNOWN_CHANNEL", f"{what} {name!r} is not a declared channel", path, node)

        def written(name: str | None, path: Path, node: str) -> None:
            if name is None:
                return
            if name in BUILTIN_CHANNELS:
                self.at(
                    "BUILTIN_CHANNEL_WRITTEN",
                    f"{name!r} is built in and read-only: write a channel of your own",
                    path,
                    node,
                )
            else:
                channel_ref(name, path, node, "output")

        def template(text: str, path: Path, node: str | None) -> None:
            for name, offset in template_reads(text):
                if name not in channels:
                    self.at(
                        "TEMPLATE_UNKNOWN_CHANNEL",
                        f"{{{{{name}}}}} reads {name!r}, which is not a declared channel",
                        path,
                        node,
                        offset,
                    )

        def template_args(value: Any, path: Path, node: str) -> None:
            if isinstance(value, str):
                template(value, path, node)
            elif isinstance(value, dict):
                for k, v in value.items():
                    template_args(v, (*path, str(k)), node)
            elif isinstance(value, list):
                for j, v in enumerate(value):
                    template_args(v, (*path, j), node)

        if spec.start != END and spec.start not in ids:
            node_ref(spec.start, ("start",), None, "start")
        elif spec.start == END:
            self.at("UNKNOWN_NODE", "start must name a node, not END", ("start",))
        for key in ("inputs", "outputs"):
            for j, name in enumerate(getattr(spec, key)):
                channel_ref(name, (key, j), None, key[:-1])
        if spec.reply is not None:
            channel_ref(spec.reply, ("reply",), None, "reply")
            if spec.reply in channels and spec.reply not in spec.outputs:
                listed = ", ".join(spec.outputs) or "none"
                self.at(
                    "REPLY_NOT_AN_OUTPUT",
                    f"reply {spec.reply!r} is not one of the flow's outputs ({listed}): "
                    f"add it to outputs",
                    ("reply",),
                )
        by_id = {n.id: n for n in spec.nodes}
        for i, node in enumerate(spec.nodes):
            here: Path = ("nodes", i)
            if node.on_error is not None:
                destination(node.on_error, (*here, "onError"), node.id, "onError")
            if isinstance(node, LlmNode):
                template(node.prompt, (*here, "prompt"), node.id)
                written(node.output, (*here, "output"), node.id)
                if node.schema_ is not None:
                    self._schema(node, spec, (*here, "schema"))
            elif isinstance(node, ToolNode):
                if node.tool not in spec.tools:
                    contract = ", ".join(spec.tools) or "none"
                    self.at(
                        "TOOL_OUTSIDE_CONTRACT",
                        f"tool {node.tool!r} is not in the flow's tools ({contract})",
                        (*here, "tool"),
                        node.id,
                    )
                template_args(node.args, (*here, "args"), node.id)
                written(node.output, (*here, "output"), node.id)
            elif isinstance(node, ToolsNode):
                channel_ref(node.calls, (*here, "calls"), node.id, "calls")
                written(node.output, (*here, "output"), node.id)
            elif isinstance(node, AskNode):
                template(node.ask, (*here, "ask"), node.id)
                written(node.output, (*here, "output"), node.id)
                self._expires(node.expires, (*here, "expires"), node.id)
            elif isinstance(node, ApprovalNode):
                node_ref(node.before, (*here, "before"), node.id, "before")
                if node.before == END:
                    self.at(
                        "UNKNOWN_NODE",
                        "before must name a node, not END",
                        (*here, "before"),
                        node.id,
                    )
                destination(node.on_reject, (*here, "onReject"), node.id, "onReject")
                template(node.ask, (*here, "ask"), node.id)
                for j, name in enumerate(node.show):
                    channel_ref(name, (*here, "show", j), node.id, "show")
                self._expires(node.expires, (*here, "expires"), node.id)
            elif isinstance(node, FanoutNode):
                channel_ref(node.over, (*here, "over"), node.id, "over")
                if node.over in channels and channels[node.over] != "list":
                    self.at(
                        "FANOUT_OVER_NOT_LIST",
                        f"fan-out over {node.over!r}, a {channels[node.over]} channel: "
                        "a fan-out spreads over a list",
                        (*here, "over"),
                        node.id,
                    )
                written(node.as_, (*here, "as"), node.id)
                node_ref(node.to, (*here, "to"), node.id, "to")
                target = by_id.get(node.to)
                if node.to == node.id or isinstance(target, FanoutNode | ApprovalNode):
                    self.at(
                        "FANOUT_BAD_TARGET",
                        "a fan-out's target runs once per item: it cannot be the fan-out "
                        "itself, another fan-out or an approval",
                        (*here, "to"),
                        node.id,
                    )
                elif target is not None:
                    self._fanout_reducer(node, target, spec)
            elif isinstance(node, HandlerNode):
                if handlers is not None and node.handler not in handlers:
                    self.at(
                        "UNKNOWN_HANDLER",
                        f"handler {node.handler!r} is not registered",
                        (*here, "handler"),
                        node.id,
                    )
                for j, name in enumerate(node.reads or ()):
                    channel_ref(name, (*here, "reads", j), node.id, "reads")
                written(node.output, (*here, "output"), node.id)
        for j, tool in enumerate(spec.tools):
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
        seen: dict[str, int] = {}
        for k, edge in enumerate(spec.edges):
            here = ("edges", k)
            node_ref(edge.from_, (*here, "from"), None, "from")
            source = by_id.get(edge.from_)
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
                destination(edge.to, (*here, "to"), edge.from_, "the edge")
                continue
            if (edge.router is None) == (edge.when is None):
                self.at(
                    "CONDITIONAL_ROUTER",
                    "a conditional edge chooses its route by a router or by when, exactly one",
                    here,
                    edge.from_,
                )
            if edge.router is not None and routers is not None and edge.router not in routers:
                self.at(
                    "UNKNOWN_ROUTER",
                    f"router {edge.router!r} is not registered",
                    (*here, "router"),
                    edge.from_,
                )
            if edge.when is not None:
                channel_ref(edge.when.split(".")[0], (*here, "when"), edge.from_, "when reads")
            for j, name in enumerate(edge.reads or ()):
                channel_ref(name, (*here, "reads", j), edge.from_, "reads")
            for route, to in edge.routes.items():
                destination(to, (*here, "routes", route), edge.from_, f"route {route!r}")
            if edge.limits and not spec.state:
                self.at(
                    "LIMIT_WITHOUT_STATE",
                    "a route limit needs the flow to declare state (the run counts in it)",
                    (*here, "limits"),
                    edge.from_,
                )
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
                        f"then {limit.then!r} must name another route of the edge "
                        f"(routes: {routes})",
                        (*here, "limits", route, "then"),
                        edge.from_,
                    )
                if limit.per is not None:
                    node_ref(limit.per, (*here, "limits", route, "per"), edge.from_, "per")

    def _expires(self, value: str | None, path: Path, node: str) -> None:
        if value is None:
            return
        try:
            parse_duration(value)
        except (ValueError, LemongraphError) as exc:
            self.at("INVALID_FIELD", f"expires: {exc}", path, node)

    def _schema(self, node: LlmNode, spec: FlowSpec, path: Path) -> None:
        assert node.schema_ is not None
        problems = schema_problems(node.schema_)
        for where, message in problems:
            self.at("SCHEMA_OUTSIDE_SUBSET", message, (*path, *where), node.id)
        channel = spec.state.get(node.output)
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

    def _fanout_reducer(self, fanout: FanoutNode, target: AnyNode, spec: FlowSpec) -> None:
        out = _output(target)
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
        seen = _reachable(spec.start, nodes, edges)
        for node in spec.nodes:
            if node.id not in seen:
                self.at(
                    "UNREACHABLE_NODE",
                    f"node {node.id!r} is unreachable: no path from start "
                    f"({spec.start}) leads to it",
                    ("nodes", index[node.id], "id"),
                    node.id,
                )


def _output(node: AnyNode) -> str | None:
    if isinstance(node, LlmNode | ToolsNode | AskNode):
        return node.output
    if isinstance(node, ToolNode | HandlerNode):
        return node.output
    return None


def successors(node: AnyNode, edges: Mapping[str, AnyEdge]) -> Iterator[str]:
    """Every node (or END) a run can go to from ``node``."""
    if node.on_error is not None:
        yield node.on_error
    if isinstance(node, FanoutNode):
        yield node.to
    elif isinstance(node, ApprovalNode):
        yield node.before
        yield node.on_reject
    edge = edges.get(node.id)
    if isinstance(edge, PlainEdge):
        yield edge.to
    elif isinstance(edge, ConditionalEdge):
        yield from edge.routes.values()


def _reachable(
    start: str,
    nodes: Mapping[str, AnyNode],
    edges: Mapping[str, AnyEdge],
    skip: Collection[str] = (),
) -> set[str]:
    seen: set[str] = set()
    stack = [start]
    while stack:
        here = stack.pop()
        if here in seen or here not in nodes or here in skip:
            continue
        seen.add(here)
        stack.extend(successors(nodes[here], edges))
    return seen


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


# ---------------------------------------------------------------------------
# Readiness


class _Readiness:
    """The warnings of a valid flow (docs/flows.md, "Readiness warnings")."""

    def __init__(
        self,
        checker: _Checker,
        flow: Flow,
        tools: Mapping[str, FlowTool] | None,
        milestone: FlowMilestone | None,
    ) -> None:
        self.c = checker
        self.flow = flow
        self.tools = tools
        self.milestone = milestone
        self.index = {n.id: i for i, n in enumerate(flow.spec.nodes)}

    def run(self) -> None:
        self.write_without_approval()
        self.conversation_unread()
        self.fanout_tail()
        self.channels()
        self.claim_only()

    def where(self, node: str) -> Path:
        return ("nodes", self.index[node], "id")

    def write_without_approval(self) -> None:
        if self.tools is None:
            return  # whether a tool writes is in the catalog
        flow = self.flow
        for node in flow.spec.nodes:
            if isinstance(node, ToolNode):
                names: tuple[str, ...] = (node.tool,)
            elif isinstance(node, ToolsNode):
                names = flow.tools
            else:
                continue
            writes = [t for t in names if t in self.tools and self.tools[t].writes]
            if not writes:
                continue
            guards = {
                n.id for n in flow.spec.nodes if isinstance(n, ApprovalNode) and n.before == node.id
            }
            if node.id == flow.start or self._reaches_around(node.id, guards):
                self.c.warn(
                    "WRITE_WITHOUT_APPROVAL",
                    f"{node.id} calls {', '.join(writes)}, which writes, and a path reaches it "
                    f"with no approval before it (an approval node with before: {node.id})",
                    self.where(node.id),
                    node.id,
                )

    def _reaches_around(self, target: str, guards: set[str]) -> bool:
        """Whether ``target`` is entered from anything but one of ``guards``."""
        flow = self.flow
        seen = _reachable(flow.start, flow.nodes, flow.edges, skip={target})
        for here in seen:
            if here in guards:
                node = flow.nodes[here]
                assert isinstance(node, ApprovalNode)
                if node.on_reject == target or node.on_error == target:
                    return True
                continue
            if target in successors(flow.nodes[here], flow.edges):
                return True
        return False

    def conversation_unread(self) -> None:
        spec = self.flow.spec
        llms = [n for n in spec.nodes if isinstance(n, LlmNode)]
        talks = spec.conversation or any(isinstance(n, AskNode) for n in spec.nodes)
        if not llms or not talks:
            return
        if any(name == "conversation" for n in llms for name, _ in template_reads(n.prompt)):
            return
        self.c.warn(
            "CONVERSATION_UNREAD",
            "this flow talks with the person, and no llm prompt reads {{conversation}} "
            f"(llm nodes: {', '.join(n.id for n in llms)}): the model will not know what "
            "was said",
            self.where(llms[0].id),
            llms[0].id,
        )

    def fanout_tail(self) -> None:
        flow = self.flow
        for node in flow.spec.nodes:
            if not isinstance(node, FanoutNode):
                continue
            guarded = node.id != flow.start
            for other in flow.spec.nodes:
                if node.id not in set(successors(other, flow.edges)):
                    continue
                edge = flow.edges.get(other.id)
                around = isinstance(edge, ConditionalEdge) and any(
                    t != node.id for t in edge.routes.values()
                )
                enters_otherwise = (
                    other.on_error == node.id
                    or isinstance(other, ApprovalNode | FanoutNode)
                    or isinstance(edge, PlainEdge)
                )
                if not around or enters_otherwise:
                    guarded = False
            if not guarded:
                self.c.warn(
                    "FANOUT_MAY_SILENCE_THE_TAIL",
                    f"{node.id} spreads over {node.over!r}; when it is empty no copy runs and "
                    f"nothing after {node.to} does either. Route around it from the node before "
                    f"(a conditional edge with a route for the empty case)",
                    self.where(node.id),
                    node.id,
                )

    def channels(self) -> None:
        flow = self.flow
        spec = flow.spec
        reads_all = any(isinstance(n, HandlerNode) and n.reads is None for n in spec.nodes) or any(
            isinstance(e, ConditionalEdge) and e.router and e.reads is None for e in spec.edges
        )
        reads = _reads(spec)
        writes: dict[str, set[str]] = {}
        for node in spec.nodes:
            out = _output(node)
            if isinstance(node, FanoutNode):
                out = node.as_
            if out is not None:
                writes.setdefault(out, set()).add(node.id)
        filled = set(spec.inputs) | {
            k for k, v in spec.state.items() if v.default is not None or v.remembers
        }
        for name in spec.state:
            if name in writes or name in filled:
                continue
            shown = [n for n in spec.nodes if isinstance(n, ApprovalNode) and name in n.show]
            if shown:
                self.c.warn(
                    "VIEW_NEVER_SHOWN",
                    f"{shown[0].id} shows {name!r}, which nothing fills (no node writes it, "
                    "it is no input and has no default): the person sees nothing there",
                    ("nodes", self.index[shown[0].id], "show", shown[0].show.index(name)),
                    shown[0].id,
                )
            elif name in reads:
                self.c.warn(
                    "CHANNEL_NEVER_WRITTEN",
                    f"{name!r} is read ({', '.join(sorted(reads[name]))}) and nothing fills it "
                    "(no node writes it, it is no input and has no default)",
                    ("state", name),
                )
        for name in spec.state:
            if name in reads or name in spec.outputs or reads_all:
                continue
            self.c.warn(
                "CHANNEL_NEVER_READ",
                f"{name!r} is declared and nothing reads it (no template, when, fan-out, "
                "view or handler) and it is not an output",
                ("state", name),
            )
        self.forgets(reads, writes, filled)

    def forgets(
        self, reads: Mapping[str, set[str]], writes: Mapping[str, set[str]], filled: set[str]
    ) -> None:
        flow = self.flow
        spec = flow.spec
        # Forward analysis: the channels that may still be unwritten on entry to
        # each node (some path from start reaches it without a write).
        candidates = {
            k
            for k, v in spec.state.items()
            if k not in filled and k in writes and v.reducer is None
        }
        if not candidates:
            return
        unwritten: dict[str, set[str]] = {spec.start: set(candidates)}
        stack = [spec.start]
        while stack:
            here = stack.pop()
            node = flow.nodes[here]
            out = unwritten[here] - {_output(node) or "", getattr(node, "as_", "")}
            for nxt in successors(node, flow.edges):
                if nxt == END:
                    continue
                if nxt == getattr(node, "to", None) and isinstance(node, FanoutNode):
                    out = out - {node.as_}
                before = unwritten.get(nxt)
                merged = out if before is None else before | out
                if before is None or merged != before:
                    unwritten[nxt] = set(merged)
                    stack.append(nxt)
        for node in spec.nodes:
            for name in sorted(_node_reads(node) & unwritten.get(node.id, set())):
                self.c.warn(
                    "CHANNEL_FORGETS_BETWEEN_TURNS",
                    f"{node.id} reads {name!r}, and a path reaches it before anything in the run "
                    "writes it; a run starts from defaults and inputs, so without remembers "
                    "(or a default) it is empty there",
                    self.where(node.id),
                    node.id,
                )

    def claim_only(self) -> None:
        if self.milestone is None or self.tools is None:
            return
        flow = self.flow
        facts: dict[str, str] = {}
        for node in flow.spec.nodes:
            names: tuple[str, ...] = ()
            if isinstance(node, ToolNode):
                names = (node.tool,)
            elif isinstance(node, ToolsNode):
                names = flow.tools
            for tool in names:
                fact = self.tools[tool].fact if tool in self.tools else None
                if fact is not None:
                    facts[fact] = tool
        if facts.keys() & self.milestone.facts:
            return
        wanted = ", ".join(sorted(self.milestone.facts)) or "none"
        self.c.warn(
            "CLAIM_ONLY_PATH",
            f"milestone {self.milestone.milestone} is done on {wanted}, and no tool this flow "
            "calls records any of them: only what the model says could get it there, and "
            "what the model says is never evidence",
            ("tools",) if flow.spec.tools else ("start",),
        )


def _node_reads(node: AnyNode) -> set[str]:
    out: set[str] = set()
    texts: list[str] = []
    if isinstance(node, LlmNode):
        texts.append(node.prompt)
    elif isinstance(node, ToolNode):
        texts.extend(_strings(node.args))
    elif isinstance(node, AskNode | ApprovalNode):
        texts.append(node.ask)
        if isinstance(node, ApprovalNode):
            out.update(node.show)
    elif isinstance(node, FanoutNode):
        out.add(node.over)
    elif isinstance(node, ToolsNode):
        out.add(node.calls)
    elif isinstance(node, HandlerNode):
        out.update(node.reads or ())
    for text in texts:
        out.update(name for name, _ in template_reads(text))
    return out - set(BUILTIN_CHANNELS)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _reads(spec: FlowSpec) -> dict[str, set[str]]:
    """Channel → the nodes (and edges) that read it."""
    out: dict[str, set[str]] = {}
    for node in spec.nodes:
        for name in _node_reads(node):
            out.setdefault(name, set()).add(node.id)
    for edge in spec.edges:
        if isinstance(edge, ConditionalEdge):
            names = set(edge.reads or ())
            if edge.when is not None:
                names.add(edge.when.split(".")[0])
            for name in names:
                out.setdefault(name, set()).add(f"edge from {edge.from_}")
    return out
