"""Scenarios: scripted events on a virtual clock, run through the pure core,
with expectations about where the job lands (docs/scenarios.md).

This module parses scenario text and runs scenarios; finding files and printing
reports is the shell's work (``stream/cli/simulate.py``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from compiler._durations import parse_duration
from compiler._errors import LemongraphError
from compiler._source import Located, did_you_mean, load_located
from compiler.conditions._ast import And, Expr, Not, Or
from compiler.conditions._condition import evaluate_expr
from compiler.conditions._printer import print_expr
from compiler.conditions._verdict import Verdict
from compiler.jobs._effects import Step, TaskOpened
from compiler.jobs._inputs import Event, Start, Tick
from compiler.jobs._jobgraph import JobGraph
from compiler.jobs._playbook import Playbook, compile_playbook
from compiler.jobs._state import JobState
from compiler.scenarios._scenario import Expectation, Scenario, ScenarioEvent

__all__ = [
    "Coverage",
    "ScenarioError",
    "ScenarioFile",
    "ScenarioResult",
    "parse_scenarios",
    "run_scenario",
]


class ScenarioError(LemongraphError):
    """A scenario file that cannot be used."""

    code = "invalid_scenario"


#: A scenario's fields that only a scenario over schedules has.
_SCHEDULE_FIELDS = ("down", "replies", "wakes", "changes")
#: The expectations about a job, which a schedule scenario cannot have.
_JOB_EXPECT = ("status", "done", "knocked", "dropped", "open", "pending", "unreachable", "tasks")


class ScenarioFile(BaseModel):
    """A scenario file: a playbook (a path relative to the file, or inline) or
    schedules (a schedules file relative to it, or an inline list), and its
    scenarios."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    playbook: str | dict[str, Any] | None = None
    schedules: str | list[dict[str, Any]] | None = None
    scenarios: list[Scenario] = Field(min_length=1)
    _located: Located | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _one_subject(self) -> ScenarioFile:
        if (self.playbook is None) == (self.schedules is None):
            raise ValueError(
                "a scenario file names a playbook or schedules (docs/schedules.md), "
                + ("not both" if self.playbook is not None else "and has neither")
            )
        return self

    def check_schedule_fields(self, source: str) -> None:
        """Refuse fields that mean nothing for the file's kind: events on
        schedules, downtime or scripted replies on a playbook, a schedule
        scenario with no span (docs/schedules.md)."""
        lines = []
        for i, scenario in enumerate(self.scenarios):
            if self.schedules is not None:
                wrong = ["events"] if scenario.events else []
                wrong += [
                    f"expect.{f}" for f in _JOB_EXPECT if getattr(scenario.expect, f) is not None
                ]
                if scenario.until is None:
                    lines.append(
                        self._where(source, ("scenarios", i, "name"))
                        + f"scenarios.{i}: a schedule scenario needs until (its span)"
                    )
                why = "a schedule scenario has no job"
            else:
                wrong = [f for f in _SCHEDULE_FIELDS if getattr(scenario, f)]
                wrong += [
                    f"expect.{f}"
                    for f in ("runs", "runs_of", "count")
                    if getattr(scenario.expect, f) is not None
                ]
                why = "only a scenario over schedules has it"
            for name in wrong:
                loc: tuple[str | int, ...] = ("scenarios", i, *name.split("."))
                lines.append(self._where(source, loc) + f"scenarios.{i}.{name}: {why}")
        if lines:
            raise ScenarioError("\n".join(lines))

    def _where(self, source: str, loc: tuple[str | int, ...]) -> str:
        pos = self._located.position(loc) if self._located else None
        return f"{source}:{pos.line}:{pos.column}: " if pos else f"{source}: "

    def check_milestones(self, playbook: Playbook, source: str) -> None:
        """Refuse an expectation naming a milestone ``playbook`` does not have
        (it could never be met, and the failure would not say why)."""
        known = [m.id for m in sorted(playbook.milestones, key=lambda m: m.index)]
        lines = []
        for i, scenario in enumerate(self.scenarios):
            for status in ("done", "knocked", "dropped", "open", "pending", "unreachable", "tasks"):
                for j, name in enumerate(getattr(scenario.expect, status) or ()):
                    if name in playbook.by_id:
                        continue
                    loc: tuple[str | int, ...] = ("scenarios", i, "expect", status, j)
                    pos = self._located.position(loc) if self._located else None
                    where = f"{source}:{pos.line}:{pos.column}" if pos else source
                    near = did_you_mean(name, known)
                    lines.append(
                        f"{where}: {'.'.join(str(p) for p in loc)}: "
                        f"unknown milestone {name!r}"
                        + (f" (did you mean {near!r}?)" if near else "")
                        + f"; playbook {playbook.key} has {', '.join(known)}"
                    )
        if lines:
            raise ScenarioError("\n".join(lines))

    def inline_playbook(self, source: str) -> Playbook:
        """Compile an inline ``playbook:`` mapping; problems point into this file."""
        assert isinstance(self.playbook, dict)
        located = self._located.subtree(("playbook",)) if self._located else None
        return compile_playbook(self.playbook, source, located, check_due=True)


def parse_scenarios(text: str, source: str) -> ScenarioFile:
    """Parse a scenario file's text. Raises :class:`ScenarioError` naming the
    file, the line and what is wrong."""
    try:
        located = load_located(text, source)
    except LemongraphError as exc:
        raise ScenarioError(str(exc)) from None
    try:
        parsed = ScenarioFile.model_validate(located.data)
        parsed._located = located
        return parsed
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = tuple(p if isinstance(p, int) else str(p) for p in err["loc"])
            pos = located.position(loc)
            where = f"{source}:{pos.line}:{pos.column}" if pos else source
            dotted = ".".join(str(p) for p in loc) or "file"
            message = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                message = f"unknown field {loc[-1]!r}"
                near = did_you_mean(str(loc[-1]), _fields_at(loc))
                if near is not None:
                    message += f" (did you mean {near!r}?)"
            lines.append(f"{where}: {dotted}: {message}")
        raise ScenarioError("\n".join(lines)) from None


def _fields_at(loc: tuple[str | int, ...]) -> Collection[str]:
    """The fields allowed where an unknown field ``loc`` was written."""
    inner: type[BaseModel] = ScenarioFile
    if len(loc) == 3:
        inner = Scenario
    elif len(loc) == 5 and loc[2] == "events":
        inner = ScenarioEvent
    elif len(loc) == 4 and loc[2] == "expect":
        inner = Expectation
    elif len(loc) != 1:
        return ()
    return inner.model_fields


@dataclass
class Coverage:
    """What a set of scenarios exercised in one playbook."""

    playbook: str
    #: milestone → the states it reached in some scenario
    states: dict[str, set[str]] = field(default_factory=dict)
    #: milestone → OR branch (canonical text) → times it was TRUE when the milestone completed
    branches: dict[str, dict[str, int]] = field(default_factory=dict)

    @classmethod
    def empty(cls, playbook: Playbook) -> Coverage:
        """Every milestone and every OR branch, none exercised yet."""
        cov = cls(playbook.key)
        for m in playbook.milestones:
            cov.states[m.id] = set()
            cov.branches[m.id] = {text: 0 for text in _or_branches(m.condition.expr)}
        return cov

    def to_json(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "playbook": self.playbook,
            "milestones": {k: sorted(v) for k, v in self.states.items()},
            "or_branches": self.branches,
        }


@dataclass(frozen=True)
class ScenarioResult:
    """One scenario's run: every step, the final state, and what missed."""

    source: str
    scenario: str
    steps: tuple[Step, ...]
    state: JobState
    tasks: tuple[str, ...]
    failures: tuple[str, ...]

    @property
    def passed(self) -> bool:
        """Did the job land where the scenario expected?"""
        return not self.failures

    def to_json(self) -> dict[str, Any]:
        """The ``results`` entry of ``simulate --json``."""
        return {
            "file": self.source,
            "scenario": self.scenario,
            "passed": self.passed,
            "status": self.state.status,
            "milestones": {k: v.status for k, v in self.state.milestones.items()},
            "tasks": list(self.tasks),
            "failures": list(self.failures),
        }


def _tick_through(
    graph: JobGraph, state: JobState, steps: list[Step], limit: datetime | None
) -> JobState:
    """Tick at each pending timer's instant up to ``limit`` (None: no limit)
    while the job runs; returns the state reached."""
    while state.status == "running" and state.timers:
        at = state.timers[0].at
        if limit is not None and at > limit:
            break
        steps.append(graph.next(state, at, Tick()))
        state = steps[-1].state or state
    return state


def run_scenario(
    playbook: Playbook, scenario: Scenario, source: str, coverage: Coverage | None = None
) -> ScenarioResult:
    """Run ``scenario`` on a virtual clock and compare the result to its expectation."""
    graph = JobGraph(playbook)
    base = scenario.base
    until = base + parse_duration(scenario.until) if scenario.until else None
    job_key = f"scenario:{scenario.name}"
    steps: list[Step] = [graph.next(None, base, Start(job_key, playbook.key, scenario.subject))]
    state = steps[0].state
    assert state is not None
    failures: list[str] = []
    events = sorted(enumerate(scenario.events), key=lambda pair: (pair[1].offset, pair[0]))
    for i, spec in events:
        at = base + spec.offset
        if until is not None and at > until:
            failures.append(f"event #{i + 1} ({spec.action} at {spec.at}) is after until")
            continue
        event = Event(
            spec.action,
            spec.value,
            spec.properties or None,
            spec.source,
            spec.idempotency_key,
            id=f"e{i + 1}",
        )
        # A worker's ticks fire each timer at its instant, before a later event
        # (and before one at the same instant: the tick came first).
        state = _tick_through(graph, state, steps, at)
        steps.append(graph.next(state, at, event))
        state = steps[-1].state or state
    # Let the clock run on through pending timers until the job ends (or `until`).
    state = _tick_through(graph, state, steps, until)
    tasks = tuple(e.milestone for step in steps for e in step.effects if isinstance(e, TaskOpened))
    failures.extend(_compare(scenario.expect, state, tasks))
    if coverage is not None:
        _cover(coverage, playbook, steps)
    return ScenarioResult(source, scenario.name, tuple(steps), state, tasks, tuple(failures))


def _compare(expect: Expectation, state: JobState, tasks: tuple[str, ...]) -> list[str]:
    failures = []
    if expect.status is not None and expect.status != state.status:
        failures.append(f"status: expected {expect.status}, got {state.status}")
    by_status: dict[str, set[str]] = {}
    for key, m in state.milestones.items():
        by_status.setdefault(m.status, set()).add(key)
    for status in ("done", "knocked", "dropped", "open", "pending", "unreachable"):
        wanted = getattr(expect, status)
        if wanted is None:
            continue
        got = by_status.get(status, set())
        missing, extra = sorted(set(wanted) - got), sorted(got - set(wanted))
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"expected but not {status}: {', '.join(missing)}")
            if extra:
                parts.append(f"{status} but not expected: {', '.join(extra)}")
            failures.append(f"{status}: " + "; ".join(parts))
    if expect.tasks is not None and list(expect.tasks) != list(tasks):
        failures.append(f"tasks: expected [{', '.join(expect.tasks)}], got [{', '.join(tasks)}]")
    return failures


def _or_branches(expr: Expr) -> list[str]:
    out: list[str] = []
    if isinstance(expr, Or):
        out.extend(print_expr(e) for e in expr.operands)
    if isinstance(expr, Not):
        out.extend(_or_branches(expr.operand))
    elif isinstance(expr, And | Or):
        for operand in expr.operands:
            out.extend(_or_branches(operand))
    return out


def _true_branches(expr: Expr, verdicts: Mapping[Any, Verdict]) -> list[str]:
    out: list[str] = []
    if isinstance(expr, Or):
        out.extend(
            print_expr(e) for e in expr.operands if evaluate_expr(e, verdicts) is Verdict.TRUE
        )
    if isinstance(expr, Not):
        out.extend(_true_branches(expr.operand, verdicts))
    elif isinstance(expr, And | Or):
        for operand in expr.operands:
            out.extend(_true_branches(operand, verdicts))
    return out


def _cover(coverage: Coverage, playbook: Playbook, steps: list[Step]) -> None:
    for step in steps:
        for transition in step.transitions:
            coverage.states.setdefault(transition.milestone, set()).add(transition.after)
        done_now = {t.milestone for t in step.transitions if t.after == "done"}
        for verdict in step.verdicts:
            if verdict.milestone not in done_now or verdict.explanation.get("verdict") != "TRUE":
                continue
            milestone = playbook.by_id[verdict.milestone]
            by_text = {
                a["atom"]: Verdict(a["verdict"]) for a in verdict.explanation.get("atoms", [])
            }
            verdicts = {atom: by_text[key] for key, atom in milestone.atom_keys if key in by_text}
            branches = coverage.branches.setdefault(milestone.id, {})
            for text in _true_branches(milestone.condition.expr, verdicts):
                branches[text] = branches.get(text, 0) + 1
