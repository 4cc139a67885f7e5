"""An LGFlow file (versions 0.1–0.17) read into this language (docs/flows.md,
"Coming from LGFlow"): a pure translation of the data, the changes it made
(each at its place in the LGFlow file), and what it cannot translate.

What maps to what: untyped ``{id, handler}`` nodes are ``handler`` nodes; an
``approval`` node property is an ``approval`` node in front of the node; the
route sentences LGFlow keeps under ``when`` are ``means`` (ours routes by
``when``); tool objects are names (their descriptions belong to the catalog);
``retry.maxAttempts`` is ``retry.max_attempts``; a conversation (a run per
message, its ``{{history}}`` built in) says which output answers the message
(``reply``); two plain edges out of one node (run side by side in LGFlow) run
one after the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from compiler._source import Located
from compiler.flows.lgflow._features import Path, features_used, lgflow_version

__all__ = ["Change", "Refusal", "Translation", "dump_flow", "relocate", "translate_lgflow"]

#: The order of a flow file's fields as this language writes them.
_ORDER = (
    "version",
    "description",
    "inputs",
    "outputs",
    "reply",
    "conversation",
    "requires",
    "state",
    "tools",
    "start",
    "nodes",
    "edges",
)
_TYPED = ("llm", "tool", "tools", "fanout", "ask")


@dataclass(frozen=True, slots=True)
class Change:
    """What the translation changed, at ``path`` of the LGFlow file."""

    path: Path
    was: str
    now: str


@dataclass(frozen=True, slots=True)
class Refusal:
    """What cannot be read, at ``path`` of the LGFlow file."""

    path: Path
    rule: str
    message: str


@dataclass(frozen=True)
class Translation:
    """The file in this language (``data``), the LGFlow ``version`` it was
    written for, the changes, the refusals (none: ``data`` is the flow), and,
    by path in ``data``, the path of the LGFlow file it came from (``origin``;
    a path not there came from the same path)."""

    version: str
    data: dict[str, Any]
    changes: tuple[Change, ...]
    refusals: tuple[Refusal, ...]
    origin: Mapping[Path, Path] = field(repr=False)

    def old_path(self, path: Path) -> Path:
        """The path in the LGFlow file that ``path`` (in ``data``) came from."""
        for end in range(len(path), -1, -1):
            found = self.origin.get(tuple(path[:end]))
            if found is not None:
                return (*found, *path[end:])
        return path


def translate_lgflow(data: Mapping[str, Any]) -> Translation:
    """Read an LGFlow file's data (its ``version`` one of ``"0.1"``–``"0.17"``)."""
    version = str(data.get("version"))
    declared = lgflow_version(version)
    assert declared is not None, "not an LGFlow version"
    refusals = [
        Refusal(
            f.path,
            "LGFLOW_FEATURE_VERSION",
            f'{f.name} requires version "{f.version}" or later (the file says "{version}")',
        )
        for f in features_used(data)
        if (lgflow_version(f.version) or (0, 0)) > declared
    ]
    if refusals:
        return Translation(version, dict(data), (), tuple(refusals), {})
    return _Translator(data, version).run()


class _Translator:
    def __init__(self, data: Mapping[str, Any], version: str) -> None:
        self.src = data
        self.version = version
        self.changes: list[Change] = []
        self.refusals: list[Refusal] = []
        self.origin: dict[Path, Path] = {}
        #: Node id → the id a run now enters it by (its approval node's).
        self.entry: dict[str, str] = {}
        #: A conversation: its ``history`` is built in here as in LGFlow.
        self.conversation = data.get("conversation") is True

    def to(self, target: Any) -> Any:
        """Where a run now goes for ``target``: its approval node, when it has one."""
        return self.entry.get(target, target) if isinstance(target, str) else target

    def change(self, path: Path, was: str, now: str) -> None:
        self.changes.append(Change(path, was, now))

    def run(self) -> Translation:
        src = self.src
        out: dict[str, Any] = {k: v for k, v in src.items() if k not in _ORDER}
        out["version"] = "1"
        self.change(("version",), f'version "{self.version}" (LGFlow)', 'version "1"')
        for key in ("description", "inputs", "outputs", "reply", "conversation", "requires"):
            if key in src:
                out[key] = src[key]
        if self.conversation and "reply" not in src:
            self.reply(out)
        if isinstance(src.get("state"), dict):
            out["state"] = self.state(src["state"])
        elif "state" in src:
            out["state"] = src["state"]
        if "tools" in src:
            out["tools"] = self.tools(src["tools"])
        nodes = self.nodes(src.get("nodes"))
        edges = self.edges(src.get("edges"))
        if "start" in src:
            out["start"] = self.to(src["start"])
            if out["start"] != src["start"]:
                self.change(
                    ("start",),
                    f"start {src['start']}",
                    f"start {out['start']} (its approval runs first)",
                )
        out["nodes"] = self.redirect_errors(nodes)
        out["edges"] = self.redirect(edges)
        ordered = {k: out[k] for k in _ORDER if k in out}
        ordered.update({k: v for k, v in out.items() if k not in ordered})
        return Translation(
            self.version, ordered, tuple(self.changes), tuple(self.refusals), self.origin
        )

    # -- state and tools ---------------------------------------------------

    def reply(self, out: dict[str, Any]) -> None:
        """A conversation's answer to each message (docs/flows.md,
        "Conversational flows"): LGFlow's chat shows the output; here the flow
        names it, ``reply``: its only output, else its only string output. Of
        several, none is chosen (``flow check`` says CONVERSATION_NO_REPLY)."""
        outputs = out.get("outputs")
        state = self.src.get("state")
        if not isinstance(outputs, list) or not isinstance(state, dict):
            return
        strings = [
            o
            for o in outputs
            if isinstance(state.get(o), dict) and state[o].get("type") == "string"
        ]
        found = outputs if len(outputs) == 1 else strings
        if len(found) == 1 and isinstance(found[0], str):
            out["reply"] = found[0]
            self.change(
                ("conversation",),
                "conversation: true (its chat shows the output)",
                f"reply: {found[0]} (the answer each message gets)",
            )

    def state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, spec in state.items():
            if self.conversation and name == "history":
                self.change(
                    ("state", name),
                    "channel history, declared",
                    "left out: a conversational flow has it built in, {at, asked, answered} "
                    "per exchange",
                )
                continue
            if not isinstance(spec, dict):
                out[name] = spec
                continue
            channel = dict(spec)
            reducer = channel.get("reducer")
            if reducer is not None and reducer not in ("append", "merge"):
                self.refusals.append(
                    Refusal(
                        ("state", name, "reducer"),
                        "LGFLOW_NOT_TRANSLATED",
                        f"reducer {reducer!r} is a function of LGFlow's registry; a channel "
                        "here combines writes by append or merge only",
                    )
                )
            if "type" not in channel:
                kind, why = self.guess_type(name, channel)
                channel = {"type": kind, **channel}
                self.change(
                    ("state", name),
                    f"channel {name} with no type",
                    f"type: {kind} (guessed: {why}; say it if it is another)",
                )
            out[name] = channel
        return out

    def guess_type(self, name: str, channel: Mapping[str, Any]) -> tuple[str, str]:
        """A channel's type from its reducer, default, or the node that writes
        it; and why."""
        kinds = {bool: "boolean", int: "number", float: "number", str: "string"}
        if channel.get("reducer") in ("append", "merge"):
            return (
                ("list", "it appends")
                if channel["reducer"] == "append"
                else ("object", "it merges")
            )
        default = channel.get("default")
        if isinstance(default, list | dict):
            return ("list" if isinstance(default, list) else "object"), "its default"
        if type(default) in kinds:
            return kinds[type(default)], "its default"
        nodes = self.src.get("nodes")
        for node in nodes if isinstance(nodes, list) else ():  # else: refused elsewhere
            if not isinstance(node, dict):
                continue
            if node.get("type") == "fanout" and node.get("over") == name:
                return "list", f"{node.get('id')} spreads over it"
            if node.get("output") != name:
                continue
            why = f"{node.get('id')} writes it"
            schema = node.get("schema")
            if isinstance(schema, dict) and schema.get("type") in ("object", "list", "array"):
                return ("object" if schema["type"] == "object" else "list"), why
            return {"tool": "object", "tools": "list"}.get(str(node.get("type")), "string"), why
        return "string", "nothing says"

    def tools(self, tools: Any) -> Any:
        if not isinstance(tools, list):
            return tools
        names: list[Any] = []
        for i, tool in enumerate(tools):
            if isinstance(tool, dict) and "name" in tool:
                names.append(tool["name"])
                said = tool.get("description")
                where = f'tools.{tool["name"]}.description: "{said}"' if said else "its entry"
                self.change(
                    ("tools", i),
                    f"tool object {tool['name']}" + (" with its description" if said else ""),
                    f"tools: [{tool['name']}]; the tool is the catalog's ({where})",
                )
            else:
                names.append(tool)
        return names

    # -- nodes -------------------------------------------------------------

    def nodes(self, nodes: Any) -> Any:
        if not isinstance(nodes, list):
            return nodes
        ids = {n.get("id") for n in nodes if isinstance(n, dict) and isinstance(n.get("id"), str)}
        out: list[Any] = []
        for i, node in enumerate(nodes):
            self.origin[("nodes", len(out))] = ("nodes", i)
            if not isinstance(node, dict):
                out.append(node)
                continue
            node = dict(node)
            approval = node.pop("approval", None)
            if approval is not None:
                out.append(self.approval(i, node, approval, ids, len(out)))
                self.origin[("nodes", len(out))] = ("nodes", i)
            out.append(self.node(i, node))
        return out

    def node(self, i: int, node: dict[str, Any]) -> dict[str, Any]:
        nid = node.get("id")
        if "type" not in node and "handler" in node:
            node = {"id": nid, "type": "handler", **{k: v for k, v in node.items() if k != "id"}}
            self.change(
                ("nodes", i),
                f"node {nid}: handler {node['handler']} (an untyped node)",
                f"type: handler; {node['handler']} is a registered Python function here, and "
                "what it returns is written to the node's output (give it one: an LGFlow "
                "handler returned a state update)",
            )
        retry = node.get("retry")
        if isinstance(retry, dict) and "maxAttempts" in retry:
            node["retry"] = {
                ("max_attempts" if k == "maxAttempts" else k): v for k, v in retry.items()
            }
            self.change(
                ("nodes", i, "retry"),
                f"node {nid}: retry.maxAttempts",
                "retry.max_attempts",
            )
        return node

    def approval(
        self, i: int, node: Mapping[str, Any], approval: Any, ids: set[Any], at: int
    ) -> Any:
        nid = str(node.get("id"))
        if not isinstance(approval, dict):
            return approval  # ours refuses what is no node, at the same place
        name = f"{nid}_approval"
        n = 2
        while name in ids:
            name, n = f"{nid}_approval{n}", n + 1
        ids.add(name)
        self.entry[nid] = name
        made: dict[str, Any] = {"id": name, "type": "approval", "before": nid}
        for key in ("ask", "show"):
            if key in approval:
                made[key] = approval[key]
        made["onReject"] = approval.get("onReject", "END")
        made.update({k: v for k, v in approval.items() if k not in made})
        where: Path = ("nodes", i, "approval")
        self.origin[("nodes", at)] = where
        self.origin[("nodes", at, "id")] = where
        self.origin[("nodes", at, "before")] = ("nodes", i, "id")
        default = "" if "onReject" in approval else " (onReject: END: it had none)"
        self.change(
            where,
            f"node {nid}: approval (a node property)",
            f"an approval node {name} before {nid}; the edges into {nid} go to {name}{default}",
        )
        return made

    # -- edges -------------------------------------------------------------

    def edges(self, edges: Any) -> Any:
        if not isinstance(edges, list):
            return edges
        out: list[Any] = []
        for i, edge in enumerate(edges):
            if isinstance(edge, dict) and isinstance(edge.get("when"), dict):
                edge = {k: v for k, v in edge.items() if k != "when"} | {"means": edge["when"]}
                self.change(
                    ("edges", i, "when"),
                    f"edge from {edge.get('from')}: route sentences under when",
                    "the same sentences under means (when chooses the route by a channel here)",
                )
            out.append(edge)
        return self.side_by_side(out)

    def side_by_side(self, edges: list[Any]) -> list[Any]:
        """Two or more plain edges out of one node, run side by side in LGFlow,
        run one after the other: each branch a chain to the node they all meet at."""
        plain: dict[Any, list[int]] = {}
        for i, e in enumerate(edges):
            plain_edge = isinstance(e, dict) and "type" not in e and isinstance(e.get("to"), str)
            if plain_edge and isinstance(e.get("from"), str):
                plain.setdefault(e["from"], []).append(i)
        out: list[Any] = list(edges)
        for source, at in plain.items():
            if len(at) < 2:
                continue
            chains = [self.chain(edges, edges[i]["to"]) for i in at]
            meets = {c[1] for c in chains if c is not None}
            targets = [edges[i]["to"] for i in at]
            if any(c is None for c in chains) or len(meets) != 1:
                self.refusals.append(
                    Refusal(
                        ("edges", at[1]),
                        "LGFLOW_NOT_TRANSLATED",
                        f"plain edges out of {source} to {', '.join(map(str, targets))} run side "
                        "by side in LGFlow; here a node has one way out, and these branches do "
                        "not each run as a chain to one node they all meet at: chain them, or "
                        "spread over a list with a fanout node",
                    )
                )
                continue
            for k in range(len(at) - 1):
                chain = chains[k]
                assert chain is not None
                last_edge = chain[0]
                out[last_edge] = {**edges[last_edge], "to": targets[k + 1]}
                self.origin[("edges", last_edge)] = ("edges", at[k + 1])
                out[at[k + 1]] = None
            self.change(
                ("edges", at[1]),
                f"{len(at)} plain edges out of {source} (LGFlow runs {', '.join(targets)} side "
                "by side)",
                f"{' then '.join(targets)}, one after the other, then {meets.pop()}: a node has "
                "one way out here (a fanout node spreads over a list's items)",
            )
        kept: list[Any] = []
        for i, e in enumerate(out):
            if e is not None:
                if len(kept) != i:
                    self.origin[("edges", len(kept))] = self.origin.get(("edges", i), ("edges", i))
                kept.append(e)
        return kept

    def chain(self, edges: list[Any], first: Any) -> tuple[int, Any] | None:
        """From node ``first`` along single plain edges: the index of the last
        edge and where it goes (a node with another edge into it, or END)."""
        outs: dict[Any, list[int]] = {}
        into: dict[Any, int] = {}
        for i, e in enumerate(edges):
            if isinstance(e, dict) and isinstance(e.get("from"), str):
                outs.setdefault(e["from"], []).append(i)
                routes = e.get("routes")
                targets = (
                    [e.get("to")]
                    if "to" in e
                    else list(routes.values())
                    if isinstance(routes, dict)
                    else []
                )
                for t in targets:
                    if isinstance(t, str):
                        into[t] = into.get(t, 0) + 1
        here, seen = first, set()
        while here not in seen and here != "END":
            seen.add(here)
            mine = outs.get(here, [])
            if len(mine) != 1 or "type" in edges[mine[0]]:
                return None
            nxt = edges[mine[0]].get("to")
            if nxt == "END" or into.get(nxt, 0) > 1:
                return mine[0], nxt
            here = nxt
        return None

    def redirect_errors(self, nodes: Any) -> Any:
        """A node's onError into a node with an approval goes to the approval."""
        if not self.entry or not isinstance(nodes, list):
            return nodes
        return [
            {**n, "onError": self.to(n["onError"])} if isinstance(n, dict) and "onError" in n else n
            for n in nodes
        ]

    def redirect(self, edges: Any) -> Any:
        """Edges, routes and onError into a node with an approval go to the approval."""
        if not self.entry or not isinstance(edges, list):
            return edges
        out: list[Any] = []
        for e in edges:
            if isinstance(e, dict):
                e = dict(e)
                if "to" in e:
                    e["to"] = self.to(e["to"])
                routes = e.get("routes")
                if isinstance(routes, dict):
                    e["routes"] = {k: self.to(v) for k, v in routes.items()}
            out.append(e)
        return out


def relocate(located: Located, translation: Translation) -> Located:
    """The translated data, each value at the place of the LGFlow file it came from."""
    positions = {}
    stack: list[tuple[Path, Any]] = [((), translation.data)]
    while stack:
        path, value = stack.pop()
        pos = located.position(translation.old_path(path))
        if pos is not None:
            positions[path] = pos
        if isinstance(value, dict):
            stack.extend(((*path, k), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend(((*path, i), v) for i, v in enumerate(value))
    return Located(translation.data, located.text, positions)


def dump_flow(data: Mapping[str, Any]) -> str:
    """A flow's data as YAML, its fields in the order this language writes them."""
    text: str = yaml.safe_dump(
        dict(data), sort_keys=False, allow_unicode=True, width=100, default_flow_style=None
    )
    return text
