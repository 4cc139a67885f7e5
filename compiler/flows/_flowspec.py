"""Flows: a milestone's work described as data (docs/flows.md).

The model of a flow file as authors write it (``FlowSpec``), the rules and
readiness warnings it is checked against, its problems, the compiled ``Flow``
that the step function (``FlowRun``) runs, and the graph a flow's nodes and
edges draw. Validation is in ``_flowcheck.py``, readiness in ``_readiness.py``,
loading in ``_flow.py``. Pure: the text is passed in; files are read in stream/.
"""

from __future__ import annotations

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
)
from topics import Approver

from compiler._errors import LemongraphError

__all__ = [
    "BUILTIN_CHANNELS",
    "CHANNEL_NAME",
    "END",
    "FLOW_RULES",
    "FLOW_WARNINGS",
    "HISTORY",
    "RESERVED_IDS",
    "TEMPLATE",
    "AnyEdge",
    "AnyNode",
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
    "FlowWorld",
    "HandlerNode",
    "Limit",
    "LlmNode",
    "McpNeed",
    "Path",
    "PlainEdge",
    "Requires",
    "Retry",
    "ToolNode",
    "ToolsNode",
    "builtin_channels",
    "output_of",
    "reachable",
    "successors",
    "template_reads",
]

#: The reserved destination: the run finishes.
END = "END"
#: Channels every flow has without declaring them (docs/flows.md, "Built-in
#: channels"): the job's conversation so far, its subject's current facts, and
#: the last failure.
BUILTIN_CHANNELS: Mapping[str, str] = {
    "conversation": "list",
    "last_error": "object",
    # The job's subject's current facts (docs/flows.md, "Channels"; docs/memory.md).
    "memory": "list",
}
#: The channel a conversational flow has besides (docs/flows.md, "Conversational
#: flows"): one ``{at, asked, answered}`` per past exchange of the flow in the
#: job, oldest first (LGFlow's ``history``).
HISTORY = "history"
#: Names no node can have.
RESERVED_IDS = (END, "START")


def builtin_channels(spec: FlowSpec) -> Mapping[str, str]:
    """The channels ``spec`` has without declaring them, with their types:
    ``BUILTIN_CHANNELS``, and ``history`` when it is a conversation."""
    if not spec.conversation:
        return BUILTIN_CHANNELS
    return {**BUILTIN_CHANNELS, HISTORY: "list"}


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
    "CONVERSATION_NO_REPLY": "a conversational flow that names no reply: the person's message "
    "would go unanswered",
    "TOOL_OUTSIDE_CONTRACT": "a tool node names a tool not in the flow's tools",
    "UNKNOWN_TOOL": "a tool the catalog does not have",
    "UNKNOWN_HANDLER": "a handler that is not registered",
    "UNKNOWN_ROUTER": "a router that is not registered",
    "TOOL_NOT_IN_INTEGRATIONS": "a flow tool its milestone's integrations do not grant",
    "FLOW_NOT_FOUND": "a milestone names a flow there is no file for",
    "APPROVAL_BYPASS": "a tool a flow guards with an approval, granted to another milestone's "
    "agent or called by another flow of the playbook",
    "MEANS_UNKNOWN_ROUTE": "a route sentence (means) for a route the edge lacks",
    # An LGFlow file (docs/flows.md, "Coming from LGFlow").
    "LGFLOW_FEATURE_VERSION": "an LGFlow file uses a feature its version does not have",
    "LGFLOW_NOT_TRANSLATED": "an LGFlow file says what this language cannot",
    "FILE_CHANNEL": "accept on a channel that is not a file channel or that is not a media "
    "type list; a file channel with a reducer or a default that is not a file value",
}

#: Every readiness warning (docs/flows.md, "Readiness warnings"), by code.
FLOW_WARNINGS: Mapping[str, str] = {
    "WRITE_WITHOUT_APPROVAL": "a tool that writes, reachable with no approval before it",
    "CONVERSATION_UNREAD": "a flow that talks to the person and no prompt reads the conversation "
    "(or, in a conversational flow, its history)",
    "FANOUT_MAY_SILENCE_THE_TAIL": "a fan-out over a list that may be empty, with no way round",
    "CHANNEL_FORGETS_BETWEEN_TURNS": "a channel read before the run writes it, with nothing "
    "to carry it (no remembers, default or input)",
    "CHANNEL_NEVER_WRITTEN": "a channel read that nothing fills",
    "CHANNEL_NEVER_READ": "a channel written that nothing reads and no output names",
    "VIEW_NEVER_SHOWN": "an approval shows a channel nothing fills",
    "CLAIM_ONLY_PATH": "no tool on any path records a fact the milestone's condition reads",
    # What LGFlow's readiness says too (docs/flows.md, "Coming from LGFlow").
    "ASK_OVERWRITES_INPUT": "an ask node writes a channel the run is handed as an input",
    "VIEW_SHOWS_RAW_DATA": "a question or approval puts a whole object or list in its sentence",
    "SCHEMA_MISSING": "an llm node with no schema fills an object or list channel",
    "DESCRIPTION_MISSING": "a handler node, or a router's routes, described nowhere",
    "DESCRIPTION_THIN": "a description under four words",
    # requires (docs/flows.md, "What a flow requires"), against the catalog and
    # the environment flow check runs in.
    "ENV_NOT_SET": "a variable requires.env names is not set",
    "PACKAGE_MISSING": "a package requires.packages names is not installed",
    "MCP_PACKAGE_MISSING": "an MCP server started by a command, with its package not named "
    "or not installed",
    "SERVICE_NOT_DECLARED": "an MCP server used and not in requires.mcp, or required and not "
    "declared by the catalog",
    # An LGFlow file (docs/flows.md, "Coming from LGFlow").
    "LGFLOW_FILE": "a file written for LGFlow, read through its translation",
}

_IDENT = r"^[A-Za-z_][A-Za-z0-9_\-]*$"
#: What a channel may be called.
CHANNEL_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
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
    #: What each route means, a sentence per route (LGFlow's ``when``).
    means: dict[str, str] = Field(default_factory=dict)


def _edge_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return "conditional" if kind is not None else "plain"


Edge: TypeAlias = Annotated[
    Annotated[PlainEdge, Tag("plain")] | Annotated[ConditionalEdge, Tag("conditional")],
    Discriminator(_edge_kind),
]


class McpNeed(_Spec):
    """An MCP server a flow needs: the package (a Python distribution) that
    runs it, when the catalog starts it by a command."""

    package: str | None = None


class Requires(_Spec):
    """What a flow needs where it runs (docs/flows.md, "What a flow requires"):
    environment variables, packages (name → version wanted), services (name →
    a paragraph saying what it is) and MCP servers (the catalog's, by name)."""

    env: tuple[str, ...] = ()
    packages: dict[str, str] = Field(default_factory=dict)
    services: dict[str, str] = Field(default_factory=dict)
    mcp: dict[str, McpNeed] = Field(default_factory=dict)


class FlowSpec(_Spec):
    """A flow file as written (docs/flows.md)."""

    version: str
    description: str = ""
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    #: The output the person is told when the run finishes (docs/flows.md,
    #: "A reply to the person"): one of ``outputs``.
    reply: str | None = None
    #: The flow is a conversation with the person (docs/flows.md,
    #: "Conversational flows"): a run per message of the person, its ``reply``
    #: the answer, and the built-in ``history`` channel.
    conversation: StrictBool = False
    requires: Requires = Field(default_factory=Requires)
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
    something (``writes``), the fact it records on success and the one it
    records when it ran and failed (a command's ``records_on_failure``)."""

    name: str
    writes: bool = True
    fact: str | None = None
    failure_fact: str | None = None
    #: The catalog's MCP server the tool is one of (None: not an MCP tool).
    server: str | None = None


@dataclass(frozen=True, slots=True)
class FlowWorld:
    """Where ``flow check`` runs, for ``requires`` (docs/flows.md, "What a flow
    requires"): the environment variables set, the distributions installed
    (their names as ``package_key`` gives them), and the catalog's MCP servers
    (name → whether a command starts it). None: not known, not checked."""

    variables: frozenset[str] | None = None
    packages: frozenset[str] | None = None
    servers: Mapping[str, bool] | None = None


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


def output_of(node: AnyNode) -> str | None:
    """The channel a node writes, if any."""
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


def reachable(
    start: str,
    nodes: Mapping[str, AnyNode],
    edges: Mapping[str, AnyEdge],
    skip: Collection[str] = (),
) -> set[str]:
    """The nodes a run can reach from ``start`` (not through ``skip``)."""
    seen: set[str] = set()
    stack = [start]
    while stack:
        here = stack.pop()
        if here in seen or here not in nodes or here in skip:
            continue
        seen.add(here)
        stack.extend(successors(nodes[here], edges))
    return seen
