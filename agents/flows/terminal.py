"""``lemongraph flow run``: a flow at the terminal (docs/flows.md, "Running a
flow at the terminal"; ``flow replay`` is agents/flows/replay.py).

``run`` drives one flow run to its end: the step function (``compiler.FlowRun``)
says what to do, :class:`agents.flows.executor.FlowExecutor` does the calls (the
stand-in model in this process unless a model is configured; the catalog's tools,
the demo tools in this process for the URLs not set), and ``ask``/``approval``
questions are put at the terminal. No Kafka: there is no job, so a tool's fact
goes nowhere. ``--record`` writes the run as JSON lines, which ``flow replay``
steps again.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import orjson
from compiler import (
    Answer,
    Ask,
    AwaitApproval,
    CallHandler,
    CallModel,
    CallRouter,
    CallTool,
    Fail,
    Finish,
    Flow,
    FlowError,
    FlowRun,
    FlowState,
    LemongraphError,
    bound_input,
    load_flow,
    to_iso,
)
from stream.runtime.errors import ExitCode, ShellError

__all__ = [
    "ActionTaken",
    "BadInput",
    "Call",
    "Question",
    "drive",
    "dump",
    "end_line",
    "load_flow_file",
    "node_of",
    "parse_inputs",
    "run_flow",
    "short",
]

Call = CallModel | CallTool | CallHandler | CallRouter
Question = Ask | AwaitApproval
#: How much of a value a human-readable step line shows.
_SHOWN = 160


class BadInput(ShellError):
    """The command cannot run: a bad flow, input, answer file or recording (exit 2)."""

    exit_code = ExitCode.USAGE


# -- the loop shared by run and replay ----------------------------------------------


@dataclass
class ActionTaken:
    """One action carried out and the input it gave back."""

    n: int
    action: dict[str, Any]
    input: dict[str, Any]
    now: str

    @property
    def node(self) -> str:
        return node_of(self.action)

    def line(self) -> dict[str, Any]:
        """The step as ``--json`` prints it (and as ``--record`` keeps it)."""
        return {
            "kind": "step",
            "n": self.n,
            "node": self.node,
            "action": self.action,
            "input": self.input,
            "now": self.now,
        }


def node_of(action: Mapping[str, Any]) -> str:
    return str(action.get("node") or action.get("edge_from") or "")


def dump(model: Any) -> dict[str, Any]:
    data: dict[str, Any] = model.model_dump(mode="json", by_alias=True)
    return data


Perform = Callable[[Call], Awaitable[Any]]
Respond = Callable[[Question, int], Awaitable[Any]]


async def drive(
    flow: Flow,
    run_id: str,
    inputs: dict[str, Any],
    perform: Perform,
    respond: Respond,
    on_step: Callable[[ActionTaken], None],
    clock: Callable[[], datetime],
) -> tuple[FlowState, list[ActionTaken]]:
    """Run ``flow`` to its end: each action carried out (``perform`` a call,
    ``respond`` to a question: the answer), its input fed back. An answer that
    changes nothing (not one of an ``ask``'s ``answers``) is asked again."""
    runner = FlowRun(flow)
    state, actions = runner.start(run_id, inputs, clock())
    queue = deque(actions)
    steps: list[ActionTaken] = []
    tries: dict[str, int] = {}
    while queue:
        action = queue.popleft()
        if isinstance(action, Finish | Fail):
            continue  # the state says so too
        fed: Any
        if isinstance(action, Ask | AwaitApproval):
            tries[action.interrupt_id] = tries.get(action.interrupt_id, 0) + 1
            answer = await respond(action, tries[action.interrupt_id])
            fed = Answer(interrupt_id=action.interrupt_id, answer=answer)
        else:
            fed = bound_input(await perform(action))  # docs/flows.md, "Bounds"
        now = clock()
        step = ActionTaken(len(steps) + 1, dump(action), dump(fed), to_iso(now))
        steps.append(step)
        on_step(step)
        after, more = runner.next(state, fed, now)
        if (
            not more
            and isinstance(action, Ask | AwaitApproval)
            and after.status == "waiting"
            and after.interrupt is not None
            and after.interrupt.interrupt_id == action.interrupt_id
        ):
            more = [action]  # not an answer it takes: the question stays open
        state = after
        queue.extend(more)
    return state, steps


def end_line(state: FlowState) -> dict[str, Any]:
    """The last line: how the run ended, its trail and its outputs or failure."""
    return {
        "kind": "end",
        "status": state.status,
        "trail": list(state.trail),
        "outputs": state.outputs,
        "failure": dump(state.failure) if state.failure is not None else None,
    }


# -- reading the command line ------------------------------------------------------


def load_flow_file(path: Path, catalog_file: Path | None, registry: Any) -> tuple[Flow, Any]:
    """The flow (checked with the catalog found for it and the registered
    names) and the catalog (or None). Raises :class:`BadInput`."""
    from agents.catalog import load_catalog_file
    from agents.flows.files import catalog_for, flow_tools

    catalog = None
    where = catalog_for(path, catalog_file)
    if where is not None:
        try:
            catalog = load_catalog_file(where)
        except LemongraphError as exc:
            raise BadInput(f"the catalog is refused: {exc}") from None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot read: {exc}") from None
    try:
        flow = load_flow(
            text,
            str(path),
            path.stem,
            tools=flow_tools(catalog) if catalog is not None else None,
            handlers=set(registry.handlers),
            routers=set(registry.routers),
        )
    except FlowError as exc:
        raise BadInput(str(exc)) from None
    return flow, catalog


def parse_inputs(flow: Flow, pairs: tuple[str, ...]) -> dict[str, Any]:
    """``--input k=v``: a string channel takes ``v`` as it stands; any other
    reads it as JSON (``5``, ``true``, ``["A-1"]``), or as the string when it is
    not JSON. Raises :class:`BadInput` for a name that is not an input."""
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise BadInput(f"--input {pair!r}: say NAME=VALUE")
        if name not in flow.spec.inputs:
            listed = ", ".join(flow.spec.inputs) or "none"
            raise BadInput(f"--input {name}: not an input of the flow (inputs: {listed})")
        channel = flow.channels.get(name)
        out[name] = value if channel is not None and channel.type == "string" else _json_or(value)
    return out


def _json_or(value: str) -> Any:
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return value


def load_answers(path: Path | None, pairs: tuple[str, ...]) -> dict[str, list[Any]]:
    """The answers given up front, by node id or interrupt id, in order (a
    node asked twice takes the next one): ``--answers FILE`` (YAML or JSON, a
    mapping to an answer or a list of them) and ``--answer NODE=VALUE``."""
    import yaml

    out: dict[str, list[Any]] = {}
    if path is not None:
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise BadInput(f"--answers {path}: {exc}") from None
        if not isinstance(data, dict):
            raise BadInput(f"--answers {path}: a mapping of node id to answer")
        for key, value in data.items():
            out.setdefault(str(key), []).extend(value if isinstance(value, list) else [value])
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise BadInput(f"--answer {pair!r}: say NODE=ANSWER")
        out.setdefault(name, []).append(value)
    return out


# -- printing ------------------------------------------------------------------------


@dataclass
class Printer:
    """Prints each step, one per line (JSON lines with ``as_json``), and keeps
    the recording when asked."""

    out: IO[str]
    as_json: bool
    record: IO[str] | None = None
    lines: list[dict[str, Any]] = field(default_factory=list)

    def emit(self, line: dict[str, Any], human: str | None) -> None:
        if self.as_json:
            self.out.write(orjson.dumps(line).decode() + "\n")
        elif human is not None:
            self.out.write(human + "\n")
        self.out.flush()
        if self.record is not None and line["kind"] in ("flow_run", "step", "end"):
            self.record.write(orjson.dumps(line).decode() + "\n")
            self.record.flush()

    def step(self, step: ActionTaken) -> None:
        self.emit(step.line(), human_step(step))

    def end(self, state: FlowState) -> None:
        line = end_line(state)
        if state.status == "finished":
            human = f"finished: {short(state.outputs)}"
        elif state.status == "failed" and state.failure is not None:
            human = f"failed at {state.failure.node}: {state.failure.message}"
        else:
            human = f"stopped: the run is {state.status} and nothing is left to do"
        self.emit(line, human)


def human_step(step: ActionTaken) -> str:
    """``N node  kind what -> result``."""
    a, fed = step.action, step.input
    kind = a["kind"]
    if kind == "call_model":
        what = short(a["prompt"], 80) + (" (schema)" if a.get("schema") else "")
        got = short(fed.get("text"))
    elif kind == "call_tool":
        what = f"{a['tool']} {short(a['args'], 80)}"
        got = f"ok {short(fed.get('result'))}" if fed.get("ok") else f"error {fed.get('error')}"
    elif kind == "call_handler":
        what = a["handler"]
        got = f"ok {short(fed.get('result'))}" if fed.get("ok") else f"error {fed.get('error')}"
    elif kind == "call_router":
        what = a["router"]
        got = f"route {fed['route']}" if "route" in fed else f"error {fed.get('error')}"
    else:
        what = short(a.get("question"), 80)
        got = f"answer {short(fed.get('answer'))}"
    return f"{step.n} {step.node}  {kind} {what} -> {got}"


def short(value: Any, limit: int = _SHOWN) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- asking at the terminal -----------------------------------------------------------


@dataclass
class Terminal:
    """Answers questions: from the answers given up front, else a line of
    ``stdin`` (the question is printed first, on ``out`` or, with ``--json``,
    as a ``question`` line)."""

    answers: dict[str, list[Any]]
    stdin: IO[str]
    printer: Printer

    async def __call__(self, action: Question, attempt: int) -> Any:
        node = action.node
        kind = "approval" if isinstance(action, AwaitApproval) else "ask"
        allowed = list(action.answers) if isinstance(action, Ask) else []
        line: dict[str, Any] = {
            "kind": "question",
            "type": kind,
            "node": node,
            "interrupt_id": action.interrupt_id,
            "question": action.question,
            "answers": allowed,
        }
        if isinstance(action, AwaitApproval):
            line["before"] = action.before
            line["show"] = action.show
        for key in (action.interrupt_id, node):
            queued = self.answers.get(key)
            if queued:
                self.printer.emit(line, None)
                return queued.pop(0)
        human = f"? {node}: {action.question}"
        if isinstance(action, AwaitApproval):
            human += f" (approve {action.before}? yes/no)"
            if action.show:
                human += f" {short(action.show)}"
        if allowed:
            human += f" [{' | '.join(allowed)}]"
        if attempt > 1 and allowed:
            human = f"  (the answer must be one of: {', '.join(allowed)})\n" + human
        self.printer.emit(line, human)
        text = await asyncio.to_thread(self.stdin.readline)
        if not text:
            raise BadInput(f"no answer for {node} (stdin ended): give --answer {node}=...")
        return text.rstrip("\r\n")


# -- flow run --------------------------------------------------------------------------


@contextmanager
def _services(
    script: Path | None, env: dict[str, str], catalog: Any, tools: tuple[str, ...]
) -> Iterator[list[str]]:
    """The stand-in model (unless a model is configured and no ``--script``
    is given) and the demo tools (for the URLs of the flow's ``tools`` not set), in
    this process; ``env`` gets their URLs. Yields what was started."""
    from stream.runtime.broker import free_port

    from agents.dev.demo_tools import TOOL_URLS, build_demo_tools
    from agents.dev.serving import AppThread
    from agents.dev.standin import StandinThread, load_script

    started: list[str] = []
    stops: list[Callable[[], None]] = []
    try:
        if script is not None or not (env.get("OPENAI_API_KEY") or env.get("OPENAI_BASE_URL")):
            try:
                rules = load_script(script) if script is not None else None
            except ValueError as exc:
                raise BadInput(str(exc)) from None
            standin = StandinThread("127.0.0.1", free_port(), rules)
            standin.start()
            stops.append(standin.stop)
            env.update(OPENAI_BASE_URL=standin.url, OPENAI_API_KEY="standin")
            started.append(f"the stand-in model at {standin.url}")
        wanted: set[str] = set()
        if catalog is not None:
            for name in tools:
                tool = catalog.tools.get(name)
                if tool is not None and tool.http is not None:
                    wanted.update(n for n in TOOL_URLS if "${" + n + "}" in tool.http.url)
        unset = sorted(n for n in wanted if not env.get(n))
        if unset:
            demo = AppThread(build_demo_tools(), "127.0.0.1", free_port(), "demo tools").start()
            stops.append(demo.stop)
            env.update({n: demo.url + TOOL_URLS[n] for n in unset})
            started.append(f"the demo tools at {demo.url} for {', '.join(unset)}")
        yield started
    finally:
        for stop in reversed(stops):
            stop()


def run_flow(
    path: Path,
    *,
    inputs: tuple[str, ...] = (),
    script: Path | None = None,
    as_json: bool = False,
    answers_file: Path | None = None,
    answers: tuple[str, ...] = (),
    record: Path | None = None,
    catalog_file: Path | None = None,
    run_id: str | None = None,
    out: IO[str] | None = None,
    err: IO[str] | None = None,
    stdin: IO[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """``lemongraph flow run``: 0 finished, 1 failed, 2 bad input."""
    from agents.flows.handlers import load_registry

    out = out or sys.stdout
    err = err or sys.stderr
    values = dict(os.environ if env is None else env)
    try:
        registry = load_registry(values)
        flow, catalog = load_flow_file(path, catalog_file, registry)
        given = parse_inputs(flow, inputs)
        queued = load_answers(answers_file, answers)
        with _services(script, values, catalog, flow.tools) as started:
            for what in started:
                err.write(f"flow run: {what}\n")
            with _opened(record) as recording:
                printer = Printer(out, as_json, recording)
                state = asyncio.run(
                    _run(flow, path, catalog, registry, values, given, queued, printer,
                         stdin or sys.stdin, run_id or f"run-{flow.name}")
                )  # fmt: skip
    except BadInput as exc:
        err.write(f"flow run: {exc}\n")
        return ExitCode.USAGE
    except LemongraphError as exc:
        err.write(f"flow run: {exc}\n")
        return ExitCode.USAGE
    return ExitCode.OK if state.status == "finished" else ExitCode.FAILED


@contextmanager
def _opened(path: Path | None) -> Iterator[IO[str] | None]:
    if path is None:
        yield None
        return
    try:
        handle = path.open("w", encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"--record {path}: {exc}") from None
    with handle:
        yield handle


async def _run(
    flow: Flow,
    path: Path,
    catalog: Any,
    registry: Any,
    env: dict[str, str],
    inputs: dict[str, Any],
    answers: dict[str, list[Any]],
    printer: Printer,
    stdin: IO[str],
    run_id: str,
) -> FlowState:
    import httpx2

    from agents.flows.executor import FlowExecutor
    from agents.model import Model, ModelSettings

    settings = ModelSettings.from_env(env)
    async with AsyncExitStack() as stack:
        client = await stack.enter_async_context(httpx2.AsyncClient())
        model = Model(settings)
        stack.push_async_callback(model.close)
        tools = await _tools(stack, catalog, client, env) if catalog is not None else None
        executor = FlowExecutor(model, tools, registry)
        started = datetime.now(UTC)
        printer.emit(
            {
                "kind": "flow_run",
                "flow": flow.name,
                "source": str(path),
                "digest": flow.digest,
                "run_id": run_id,
                "inputs": inputs,
                "now": to_iso(started),
            },
            None,
        )

        async def perform(action: Call) -> Any:
            return await executor.execute(action, job_key=None, flow=flow.name, run_id=run_id)

        clock = _first_then_now(started)
        state, _ = await drive(
            flow, run_id, inputs, perform, Terminal(answers, stdin, printer), printer.step, clock
        )
        printer.end(state)
        return state


async def _tools(stack: AsyncExitStack, catalog: Any, client: Any, env: dict[str, str]) -> Any:
    """The executor of the catalog's tools, its MCP servers started for the run
    and closed after it (docs/agents.md, "MCP servers")."""
    from agents.tools.executor import Executor
    from agents.tools.mcp import McpServers

    if not any(spec.configured(env) for spec in catalog.mcp_servers.values()):
        return Executor(catalog, client, env)  # the SDK is not even imported
    mcp = McpServers(catalog, env)
    await mcp.start()
    stack.push_async_callback(mcp.close)
    return Executor(mcp.catalog(catalog), client, env, mcp=mcp)


def _first_then_now(first: datetime) -> Callable[[], datetime]:
    used = [False]

    def clock() -> datetime:
        if not used[0]:
            used[0] = True
            return first
        return datetime.now(UTC)

    return clock
