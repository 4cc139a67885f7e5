"""Loading a flow (docs/flows.md): its text parsed, validated against every
rule, compiled, and its readiness checked. The model and the compiled ``Flow``
are in ``_flowspec.py``, the rules in ``_flowcheck.py``. Pure: the text is
passed in; files are read in stream/.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

from compiler._errors import LemongraphError
from compiler._source import load_located
from compiler.flows._flowcheck import FlowChecker
from compiler.flows._flowspec import (
    Flow,
    FlowError,
    FlowMilestone,
    FlowProblem,
    FlowReport,
    FlowTool,
    FlowWorld,
)

__all__ = ["check_flow", "load_flow"]


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
    world: FlowWorld | None = None,
) -> FlowReport:
    """Validate a flow's text and check its readiness.

    ``name`` defaults to the file name without its suffix. ``tools`` (the
    catalog's), ``handlers`` and ``routers`` (the registered names) are
    checked when given; ``milestone`` adds the checks against the milestone
    that names the flow; ``world`` (the environment, installed packages and
    the catalog's MCP servers) what its ``requires`` is checked against.
    Readiness warnings are only looked for in a valid flow.
    """
    checker = FlowChecker(source, name if name is not None else _name_of(source))
    try:
        located = load_located(text, source)
    except LemongraphError as exc:
        line, column = getattr(exc, "line", None), getattr(exc, "column", None)
        reason = getattr(exc, "reason", exc.message)
        return FlowReport(None, (FlowProblem(source, "INVALID_SOURCE", reason, line, column),))
    checker.located = located
    flow = checker.compile(located.data, tools, handlers, routers, milestone, world)
    # In the order of the file, as a reader meets them.
    ordered = sorted(checker.problems, key=lambda p: (p.line or 0, p.column or 0))
    return FlowReport(flow, tuple(ordered))
