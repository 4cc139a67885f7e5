"""Flow files on disk (docs/flows.md): finding them beside the playbooks,
checking them with the catalog and the milestones that name them. The core
(compiler/_flow.py) only sees text; this reads the files."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from compiler import (
    FlowMilestone,
    FlowProblem,
    FlowReport,
    FlowTool,
    LemongraphError,
    Playbook,
    PlaybookError,
    check_flow,
    load_located,
)

from .files import flow_files, is_flow, load_playbook_file, playbook_files

if TYPE_CHECKING:
    from agents.catalog import Catalog

__all__ = [
    "catalog_for",
    "check_flow_file",
    "check_flow_paths",
    "check_playbook_flows",
    "find_flow",
    "flow_tools",
    "milestone_context",
]

_SUFFIXES = (".yaml", ".yml", ".json")


def flow_tools(catalog: Catalog) -> dict[str, FlowTool]:
    """The catalog's tools as the flow compiler sees them."""
    return {
        name: FlowTool(name, tool.writes, tool.records.fact if tool.records else None)
        for name, tool in catalog.tools.items()
    }


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
) -> FlowReport:
    """Check one flow file (with the catalog's tools, the milestone naming it
    and the registered handler and router names, when given)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problem = FlowProblem(str(path), "INVALID_SOURCE", f"cannot read: {exc}")
        return FlowReport(None, (problem,))
    tools = flow_tools(catalog) if catalog is not None else None
    return check_flow(
        text,
        str(path),
        path.stem,
        tools=tools,
        milestone=milestone,
        handlers=handlers,
        routers=routers,
    )


def _milestones_naming(folder: Path, name: str) -> list[tuple[Playbook, str]]:
    out: list[tuple[Playbook, str]] = []
    for path in playbook_files(folder):
        try:
            playbook = load_playbook_file(path)
        except (PlaybookError, LemongraphError):
            continue  # `lemongraph check` reports a broken playbook
        out.extend((playbook, m.id) for m in playbook.milestones if m.flow == name)
    return out


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
    from agents.catalog import load_catalog_file

    files: list[Path] = []
    problems: list[FlowProblem] = []
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
    catalogs: dict[Path, Catalog | None] = {}
    for path in files:
        where = catalog_for(path, configured_catalog)
        catalog = None
        if where is not None:
            if where not in catalogs:
                try:
                    catalogs[where] = load_catalog_file(where)
                except LemongraphError as exc:
                    catalogs[where] = None
                    problems.append(
                        FlowProblem(str(where), "UNKNOWN_TOOL", f"the catalog is refused: {exc}")
                    )
            catalog = catalogs[where]
        folder = path.parent.parent if path.parent.name == "flows" else None
        namers = _milestones_naming(folder, path.stem) if folder is not None else []
        seen: set[str] = set()
        # Without a catalog nothing says what a milestone grants.
        contexts: list[FlowMilestone | None] = [None]
        if catalog is not None and namers:
            contexts = [milestone_context(catalog, pb, m) for pb, m in namers]
        for context in contexts:
            report = check_flow_file(path, catalog, context, handlers=handlers, routers=routers)
            for problem in report.problems:
                if str(problem) not in seen:
                    seen.add(str(problem))
                    problems.append(problem)
    return problems, len(files)


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
        located = None
        for index, spec in enumerate(playbook.spec.milestones):
            if spec.flow is None:
                continue
            found = next((f for f in (find_flow(d, spec.flow) for d in folders) if f), None)
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
            context = milestone_context(catalog, playbook, spec.id) if catalog else None
            report = check_flow_file(found, catalog, context, handlers=handlers, routers=routers)
            out.extend(str(p) for p in report.errors)
    return out
