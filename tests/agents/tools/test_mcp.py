"""MCP tools through the trusted executor, against real MCP servers
(docs/agents.md, "MCP servers"): ``mcp-server-time`` and ``mcp-server-git``
(installed from PyPI) over stdio, an MCP server of the tests' own (the SDK's
MCPServer, tests/agents/tools/mcp_fixture.py) over stdio and over streamable
HTTP. The servers run for the whole module, in one event loop on a thread of
its own, as the agents service holds them; each test calls through it."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import pytest
from click.testing import CliRunner
from starlette.types import ASGIApp, Receive, Scope, Send

from agents.catalog import Catalog, CatalogError, load_catalog, load_catalog_file
from agents.compose import OpenTask, compose
from agents.dev.serving import AppThread
from agents.flows.terminal import run_flow
from agents.tools.executor import Executor, Outcome, derived_key
from stream.runtime.broker import free_port
from tests.lanes import ROOT

if TYPE_CHECKING:
    from agents.tools.mcp import McpServers

# The MCP SDK (about 1 s of CPU to import) is imported by the fixtures and tests that
# use it, not by every test process collecting the suite (docs/operations.md, "How
# long a start takes"): agents.tools.mcp, agents.tools.cli, agents.dev.demo_mcp and
# mcp_fixture import it.

T = TypeVar("T")
FIXTURE = Path(__file__).with_name("mcp_fixture.py")
TOKEN = "s3cret-token"

CATALOG = """\
integrations:
  ops:
    tools: [current_time, git_status, slow_read, slow_write, echo_key, fails, lookup,
            web_key, web_lookup]
agents:
  conversation: {instructions: Help.}
mcp_servers:
  clock: {command: ["python", "-m", "mcp_server_time", "--local-timezone", "UTC"]}
  git: {command: ["python", "-m", "mcp_server_git", "--repository", "${REPO}"]}
  fixture: {command: ["python", "${FIXTURE}"], env: [MARK_DIR]}
  web: {url: "${WEB_URL}/mcp", headers: {Authorization: "Bearer ${TOKEN}"}}
tools:
  current_time:
    mcp: {server: clock, tool: get_current_time}
    idempotent: true
    records: {fact: time_checked, properties: {timezone: "$.timezone"}}
  git_status:
    mcp: {server: git, tool: git_status}
    idempotent: true
    writes: false
    records: {fact: repo_status, properties: {text: "$"}}
  slow_read:
    description: Safe to call again.
    mcp: {server: fixture, tool: slow}
    idempotent: true
  slow_write:
    description: Not safe to call again.
    mcp: {server: fixture, tool: slow}
    records: {fact: slept}
  echo_key:
    mcp: {server: fixture, tool: echo_key}
    records: {fact: key_seen, properties: {key: "$.key"}}
  fails:
    mcp: {server: fixture, tool: fails}
    records: {fact: never}
    records_on_failure: {fact: out_of_stock, properties: {reason: "$.reason"}}
  lookup:
    mcp: {server: fixture, tool: lookup}
    records: {fact: found, properties: {id: "$.id"}}
  web_key:
    mcp: {server: web, tool: echo_key}
    records: {fact: web_key_seen, properties: {key: "$.key"}}
  web_lookup:
    mcp: {server: web, tool: lookup}
    records: {fact: found, properties: {id: "$.id"}}
"""
GRANTED = [
    "current_time", "git_status", "slow_read", "slow_write", "echo_key", "fails", "lookup",
    "web_key", "web_lookup",
]  # fmt: skip


class _Bearer:
    """The web server's door: 401 without ``Authorization: Bearer <TOKEN>``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if headers.get(b"authorization") != f"Bearer {TOKEN}".encode():
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"no"})
                return
        await self.app(scope, receive, send)


@dataclass
class World:
    """The module's servers, their supervisor and executor, in one loop."""

    loop: asyncio.AbstractEventLoop
    catalog: Catalog
    servers: McpServers
    executor: Executor
    env: dict[str, str]
    marks: Path
    port: int
    web: AppThread

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, name: str, args: dict[str, Any], task: str = "t-1") -> Outcome:
        return self.run(
            self.executor.run(
                job_key="job-1",
                task_id=task,
                name=name,
                arguments=json.dumps(args),
                granted=GRANTED,
                occurrence=1,
            )
        )

    def connects(self, server: str) -> int:
        return self.servers.connections[server].connects

    def serve_web(self, shape: str) -> None:
        """(Re)start the web server with ``lookup`` of ``shape``, on the same port."""
        self.web.stop()
        self.web = AppThread(web_app(shape), "127.0.0.1", self.port, "mcp web").start()


def web_app(shape: str = "v1") -> ASGIApp:
    """The tests' own MCP server over streamable HTTP, behind the token."""
    from tests.agents.tools import mcp_fixture

    return _Bearer(mcp_fixture.build(shape).streamable_http_app())


def wait_for(what: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "not observed in time"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    from agents.tools.mcp import McpServers

    root = tmp_path_factory.mktemp("mcp")
    repo = root / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "notes.txt").write_text("hello\n")
    marks = root / "marks"
    marks.mkdir()
    port = free_port()
    web = AppThread(web_app(), "127.0.0.1", port, "mcp web").start()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", str(root)),
        "REPO": str(repo),
        "FIXTURE": str(FIXTURE),
        "MARK_DIR": str(marks),
        "WEB_URL": web.url,
        "TOKEN": TOKEN,
    }
    catalog = load_catalog(CATALOG)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="mcp loop", daemon=True)
    thread.start()
    errlog = (root / "servers.log").open("w")
    servers = McpServers(catalog, env, errlog=errlog, ping_every=1.0)

    async def up() -> Executor:
        await servers.start()
        return Executor(catalog, httpx.AsyncClient(), env, mcp=servers)

    executor = asyncio.run_coroutine_threadsafe(up(), loop).result(60)
    world = World(loop, catalog, servers, executor, env, marks, port, web)
    yield world
    world.run(servers.close())
    world.run(executor.client.aclose())
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()
    world.web.stop()
    errlog.close()


def test_a_time_servers_result_records_its_fact_under_our_key(world: World) -> None:
    outcome = world.call("current_time", {"timezone": "Europe/Paris"})
    assert outcome.status == "done", outcome.output
    assert outcome.url == "mcp:clock/get_current_time"
    assert outcome.data["timezone"] == "Europe/Paris"
    fact = outcome.fact
    assert fact is not None
    assert (fact.action, fact.source, fact.key) == ("time_checked", "tool", "job-1")
    assert fact.properties == {"timezone": "Europe/Paris"}
    key = derived_key("t-1", "current_time", {"timezone": "Europe/Paris"}, 1)
    assert fact.idempotency_key == outcome.key == key


def test_a_git_servers_text_result_is_the_whole_path(world: World) -> None:
    outcome = world.call("git_status", {"repo_path": world.env["REPO"]})
    assert outcome.status == "done", outcome.output
    assert outcome.fact is not None
    text = outcome.fact.properties["text"]
    assert "notes.txt" in text  # not JSON: `$` is the text the server answered
    # Arguments that do not fit the server's own schema are refused, not sent.
    refused = world.call("git_status", {"path": "x"})
    assert refused.status == "refused"
    assert "repo_path" in refused.output


def test_only_what_the_catalog_grants_is_offered_or_run(world: World) -> None:
    view = world.servers.catalog(world.catalog)
    task = OpenTask("t-1", "m", "Do it.", "2026-01-01T00:00:00Z", ("ops",))
    request = compose(
        view, playbook_instructions="", tasks=[task], subject={}, contacts=[], turns=[]
    )
    offered = {t.name: t for t in request.tools}
    assert set(offered) == set(GRANTED)
    # An mcp tool without parameters or description is offered as its server lists it.
    clock = offered["current_time"]
    assert clock.parameters["required"] == ["timezone"]
    assert "time" in clock.description.lower()
    # The servers have more: none of it is offered, and a call is refused.
    assert "convert_time" in world.servers.status()[0].listed
    for name in ("convert_time", "git_commit", "git_add"):
        assert name not in offered
        outcome = world.call(name, {})
        assert outcome.status == "refused"


def test_the_idempotency_key_travels_in_meta(world: World) -> None:
    outcome = world.call("echo_key", {}, task="t-meta")
    assert outcome.status == "done", outcome.output
    assert outcome.fact is not None
    assert outcome.fact.properties == {"key": outcome.key}
    assert outcome.key == derived_key("t-meta", "echo_key", {}, 1)


def test_an_error_result_fails_and_records_only_records_on_failure(world: World) -> None:
    outcome = world.call("fails", {})
    assert outcome.status == "failed"
    assert "out of stock" in outcome.output
    assert outcome.fact is not None
    assert (outcome.fact.action, outcome.fact.source) == ("out_of_stock", "tool")
    assert outcome.fact.properties == {"reason": "out of stock"}


def _killed_mid_call(world: World, name: str, task: str) -> Outcome:
    """Call the slow tool, kill its server once it runs, and wait for the outcome."""
    before = world.connects("fixture")
    args = {"seconds": 60}
    future = asyncio.run_coroutine_threadsafe(
        world.executor.run(
            job_key="job-1", task_id=task, name=name, arguments=json.dumps(args),
            granted=GRANTED, occurrence=1,
        ),
        world.loop,
    )  # fmt: skip
    mark = world.marks / f"slow-{derived_key(task, name, args, 1)}.pid"
    wait_for(mark.exists)
    wait_for(lambda: mark.read_text() != "")
    os.kill(int(mark.read_text()), signal.SIGKILL)
    outcome = future.result(30)
    # The supervisor starts the server again: the next call is answered.
    wait_for(lambda: world.connects("fixture") > before)
    again = world.call("echo_key", {}, task=f"{task}-after")
    assert again.status == "done", again.output
    return outcome


def test_a_writing_tool_cut_short_by_a_killed_server_is_outcome_unknown(world: World) -> None:
    outcome = _killed_mid_call(world, "slow_write", "t-write")
    assert outcome.status == "outcome_unknown", outcome.output
    assert outcome.fact is None
    assert "do not repeat it" in outcome.output


def test_an_idempotent_tool_cut_short_by_a_killed_server_failed(world: World) -> None:
    outcome = _killed_mid_call(world, "slow_read", "t-read")
    assert outcome.status == "failed", outcome.output
    assert "closed during the call" in outcome.output


def test_over_streamable_http_with_a_token_from_the_environment(world: World) -> None:
    outcome = world.call("web_key", {}, task="t-web")
    assert outcome.status == "done", outcome.output
    assert outcome.url == f"mcp:web/echo_key ({world.env['WEB_URL']}/mcp)"
    assert outcome.fact is not None
    assert outcome.fact.properties == {"key": derived_key("t-web", "web_key", {}, 1)}
    # The same server without the token is refused at its door.
    status = asyncio.run(_without_token(world.env["WEB_URL"]))
    assert status == 401


async def _without_token(url: str) -> int:
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{url}/mcp", json={})
        return response.status_code


def test_a_changed_schema_after_a_reconnect_is_refused_and_logged(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    assert world.call("web_lookup", {"id": "a-1"}).status == "done"
    before = world.connects("web")
    with caplog.at_level(logging.WARNING, logger="agents.tools.mcp"):
        world.serve_web("v2")  # the server comes back with lookup(id: int)
        wait_for(lambda: world.connects("web") > before)
        wait_for(
            lambda: "web_lookup" not in (world.servers.catalog(world.catalog).mcp_listed or {})
        )
    outcome = world.call("web_lookup", {"id": 7})
    assert outcome.status == "refused"
    assert "changed its input schema" in outcome.output
    assert any("lookup changed its input schema" in r.getMessage() for r in caplog.records)
    # The server's other tools are still called.
    assert world.call("web_key", {}, task="t-web-2").status == "done"


def test_check_refuses_a_catalog_naming_an_undeclared_server() -> None:
    with pytest.raises(CatalogError, match="unknown server 'nowhere'"):
        load_catalog(CATALOG.replace("server: clock", "server: nowhere"))
    with pytest.raises(CatalogError, match="exactly one of command"):
        load_catalog(
            CATALOG.replace('clock: {command: ["python",', 'clock: {url: "x", command: ["python",')
        )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


def web_catalog(world: World, folder: Path, tools: str) -> Path:
    """A catalog file with the web server (its token from ``${TOKEN}``) and ``tools``."""
    url = f"{world.env['WEB_URL']}/mcp"
    head = (
        "agents: {conversation: {instructions: Help.}}\nmcp_servers:\n"
        f'  web: {{url: "{url}", headers: {{Authorization: "Bearer ${{TOKEN}}"}}}}\ntools:\n'
    )
    path = folder / "catalog.yaml"
    path.write_text(head + tools)
    return path


def test_tools_list_shows_each_servers_tools_next_to_the_grants(
    world: World, tmp_path: Path
) -> None:
    catalog = web_catalog(
        world,
        tmp_path,
        """\
  web_key: {mcp: {server: web, tool: echo_key}}
  gone: {mcp: {server: web, tool: nope}}
  book: {description: Book., http: {url: "https://example.com/book?token=${T}"}}
""",
    )
    from agents.tools.cli import tools

    env = {"LEMONGRAPH_CATALOG": str(catalog), "TOKEN": TOKEN, "T": "secret"}
    result = CliRunner().invoke(tools, ["list"], env=env)
    lines = [line.split() for line in result.output.splitlines()]
    assert result.exit_code == 1, result.output  # a granted tool is missing
    assert lines[0][:4] == ["mcp", "server", "web", f"({world.env['WEB_URL']}/mcp):"]
    assert ["echo_key", "granted", "as", "web_key"] in lines
    assert ["fails", "not", "granted"] in lines
    assert ["nope", "missing", "as", "gone:", "is", "not", "listed", "by", "the", "server"] in lines
    assert lines[-1] == ["http", "tool", "book:", "POST", "https://example.com/book?token=***"]


def test_the_bundled_catalogs_demo_setup_guide_records_self_service(world: World) -> None:
    from agents.dev.demo_mcp import SETUP_MCP_URL, build_demo_mcp
    from agents.tools.mcp import McpServers

    catalog = load_catalog_file(ROOT / "examples" / "catalog.yaml")
    demo = AppThread(build_demo_mcp().streamable_http_app(), "127.0.0.1", free_port(), "demo")
    demo.start()
    servers = McpServers(catalog, {SETUP_MCP_URL: f"{demo.url}/mcp"})

    async def go() -> Outcome:
        await servers.start()
        try:
            view = servers.catalog(catalog)
            assert view.offer("check_setup") is not None
            executor = Executor(view, world.executor.client, {}, mcp=servers)
            return await executor.run(
                job_key="job-1", task_id="t-setup", name="check_setup", arguments="{}",
                granted=["check_setup"], occurrence=1,
            )  # fmt: skip
        finally:
            await servers.close()

    try:
        outcome = world.run(go())
    finally:
        demo.stop()
    assert outcome.status == "done", outcome.output
    assert outcome.fact is not None
    assert outcome.fact.action == "self_service_completed"
    assert outcome.fact.properties == {"steps": 4}


def test_a_flows_tool_node_calls_an_mcp_tool_in_flow_run(world: World, tmp_path: Path) -> None:
    tool = "  web_key: {mcp: {server: web, tool: echo_key}, idempotent: true, writes: false}\n"
    catalog = web_catalog(world, tmp_path, tool)
    flow = tmp_path / "echo.yaml"
    flow.write_text(
        """\
version: "1"
description: Ask the web server for the key it was sent.
outputs: [seen]
state:
  seen: {type: object, description: What the server answered.}
tools: [web_key]
start: ask
nodes:
  - {id: ask, type: tool, tool: web_key, args: {}, output: seen}
edges:
  - {from: ask, to: END}
"""
    )
    out, err = io.StringIO(), io.StringIO()
    env = {**os.environ, "TOKEN": TOKEN}
    code = run_flow(flow, catalog_file=catalog, as_json=True, out=out, err=err, env=env)
    assert code == 0, out.getvalue() + err.getvalue()
    end = json.loads(out.getvalue().splitlines()[-1])
    # The server was sent the flow's call id as the key (docs/flows.md, "Ids").
    assert (end["status"], end["outputs"]) == ("finished", {"seen": {"key": "run-echo/ask/1/1"}})
