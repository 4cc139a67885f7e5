"""A valid flow's readiness warnings (docs/flows.md, "Readiness warnings"):
what does not refuse a flow but will likely surprise its author.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from compiler.flows._flowspec import (
    BUILTIN_CHANNELS,
    END,
    HISTORY,
    TEMPLATE,
    AnyNode,
    ApprovalNode,
    AskNode,
    ConditionalEdge,
    FanoutNode,
    Flow,
    FlowMilestone,
    FlowSpec,
    FlowTool,
    HandlerNode,
    LlmNode,
    Path,
    PlainEdge,
    ToolNode,
    ToolsNode,
    builtin_channels,
    output_of,
    reachable,
    successors,
    template_reads,
)

__all__ = ["Readiness", "Warner"]


class Warner(Protocol):
    """Where a warning goes (the flow's checker)."""

    def warn(self, rule: str, message: str, path: Path, node: str | None = None) -> None: ...


class Readiness:
    """The warnings of a valid flow (docs/flows.md, "Readiness warnings")."""

    def __init__(
        self,
        checker: Warner,
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
        self.asks()
        self.schema_missing()
        self.descriptions()

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
        seen = reachable(flow.start, flow.nodes, flow.edges, skip={target})
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
        """A flow that talks with the person whose prompts read neither the
        conversation nor, when it is a conversational flow, its ``history``
        (docs/flows.md, "Conversational flows")."""
        spec = self.flow.spec
        llms = [n for n in spec.nodes if isinstance(n, LlmNode)]
        talks = spec.conversation or any(isinstance(n, AskNode) for n in spec.nodes)
        if not llms or not talks:
            return
        said = {"conversation", HISTORY} if spec.conversation else {"conversation"}
        if any(name in said for n in llms for name, _ in template_reads(n.prompt)):
            return
        which = "{{conversation}} or {{history}}" if spec.conversation else "{{conversation}}"
        self.c.warn(
            "CONVERSATION_UNREAD",
            f"this flow talks with the person, and no llm prompt reads {which} "
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
        spec = self.flow.spec
        reads_all = _reads_all(spec)
        reads = _reads(spec)
        writes = _writes(spec)
        filled = _filled(spec)
        self.never_filled(reads, writes, filled)
        self.never_read(reads, reads_all)
        self.forgets(reads, writes, filled)

    def never_filled(
        self, reads: Mapping[str, set[str]], writes: Mapping[str, set[str]], filled: set[str]
    ) -> None:
        """Channels nothing fills that a view shows or something reads."""
        spec = self.flow.spec
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

    def never_read(self, reads: Mapping[str, set[str]], reads_all: bool) -> None:
        """Declared channels nothing reads and no output names."""
        spec = self.flow.spec
        for name in spec.state:
            if name in reads or name in spec.outputs or reads_all:
                continue
            self.c.warn(
                "CHANNEL_NEVER_READ",
                f"{name!r} is declared and nothing reads it (no template, when, fan-out, "
                "view or handler) and it is not an output",
                ("state", name),
            )

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
            out = unwritten[here] - {output_of(node) or "", getattr(node, "as_", "")}
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
                known = self.tools.get(tool)
                for fact in (known.fact, known.failure_fact) if known is not None else ():
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

    # -- what LGFlow's readiness says too (docs/flows.md, "Coming from LGFlow") --

    def kind(self, name: str) -> str | None:
        spec = self.flow.spec.state.get(name)
        return spec.type if spec is not None else builtin_channels(self.flow.spec).get(name)

    def asks(self) -> None:
        """An ask that overwrites an input; a question that puts a whole object
        or list in its sentence."""
        spec = self.flow.spec
        for node in spec.nodes:
            if isinstance(node, AskNode) and node.output in spec.inputs:
                self.c.warn(
                    "ASK_OVERWRITES_INPUT",
                    f"{node.id} writes the person's answer to {node.output!r}, which the run is "
                    "handed as an input: the answer replaces it (give the answer a channel of "
                    "its own)",
                    ("nodes", self.index[node.id], "output"),
                    node.id,
                )
            if not isinstance(node, AskNode | ApprovalNode):
                continue
            for match in TEMPLATE.finditer(node.ask):
                name, path = match.group(1), match.group(2)
                kind = self.kind(name)
                if path or kind not in ("object", "list"):
                    continue
                self.c.warn(
                    "VIEW_SHOWS_RAW_DATA",
                    f"{node.id} puts the whole {kind} {name!r} in its question: a person reads "
                    f"a run of fields there, not a sentence (read what is meant, "
                    f"{{{{{name}.field}}}}"
                    + (
                        ", or show it: show lays it out as fields)"
                        if isinstance(node, ApprovalNode)
                        else ")"
                    ),
                    ("nodes", self.index[node.id], "ask"),
                    node.id,
                )

    def schema_missing(self) -> None:
        """An llm node with no schema filling an object or list channel (an
        append channel takes each reply as one item: text is fine there)."""
        for node in self.flow.spec.nodes:
            if not isinstance(node, LlmNode) or node.schema_ is not None:
                continue
            channel = self.flow.spec.state.get(node.output)
            if channel is None or channel.type not in ("object", "list"):
                continue
            if channel.reducer == "append":
                continue
            self.c.warn(
                "SCHEMA_MISSING",
                f"{node.id} fills the {channel.type} {node.output!r} from the model with no "
                "schema: the reply is read as JSON of any shape (say its shape: schema)",
                ("nodes", self.index[node.id], "id"),
                node.id,
            )

    def descriptions(self) -> None:
        """Code nobody described (a handler, a router's routes), and
        descriptions too thin to say anything (under four words)."""
        spec = self.flow.spec
        for node in spec.nodes:
            if isinstance(node, HandlerNode) and not node.description.strip():
                self.c.warn(
                    "DESCRIPTION_MISSING",
                    f"{node.id} runs handler {node.handler}, and says nowhere what it does "
                    "(description)",
                    ("nodes", self.index[node.id], "id"),
                    node.id,
                )
        for i, edge in enumerate(spec.edges):
            if isinstance(edge, ConditionalEdge) and edge.router is not None:
                missing = [r for r in edge.routes if not edge.means.get(r, "").strip()]
                if missing:
                    self.c.warn(
                        "DESCRIPTION_MISSING",
                        f"router {edge.router} chooses between routes, and nothing says when "
                        f"it takes {', '.join(missing)} (means: a sentence per route)",
                        ("edges", i, "router"),
                        edge.from_,
                    )
        for path, text in _described(spec):
            if text.strip() and len(text.split()) < 4:
                self.c.warn(
                    "DESCRIPTION_THIN",
                    f"{text.strip()!r} is under four words: say what it is, for whoever "
                    "reads the flow (and a person shown it)",
                    path,
                )


def _described(spec: FlowSpec) -> Iterator[tuple[Path, str]]:
    """Every description a flow gives, and where."""
    yield ("description",), spec.description
    for name, channel in spec.state.items():
        yield ("state", name, "description"), channel.description
    for i, node in enumerate(spec.nodes):
        yield ("nodes", i, "description"), node.description
    for i, edge in enumerate(spec.edges):
        yield ("edges", i, "description"), edge.description
        if isinstance(edge, ConditionalEdge):
            for route, sentence in edge.means.items():
                yield ("edges", i, "means", route), sentence
    for name, paragraph in spec.requires.services.items():
        yield ("requires", "services", name), paragraph


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


def _reads_all(spec: FlowSpec) -> bool:
    """Whether a handler or a router may read any channel (it names none)."""
    return any(isinstance(n, HandlerNode) and n.reads is None for n in spec.nodes) or any(
        isinstance(e, ConditionalEdge) and e.router and e.reads is None for e in spec.edges
    )


def _writes(spec: FlowSpec) -> dict[str, set[str]]:
    """Channel → the nodes that write it (a fan-out writes its ``as``)."""
    writes: dict[str, set[str]] = {}
    for node in spec.nodes:
        out = output_of(node)
        if isinstance(node, FanoutNode):
            out = node.as_
        if out is not None:
            writes.setdefault(out, set()).add(node.id)
    return writes


def _filled(spec: FlowSpec) -> set[str]:
    """The channels a run starts with: inputs, defaults and remembered ones."""
    return set(spec.inputs) | {
        k for k, v in spec.state.items() if v.default is not None or v.remembers
    }


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
