"""The agent catalog: what the integrations a playbook names grant, which agents
exist, which tools trusted code runs and what fact each records (docs/agents.md).

``catalog.yaml`` sits in the playbooks folder (``LEMONGRAPH_CATALOG`` points
elsewhere). It is validated like a playbook: every problem, with file, line and
column. :func:`check_playbooks` adds the one rule that spans both: every
integration a playbook names must be in the catalog.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from compiler import LemongraphError, Playbook, field_problem, load_located
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from topics import APPROVERS_DEFAULT, Approver

from agents.errors import AgentsError
from agents.workspace.ops import WorkspaceAction, implied_fields, parameter_problems

__all__ = [
    "COMMAND_RESULT",
    "CONVERSATION",
    "MAX_DELEGATION_DEPTH",
    "PLACEHOLDER",
    "TOOL_KINDS",
    "AgentSpec",
    "Bounds",
    "Catalog",
    "CatalogError",
    "CommandAction",
    "HttpAction",
    "IntegrationSpec",
    "McpAction",
    "McpServerSpec",
    "Records",
    "ServerTool",
    "Success",
    "ToolSpec",
    "catalog_path",
    "check_playbooks",
    "load_catalog",
    "load_catalog_file",
    "redact_env",
]

#: The agent composed over a job's frontier (every catalog has one).
CONVERSATION = "conversation"

#: How many delegates deep a run may go: the agent a run starts with calls a
#: delegate (1), which may call another (2), and that one a third (3). ``check``
#: refuses a catalog with a longer chain, and a run refuses a deeper call
#: (docs/agents.md, "Bounds").
MAX_DELEGATION_DEPTH = 3

_NAME = r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$"
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: A command's argv element that is one placeholder, ``{name}``: filled, whole,
#: with the model's argument ``name`` (docs/agents.md, "Command tools").
PLACEHOLDER = re.compile(r"^\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: A ``{name}`` inside a longer element (not a ``${VAR}``): refused when it
#: names a parameter, since it would not be filled.
_INNER = re.compile(r"(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}")


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HttpAction(_Spec):
    """Call an HTTP endpoint with the arguments as the JSON body. ``${VAR}`` in
    the URL and header values is read from the environment when the call is made."""

    url: str = Field(min_length=1)
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: float = Field(10.0, gt=0, le=300)


class CommandAction(_Spec):
    """Run a program the catalog names (docs/agents.md, "Command tools"). An
    argv element that is exactly ``{name}`` is filled with the model's argument
    ``name``, whole; ``${VAR}`` in argv and cwd is read from the service's
    environment when the command runs. ``env`` names the variables of the
    service's environment the command gets: nothing else."""

    argv: tuple[str, ...] = Field(min_length=1)
    cwd: str | None = None
    timeout: float = Field(60.0, gt=0, le=86_400)
    env: tuple[str, ...] = ("PATH",)


class McpServerSpec(_Spec):
    """An MCP server (docs/agents.md, "MCP servers"): a ``command`` the service
    starts and talks to over stdio (``env`` names the service's variables it
    gets, ``cwd`` where it runs), or a streamable HTTP ``url`` with ``headers``.
    ``${VAR}`` in the command, URL and header values is read from the service's
    environment."""

    command: tuple[str, ...] | None = Field(None, min_length=1)
    env: tuple[str, ...] = ()
    cwd: str | None = None
    url: str | None = Field(None, min_length=1)
    headers: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSpec:
        if (self.command is None) == (self.url is None):
            raise ValueError("says exactly one of command (stdio) and url (streamable HTTP)")
        if self.command is not None and self.headers:
            raise ValueError("headers go with url, not command")
        if self.url is not None and (self.env or self.cwd is not None):
            raise ValueError("env and cwd go with command, not url")
        return self

    def configured(self, env: Mapping[str, str] | None = None) -> bool:
        """Whether it names something to reach: a URL that is not empty once its
        ``${VAR}`` are read from ``env`` (a command always does)."""
        return self.url is None or bool(expand_env(self.url, env).strip())


class McpAction(_Spec):
    """Call ``tool`` of the MCP server ``server`` (a name under ``mcp_servers``)
    with the arguments; ``timeout``: how long the answer may take."""

    server: str = Field(min_length=1)
    tool: str = Field(min_length=1)
    timeout: float = Field(30.0, gt=0, le=3600)


@dataclass(frozen=True)
class ServerTool:
    """An MCP tool as its server listed it: what the model is told of it when
    the catalog says nothing (docs/agents.md, "MCP servers")."""

    description: str
    parameters: Mapping[str, Any]


class Records(_Spec):
    """The fact a successful call records, with properties read from the JSON
    response by path (``$.when``, ``$.booking.id``), and ``fixed`` ones as the
    catalog writes them (a read path of the same name wins)."""

    fact: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
    properties: dict[str, str] = Field(default_factory=dict)
    value: str | None = None
    #: Properties recorded as written here, not read from the answer
    #: (docs/agents.md, "The catalog"): trusted text, like the rest of a tool.
    fixed: dict[str, Any] = Field(default_factory=dict)


class Success(_Spec):
    """What a tool's 2xx JSON answer must say to confirm the call, instead of
    the default rule (docs/agents.md, "What success is"): the value at ``path``
    ``equals`` one value, is ``in`` a list, or ``exists`` (or, ``false``, is
    absent). Exactly one of the three."""

    path: str
    equals: Any = None
    in_: tuple[Any, ...] | None = Field(None, alias="in", min_length=1)
    exists: bool | None = None

    @field_validator("equals")
    @classmethod
    def _scalar(cls, value: Any) -> Any:
        if not isinstance(value, str | int | float | bool | None):
            raise ValueError("must be a string, number, true, false or null")
        return value

    @field_validator("in_")
    @classmethod
    def _scalars(cls, values: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
        for value in values or ():
            cls._scalar(value)
        return values

    @model_validator(mode="after")
    def _one_condition(self) -> Success:
        given = [name for name in ("equals", "in_", "exists") if name in self.model_fields_set]
        if len(given) != 1:
            said = f" (it says {', '.join(g.rstrip('_') for g in given)})" if given else ""
            raise ValueError(f"says exactly one of equals, in and exists{said}")
        if given != ["equals"] and getattr(self, given[0]) is None:
            raise ValueError(f"{given[0].rstrip('_')} cannot be null")
        return self


class ToolSpec(_Spec):
    """A tool: what the model is told, the schema of its arguments, what
    trusted code does, and what it records on success."""

    #: Required, except for an mcp tool (its server's description is used).
    description: str = ""
    #: For an mcp tool that omits it, its server's input schema is used.
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    http: HttpAction | None = None
    command: CommandAction | None = None
    mcp: McpAction | None = None
    #: An editor op in the job's worktree (docs/coding.md, "The editor's tools").
    workspace: WorkspaceAction | None = None
    idempotent: bool = False
    records: Records | None = None
    #: The fact a call that ran and failed records (a command's non-zero exit, an
    #: MCP error result): a failed run is evidence too (docs/agents.md, "Tool kinds").
    records_on_failure: Records | None = None
    #: What a 2xx answer must say to confirm the call (None: the default rule).
    success: Success | None = None
    #: Whether a call changes something (flows warn about a write with no
    #: approval before it, docs/flows.md); a tool writes unless it says not.
    writes: bool = True

    @model_validator(mode="before")
    @classmethod
    def _implied(cls, data: Any) -> Any:
        """A workspace op implies its parameters, ``writes`` and ``idempotent``."""
        return implied_fields(data)


class IntegrationSpec(_Spec):
    """What an integration a playbook names grants: tools, a delegate agent, or both."""

    tools: tuple[str, ...] = ()
    delegate: str | None = None


class Bounds(_Spec):
    """Model turns, tool calls, tokens (None: no bound) and wall time: the whole
    run's, delegates included, for the agent a run starts with; a delegate's own
    only narrow that (docs/agents.md, "Bounds")."""

    max_turns: int = Field(10, ge=1, le=1000)
    max_tool_calls: int = Field(20, ge=0, le=10_000)
    max_tokens: int | None = Field(None, ge=1)
    max_seconds: float = Field(120.0, gt=0, le=86_400)


class AgentSpec(_Spec):
    """An agent: its instructions, its own tools and delegates, skills, bounds."""

    instructions: str = Field(min_length=1)
    description: str | None = None
    tools: tuple[str, ...] = ()
    delegates: tuple[str, ...] = ()
    skills: tuple[str, ...] = ()
    bounds: Bounds = Field(default_factory=Bounds)


class _CatalogSpec(_Spec):
    #: Who answers an approval whose flow node names no ``approvers``.
    approvers: tuple[Approver, ...] = Field(APPROVERS_DEFAULT, min_length=1)
    integrations: dict[str, IntegrationSpec] = Field(default_factory=dict)
    agents: dict[str, AgentSpec] = Field(default_factory=dict)
    tools: dict[str, ToolSpec] = Field(default_factory=dict)
    skills: dict[str, str] = Field(default_factory=dict)
    mcp_servers: dict[str, McpServerSpec] = Field(default_factory=dict)


@dataclass(frozen=True)
class Catalog:
    """A validated catalog. ``skills`` maps a skill's name to its text."""

    source: str
    integrations: Mapping[str, IntegrationSpec]
    agents: Mapping[str, AgentSpec]
    tools: Mapping[str, ToolSpec]
    skills: Mapping[str, str]
    #: Who answers an approval whose flow node names no ``approvers``
    #: (docs/agents.md, "Who approves").
    approvers: tuple[str, ...] = APPROVERS_DEFAULT
    mcp_servers: Mapping[str, McpServerSpec] = field(default_factory=dict)
    #: The mcp tools that may be offered now, as their servers listed them
    #: (``McpServers.catalog``); None: no server was asked, each is offered as
    #: the catalog says (docs/agents.md, "MCP servers").
    mcp_listed: Mapping[str, ServerTool] | None = None

    def offer(self, name: str) -> tuple[str, Mapping[str, Any]] | None:
        """(description, parameters) the model is told of tool ``name``, or None
        when it is not offered now (an mcp tool its server does not list as it did)."""
        tool = self.tools[name]
        if tool.mcp is None or self.mcp_listed is None:
            return tool.description, tool.parameters
        listed = self.mcp_listed.get(name)
        if listed is None:
            return None
        given = "parameters" in tool.model_fields_set
        return (
            tool.description or listed.description,
            tool.parameters if given else listed.parameters,
        )

    def grants(self, integrations: Iterable[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(tools, delegate agents) that ``integrations`` grant, each once, in
        the order first granted."""
        tools: dict[str, None] = {}
        delegates: dict[str, None] = {}
        for name in integrations:
            spec = self.integrations.get(name)
            if spec is None:
                continue
            tools.update(dict.fromkeys(spec.tools))
            if spec.delegate is not None:
                delegates[spec.delegate] = None
        return tuple(tools), tuple(delegates)


class CatalogError(AgentsError, LemongraphError):
    """A catalog that is refused. ``problems`` has one line per problem,
    ``file:line:column: what``."""

    code = "invalid_catalog"

    def __init__(self, problems: list[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(problems))


def catalog_path(playbooks: Path, configured: str | None = None) -> Path:
    """Where the catalog is: ``LEMONGRAPH_CATALOG`` when set, else
    ``catalog.yaml`` in the playbooks folder."""
    if configured:
        return Path(configured)
    return playbooks / "catalog.yaml"


def load_catalog_file(path: Path) -> Catalog:
    """Read and validate a catalog file; skill files are read relative to it."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError([f"{path}: cannot read: {exc}"]) from None
    return load_catalog(text, str(path), base=path.parent)


def load_catalog(text: str, source: str = "<catalog>", base: Path | None = None) -> Catalog:
    """Validate catalog text. Raises :class:`CatalogError` listing every problem."""
    located = load_located(text, source)
    problems: list[str] = []

    def where(path: tuple[str | int, ...]) -> str:
        pos = located.position(path)
        return f"{source}:{pos.line}:{pos.column}" if pos else source

    def problem(path: tuple[str | int, ...], message: str) -> None:
        problems.append(f"{where(path)}: {message}")

    data = located.data
    if not isinstance(data, dict):
        raise CatalogError(
            [f"{where(())}: a catalog must be a mapping (integrations, agents, ...)"]
        )
    try:
        spec = _CatalogSpec.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            problem(tuple(err["loc"]), field_problem(err, "catalog"))
        raise CatalogError(problems) from None

    _check_names(spec, problem)
    _check_integrations(spec, problem)
    _check_agents(spec, problem)
    _check_delegation(spec, problem)
    _check_tools(spec, problem)
    skills = _read_skills(spec, base or Path("."), problem)
    if problems:
        raise CatalogError(problems)
    return Catalog(
        source,
        spec.integrations,
        spec.agents,
        spec.tools,
        skills,
        approvers=spec.approvers,
        mcp_servers=spec.mcp_servers,
    )


#: ``problem(path, message)``: a problem at ``path`` of the catalog's text.
_Problem = Callable[[tuple[str | int, ...], str], None]


def _check_names(spec: _CatalogSpec, problem: _Problem) -> None:
    """Names that are valid, the conversation agent, no tool named as an agent."""
    for section in ("integrations", "agents", "tools", "skills", "mcp_servers"):
        for name in getattr(spec, section):
            if not re.match(_NAME, name):
                problem((section, name), f"{section}: {name!r} is not a valid name")
    if CONVERSATION not in spec.agents:
        problem(("agents",), f"agents: the {CONVERSATION!r} agent is required")
    for name in spec.tools:
        if name in spec.agents:
            problem(
                ("tools", name),
                f"tools.{name}: an agent has the same name (a delegate is called by its name)",
            )


def _check_integrations(spec: _CatalogSpec, problem: _Problem) -> None:
    """Each integration's tools are known, its delegate a known agent, not the
    conversation agent."""
    for name, integration in spec.integrations.items():
        for i, tool_name in enumerate(integration.tools):
            if tool_name not in spec.tools:
                problem(
                    ("integrations", name, "tools", i),
                    f"integrations.{name}: unknown tool {tool_name!r}",
                )
        if integration.delegate is not None:
            if integration.delegate not in spec.agents:
                problem(
                    ("integrations", name, "delegate"),
                    f"integrations.{name}: unknown agent {integration.delegate!r}",
                )
            elif integration.delegate == CONVERSATION:
                problem(
                    ("integrations", name, "delegate"),
                    f"integrations.{name}: the conversation agent cannot be a delegate",
                )


def _check_agents(spec: _CatalogSpec, problem: _Problem) -> None:
    """Each agent's tools, delegates and skills are known (a delegate is
    neither itself nor the conversation agent)."""
    for name, agent in spec.agents.items():
        for i, tool_name in enumerate(agent.tools):
            if tool_name not in spec.tools:
                problem(("agents", name, "tools", i), f"agents.{name}: unknown tool {tool_name!r}")
        for i, delegate in enumerate(agent.delegates):
            if delegate not in spec.agents or delegate in (name, CONVERSATION):
                problem(
                    ("agents", name, "delegates", i),
                    f"agents.{name}: {delegate!r} cannot be a delegate here",
                )
        for i, skill in enumerate(agent.skills):
            if skill not in spec.skills:
                problem(("agents", name, "skills", i), f"agents.{name}: unknown skill {skill!r}")


def _check_delegation(spec: _CatalogSpec, problem: _Problem) -> None:
    """No agent calls, through its delegates, an agent that called it (a cycle:
    ``a → b → a``), and no chain of delegates is deeper than
    :data:`MAX_DELEGATION_DEPTH` (docs/agents.md, "Bounds"). The conversation
    agent calls the delegates that integrations grant."""
    calls = _delegation_graph(spec)
    cycles = _cycles(calls)
    for cycle in cycles:
        grants = [
            f"integration {name} grants {i.delegate}"
            for name, i in spec.integrations.items()
            if i.delegate in cycle
        ]
        by = f" ({', '.join(grants)})" if grants else ""
        problem(
            ("agents", cycle[0], "delegates"),
            f"agents.{cycle[0]}: a delegation cycle: {' → '.join(cycle)}{by}; "
            "a delegate cannot call, even through others, an agent that called it",
        )
    if cycles:
        return
    chain = _deepest(calls)
    if len(chain) - 1 > MAX_DELEGATION_DEPTH:
        problem(
            ("agents", chain[0]),
            f"agents.{chain[0]}: a chain of delegates {len(chain) - 1} deep: "
            f"{' → '.join(chain)}; at most {MAX_DELEGATION_DEPTH}",
        )


def _delegation_graph(spec: _CatalogSpec) -> dict[str, list[str]]:
    """Who may call whom: each agent its ``delegates`` (known, not itself, not
    the conversation agent: refused apart), the conversation agent also what
    integrations grant."""
    calls: dict[str, list[str]] = {}
    for name, agent in spec.agents.items():
        known = (d for d in agent.delegates if d in spec.agents and d not in (name, CONVERSATION))
        calls[name] = list(dict.fromkeys(known))
    if CONVERSATION in calls:
        granted = (i.delegate for i in spec.integrations.values())
        known = (d for d in granted if d in spec.agents and d != CONVERSATION)
        calls[CONVERSATION] = list(dict.fromkeys([*calls[CONVERSATION], *known]))
    return calls


def _cycles(calls: Mapping[str, list[str]]) -> list[list[str]]:
    """One cycle per call that closes one (``[a, b, a]``), each set of agents
    once, in the catalog's order. Iterative: a catalog's size bounds no stack."""
    found: dict[frozenset[str], list[str]] = {}
    done: set[str] = set()
    for root in calls:
        if root in done:
            continue
        path = [root]
        todo = [iter(calls[root])]
        while todo:
            callee = next(todo[-1], None)
            if callee is None:
                done.add(path.pop())
                todo.pop()
            elif callee in path:
                cycle = [*path[path.index(callee) :], callee]
                found.setdefault(frozenset(cycle), cycle)
            elif callee not in done:
                path.append(callee)
                todo.append(iter(calls.get(callee, ())))
    return list(found.values())


def _deepest(calls: Mapping[str, list[str]]) -> list[str]:
    """The longest chain of calls in a graph with no cycle (the first found
    of the longest)."""
    longest: dict[str, list[str]] = {}
    for name in _callees_first(calls):
        below = (longest[callee] for callee in calls.get(name, ()))
        longest[name] = [name, *max(below, key=len, default=[])]
    return max(longest.values(), key=len, default=[])


def _callees_first(calls: Mapping[str, list[str]]) -> list[str]:
    """Every agent after all it calls (a graph with no cycle)."""
    order: list[str] = []
    placed: set[str] = set()
    for root in calls:
        todo = [(root, iter(calls.get(root, ())))]
        while todo:
            name, callees = todo[-1]
            callee = next(callees, None)
            if callee is None:
                todo.pop()
                if name not in placed:
                    placed.add(name)
                    order.append(name)
            elif callee not in placed:
                todo.append((callee, iter(calls.get(callee, ()))))
    return order


#: What trusted code can do for a tool: a tool says exactly one of them
#: (docs/agents.md, "Tool kinds").
TOOL_KINDS = ("http", "command", "mcp", "workspace")
#: The kinds whose call can run and fail, so ``records_on_failure`` means something.
_FAILURE_RECORDED = ("command", "mcp")
#: What a command's result holds, for its ``records`` paths (docs/agents.md,
#: "Command tools").
COMMAND_RESULT = (
    "exit_code", "duration_ms", "output_tail", "output_sha256", "output_bytes", "timed_out"
)  # fmt: skip


def _check_tools(spec: _CatalogSpec, problem: _Problem) -> None:
    """Each tool's parameters are an object's JSON Schema, it says exactly one
    thing to do (one of :data:`TOOL_KINDS`), and its response paths start at ``$``."""
    for name, tool in spec.tools.items():
        try:
            Draft202012Validator.check_schema(tool.parameters)
        except SchemaError as exc:
            problem(("tools", name, "parameters"), f"tools.{name}.parameters: {exc.message}")
        if tool.parameters.get("type") != "object":
            problem(
                ("tools", name, "parameters"),
                f"tools.{name}.parameters: the arguments must be an object (type: object)",
            )
        _check_kind(name, tool, problem)
        if tool.command is not None:
            _check_command(name, tool, problem)
        _check_mcp_tool(spec, name, tool, problem)
        if tool.workspace is not None:
            for said in parameter_problems(tool.workspace.op, tool.parameters):
                problem(("tools", name, "parameters"), f"tools.{name}.parameters: {said}")
        paths: list[tuple[tuple[str, ...], str]] = []
        for part in ("records", "records_on_failure"):
            records: Records | None = getattr(tool, part)
            if records is not None:
                props = records.properties.items()
                paths += [((part, "properties", prop), ref) for prop, ref in props]
        if tool.success is not None:
            paths.append((("success", "path"), tool.success.path))
        for at, ref in paths:
            if not ref.startswith("$"):
                problem(
                    ("tools", name, *at),
                    f"tools.{name}.{'.'.join(at)}: {ref!r} is not a response path ($ or $.field)",
                )


def _check_kind(name: str, tool: ToolSpec, problem: _Problem) -> None:
    """Exactly one of :data:`TOOL_KINDS`; ``records_on_failure`` only where a call
    can run and fail."""
    kinds = [kind for kind in TOOL_KINDS if getattr(tool, kind) is not None]
    if len(kinds) != 1:
        said = f"more than one thing ({', '.join(kinds)})" if kinds else "nothing"
        problem(
            ("tools", name),
            f"tools.{name}: says {said} for trusted code to do: "
            f"exactly one of {', '.join(TOOL_KINDS)}",
        )
    elif tool.records_on_failure is not None and kinds[0] not in _FAILURE_RECORDED:
        problem(
            ("tools", name, "records_on_failure"),
            f"tools.{name}.records_on_failure: a failed {kinds[0]} call records nothing "
            f"(only {', '.join(_FAILURE_RECORDED)} tools record a failure)",
        )


def _check_command(name: str, tool: ToolSpec, problem: _Problem) -> None:
    """A command's program is the catalog's, each ``{name}`` placeholder a whole
    argv element naming one of the tool's parameters, each ``${VAR}`` well
    formed, its env names variable names, its records paths the result's fields
    (docs/agents.md, "Command tools")."""
    assert tool.command is not None
    at = ("tools", name, "command")
    known = set(tool.parameters.get("properties") or ())
    argv = tool.command.argv
    if not argv[0].strip():
        problem((*at, "argv", 0), f"tools.{name}.command.argv: the program (argv[0]) is empty")
    elif PLACEHOLDER.match(argv[0]):
        problem(
            (*at, "argv", 0),
            f"tools.{name}.command.argv: the program (argv[0]) cannot come from the model",
        )
    for i, element in enumerate(argv):
        whole = PLACEHOLDER.match(element)
        if whole is not None and whole.group(1) not in known:
            problem(
                (*at, "argv", i),
                f"tools.{name}.command.argv: {element!r} names no property of the "
                f"tool's parameters ({', '.join(sorted(known)) or 'none'})",
            )
        inner = [n for n in _INNER.findall(element) if n in known]
        if whole is None and inner:
            problem(
                (*at, "argv", i),
                f"tools.{name}.command.argv: {element!r}: a placeholder must be a whole "
                f"argv element (make {{{inner[0]}}} an element of its own)",
            )
    texts: list[tuple[tuple[str | int, ...], str]] = [(("argv", i), e) for i, e in enumerate(argv)]
    if tool.command.cwd is not None:
        texts.append((("cwd",), tool.command.cwd))
    for where, text in texts:
        if text.count("${") != len(_ENV.findall(text)):
            problem(
                (*at, *where),
                f"tools.{name}.command.{where[0]}: {text!r}: a ${{VAR}} is not well formed",
            )
    for i, var in enumerate(tool.command.env):
        if not _VAR_NAME.match(var):
            problem((*at, "env", i), f"tools.{name}.command.env: {var!r} is not a variable name")
    _check_command_paths(name, tool, problem)


def _check_command_paths(name: str, tool: ToolSpec, problem: _Problem) -> None:
    """A command's records read its result: ``$`` or ``$.`` one of its fields."""
    for part in ("records", "records_on_failure"):
        records: Records | None = getattr(tool, part)
        if records is None:
            continue
        refs: list[tuple[tuple[str, ...], str]]
        refs = [(("properties", p), ref) for p, ref in records.properties.items()]
        if records.value is not None:
            refs.append((("value",), records.value))
        for where, ref in refs:
            head = ref.removeprefix("$.").split(".")[0]
            if ref.startswith("$.") and head not in COMMAND_RESULT:
                problem(
                    ("tools", name, part, *where),
                    f"tools.{name}.{part}.{'.'.join(where)}: {ref!r}: a command's result "
                    f"has {', '.join(COMMAND_RESULT)}",
                )


def _check_mcp_tool(spec: _CatalogSpec, name: str, tool: ToolSpec, problem: _Problem) -> None:
    """An mcp tool names a declared server; any other tool has a description."""
    if tool.mcp is None:
        if not tool.description:
            problem(("tools", name), f"tools.{name}: a description is required")
        return
    if tool.mcp.server not in spec.mcp_servers:
        declared = ", ".join(sorted(spec.mcp_servers)) or "none"
        problem(
            ("tools", name, "mcp", "server"),
            f"tools.{name}.mcp: unknown server {tool.mcp.server!r} (mcp_servers: {declared})",
        )


def _read_skills(spec: _CatalogSpec, base: Path, problem: _Problem) -> dict[str, str]:
    """Each skill's text, read from its file (relative to ``base``)."""
    skills: dict[str, str] = {}
    for name, file in spec.skills.items():
        path = base / file
        try:
            skills[name] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            problem(("skills", name), f"skills.{name}: cannot read {file}: {why}")
    return skills


def check_playbooks(catalog: Catalog, playbooks: Iterable[Playbook]) -> list[str]:
    """One line per integration a playbook names that the catalog lacks."""
    out: list[str] = []
    for playbook in playbooks:
        for milestone in playbook.milestones:
            for name in milestone.integrations:
                if name not in catalog.integrations:
                    out.append(
                        f"{catalog.source}: playbook {playbook.key} milestone {milestone.id}: "
                        f"integration {name!r} is not in the catalog"
                    )
    return out


def expand_env(text: str, env: Mapping[str, str] | None = None) -> str:
    """``${VAR}`` replaced from the environment (an unset variable is empty)."""
    values = os.environ if env is None else env
    return _ENV.sub(lambda m: values.get(m.group(1), ""), text)


def redact_env(text: str, shown: str = "***") -> str:
    """``text`` with each ``${VAR}`` as ``shown``: what a journal shows of a
    value read from the environment (docs/agents.md, "Command tools")."""
    return _ENV.sub(shown, text)
