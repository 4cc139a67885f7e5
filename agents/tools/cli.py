"""``lemongraph tools list`` (docs/agents.md, "Tool kinds"): the catalog's
tools by kind; for each MCP server, connected to, every tool it lists next to
what the catalog grants of it. Registered under the entry-point group
``lemongraph.commands`` (pyproject.toml; docs/operations.md, "Commands")."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping
from typing import Any

import click
import orjson
from stream.runtime.config import Settings
from stream.runtime.errors import ExitCode

from agents.catalog import Catalog, CatalogError, load_catalog_file
from agents.tools.executor import redact_url
from agents.tools.mcp import McpServers, ServerStatus

__all__ = ["tools"]


@click.group()
def tools() -> None:
    """The catalog's tools: HTTP calls, commands and MCP servers (docs/agents.md)."""


@tools.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of lines.")
@click.option("--wait", default=20.0, show_default=True, help="Seconds to reach each server.")
def list_tools(as_json: bool, wait: float) -> None:
    """Connect to each MCP server of the catalog (LEMONGRAPH_CATALOG) and show
    each tool it lists next to what the catalog grants: `granted` (by which
    catalog tools), `not granted`, or `missing` (the catalog names a tool the
    server does not list, or the server was not reached), then the HTTP and
    command tools. Exit 1 when a granted MCP tool is missing or refused."""
    try:
        catalog = load_catalog_file(Settings.from_env().catalog_file)
    except CatalogError as exc:
        click.echo(str(exc), err=True)
        sys.exit(ExitCode.FAILED)
    servers = asyncio.run(_survey(catalog, dict(os.environ), wait))
    report = _report(catalog, servers)
    if as_json:
        click.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    else:
        for line in _lines(report):
            click.echo(line)
    if any(t["state"] == "missing" for s in report["mcp_servers"] for t in s["tools"]):
        sys.exit(ExitCode.FAILED)


async def _survey(catalog: Catalog, env: Mapping[str, str], wait: float) -> list[ServerStatus]:
    """Each MCP server's status, after one try to reach it."""
    with open(os.devnull, "w") as quiet:  # a stdio server's own log is not ours to show
        servers = McpServers(catalog, env, errlog=quiet)
        try:
            await servers.start(wait)
            return servers.status()
        finally:
            await servers.close()


def _report(catalog: Catalog, servers: list[ServerStatus]) -> dict[str, Any]:
    """What ``tools list`` shows, as data."""
    out: list[dict[str, Any]] = []
    for server in servers:
        rows: list[dict[str, Any]] = []
        for name in server.listed:
            granted = server.granted.get(name, ())
            state = "granted" if granted else "not granted"
            if name in server.refused:
                state = "missing"
            rows.append({"tool": name, "state": state, "as": list(granted),
                         "why": server.refused.get(name)})  # fmt: skip
        for name, granted in server.granted.items():
            if name not in server.listed:
                why = server.refused.get(name) or (server.error or "the server was not reached")
                rows.append({"tool": name, "state": "missing", "as": list(granted), "why": why})
        out.append({"server": server.name, "reached_by": server.shown,
                    "connected": server.connected, "error": server.error,
                    "listed": list(server.listed), "tools": rows})  # fmt: skip
    others = []
    for name, tool in catalog.tools.items():
        if tool.http is not None:
            others.append({"tool": name, "kind": "http",
                           "calls": f"{tool.http.method} {redact_url(tool.http.url)}"})  # fmt: skip
        elif tool.mcp is None:  # a command tool (docs/agents.md, "Tool kinds")
            argv = getattr(getattr(tool, "command", None), "argv", None) or ()
            others.append({"tool": name, "kind": "command", "calls": " ".join(map(str, argv))})
    return {"mcp_servers": out, "tools": others}


def _lines(report: dict[str, Any]) -> list[str]:
    lines = []
    for server in report["mcp_servers"]:
        listed = len(server["listed"])
        state = (
            f"connected, {listed} tool{'' if listed == 1 else 's'} listed"
            if server["connected"]
            else f"not reached: {server['error']}"
        )
        lines.append(f"mcp server {server['server']} ({server['reached_by']}): {state}")
        for row in server["tools"]:
            said = row["state"]
            if row["as"]:
                said += f" as {', '.join(row['as'])}"
            if row["why"]:
                said += f": {row['why']}"
            lines.append(f"  {row['tool']:<24} {said}")
    for row in report["tools"]:
        lines.append(f"{row['kind']} tool {row['tool']}: {row['calls']}")
    return lines
