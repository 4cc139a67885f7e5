"""Flow files on disk (docs/flows.md): finding them beside the playbooks,
checking them with the catalog and the milestones that name them. The core
(compiler/flows/_flow.py) only sees text; this reads the files."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from compiler import (
    Flow,
    FlowMilestone,
    FlowProblem,
    FlowReport,
    FlowTool,
    FlowWorld,
    LemongraphError,
    Playbook,
    PlaybookError,
    check_flow,
    load_located,
    package_key,
)
from stream.runtime.files import flow_files, is_flow, load_playbook_file, playbook_files

from agents.catalog import Catalog, load_catalog_file

__all__ = [
    "Bypass",
    "approval_bypasses",
    "approval_guards",
    "catalog_for",
    "check_flow_file",
    "check_flow_paths",
    "check_playbook_flows",
    "find_flow",
    "flow_tools",
    "here",
    "milestone_context",
]

_SUFFIXES = (".yaml", ".yml", ".json")


def flow_tools(catalog: Catalog) -> dict[str, FlowTool]:
    """The catalog's tools as the flow compiler sees them."""
    return {
        name: FlowTool(
            name,
            tool.writes,
            tool.records.fact if tool.records else None,
            tool.records_on_failure.fact if tool.records_on_failure else None,
            tool.mcp.server if tool.mcp else None,
        )
        for name, tool in catalog.tools.items()
    }


def here() -> FlowWorld:
    """What ``requires`` is checked against where this runs (docs/flows.md,
    "What a flow requires"): the environment's variables and the installed
    distributions (the catalog's MCP servers are added per catalog)."""
    installed = {package_key(d.metadata["Name"] or "") for d in metadata.distributions()}
    return FlowWorld(frozenset(os.environ), frozenset(installed - {""}))


def milestone_context(catalog: Catalog | None, playbook: Playbook, milestone: str) -> FlowMilestone:
    """What the flow of ``milestone`` is checked against: the tools the
    milestone's integrations grant (its own and its delegates'), and the facts
    its condition reads."""
    m = playbook.by_id[milestone]
    granted: set[str] = set()
    if catalog is not None:
        tools, delegates = catalog.grants(m.integrations)
        granted.update(tools)
        for name in delegates:
            agent = catalog.agents.get(name)
            if agent is not None:
                granted.update(agent.tools)
    facts = frozenset(atom.fact_name for atom in m.condition.atoms)
    return FlowMilestone(playbook.key, milestone, frozenset(granted), facts)


def approval_guards(flows: Iterable[Flow]) -> dict[str, frozenset[str]]:
    """By tool, the flows (of one playbook) that guard it with an approval."""
    found: dict[str, set[str]] = {}
    for flow in flows:
        for tool in flow.guarded:
            found.setdefault(tool, set()).add(flow.name)
    return {tool: frozenset(names) for tool, names in found.items()}


@dataclass(frozen=True)
class Bypass:
    """A way around an approval in a playbook (``APPROVAL_BYPASS``, docs/flows.md,
    "An approval cannot be walked around"): milestone ``milestone`` lets ``tool``
    be called by another than the flows that guard it, ``guards``. ``how`` says
    by what; ``path`` is where the playbook says it."""

    milestone: str
    tool: str
    guards: frozenset[str]
    how: str
    path: tuple[str | int, ...]

    @property
    def message(self) -> str:
        names = sorted(self.guards)
        by = f"flow {names[0]} guards" if len(names) == 1 else f"flows {', '.join(names)} guard"
        only = "only that flow may call it" if len(names) == 1 else "only they may call it"
        return (
            f"milestone {self.milestone}: {self.how} {self.tool}, and {by} {self.tool} "
            f"with an approval: {only}"
        )


def approval_bypasses(
    playbook: Playbook, flows: Mapping[str, Flow], catalog: Catalog | None
) -> list[Bypass]:
    """Where ``playbook`` lets a tool that one of its flows guards with an
    approval be called without it: a milestone not run by a flow whose
    integrations grant it (directly, or through a delegate agent's tools), or
    a milestone whose flow calls it and does not guard it. ``flows``: by
    milestone id, the compiled flow of each milestone that names one (one that
    does not load is left out: its problems are reported as such)."""
    guards = approval_guards(flows.values())
    out: list[Bypass] = []
    if not guards:
        return out
    for index, spec in enumerate(playbook.spec.milestones):
        flow = flows.get(spec.id)
        if flow is not None:
            for tool in flow.tools:
                if tool in guards and flow.name not in guards[tool]:
                    how = f"its flow {flow.name} calls"
                    where: tuple[str | int, ...] = ("milestones", index, "flow")
                    out.append(Bypass(spec.id, tool, guards[tool], how, where))
            continue
        if spec.flow is not None or catalog is None:
            continue
        for j, integration in enumerate(spec.integrations):
            for tool, delegate in _agent_tools(catalog, integration).items():
                if tool in guards:
                    how = f"integration {integration} grants its agent"
                    if delegate is not None:
                        how = f"integration {integration}'s delegate agent {delegate} has"
                    where = ("milestones", index, "integrations", j)
                    out.append(Bypass(spec.id, tool, guards[tool], how, where))
    return out


def _agent_tools(catalog: Catalog, integration: str) -> dict[str, str | None]:
    """The tools an agent can call through ``integration``: its own (None) and,
    by the delegate agent that has them, its delegate's and theirs."""
    spec = catalog.integrations.get(integration)
    if spec is None:
        return {}
    found: dict[str, str | None] = dict.fromkeys(spec.tools)
    todo = [spec.delegate] if spec.delegate is not None else []
    seen: set[str] = set()
    while todo:
        name = todo.pop(0)
        agent = catalog.agents.get(name)
        if name in seen or agent is None:
            continue
        seen.add(name)
        for tool in agent.tools:
            found.setdefault(tool, name)
        todo.extend(agent.delegates)
    return found


def _bypass_problems(path: Path, bypasses: Iterable[Bypass]) -> list[FlowProblem]:
    """Each bypass as an error at the line of the playbook (``path``) that makes it."""
    found = list(bypasses)
    if not found:
        return []
    located = load_located(path.read_text(encoding="utf-8"), str(path))
    out: list[FlowProblem] = []
    for bypass in found:
        pos = located.position(bypass.path)
        line, column = (pos.line, pos.column) if pos else (None, None)
        out.append(FlowProblem(str(path), "APPROVAL_BYPASS", bypass.message, line, column))
    return out


def find_flow(folder: Path, name: str) -> Path | None:
    """``folder/flows/NAME.yaml|yml|json``, the first that exists."""
    for suffix in _SUFFIXES:
        path = folder / "flows" / f"{name}{suffix}"
        if path.is_file():
            return path
    return None


def catalog_for(flow: Path, configured: Path | None) -> Path | None:
    """The catalog a flow file is checked with: ``LEMONGRAPH_CATALOG`` when set,
    else ``catalog.yaml`` of the playbooks folder the ``flows/`` folder is in."""
    if configured is not None:
        return configured if configured.is_file() else None
    folder = flow.parent.parent if flow.parent.name == "flows" else flow.parent
    path = folder / "catalog.yaml"
    return path if path.is_file() else None


def check_flow_file(
    path: Path,
    catalog: Catalog | None = None,
    milestone: FlowMilestone | None = None,
    *,
    handlers: Collection[str] | None = None,
    routers: Collection[str] | None = None,
    world: FlowWorld | None = None,
) -> FlowReport:
    """Check one flow file (with the catalog's tools, the milestone naming it,
    the registered handler and router names, and what its ``requires`` is
    checked against, when given)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problem = FlowProblem(str(path), "INVALID_SOURCE", f"cannot read: {exc}")
        return FlowReport(None, (problem,))
    tools = flow_tools(catalog) if catalog is not None else None
    if world is not None and catalog is not None:
        servers = {name: spec.command is not None for name, spec in catalog.mcp_servers.items()}
        world = dataclasses.replace(world, servers=servers)
    return check_flow(
        text,
        str(path),
        path.stem,
        tools=tools,
        milestone=milestone,
        handlers=handlers,
        routers=routers,
        world=world,
    )


def _milestones_naming(folder: Path, name: str) -> list[tuple[Path, Playbook, str]]:
    out: list[tuple[Path, Playbook, str]] = []
    for path in playbook_files(folder):
        try:
            playbook = load_playbook_file(path)
        except (PlaybookError, LemongraphError):
            continue  # `lemongraph check` reports a broken playbook
        out.extend((path, playbook, m.id) for m in playbook.milestones if m.flow == name)
    return out


def _milestone_flows(
    playbook: Playbook,
    folders: Sequence[Path],
    catalog: Catalog | None,
    handlers: Collection[str] | None,
    routers: Collection[str] | None,
) -> dict[str, tuple[Path, FlowReport] | None]:
    """By milestone id, each milestone of ``playbook`` that names a flow: the
    flow's file (the first of ``folders`` that has it) and what checking it
    against the milestone found; None when no folder has it."""
    out: dict[str, tuple[Path, FlowReport] | None] = {}
    for spec in playbook.spec.milestones:
        if spec.flow is None:
            continue
        found = next((f for f in (find_flow(d, spec.flow) for d in folders) if f), None)
        if found is None:
            out[spec.id] = None
            continue
        context = milestone_context(catalog, playbook, spec.id) if catalog else None
        report = check_flow_file(found, catalog, context, handlers=handlers, routers=routers)
        out[spec.id] = (found, report)
    return out


def _bypasses(
    path: Path,
    playbook: Playbook,
    checked: Mapping[str, tuple[Path, FlowReport] | None],
    catalog: Catalog | None,
    flow: str | None = None,
) -> list[FlowProblem]:
    """The playbook's ``APPROVAL_BYPASS`` errors (those ``flow`` takes part
    in, when given: as a guard, or as the flow that walks around one)."""
    compiled = {
        m: found[1].flow
        for m, found in checked.items()
        if found is not None and found[1].flow is not None
    }
    bypasses = approval_bypasses(playbook, compiled, catalog)
    if flow is not None:
        bypasses = [
            b for b in bypasses if flow in b.guards or playbook.by_id[b.milestone].flow == flow
        ]
    return _bypass_problems(path, bypasses)


def check_flow_paths(
    paths: Sequence[Path],
    configured_catalog: Path | None,
    *,
    handlers: Collection[str] | None = None,
    routers: Collection[str] | None = None,
) -> tuple[list[FlowProblem], int]:
    """``lemongraph flow check``: every problem and warning of the flow files
    (a folder: its ``flows/`` files, or its own when it is one), and how many
    files were checked. A flow is checked against the catalog found for it and
    against each milestone of the playbooks beside it that names it."""
    problems: list[FlowProblem] = []
    files = _flow_paths(paths, problems)
    catalogs: dict[Path, Catalog | None] = {}
    seen: set[str] = set()
    world = here()
    for path in files:
        catalog = _catalog_of(path, configured_catalog, catalogs, problems)
        folder = path.parent.parent if path.parent.name == "flows" else None
        namers = _milestones_naming(folder, path.stem) if folder is not None else []
        # Without a catalog nothing says what a milestone grants.
        contexts: list[FlowMilestone | None] = [None]
        if catalog is not None and namers:
            contexts = [milestone_context(catalog, pb, m) for _, pb, m in namers]
        found: list[FlowProblem] = []
        for context in contexts:
            report = check_flow_file(
                path, catalog, context, handlers=handlers, routers=routers, world=world
            )
            found.extend(report.problems)
        # A playbook naming the flow that walks around one of its approvals (or,
        # with this flow, around another flow's).
        for playbook_path, playbook in {str(p): (p, pb) for p, pb, _ in namers}.values():
            folders = [playbook_path.parent]
            checked = _milestone_flows(playbook, folders, catalog, handlers, routers)
            found.extend(_bypasses(playbook_path, playbook, checked, catalog, path.stem))
        for problem in found:
            if str(problem) not in seen:
                seen.add(str(problem))
                problems.append(problem)
    return problems, len(files)


def _flow_paths(paths: Sequence[Path], problems: list[FlowProblem]) -> list[Path]:
    """The flow files ``paths`` name (a folder: its ``flows/`` files, or its
    own when it is one); a path that is neither is a problem."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            inner = flow_files(path) or sorted(
                p for p in path.iterdir() if p.is_file() and is_flow(p, path.parent)
            )
            files.extend(inner)
        elif path.is_file():
            files.append(path)
        else:
            problems.append(FlowProblem(str(path), "INVALID_SOURCE", "no such file or folder"))
    return files


def _catalog_of(
    path: Path,
    configured: Path | None,
    catalogs: dict[Path, Catalog | None],
    problems: list[FlowProblem],
) -> Catalog | None:
    """The catalog found for the flow file (each loaded once, in ``catalogs``);
    None when there is none or it is refused (a problem, once)."""
    where = catalog_for(path, configured)
    if where is None:
        return None
    if where not in catalogs:
        try:
            catalogs[where] = load_catalog_file(where)
        except LemongraphError as exc:
            catalogs[where] = None
            problems.append(
                FlowProblem(str(where), "UNKNOWN_TOOL", f"the catalog is refused: {exc}")
            )
    return catalogs[where]


def check_playbook_flows(
    playbooks: Iterable[tuple[Path, Playbook]],
    catalog: Catalog | None,
    roots: Iterable[Path] = (),
    *,
    handlers: Collection[str] | None = None,
    routers: Collection[str] | None = None,
) -> list[str]:
    """``lemongraph check``: each milestone's ``flow`` must be a file in
    ``flows/`` beside its playbook (or in a checked folder), valid, and call
    only tools the milestone's integrations grant. One line per problem."""
    out: list[str] = []
    for path, playbook in playbooks:
        folders = [path.parent, *roots]
        checked = _milestone_flows(playbook, folders, catalog, handlers, routers)
        located = None
        for index, spec in enumerate(playbook.spec.milestones):
            if spec.id not in checked:
                continue
            found = checked[spec.id]
            if found is None:
                if located is None:
                    located = load_located(path.read_text(encoding="utf-8"), str(path))
                pos = located.position(("milestones", index, "flow"))
                where = f"{path}:{pos.line}:{pos.column}" if pos else str(path)
                out.append(
                    f"{where}: error FLOW_NOT_FOUND: milestone {spec.id}: no flow "
                    f"{spec.flow!r} (looked for flows/{spec.flow}.yaml beside the playbook)"
                )
                continue
            out.extend(str(p) for p in found[1].errors)
        # A tool a flow guards with an approval is called by no one else (docs/flows.md).
        out.extend(str(p) for p in _bypasses(path, playbook, checked, catalog))
    return out
