"""``lemongraph flow run`` and ``lemongraph flow replay`` (docs/flows.md,
"Running a flow at the terminal", "Replay").

``run`` drives one flow run to its end: the step function (``compiler.FlowRun``)
says what to do, :class:`agents.flows.executor.FlowExecutor` does the calls (the
stand-in model in this process unless a model is configured; the catalog's tools,
the demo tools in this process for the URLs not set), and ``ask``/``approval``
questions are put at the terminal. No Kafka: there is no job, so a tool's fact
goes nowhere. ``--record`` writes the run as JSON lines; ``replay`` steps the
flow again on those lines alone (no model, no tool, no handler is called) and
proves that it takes the same path to the same outputs.
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
    FlowStart,
    FlowState,
    LemongraphError,
    flow_input_from_json,
    from_iso,
    load_flow,
    to_iso,
)
from stream.runtime.errors import ShellError

__all__ = ["BadInput", "Recording", "parse_inputs", "replay_flow", "replay_job", "run_flow"]

Call = CallModel | CallTool | CallHandler | CallRouter
Question = Ask | AwaitApproval
#: How much of a value a human-readable step line shows.
_SHOWN = 160


class BadInput(ShellError):
    """The command cannot run: a bad flow, input, answer file or recording (exit 2)."""

    exit_code = 2


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
        return _node_of(self.action)

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


def _node_of(action: Mapping[str, Any]) -> str:
    return str(action.get("node") or action.get("edge_from") or "")


def _dump(model: Any) -> dict[str, Any]:
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
            fed = await perform(action)
        now = clock()
        step = ActionTaken(len(steps) + 1, _dump(action), _dump(fed), to_iso(now))
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
        "failure": _dump(state.failure) if state.failure is not None else None,
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
            human = f"finished: {_short(state.outputs)}"
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
        what = _short(a["prompt"], 80) + (" (schema)" if a.get("schema") else "")
        got = _short(fed.get("text"))
    elif kind == "call_tool":
        what = f"{a['tool']} {_short(a['args'], 80)}"
        got = f"ok {_short(fed.get('result'))}" if fed.get("ok") else f"error {fed.get('error')}"
    elif kind == "call_handler":
        what = a["handler"]
        got = f"ok {_short(fed.get('result'))}" if fed.get("ok") else f"error {fed.get('error')}"
    elif kind == "call_router":
        what = a["router"]
        got = f"route {fed['route']}" if "route" in fed else f"error {fed.get('error')}"
    else:
        what = _short(a.get("question"), 80)
        got = f"answer {_short(fed.get('answer'))}"
    return f"{step.n} {step.node}  {kind} {what} -> {got}"


def _short(value: Any, limit: int = _SHOWN) -> str:
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
                human += f" {_short(action.show)}"
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
    from agents.dev.demo_tools import TOOL_URLS, build_demo_tools
    from agents.dev.serving import AppThread
    from agents.dev.standin import StandinThread, load_script
    from stream.runtime.broker import free_port

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
        return 2
    except LemongraphError as exc:
        err.write(f"flow run: {exc}\n")
        return 2
    return 0 if state.status == "finished" else 1


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
    import httpx

    from agents.executor import Executor
    from agents.flows.executor import FlowExecutor
    from agents.model import Model, ModelSettings

    settings = ModelSettings.from_env(env)
    async with AsyncExitStack() as stack:
        client = await stack.enter_async_context(httpx.AsyncClient())
        model = Model(settings)
        stack.push_async_callback(model.close)
        tools = Executor(catalog, client, env) if catalog is not None else None
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


def _first_then_now(first: datetime) -> Callable[[], datetime]:
    used = [False]

    def clock() -> datetime:
        if not used[0]:
            used[0] = True
            return first
        return datetime.now(UTC)

    return clock


# -- flow replay -----------------------------------------------------------------------


@dataclass
class Recording:
    """A recorded run: its first line, its steps and its end."""

    head: dict[str, Any]
    steps: list[dict[str, Any]]
    end: dict[str, Any] | None

    @classmethod
    def read(cls, path: Path) -> Recording:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise BadInput(f"--journal {path}: cannot read: {exc}") from None
        head: dict[str, Any] | None = None
        steps: list[dict[str, Any]] = []
        end = None
        for number, text in enumerate(lines, 1):
            if not text.strip():
                continue
            try:
                line = orjson.loads(text)
            except orjson.JSONDecodeError as exc:
                raise BadInput(f"{path}:{number}: not JSON: {exc}") from None
            kind = line.get("kind") if isinstance(line, dict) else None
            if kind == "flow_run":
                head = line
            elif kind == "step":
                steps.append(line)
            elif kind == "end":
                end = line
        if head is None:
            raise BadInput(f"{path}: not a recorded flow run (no flow_run line: flow run --record)")
        return cls(head, steps, end)


class _Differs(ShellError):
    pass


def replay_flow(
    path: Path,
    journal: Path,
    *,
    as_json: bool = False,
    catalog_file: Path | None = None,
    out: IO[str] | None = None,
    err: IO[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """``lemongraph flow replay``: 0 when the flow takes the recorded path to
    the recorded outputs, with no model, tool or handler called; 1 with the
    first difference; 2 bad input."""

    def source() -> tuple[Path, Callable[[Flow], tuple[str | None, int]]]:
        recording = Recording.read(journal)
        return path, lambda flow: (asyncio.run(_replay(flow, recording)), len(recording.steps))

    return _replay_with(source, as_json, catalog_file, out, err, env)


def _replay_with(
    source: Callable[[], tuple[Path, Callable[[Flow], tuple[str | None, int]]]],
    as_json: bool,
    catalog_file: Path | None,
    out: IO[str] | None,
    err: IO[str] | None,
    env: Mapping[str, str] | None,
) -> int:
    """One replay, whatever its source: ``source`` gives the flow file and how
    to step it (the first difference, or None, and the steps); the verdict
    printed; 2 for bad input."""
    from agents.flows.handlers import load_registry

    try:
        path, step = source()
        registry = load_registry(dict(os.environ if env is None else env))
        flow, _ = load_flow_file(path, catalog_file, registry)
        difference, steps = step(flow)
    except (BadInput, LemongraphError) as exc:
        (err or sys.stderr).write(f"flow replay: {exc}\n")
        return 2
    return _report(difference, steps, as_json, out or sys.stdout)


def _report(difference: str | None, steps: int, as_json: bool, out: IO[str]) -> int:
    """Print the replay's verdict: 0 the same, 1 the first difference."""
    if difference is None:
        line: dict[str, Any] = {"kind": "replay", "same": True, "steps": steps}
        text = f"same path and outputs ({steps} steps, no model or tool called)"
    else:
        line = {"kind": "replay", "same": False, "difference": difference}
        text = f"differs: {difference}"
    out.write((orjson.dumps(line).decode() if as_json else text) + "\n")
    return 0 if difference is None else 1


async def _replay(flow: Flow, recording: Recording) -> str | None:
    """The first difference between the recording and the flow stepped on
    the recorded results, or None."""
    head = recording.head
    if head.get("flow") != flow.name:
        return f"the recording is of flow {head.get('flow')!r}, not {flow.name!r}"
    by_id: dict[str, dict[str, Any]] = {}
    for line in recording.steps:
        fed = line.get("input") or {}
        key = fed.get("call_id") or fed.get("interrupt_id")
        if key is not None:
            by_id.setdefault(str(key), fed)
    nows = [str(head.get("now"))] + [str(s.get("now")) for s in recording.steps]
    place = [0]

    def clock() -> datetime:
        at = nows[min(place[0], len(nows) - 1)]
        place[0] += 1
        try:
            return from_iso(at)
        except (ValueError, LemongraphError):
            raise BadInput(f"the recording has a bad time {at!r}") from None

    taken: list[ActionTaken] = []

    def check(step: ActionTaken) -> None:
        taken.append(step)
        index = step.n - 1
        if index >= len(recording.steps):
            raise _Differs(f"step {step.n}: {_said(step.action)}, and the recording had ended")
        was = recording.steps[index]["action"]
        if was != step.action:
            raise _Differs(f"step {step.n}: {_difference(was, step.action)}")

    def recorded(key: str, action: Any) -> dict[str, Any]:
        fed = by_id.get(key)
        if fed is None:
            n = len(taken) + 1
            raise _Differs(f"step {n}: {_said(_dump(action))}, which the recording never did")
        return fed

    async def perform(action: Call) -> Any:
        return flow_input_from_json(recorded(action.call_id, action))

    async def respond(action: Question, attempt: int) -> Any:
        return recorded(action.interrupt_id, action).get("answer")

    try:
        state, steps = await drive(
            flow,
            str(head.get("run_id")),
            dict(head.get("inputs") or {}),
            perform,
            respond,
            check,
            clock,
        )
    except _Differs as exc:
        return str(exc)
    if len(steps) < len(recording.steps):
        missing = recording.steps[len(steps)]
        return (
            f"step {len(steps) + 1}: the recording has {_said(missing['action'])}; the replay ended"
        )
    end = recording.end
    if end is None:
        return "the recording has no end line (the recorded run was cut short)"
    return _compare_end(end, state)


def _compare_end(end: Mapping[str, Any], state: FlowState) -> str | None:
    """The first of the end's status, trail (node by node), outputs and
    failure that the replayed state does not have, or None."""
    mine = end_line(state)
    was, now = list(end.get("trail") or []), mine["trail"]
    for n, (a, b) in enumerate(zip(was, now, strict=False), 1):
        if a != b:
            return f"node {n}: recorded {a}, replayed {b}"
    for key in ("status", "trail", "outputs", "failure"):
        if end.get(key) != mine[key]:
            return f"{key}: recorded {_short(end.get(key))}, replayed {_short(mine[key])}"
    return None


def _said(action: Mapping[str, Any]) -> str:
    kind = action.get("kind")
    name = action.get("tool") or action.get("handler") or action.get("router") or ""
    return f"{_node_of(action)} {kind}{' ' + name if name else ''}".strip()


def _difference(was: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    if _node_of(was) != _node_of(now) or was.get("kind") != now.get("kind"):
        return f"recorded {_said(was)}, replayed {_said(now)}"
    for key in sorted(set(was) | set(now)):
        if was.get(key) != now.get(key):
            return (
                f"{_said(now)}: {key} was {_short(was.get(key), 80)}, is {_short(now.get(key), 80)}"
            )
    return f"recorded {_said(was)}, replayed {_said(now)}"


# -- replaying a run of the agents service -------------------------------------------


def replay_job(
    conversation: Mapping[str, Any] | None,
    job: str,
    run_id: str | None,
    path: Path | None,
    *,
    playbooks: Path,
    jobs: list[str] | None = None,
    as_json: bool = False,
    catalog_file: Path | None = None,
    out: IO[str] | None = None,
    err: IO[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """``lemongraph flow replay --job KEY``: a flow run of the agents service
    (``conversation``, the job's latest record on the ``conversations`` topic,
    None when it has none; ``jobs``, the keys it has), stepped again from its
    start on the inputs it recorded (no model, tool or handler called), the
    flow read from ``path`` or the playbooks' ``flows/``. Exit 0 the same node
    path and outputs, 1 the first difference, 2 bad input."""
    from agents.flows.files import find_flow

    def source() -> tuple[Path, Callable[[Flow], tuple[str | None, int]]]:
        if conversation is None:
            there = ", ".join(sorted(jobs or [])[:20]) or "none"
            raise BadInput(
                f"no conversation of job {job!r} on the conversations topic (jobs: {there})"
            )
        track = _track_of(conversation, job, run_id)
        found = path if path is not None else find_flow(playbooks, str(track["flow"]))
        if found is None:
            raise BadInput(
                f"run {track['run_id']} is of flow {track['flow']!r}: "
                f"no {playbooks}/flows/{track['flow']}.yaml (give the flow file)"
            )
        return found, lambda flow: _replay_inputs(flow, track)

    return _replay_with(source, as_json, catalog_file, out, err, env)


def _track_of(conversation: Mapping[str, Any], job: str, run_id: str | None) -> dict[str, Any]:
    """The flow run ``run_id`` of the conversation (the latest without one)."""
    tracks = [dict(t) for t in (conversation.get("flows") or {}).values()]
    runs = [str(t.get("run_id")) for t in tracks]
    if not tracks:
        raise BadInput(f"job {job!r} has no flow run")
    if run_id is None:
        return max(tracks, key=lambda t: _run_number(str(t.get("run_id"))))
    for track in tracks:
        if track.get("run_id") == run_id:
            return track
    raise BadInput(f"job {job!r} has no flow run {run_id!r} (runs: {', '.join(runs)})")


def _run_number(run_id: str) -> int:
    _, _, n = run_id.rpartition("#")
    return int(n) if n.isdigit() else 0


def _replay_inputs(flow: Flow, track: Mapping[str, Any]) -> tuple[str | None, int]:
    """Step ``flow`` from the start on the run's recorded inputs, in order and at
    their recorded times; the first difference from the run's recorded state
    (its node path, status, outputs, failure), or None, and the steps taken."""
    stepped = list(track.get("stepped") or [])
    times = list(track.get("stepped_at") or [])
    recorded = track.get("state")
    if not stepped or stepped[0].get("kind") != "start" or recorded is None:
        raise BadInput(
            f"run {track.get('run_id')} has no recorded start (not started, or more than "
            "its kept inputs were stepped)"
        )
    if track.get("flow") != flow.name:
        return f"the run is of flow {track.get('flow')!r}, not {flow.name!r}", 0

    def at(n: int) -> datetime:
        text = times[n] if n < len(times) else (times[-1] if times else "1970-01-01T00:00:00Z")
        try:
            return from_iso(text)
        except (ValueError, LemongraphError):
            raise BadInput(f"the run has a bad time {text!r}") from None

    runner = FlowRun(flow)
    try:
        given = [flow_input_from_json(item) for item in stepped]
    except ValueError as exc:
        raise BadInput(f"the run's recorded inputs do not read: {exc}") from None
    start = given[0]
    assert isinstance(start, FlowStart)
    try:
        state, actions = runner.start(start.run_id, dict(start.inputs), at(0))
    except ValueError as exc:
        return f"the start: {exc}", 0
    issued = {_id_of(_dump(a)) for a in actions}
    for n, fed in enumerate(given[1:], 1):
        key = _id_of(_dump(fed))
        if key is not None and key not in issued:
            return (
                f"step {n}: the run was given the {fed.kind} of {key}, which the replay never "
                f"asked for (replayed path: {' '.join(state.trail) or 'none'})"
            ), n
        state, actions = runner.next(state, fed, at(n))
        issued.update(_id_of(_dump(a)) for a in actions)
    steps = len(given) - 1
    return _compare_end(end_line(FlowState.model_validate(recorded)), state), steps


def _id_of(item: Mapping[str, Any]) -> str | None:
    found = item.get("call_id") or item.get("interrupt_id")
    return str(found) if found is not None else None
