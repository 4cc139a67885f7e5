"""The flows the agents service runs (docs/flows.md, "Flows in the agents
service"): each milestone's flow, compiled at start with the catalog and the
milestone's tools, and what a run of one starts with."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compiler import (
    HISTORY,
    ApprovalNode,
    Flow,
    FlowError,
    LemongraphError,
    check_flow,
    load_flow,
)
from stream.runtime.files import load_playbooks_dir
from topics import APPROVERS_DEFAULT

from agents.catalog import Catalog
from agents.flows.files import (
    approval_bypasses,
    approval_guards,
    find_flow,
    flow_tools,
    milestone_context,
)

__all__ = ["CONVERSATION_TURNS", "Flows", "load_flows", "remembering"]

#: Turns of the conversation a flow run starts with (its ``conversation`` channel).
CONVERSATION_TURNS = 20


@dataclass
class Flows:
    """The flows the service runs: by name, and the flow each (playbook,
    milestone) names."""

    by_name: dict[str, Flow] = field(default_factory=dict)
    by_milestone: dict[tuple[str, str], str] = field(default_factory=dict)
    #: Who answers an approval whose node names no ``approvers`` (the catalog's).
    approvers: tuple[str, ...] = APPROVERS_DEFAULT
    #: Milestones whose flow is not run, with the flow as far as it could be
    #: compiled: it does not load with the catalog and the milestone, or it walks
    #: around another flow's approval (APPROVAL_BYPASS). What it guards stays
    #: guarded (its milestone is worked by the conversation agent).
    refused: dict[tuple[str, str], Flow] = field(default_factory=dict)

    def of(self, playbook_key: str, milestone: str) -> str | None:
        return self.by_milestone.get((playbook_key, milestone))

    def conversational(self, name: str) -> bool:
        """Whether flow ``name`` is a conversation: a run per message of the
        person (docs/flows.md, "Conversational flows")."""
        flow = self.by_name.get(name)
        return flow is not None and flow.spec.conversation

    def descriptions(self, name: str) -> dict[str, str]:
        """The ``description`` of each of flow ``name``'s channels that has one:
        the labels of what it shows a person."""
        flow = self.by_name.get(name)
        channels = flow.channels if flow is not None else {}
        return {k: c.description for k, c in channels.items() if c.description}

    def approvers_of(self, name: str, node: str) -> tuple[str, ...]:
        """Who may answer the approval ``node`` of flow ``name`` (docs/flows.md,
        "Who approves"): the node's ``approvers``, else the catalog's."""
        flow = self.by_name.get(name)
        nodes = flow.spec.nodes if flow is not None else ()
        for n in nodes:
            if n.id == node and isinstance(n, ApprovalNode) and n.approvers:
                return tuple(n.approvers)
        return self.approvers

    def guarded(self, playbook_key: str) -> dict[str, frozenset[str]]:
        """By tool, the flows of the playbook's milestones that guard it with an
        approval: only they call it; no agent is offered it (docs/flows.md, "An
        approval cannot be walked around")."""
        flows = [
            self.by_name[name]
            for (playbook, _), name in self.by_milestone.items()
            if playbook == playbook_key and name in self.by_name
        ]
        flows += [f for (playbook, _), f in self.refused.items() if playbook == playbook_key]
        return approval_guards(flows)

    def inputs(
        self,
        name: str,
        subject: Mapping[str, Any],
        turns: Sequence[Any] = (),
        remembered: Mapping[str, Any] | None = None,
        memory: Sequence[Mapping[str, Any]] = (),
    ) -> dict[str, Any]:
        """The values the flow's last run for the job left in the channels that
        ``remembers`` (those that still do), the flow's ``inputs`` channels the
        job's subject has, the conversation so far (its last
        ``CONVERSATION_TURNS`` turns, as ``{role, text, name?}``) as the
        built-in ``conversation`` channel, the subject's current facts
        (agents/memory/profiles.py) as the built-in, read-only ``memory``, and
        a conversational flow's ``history`` (kept with its remembered values)."""
        flow = self.by_name.get(name)
        if flow is None:
            return {}
        found = {k: v for k, v in (remembered or {}).items() if k in remembering(flow)}
        found.update({k: subject[k] for k in flow.spec.inputs if k in subject})
        found["conversation"] = [
            {"role": t.role, "text": t.text, **({"name": t.name} if t.name else {})}
            for t in turns[-CONVERSATION_TURNS:]
        ]
        found["memory"] = [dict(f) for f in memory]
        if flow.spec.conversation:
            # its past exchanges in the job (docs/flows.md, "Conversational flows")
            found[HISTORY] = list((remembered or {}).get(HISTORY) or [])
        return found


def remembering(flow: Flow) -> set[str]:
    """The flow's channels that ``remembers``."""
    return {k for k, v in flow.spec.state.items() if v.remembers}


def load_flows(folder: Path, catalog: Catalog | None, say: Callable[[str], None]) -> Flows:
    """The flows the playbooks of ``folder`` name (``flows/NAME.yaml``), each
    compiled with its milestone's tools. A playbook or flow that does not load
    is said and skipped (`lemongraph check` names its problems); its milestone
    is then worked by the conversation agent."""
    found = Flows(approvers=catalog.approvers if catalog is not None else APPROVERS_DEFAULT)
    if not folder.is_dir():
        return found
    playbooks = load_playbooks_dir(folder)
    tools = flow_tools(catalog) if catalog is not None else None
    for playbook in playbooks.by_key.values():
        for milestone in playbook.milestones:
            name = getattr(milestone, "flow", None)
            if not name:
                continue
            path = find_flow(folder, name)
            if path is None:
                say(f"agents: flow {name!r} of {playbook.key}/{milestone.id}: no flows/{name}.yaml")
                continue
            if name not in found.by_name:
                try:
                    found.by_name[name] = load_flow(
                        path.read_text(encoding="utf-8"),
                        str(path),
                        name,
                        tools=tools,
                        milestone=milestone_context(catalog, playbook, milestone.id),
                    )
                except (FlowError, LemongraphError, OSError, UnicodeDecodeError) as exc:
                    say(f"agents: flow {path} does not load: {exc}")
                    unchecked = _unchecked(path, name)
                    if unchecked is not None:
                        found.refused[(playbook.key, milestone.id)] = unchecked
                    continue
            found.by_milestone[(playbook.key, milestone.id)] = name
        # A flow that calls a tool another flow of the playbook guards, with no
        # approval of its own, is not run (`lemongraph check`: APPROVAL_BYPASS).
        flows = {m: f for (key, m), f in found.refused.items() if key == playbook.key}
        flows.update(
            (m, found.by_name[name]) for (key, m), name in found.by_milestone.items()
            if key == playbook.key
        )  # fmt: skip
        for bypass in approval_bypasses(playbook, flows, None):
            where = (playbook.key, bypass.milestone)
            if where in found.by_milestone:
                name = found.by_milestone.pop(where)
                found.refused[where] = found.by_name[name]
                say(f"agents: flow {name!r} of {'/'.join(where)} is not run: {bypass.message}")
    return found


def _unchecked(path: Path, name: str) -> Flow | None:
    """The flow compiled without the catalog and its milestone (so that what
    it guards is known), or None when even that fails."""
    try:
        return check_flow(path.read_text(encoding="utf-8"), str(path), name).flow
    except (OSError, UnicodeDecodeError):
        return None
