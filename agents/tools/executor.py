"""The trusted executor: runs the tools a model asks for, never the model
(docs/agents.md, "Tools as evidence").

It refuses a tool the open tasks do not grant and arguments that fail the
tool's schema; runs what the tool says, by its kind (docs/agents.md, "Tool
kinds"): an ``http`` call (an idempotent tool gets our derived key as
``Idempotency-Key``; success judged by agents/tools/success.py) or a
``command`` (agents/tools/command.py) or a ``workspace`` op in the job's
worktree (agents/workspace/editor.py); and on a confirmed success returns the
fact the tool records — or, for a command that ran and failed, the fact its
``records_on_failure`` says — as an inbox event with ``source: tool`` and that
same key as its idempotency key. The key is derived from our own data — task id, tool,
canonical arguments and occurrence — never from the model's call id, so a
re-delivered task or a retried model turn records the fact once.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import time
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, Literal

import httpx2
import orjson
from jsonschema import Draft202012Validator
from opentelemetry.util.types import AttributeValue
from stream.runtime.tracing import span
from topics import InboxEvent, encode

from agents.catalog import Catalog, Records, ToolSpec, expand_env
from agents.model import whole_number
from agents.tools.command import CommandError, prepare, run_command, told
from agents.tools.outcome import RESULT_EXCERPT, Outcome, redact_url, tell
from agents.tools.success import Verdict, judge, response_path
from agents.workspace.editor import perform
from agents.workspace.worktree import Workspaces

if TYPE_CHECKING:
    from agents.tools.mcp import McpServers

__all__ = [
    "FACT_MAX_BYTES",
    "MAX_TOOL_RESPONSE_BYTES",
    "Executor",
    "Outcome",
    "derived_key",
    "redact_url",
    "response_path",
    "tool_response_bound",
]

#: How much of an editor op's result the model is shown: a file's text is
#: bounded by the editor first (agents/workspace/ops.py, ``OUTPUT_CHARS``).
WORKSPACE_EXCERPT = 16_000
#: The default of ``LEMONGRAPH_MAX_TOOL_RESPONSE_BYTES``: the most of a tool's
#: answer read (docs/agents.md, "Output bounds").
MAX_TOOL_RESPONSE_BYTES = 4 << 20
#: The most a fact a tool records may take, as JSON: it goes to the inbox and
#: into the run's checkpoint (docs/agents.md, "Output bounds").
FACT_MAX_BYTES = 65_536
#: How much of a body that is not a success the model and the journal are shown.
BODY_EXCERPT = 300
#: No tool is guarded by a flow's approval (a call from a flow, or no flows).
_UNGUARDED: Mapping[str, Collection[str]] = {}


def derived_key(task_id: str, tool: str, arguments: Any, occurrence: int) -> str:
    """The idempotency key of one tool call: the same for the same task, tool,
    arguments (canonical JSON) and occurrence, whatever the model called it."""
    canonical = orjson.dumps([task_id, tool, arguments, occurrence], option=orjson.OPT_SORT_KEYS)
    return "lg-" + hashlib.sha256(canonical).hexdigest()[:40]


class Executor:
    """Runs catalog tools, each by its kind. ``env`` supplies ``${VAR}`` values
    and a command's allowed environment (None: this process's environment)."""

    def __init__(
        self,
        catalog: Catalog,
        client: httpx2.AsyncClient,
        env: Mapping[str, str] | None = None,
        *,
        max_response: int = MAX_TOOL_RESPONSE_BYTES,
        headers: Mapping[str, str] | None = None,
        mcp: McpServers | None = None,
        workspaces: Workspaces | None = None,
    ) -> None:
        self.catalog = catalog
        #: The catalog's MCP servers, connected (agents/tools/mcp.py).
        self.mcp = mcp
        #: Where each job's worktree is, for ``workspace`` tools (None: no job
        #: has one, and such a tool is refused: docs/coding.md).
        self.workspaces = workspaces
        self.client = client
        self.env = env
        #: The most of a tool's answer read (``LEMONGRAPH_MAX_TOOL_RESPONSE_BYTES``).
        self.max_response = max_response
        #: Sent with every call, over the tool's own: a prompt run's origin
        #: (docs/schedules.md, "Wake loops").
        self.headers = dict(headers or {})
        self._validators = {
            name: Draft202012Validator(tool.parameters) for name, tool in catalog.tools.items()
        }

    def carrying(self, headers: Mapping[str, str]) -> Executor:
        """This executor, whose calls carry ``headers`` too (a prompt run's origin:
        docs/schedules.md, "Wake loops"); everything else shared."""
        other = copy.copy(self)
        other.headers = {**self.headers, **headers}
        return other

    def check(
        self,
        name: str,
        arguments: str,
        granted: Collection[str],
        guarded: Mapping[str, Collection[str]] = _UNGUARDED,
    ) -> tuple[Any, str | None]:
        """(parsed arguments, why the call is refused or None). ``guarded``: by
        tool, the flows that guard it with an approval, when an agent calls
        (only those flows call it: docs/flows.md)."""
        if name in guarded:
            flows = sorted(guarded[name])
            one = len(flows) == 1
            which = f"flow {flows[0]}" if one else f"flows {', '.join(flows)}"
            only = "that flow calls" if one else "those flows call"
            return None, f"{name} is guarded by an approval in {which}: only {only} it"
        if name not in granted or name not in self.catalog.tools:
            return None, f"the tool {name!r} is not granted to this agent by its open tasks"
        try:
            args = orjson.loads(arguments or "{}")
        except orjson.JSONDecodeError as exc:
            return None, f"the arguments are not JSON: {exc}"
        validator = self._validators[name]
        if self.catalog.tools[name].mcp is not None:  # docs/agents.md, "MCP servers"
            if self.mcp is None:
                return args, "refused: no MCP server is connected here"
            why, validator = self.mcp.admit(name, self.catalog.tools[name], validator)
            if why is not None:
                return args, why
        errors = sorted(validator.iter_errors(args), key=lambda e: list(e.path))
        if errors:
            first = errors[0]
            where = "/".join(str(p) for p in first.absolute_path) or "arguments"
            return args, f"the arguments do not fit the tool's schema: {where}: {first.message}"
        return args, None

    async def run(
        self,
        *,
        job_key: str,
        task_id: str,
        name: str,
        arguments: str,
        granted: Collection[str],
        occurrence: int,
        key: str | None = None,
        guarded: Mapping[str, Collection[str]] = _UNGUARDED,
    ) -> Outcome:
        """Check, run and interpret one call. ``key``, when given, is the
        idempotency key instead of the derived one (a flow's call id, which is
        made from our own data too: docs/flows.md, "Ids"). Traced as an
        ``execute_tool NAME`` span (docs/operations.md, "Tracing"): the tool and
        its outcome, never its arguments or its answer."""
        args, refused = self.check(name, arguments, granted, guarded)
        if key is None:
            key = derived_key(task_id, name, args, occurrence)
        tool = self.catalog.tools.get(name)
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.type": "extension" if tool is not None and tool.mcp else "function",
            "lemongraph.job.key": job_key,
        }
        with span("agents", f"execute_tool {name}", attributes) as traced:
            if refused is not None or tool is None:
                outcome = Outcome("refused", tell(False, refused or "unknown tool"), key)
            else:
                outcome = await self._by_kind(tool, name, args, key, job_key)
            if traced is not None:
                traced.set_attribute("lemongraph.tool.status", outcome.status)
                if outcome.status != "done":
                    traced.set_attribute("error.type", outcome.status)
        return outcome

    async def _by_kind(
        self, tool: ToolSpec, name: str, args: Any, key: str, job_key: str
    ) -> Outcome:
        """Run a checked call by its tool's kind."""
        if tool.mcp is not None:
            from agents.tools.mcp_result import run_mcp

            return await run_mcp(self, tool, name=name, args=args, key=key, job_key=job_key)
        if tool.command is not None:
            return await self._command(tool, job_key, key, args)
        if tool.workspace is not None:
            return await self._workspace(tool, job_key, key, args)
        return await self._http(tool, job_key, key, args)

    async def _http(self, tool: ToolSpec, job_key: str, key: str, args: Any) -> Outcome:
        """Make the tool's HTTP call and judge its answer."""
        assert tool.http is not None  # the catalog requires one kind
        url = expand_env(tool.http.url, self.env)
        shown = redact_url(url)
        headers = {k: expand_env(v, self.env) for k, v in tool.http.headers.items()}
        if tool.idempotent:
            headers["Idempotency-Key"] = key
        headers.update(self.headers)
        started = time.monotonic()
        try:
            status, body, cut = await self._send(tool, url, args, headers)
        except httpx2.TimeoutException:
            seconds = time.monotonic() - started
            return self._unanswered(tool, key, shown, seconds, f"timed out after {seconds:.1f}s")
        except httpx2.HTTPError as exc:
            seconds = time.monotonic() - started
            return self._unanswered(tool, key, shown, seconds, f"{type(exc).__name__}")
        seconds = time.monotonic() - started
        if not 200 <= status < 300:
            why = f"HTTP {status}: {_opening(body)}"
            return Outcome("failed", tell(False, why), key, None, status, shown, seconds)
        if cut:
            # Not read whole, so not judged: what it did is unknown (docs/agents.md,
            # "Output bounds").
            why = (
                f"HTTP {status}, but the answer is over LEMONGRAPH_MAX_TOOL_RESPONSE_BYTES "
                f"({self.max_response:,} bytes): cut there and not read: {_opening(body)}"
            )
            return self._unanswered(tool, key, shown, seconds, why, status)
        # A 2xx is not enough: the body must say the call happened
        # (docs/agents.md, "What success is").
        judged = judge(tool.success, body)
        why = f"HTTP {status}, but {judged.why}: {_opening(body)}"
        if judged.verdict is Verdict.FAILED:
            return Outcome("failed", tell(False, why), key, None, status, shown, seconds)
        if judged.verdict is Verdict.UNSAID:
            return self._unanswered(tool, key, shown, seconds, why, status)
        fact, oversize = self._fact(tool.records, job_key, key, judged.data)
        return Outcome(
            "done",
            tell(True, oversize or judged.data),
            key,
            fact=fact,
            http_status=status,
            url=shown,
            seconds=seconds,
            data=judged.data,
        )

    async def _send(
        self, tool: ToolSpec, url: str, args: Any, headers: dict[str, str]
    ) -> tuple[int, bytes, bool]:
        """Make the tool's HTTP request; (status, the body read up to
        ``max_response`` bytes, whether it was cut there). The body is streamed:
        no more than the bound is ever held."""
        assert tool.http is not None
        method = tool.http.method
        sent: dict[str, Any] = {"params": _params(args)} if method == "GET" else {"json": args}
        request = self.client.stream(
            method, url, headers=headers, timeout=tool.http.timeout, **sent
        )
        async with request as response:
            body = bytearray()
            async for chunk in response.aiter_bytes():
                room = self.max_response - len(body)
                if len(chunk) > room:
                    body += chunk[:room]
                    return response.status_code, bytes(body), True
                body += chunk
            return response.status_code, bytes(body), False

    def _unanswered(
        self,
        tool: ToolSpec,
        key: str,
        url: str,
        seconds: float,
        reason: str,
        http_status: int | None = None,
    ) -> Outcome:
        # The request may have reached the endpoint, and no answer says what it
        # did (none came, or a 2xx body that does not say). An idempotent tool
        # is safe to call again with the same key; any other is not.
        if tool.idempotent:
            return Outcome("failed", tell(False, reason), key, None, http_status, url, seconds)
        return Outcome(
            "outcome_unknown",
            tell(False, f"{reason}; it may or may not have taken effect: do not repeat it"),
            key,
            http_status=http_status,
            url=url,
            seconds=seconds,
        )

    async def _command(self, tool: ToolSpec, job_key: str, key: str, args: Any) -> Outcome:
        """Run the tool's command (agents/tools/command.py): ``done`` on exit 0
        with what ``records`` says, else ``failed`` with what
        ``records_on_failure`` says (docs/agents.md, "Command tools")."""
        assert tool.command is not None
        prepared = prepare(tool.command, args, self.env)
        started = time.monotonic()
        try:
            result = await run_command(prepared, tool.command.timeout)
        except CommandError as exc:
            seconds = time.monotonic() - started
            why = f"the command did not start: {exc}"
            return Outcome("failed", tell(False, why), key, seconds=seconds, command=prepared.shown)
        seconds = time.monotonic() - started
        data = result.data()
        records = tool.records if result.ok else tool.records_on_failure
        fact, oversize = self._fact(records, job_key, key, data)
        output = tell(result.ok, oversize) if oversize else told(result, RESULT_EXCERPT)
        status: Literal["done", "failed"] = "done" if result.ok else "failed"
        return Outcome(
            status, output, key, fact=fact, seconds=seconds, data=data, command=prepared.shown
        )

    async def _workspace(self, tool: ToolSpec, job_key: str, key: str, args: Any) -> Outcome:
        """Do the tool's editor op in the job's worktree (agents/workspace/editor.py,
        in a thread: it reads files and runs git). A write is a result, not
        evidence: it records a fact only when the tool says ``records``
        (docs/coding.md, "The editor's tools")."""
        assert tool.workspace is not None
        root = self.workspaces.root(job_key) if self.workspaces is not None else None
        if root is None:
            return Outcome("refused", tell(False, "no workspace for this job"), key)
        started = time.monotonic()
        edited = await asyncio.to_thread(perform, root, tool.workspace.op, args)
        seconds = time.monotonic() - started
        if edited.status != "done":
            return Outcome(edited.status, tell(False, edited.why), key, seconds=seconds)
        fact, oversize = self._fact(tool.records, job_key, key, edited.data)
        output = tell(True, oversize or edited.data, WORKSPACE_EXCERPT)
        return Outcome("done", output, key, fact=fact, seconds=seconds, data=edited.data)

    def _fact(
        self, records: Records | None, job_key: str, key: str, data: Any
    ) -> tuple[InboxEvent | None, str | None]:
        """The fact ``records`` says, read from ``data``, and None; or, over
        :data:`FACT_MAX_BYTES`, no fact and what the model is told of it."""
        if records is None:
            return None, None
        properties = dict(records.fixed)
        for name, path in records.properties.items():
            found, value = response_path(data, path)
            if found:
                properties[name] = value
        value = None
        if records.value is not None:
            found, value = response_path(data, records.value)
        fact = InboxEvent(
            key=job_key,
            action=records.fact,
            value=value if isinstance(value, str | int | float | bool) else None,
            properties=properties,
            idempotency_key=key,
            source="tool",
        )
        size = len(encode(fact))
        if size > FACT_MAX_BYTES:
            return None, (
                f"it happened, but the fact it records is {size:,} bytes, over "
                f"{FACT_MAX_BYTES:,}: not recorded"
            )
        return fact, None


def tool_response_bound(env: Mapping[str, str] | None) -> int:
    """``LEMONGRAPH_MAX_TOOL_RESPONSE_BYTES`` of ``env`` (``ValueError`` when it
    is not a whole number of at least 1)."""
    name = "LEMONGRAPH_MAX_TOOL_RESPONSE_BYTES"
    return whole_number(env or {}, name, MAX_TOOL_RESPONSE_BYTES)


def _params(args: Any) -> dict[str, str]:
    if not isinstance(args, dict):
        return {}
    return {k: v if isinstance(v, str) else orjson.dumps(v).decode() for k, v in args.items()}


def _opening(body: bytes) -> str:
    """The first characters of a response body, for the model and the journal."""
    if not body:
        return "(no body)"
    text = body[: BODY_EXCERPT * 4].decode("utf-8", "replace")
    return text if len(text) <= BODY_EXCERPT else text[: BODY_EXCERPT - 3] + "..."
