"""``lemongraph flow replay`` (docs/flows.md, "Replay"): step a flow again on a
recorded run alone (no model, no tool, no handler is called) and prove that it
takes the same path to the same outputs: a run of ``flow run --record``
(agents/flows/terminal.py), or a run the agents service recorded in a job's
conversation."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import orjson
from compiler import (
    Flow,
    FlowRun,
    FlowStart,
    FlowState,
    LemongraphError,
    flow_input_from_json,
    from_iso,
)
from stream.runtime.errors import ExitCode, ShellError

from agents.flows.terminal import (
    ActionTaken,
    BadInput,
    Call,
    Question,
    drive,
    dump,
    end_line,
    load_flow_file,
    node_of,
    short,
)

__all__ = ["Recording", "replay_flow", "replay_job"]


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
        return ExitCode.USAGE
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
    return ExitCode.OK if difference is None else ExitCode.FAILED


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
            raise _Differs(f"step {n}: {_said(dump(action))}, which the recording never did")
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
            return f"{key}: recorded {short(end.get(key))}, replayed {short(mine[key])}"
    return None


def _said(action: Mapping[str, Any]) -> str:
    kind = action.get("kind")
    name = action.get("tool") or action.get("handler") or action.get("router") or ""
    return f"{node_of(action)} {kind}{' ' + name if name else ''}".strip()


def _difference(was: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    if node_of(was) != node_of(now) or was.get("kind") != now.get("kind"):
        return f"recorded {_said(was)}, replayed {_said(now)}"
    for key in sorted(set(was) | set(now)):
        if was.get(key) != now.get(key):
            return (
                f"{_said(now)}: {key} was {short(was.get(key), 80)}, is {short(now.get(key), 80)}"
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
    issued = {_id_of(dump(a)) for a in actions}
    for n, fed in enumerate(given[1:], 1):
        key = _id_of(dump(fed))
        if key is not None and key not in issued:
            return (
                f"step {n}: the run was given the {fed.kind} of {key}, which the replay never "
                f"asked for (replayed path: {' '.join(state.trail) or 'none'})"
            ), n
        state, actions = runner.next(state, fed, at(n))
        issued.update(_id_of(dump(a)) for a in actions)
    steps = len(given) - 1
    return _compare_end(end_line(FlowState.model_validate(recorded)), state), steps


def _id_of(item: Mapping[str, Any]) -> str | None:
    found = item.get("call_id") or item.get("interrupt_id")
    return str(found) if found is not None else None
