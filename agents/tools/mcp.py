"""The catalog's MCP servers, connected through the official ``mcp`` SDK and
kept connected (docs/agents.md, "MCP servers").

:class:`McpServers` is the supervisor. Each declared server gets one
long-lived asyncio task that owns its connection: it enters the SDK's
transport (stdio: the SDK starts the command and owns its process; streamable
HTTP: a client for the URL) and the ``ClientSession``, and leaves them, in that
same task (the SDK's anyio task groups must be left by the task that entered
them). Calls are made from the runs' own tasks over the session.

The first listing of a server's tools is the reference: each tool the catalog
grants is offered with the input schema read then. On a reconnect the server is
listed again; a granted tool whose schema changed, or that vanished, is refused
(and logged) until the service restarts: never silently re-shaped.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any, TextIO, cast

import anyio
import httpx2
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    CallToolResult,
    PaginatedRequestParams,
    RequestParamsMeta,
    Tool,
)

from agents.catalog import Catalog, McpAction, McpServerSpec, ServerTool, ToolSpec, expand_env
from agents.tools.outcome import redact_url

__all__ = ["McpAnswer", "McpServers", "ServerStatus"]

log = logging.getLogger(__name__)

#: The first wait before reconnecting, doubled after each failure up to the most.
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0
#: How often a connected server is pinged (a dead one is found between calls).
PING_EVERY = 10.0
#: How long connecting and listing may take, and a ping.
CONNECT_TIMEOUT = 20.0
PING_TIMEOUT = 10.0
#: How long a call waits for a server that is reconnecting.
RECONNECT_WAIT = 10.0
#: The key of our idempotency key in a call's ``_meta`` (docs/agents.md, "MCP servers").
META_KEY = "idempotency_key"


@dataclass(frozen=True)
class _Listed:
    """A granted tool as its server listed it first."""

    description: str
    schema: dict[str, Any]
    validator: Draft202012Validator = field(compare=False)


@dataclass(frozen=True)
class McpAnswer:
    """What a call came to: the server's ``result``; or ``error``, a protocol
    error it answered with (the tool did not run); or ``lost``, why no answer
    came (the call may have reached it); or ``unsent``, why it was not sent."""

    result: CallToolResult | None = None
    error: str | None = None
    lost: str | None = None
    unsent: str | None = None
    refused: str | None = None


@dataclass(frozen=True)
class ServerStatus:
    """A server as ``lemongraph tools list`` shows it: how it is reached, whether
    it is connected, what it lists, and which catalog tool names each tool."""

    name: str
    shown: str
    connected: bool
    error: str | None
    listed: tuple[str, ...]
    granted: Mapping[str, tuple[str, ...]]
    refused: Mapping[str, str]


class _Connection:
    """One server's connection, owned by one task (:meth:`supervise`)."""

    def __init__(
        self,
        name: str,
        spec: McpServerSpec,
        wanted: frozenset[str],
        env: Mapping[str, str] | None,
        errlog: TextIO,
        ping_every: float,
    ) -> None:
        self.name = name
        self.spec = spec
        #: The server's tools the catalog grants (by the server's names).
        self.wanted = wanted
        self.env = env
        self.errlog = errlog
        self.ping_every = ping_every
        #: The reference listing (the first), of the wanted tools.
        self.listed: dict[str, _Listed] | None = None
        #: Every tool name the server listed last.
        self.names: tuple[str, ...] = ()
        #: Wanted tools refused until a restart, and why.
        self.refused: dict[str, str] = {}
        self.session: ClientSession | None = None
        self.error: str | None = None
        self.connects = 0
        self.connected = asyncio.Event()
        self.attempted = asyncio.Event()
        self.wake = asyncio.Event()
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    @property
    def shown(self) -> str:
        """How the server is reached, for logs and ``tools list`` (no secret)."""
        if self.spec.url is not None:
            return redact_url(expand_env(self.spec.url, self.env))
        return " ".join(self.spec.command or ())

    def where(self, tool: str) -> str:
        """The journal's ``url`` of a call: ``mcp:server/tool``, and the URL of
        an HTTP server, redacted."""
        name = f"mcp:{self.name}/{tool}"
        if self.spec.url is None:
            return name
        return f"{name} ({redact_url(expand_env(self.spec.url, self.env))})"

    def refusal(self, tool: str) -> str | None:
        if tool in self.refused:
            why = self.refused[tool]
            return f"refused: the MCP server {self.name}'s tool {tool} {why} (until a restart)"
        if self.listed is None:
            why = f" ({self.error})" if self.error else ""
            return f"refused: the MCP server {self.name} has not been reached yet{why}"
        return None

    async def supervise(self) -> None:
        """Connect, watch, reconnect with backoff, until stopped."""
        if not self.spec.configured(self.env):
            self.error = "not configured: its url is empty"
            self.attempted.set()
            return
        delay = BACKOFF_FIRST
        down = False
        while not self.stop.is_set():
            try:
                await self._connect_and_watch()
                delay, down = BACKOFF_FIRST, False
            except Exception as exc:
                self.error = _describe(exc)
                # Said once while it stays down.
                level = logging.DEBUG if down else logging.WARNING
                log.log(level, "mcp: server %s (%s): %s", self.name, self.shown, self.error)
                down = True
            finally:
                self.session = None
                self.connected.clear()
                self.attempted.set()
            if self.stop.is_set():
                return
            self.wake.clear()
            try:
                async with asyncio.timeout(delay):
                    await self.wake.wait()
            except TimeoutError:
                pass
            delay = min(delay * 2, BACKOFF_MAX)

    async def _connect_and_watch(self) -> None:
        async with AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(self._transport(stack))
            session = await stack.enter_async_context(ClientSession(read, write))
            # anyio's scopes inside the SDK's task groups (not asyncio.timeout).
            with anyio.fail_after(CONNECT_TIMEOUT):
                await session.initialize()
                tools = await _list_all(session)
            self._take(tools)
            self.session = session
            self.error = None
            self.connects += 1
            self.wake.clear()
            self.connected.set()
            self.attempted.set()
            log.info("mcp: server %s connected (%d tools listed)", self.name, len(tools))
            await self._watch(session)

    @asynccontextmanager
    async def _transport(self, stack: AsyncExitStack) -> AsyncIterator[Any]:
        spec = self.spec
        if spec.command is not None:
            argv = [expand_env(part, self.env) for part in spec.command]
            if argv[0] in ("python", "python3"):
                argv[0] = sys.executable  # the service's own interpreter (docs/agents.md)
            values = self.env if self.env is not None else {}
            params = StdioServerParameters(
                command=argv[0],
                args=argv[1:],
                env={name: values[name] for name in spec.env if name in values},
                cwd=expand_env(spec.cwd, self.env) if spec.cwd is not None else None,
            )
            async with stdio_client(params, errlog=self.errlog) as streams:
                yield streams
            return
        assert spec.url is not None
        headers = {k: expand_env(v, self.env) for k, v in spec.headers.items()}
        client = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0))
        await stack.enter_async_context(client)
        async with streamable_http_client(expand_env(spec.url, self.env), http_client=client) as s:
            yield s

    def _take(self, tools: list[Tool]) -> None:
        """Take a listing: the first is the reference; a later one refuses a
        wanted tool whose schema changed or that vanished."""
        self.names = tuple(t.name for t in tools)
        now = {t.name: t for t in tools if t.name in self.wanted}
        if self.listed is None:
            self.listed = {}
            for name in sorted(self.wanted):
                tool = now.get(name)
                if tool is None:
                    self._refuse(name, "is not listed by the server")
                    continue
                try:
                    Draft202012Validator.check_schema(tool.input_schema)
                except SchemaError as exc:
                    self._refuse(name, f"has an input schema that is no JSON Schema: {exc.message}")
                    continue
                validator = Draft202012Validator(tool.input_schema)
                self.listed[name] = _Listed(tool.description or "", tool.input_schema, validator)
            return
        for name, first in self.listed.items():
            again = now.get(name)
            if name in self.refused:
                continue
            if again is None:
                self._refuse(name, "vanished: the server no longer lists it")
            elif again.input_schema != first.schema:
                self._refuse(name, "changed its input schema since the service started")

    def _refuse(self, tool: str, why: str) -> None:
        self.refused[tool] = why
        log.warning("mcp: server %s: tool %s %s: refused", self.name, tool, why)

    async def _watch(self, session: ClientSession) -> None:
        """Until stopped or broken: a ping now and then (a dead server shows)."""
        while not self.stop.is_set():
            with anyio.move_on_after(self.ping_every):
                await self.wake.wait()
                return  # stopping, or a call found the connection broken
            with anyio.fail_after(PING_TIMEOUT):
                await session.send_ping()

    def broken(self) -> None:
        """A call found the connection gone: reconnect now."""
        self.connected.clear()
        self.wake.set()

    async def ready(self, wait: float) -> ClientSession | None:
        """The session, waiting up to ``wait`` seconds for a reconnect."""
        if self.session is None or not self.connected.is_set():
            try:
                async with asyncio.timeout(wait):
                    await self.connected.wait()
            except TimeoutError:
                return None
        return self.session

    async def call(self, action: McpAction, args: Any, key: str) -> McpAnswer:
        refused = self.refusal(action.tool)
        if refused is not None:
            return McpAnswer(refused=refused)
        session = await self.ready(min(action.timeout, RECONNECT_WAIT))
        if session is None:
            why = f": {self.error}" if self.error else ""
            return McpAnswer(unsent=f"the MCP server {self.name} is not connected{why}")
        meta = cast(RequestParamsMeta, {META_KEY: key})
        try:
            result = await session.call_tool(
                action.tool,
                args if isinstance(args, dict) else {},
                read_timeout_seconds=action.timeout,
                meta=meta,
            )
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                return McpAnswer(lost=f"timed out after {action.timeout:g}s")
            if exc.code == CONNECTION_CLOSED:
                self.broken()
                return McpAnswer(lost="the connection to the MCP server closed during the call")
            return McpAnswer(error=f"the MCP server answered with an error ({exc.code}): {exc}")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
            self.broken()
            return McpAnswer(lost=f"the connection to the MCP server broke: {_describe(exc)}")
        except Exception as exc:  # an answer the SDK could not read: what it did is unknown
            return McpAnswer(lost=f"no answer that could be read: {_describe(exc)}")
        return McpAnswer(result=result)


class McpServers:
    """The catalog's MCP servers (docs/agents.md, "MCP servers"): started with
    the service (:meth:`start`), closed with it (:meth:`close`)."""

    def __init__(
        self,
        catalog: Catalog,
        env: Mapping[str, str] | None = None,
        *,
        errlog: TextIO | None = None,
        ping_every: float = PING_EVERY,
    ) -> None:
        self.catalog_tools = {n: t for n, t in catalog.tools.items() if t.mcp is not None}
        wanted: dict[str, set[str]] = {name: set() for name in catalog.mcp_servers}
        for tool in self.catalog_tools.values():
            assert tool.mcp is not None
            wanted.setdefault(tool.mcp.server, set()).add(tool.mcp.tool)
        self.connections = {
            name: _Connection(
                name,
                spec,
                frozenset(wanted[name]),
                env,
                errlog or sys.stderr,
                ping_every,
            )
            for name, spec in catalog.mcp_servers.items()
        }

    async def start(self, wait: float = CONNECT_TIMEOUT) -> None:
        """Start every server's task and wait (up to ``wait`` seconds) for each
        first attempt: a server that is down is retried in the background."""
        for name, conn in self.connections.items():
            if conn.task is None:
                conn.task = asyncio.create_task(conn.supervise(), name=f"mcp:{name}")
        pending = [c.attempted.wait() for c in self.connections.values()]
        if pending:
            try:
                async with asyncio.timeout(wait):
                    await asyncio.gather(*pending)
            except TimeoutError:
                pass

    async def close(self) -> None:
        """Stop every server (a stdio server's process ends with its session)."""
        tasks = []
        for conn in self.connections.values():
            conn.stop.set()
            conn.wake.set()
            if conn.task is not None:
                tasks.append(conn.task)
        if not tasks:
            return
        _, late = await asyncio.wait(tasks, timeout=15.0)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late, timeout=5.0)

    def _of(self, name: str) -> tuple[_Connection, McpAction]:
        tool = self.catalog_tools[name]
        assert tool.mcp is not None
        return self.connections[tool.mcp.server], tool.mcp

    def where(self, name: str) -> str:
        """The journal's ``url`` of a call of catalog tool ``name``."""
        conn, action = self._of(name)
        return conn.where(action.tool)

    def admit(
        self, name: str, tool: ToolSpec, validator: Draft202012Validator
    ) -> tuple[str | None, Draft202012Validator]:
        """For the executor's check: (why mcp tool ``name`` is refused or None,
        the validator of its arguments: ``validator`` when the catalog gives its
        ``parameters``, else its server's input schema)."""
        conn, action = self._of(name)
        refused = conn.refusal(action.tool)
        listed = (conn.listed or {}).get(action.tool)
        if refused is not None or listed is None:
            return refused or f"refused: the MCP server {conn.name} does not list it", _ANY
        given = "parameters" in tool.model_fields_set
        return None, validator if given else listed.validator

    def catalog(self, base: Catalog) -> Catalog:
        """``base`` with what its mcp tools are offered as now (their servers'
        descriptions and schemas; a refused one not at all)."""
        listed: dict[str, ServerTool] = {}
        for name in self.catalog_tools:
            conn, action = self._of(name)
            first = (conn.listed or {}).get(action.tool)
            if first is not None and conn.refusal(action.tool) is None:
                listed[name] = ServerTool(first.description, first.schema)
        return replace(base, mcp_listed=listed)

    async def call(self, name: str, args: Any, key: str) -> McpAnswer:
        """Call catalog tool ``name`` with ``args``; ``key`` travels in ``_meta``."""
        conn, action = self._of(name)
        return await conn.call(action, args, key)

    def status(self) -> list[ServerStatus]:
        """Each server: connected, what it lists, which catalog tools name which tool."""
        out = []
        for name, conn in self.connections.items():
            granted: dict[str, list[str]] = {}
            for tool_name, tool in self.catalog_tools.items():
                if tool.mcp is not None and tool.mcp.server == name:
                    granted.setdefault(tool.mcp.tool, []).append(tool_name)
            out.append(
                ServerStatus(
                    name,
                    conn.shown,
                    conn.connected.is_set(),
                    conn.error,
                    conn.names,
                    {k: tuple(v) for k, v in granted.items()},
                    dict(conn.refused),
                )
            )
        return out


#: Passes anything: the validator returned with a refusal (never used).
_ANY = Draft202012Validator({})


async def _list_all(session: ClientSession) -> list[Tool]:
    """Every tool the server lists (following its pages)."""
    result = await session.list_tools()
    tools = list(result.tools)
    while result.next_cursor:
        result = await session.list_tools(params=PaginatedRequestParams(cursor=result.next_cursor))
        tools.extend(result.tools)
    return tools


def _describe(exc: BaseException) -> str:
    """An exception in a few words (an exception group: its first leaf)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
