"""What a flow requires, checked where ``flow check`` runs (docs/flows.md,
"What a flow requires"): its environment variables, packages and MCP servers,
against the environment and the catalog it is given. Pure: the environment is
passed in (``FlowWorld``), never read here."""

from __future__ import annotations

import re
from collections.abc import Mapping

from compiler.flows._flowspec import Flow, FlowTool, FlowWorld, ToolNode, ToolsNode
from compiler.flows._readiness import Warner

__all__ = ["check_requires", "package_key"]


def package_key(name: str) -> str:
    """A distribution's name as installers compare it (PEP 503: ``Foo_Bar`` is ``foo-bar``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def check_requires(
    c: Warner, flow: Flow, tools: Mapping[str, FlowTool] | None, world: FlowWorld | None
) -> None:
    """The warnings of ``requires`` (each only when what it is checked against is known)."""
    needs = flow.spec.requires
    world = world or FlowWorld()
    if world.variables is not None:
        for i, name in enumerate(needs.env):
            if name not in world.variables:
                c.warn(
                    "ENV_NOT_SET",
                    f"requires.env names {name}, and it is not set here: a run would miss it",
                    ("requires", "env", i),
                )
    if world.packages is not None:
        for name in needs.packages:
            if package_key(name) not in world.packages:
                c.warn(
                    "PACKAGE_MISSING",
                    f"requires.packages names {name}, and it is not installed here "
                    f"(pip install {name})",
                    ("requires", "packages", name),
                )
    _mcp(c, flow, tools, world)


def _mcp(c: Warner, flow: Flow, tools: Mapping[str, FlowTool] | None, world: FlowWorld) -> None:
    needs = flow.spec.requires.mcp
    servers = world.servers
    for name, need in needs.items():
        where = ("requires", "mcp", name)
        if servers is not None and name not in servers:
            known = ", ".join(sorted(servers)) or "none"
            c.warn(
                "SERVICE_NOT_DECLARED",
                f"requires.mcp names {name}, and the catalog's mcp_servers do not declare it "
                f"(mcp_servers: {known})",
                where,
            )
            continue
        if servers is None or not servers[name]:
            continue  # reached by a URL (or not known): no package to have
        if need.package is None:
            c.warn(
                "MCP_PACKAGE_MISSING",
                f"MCP server {name} is started by a command, and requires.mcp.{name} names no "
                "package that brings it (package: NAME)",
                where,
            )
        elif world.packages is not None and package_key(need.package) not in world.packages:
            c.warn(
                "MCP_PACKAGE_MISSING",
                f"MCP server {name} is started by a command from package {need.package}, "
                f"which is not installed here (pip install {need.package})",
                (*where, "package"),
            )
    if tools is None:
        return
    index = {n.id: i for i, n in enumerate(flow.spec.nodes)}
    for node in flow.spec.nodes:
        if isinstance(node, ToolNode):
            called: tuple[str, ...] = (node.tool,)
        elif isinstance(node, ToolsNode):
            called = flow.tools
        else:
            continue
        for tool in called:
            spec = tools.get(tool)
            server = spec.server if spec is not None else None
            if server is None or server in needs:
                continue
            c.warn(
                "SERVICE_NOT_DECLARED",
                f"{node.id} calls {tool}, a tool of MCP server {server}, and requires.mcp does "
                f"not declare {server} (requires: {{mcp: {{{server}: {{}}}}}})",
                ("nodes", index[node.id], "id"),
                node.id,
            )
