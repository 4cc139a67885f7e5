"""``lemongraph simulate``: find scenario files, run them through the pure core,
and report (plain, ``--trace``, ``--coverage``, ``--json``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compiler import (
    Coverage,
    Event,
    LemongraphError,
    Playbook,
    ScenarioFile,
    ScenarioResult,
    Start,
    Step,
    TaskClosed,
    TaskOpened,
    TimerCancelled,
    TimerSet,
    format_offset,
    parse_scenarios,
    run_scenario,
)

from .files import load_playbook_file

__all__ = [
    "SimulationRun",
    "playbook_for",
    "render_coverage",
    "render_summary",
    "render_trace",
    "simulate_files",
]


@dataclass
class SimulationRun:
    """Every scenario result, coverage per playbook, and files that were unusable."""

    results: list[ScenarioResult] = field(default_factory=list)
    coverage: dict[str, Coverage] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Every scenario met its expectation."""
        return all(r.passed for r in self.results)

    def to_json(self) -> dict[str, Any]:
        """``{"results": [...], "coverage": {...}, "errors": [...]}``."""
        return {
            "results": [r.to_json() for r in self.results],
            "coverage": {k: v.to_json() for k, v in self.coverage.items()},
            "errors": list(self.errors),
        }


def playbook_for(path: Path, parsed: ScenarioFile) -> Playbook:
    """The playbook a scenario file runs on: inline, or the file it names
    (relative to the scenario file). Refuses expectations that name a milestone
    it does not have (``check`` and ``simulate`` both come through here)."""
    ref = parsed.playbook
    if isinstance(ref, dict):
        playbook = parsed.inline_playbook(str(path))
    else:
        target = (path.parent / ref).resolve()
        if not target.is_file():
            raise LemongraphError(f"{path}: playbook {ref!r} not found (looked for {target})")
        playbook = load_playbook_file(target)
    parsed.check_milestones(playbook, str(path))
    return playbook


def simulate_files(paths: list[Path]) -> SimulationRun:
    """Run every scenario of every file. Unusable files are reported in ``errors``."""
    run = SimulationRun()
    for path in paths:
        try:
            scenario_file = parse_scenarios(path.read_text(encoding="utf-8"), str(path))
            playbook = playbook_for(path, scenario_file)
        except (OSError, UnicodeDecodeError) as exc:
            run.errors.append(f"{path}: cannot read: {exc}")
            continue
        except LemongraphError as exc:
            run.errors.append(str(exc))
            continue
        coverage = run.coverage.setdefault(playbook.key, Coverage.empty(playbook))
        for scenario in scenario_file.scenarios:
            run.results.append(run_scenario(playbook, scenario, str(path), coverage))
    return run


def render_summary(run: SimulationRun) -> str:
    """One line per scenario, the reasons under a failure, and a total."""
    lines = []
    for r in run.results:
        mark = "PASS" if r.passed else "FAIL"
        lines.append(f"{mark}  {r.source} :: {r.scenario}  → {r.state.status}")
        lines.extend(f"      {failure}" for failure in r.failures)
    lines.extend(f"ERROR {e}" for e in run.errors)
    passed = sum(r.passed for r in run.results)
    failed = len(run.results) - passed
    lines.append(
        f"{passed} passed, {failed} failed"
        + (f", {len(run.errors)} unusable" if run.errors else "")
    )
    return "\n".join(lines)


def _describe_input(step: Step) -> str:
    item = step.input
    if isinstance(item, Start):
        return f"job.start {item.playbook_key}"
    if isinstance(item, Event):
        extra = []
        if item.value is not None:
            extra.append(f"value={item.value!r}")
        if item.properties:
            extra.append(f"properties={dict(item.properties)}")
        tail = f" {' '.join(extra)}" if extra else ""
        return f"event {item.action}{tail} (source {item.source}, id {item.id})"
    return "tick"


def _describe_effect(effect: object) -> str | None:
    if isinstance(effect, TaskOpened):
        return f"task.opened {effect.milestone}  frontier [{', '.join(effect.frontier)}]"
    if isinstance(effect, TaskClosed):
        return f"task.closed {effect.milestone}  outcome {effect.outcome}"
    if isinstance(effect, TimerSet | TimerCancelled):
        verb = "set" if isinstance(effect, TimerSet) else "cancelled"
        return f"timer {verb} {effect.timer.kind} {effect.timer.milestone}"
    return f"job finished: {getattr(effect, 'status', '?')}"


def render_trace(result: ScenarioResult) -> str:
    """Every turn: input, timers fired, verdicts with explanations, transitions, effects."""
    base = result.steps[0].now
    out = [f"── {result.source} :: {result.scenario}"]
    for step in result.steps:
        offset = "+" + format_offset(step.now - base)
        out.append(f"  {offset:<10} {_describe_input(step)}  [{step.outcome}]")
        pad = " " * 13
        if step.fired:
            fired = ", ".join(
                f"{t.kind} {t.milestone}@+{format_offset(t.at - base)}" for t in step.fired
            )
            out.append(f"{pad}timers fired: {fired}")
        for v in step.verdicts:
            exp = v.explanation
            world = "closed" if exp.get("closed") else "open"
            when = "" if v.at == step.now else f" @+{format_offset(v.at - base)}"
            out.append(
                f"{pad}verdict {v.milestone}{when}: {exp['verdict']} ({world} world)  "
                f"{exp['condition']}"
            )
            for atom in exp.get("atoms", []):
                evidence = f" evidence {', '.join(atom['evidence'])}" if atom["evidence"] else ""
                out.append(
                    f"{pad}    {atom['atom']}: {atom['verdict']} (count {atom['count']}){evidence}"
                )
        for t in step.transitions:
            out.append(f"{pad}{t.milestone}: {t.before} → {t.after} ({t.reason})")
        for effect in step.effects:
            text = _describe_effect(effect)
            if text:
                out.append(f"{pad}↳ {text}")
    out.append(
        f"  end: job {result.state.status}; "
        + ", ".join(f"{k}={v.status}" for k, v in result.state.milestones.items())
    )
    return "\n".join(out)


def render_coverage(run: SimulationRun) -> str:
    """Which milestones reached which states, which OR branches made a condition TRUE."""
    states = ("open", "done", "knocked", "dropped", "unreachable")
    lines = []
    for key, cov in run.coverage.items():
        lines.append(f"coverage of playbook {key}")
        for milestone, seen in cov.states.items():
            cells = " ".join(f"{s}:{'✓' if s in seen else '·'}" for s in states)
            lines.append(f"  {milestone:<28} {cells}")
            for branch, hits in cov.branches.get(milestone, {}).items():
                seen_true = f"TRUE {hits}×" if hits else "never TRUE"
                lines.append(f"      OR branch {branch!r}: {seen_true}")
    return "\n".join(lines)
