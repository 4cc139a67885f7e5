"""``lemongraph simulate``: find scenario files, run them through the pure core,
and report (plain, ``--trace``, ``--coverage``, ``--json``)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import click

from compiler import (
    Coverage,
    Event,
    FactRemembered,
    LemongraphError,
    Playbook,
    ScenarioFile,
    ScenarioResult,
    Schedule,
    ScheduleScenarioResult,
    Start,
    Step,
    TaskClosed,
    TaskOpened,
    TimerCancelled,
    TimerSet,
    format_offset,
    parse_scenarios,
    run_scenario,
    run_schedule_scenario,
    schedule_run_line,
    to_iso,
    validate_schedule,
)
from stream.cli.common import native
from stream.runtime.command import env_settings
from stream.runtime.errors import ExitCode
from stream.runtime.files import load_playbook_file, load_schedules_file, scenario_files

__all__ = [
    "SimulationRun",
    "playbook_for",
    "render_coverage",
    "render_summary",
    "render_trace",
    "schedules_for",
    "simulate",
    "simulate_files",
]


@dataclass
class SimulationRun:
    """Every scenario result, coverage per playbook, and files that were unusable."""

    results: list[ScenarioResult | ScheduleScenarioResult] = field(default_factory=list)
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


def playbook_for(path: Path, parsed: ScenarioFile) -> Playbook | None:
    """The playbook a scenario file runs on: inline, or the file it names
    (relative to the scenario file). Refuses expectations that name a milestone
    it does not have (``check`` and ``simulate`` both come through here). A file
    over schedules has no playbook: its schedules are validated, and None is
    returned (docs/schedules.md, "Proving schedules on a virtual clock")."""
    parsed.check_schedule_fields(str(path))
    if parsed.schedules is not None:
        schedules_for(path, parsed)
        return None
    ref = parsed.playbook
    assert ref is not None
    if isinstance(ref, dict):
        playbook = parsed.inline_playbook(str(path))
    else:
        target = (path.parent / ref).resolve()
        if not target.is_file():
            raise LemongraphError(f"{path}: playbook {ref!r} not found (looked for {target})")
        playbook = load_playbook_file(target)
    parsed.check_milestones(playbook, str(path))
    return playbook


def schedules_for(path: Path, parsed: ScenarioFile) -> list[Schedule]:
    """The schedules a scenario file runs: inline, or those of the schedules file
    it names (relative to the scenario file; read as a worker reads
    ``schedules.yaml``), each validated. Problems name the file, the line, the
    schedule and the field, as ``lemongraph check`` does for ``schedules.yaml``."""
    ref = parsed.schedules
    if isinstance(ref, str):
        target = path.parent / ref
        if not target.is_file():
            raise LemongraphError(f"{path}: schedules {ref!r} not found (looked for {target})")
        found = load_schedules_file(target)
        if found.problems:
            raise LemongraphError("\n".join(found.problems))
        return list(found.schedules)
    out: list[Schedule] = []
    problems: list[str] = []
    for i, item in enumerate(ref or []):
        pos = parsed._located.position(("schedules", i)) if parsed._located else None
        name = item.get("id") or item.get("name")
        label = f"schedules[{i}]" + (f" ({name})" if isinstance(name, str) else "")
        at = f"{path}:{pos.line}: {label}" if pos else f"{path}: {label}"
        try:
            schedule = validate_schedule(item, f"{path}: {label}")
        except LemongraphError as exc:
            problems.append(f"{at}: {str(exc).splitlines()[0]}")
            continue
        if any(s.id == schedule.id for s in out):
            problems.append(f"{at}: id {schedule.id!r} is used by an earlier schedule")
            continue
        out.append(schedule)
    if problems:
        raise LemongraphError("\n".join(problems))
    return out


def simulate_files(paths: list[Path]) -> SimulationRun:
    """Run every scenario of every file. Unusable files are reported in ``errors``."""
    run = SimulationRun()
    for path in paths:
        try:
            scenario_file = parse_scenarios(path.read_text(encoding="utf-8"), str(path))
            playbook = playbook_for(path, scenario_file)
            schedules = schedules_for(path, scenario_file) if playbook is None else []
        except (OSError, UnicodeDecodeError) as exc:
            run.errors.append(f"{path}: cannot read: {exc}")
            continue
        except LemongraphError as exc:
            run.errors.append(str(exc))
            continue
        if playbook is None:
            for scenario in scenario_file.scenarios:
                run.results.append(run_schedule_scenario(schedules, scenario, str(path)))
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
        landed = r.summary() if isinstance(r, ScheduleScenarioResult) else r.state.status
        lines.append(f"{mark}  {r.source} :: {r.scenario}  → {landed}")
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
    if isinstance(effect, FactRemembered):  # docs/memory.md, "What is remembered"
        return (
            f"fact.remembered {effect.name}={effect.value!r} of {effect.subject} "
            f"(source {effect.source}, id {effect.event_id})"
        )
    return f"job finished: {getattr(effect, 'status', '?')}"


def render_trace(result: ScenarioResult | ScheduleScenarioResult) -> str:
    """Every turn: input, timers fired, verdicts with explanations, transitions, effects.
    For schedules: every record and delivery, with its offset and local time."""
    if isinstance(result, ScheduleScenarioResult):
        return render_schedule_trace(result)
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


#: The fields of a run record a trace shows when they are set, and how.
_TRACED = (
    ("attempt", "attempt {}"),
    ("job_key", "job {}"),
    ("error", "error: {}"),
    ("context", "context: {}"),
    ("delivered_to", "delivered to {}"),
)


def render_schedule_trace(result: ScheduleScenarioResult) -> str:
    """Each ``schedule-runs`` record as the worker would write it, with its
    offset from ``base``, the slot on the schedule's wall clock, and each delivery."""
    zones = {s.id: s.timezone for s in result.schedules}
    out = [f"── {result.source} :: {result.scenario}"]
    deliveries = list(result.deliveries)
    alerts = {(a["run_id"], a["status"]): a for a in result.alerts}
    for i, record in enumerate(result.records):
        while deliveries and deliveries[0].after <= i:
            out.append(_delivery_line(result, deliveries.pop(0)))
        slot = record.get("slot")
        local = f"  ({local_time(slot, zones.get(record['schedule_id'], 'UTC'))})" if slot else ""
        extra = [f"run {record['run_id']}"]
        extra += [text.format(record[k]) for k, text in _TRACED if record.get(k)]
        if record.get("output"):
            extra.append(f"output: {record['output'].strip()[:60]!r}")
        out.append(
            f"  {offset_of(result.base, record['at']):<10} {schedule_run_line(record)}{local}  "
            + "; ".join(extra)
        )
        alert = alerts.get((record["run_id"], record["status"]))
        if alert is not None:  # docs/schedules.md, "Heartbeats"
            at = offset_of(result.base, alert["at"])
            out.append(f"  {at:<10} ↳ heartbeat.alert {alert['severity']} (run {alert['run_id']})")
    out.extend(_delivery_line(result, d) for d in deliveries)
    out.append(f"  end: {result.summary()}")
    return "\n".join(out)


def _delivery_line(result: ScheduleScenarioResult, d: Any) -> str:
    at = offset_of(result.base, to_iso(d.at))
    return f"  {at:<10} ↳ deliver to {d.target} (run {d.run_id}): {d.text.strip()[:80]!r}"


def local_time(instant: str, tz: str) -> str:
    """An ISO UTC instant on a schedule's wall clock: ``2026-03-08 03:00 EDT``."""
    return (
        datetime.fromisoformat(instant.replace("Z", "+00:00"))
        .astimezone(ZoneInfo(tz))
        .strftime("%Y-%m-%d %H:%M %Z")
    )


def offset_of(base: datetime, instant: str) -> str:
    """``+1d2h`` from ``base``."""
    delta = datetime.fromisoformat(instant.replace("Z", "+00:00")) - base
    return ("+" if delta >= timedelta(0) else "-") + format_offset(abs(delta))


@click.command()
@click.argument("name_filter", required=False)
@click.option("--dir", "folder", type=click.Path(path_type=Path), help="Scenario folder.")
@click.option("--trace", is_flag=True, help="Show every turn.")
@click.option("--coverage", is_flag=True, help="Show which states and OR branches were exercised.")
@click.option("--json", "as_json", is_flag=True, help="Print {results, coverage} as JSON.")
def simulate(
    name_filter: str | None, folder: Path | None, trace: bool, coverage: bool, as_json: bool
) -> None:
    """Run every *.scenario.yaml|json through the pure core on a virtual clock.

    FILTER keeps only scenario files whose path contains it. Exit 1 when a
    scenario misses its expectation, 2 when input files are unusable.
    """
    native()
    root = folder if folder is not None else env_settings().playbooks_dir
    if not root.is_dir():
        click.echo(f"error: scenario folder {root} does not exist", err=True)
        sys.exit(ExitCode.USAGE)
    files = scenario_files(root, name_filter)
    if not files:
        click.echo(
            f"error: no *.scenario.yaml|yml|json under {root}"
            + (f" matching {name_filter!r}" if name_filter else ""),
            err=True,
        )
        if name_filter:
            for line in _scenario_names(root, name_filter):
                click.echo(line, err=True)
        sys.exit(ExitCode.USAGE)
    run = simulate_files(files)
    if as_json:
        click.echo(json.dumps(run.to_json(), indent=2, ensure_ascii=False))
    else:
        if trace:
            for result in run.results:
                click.echo(render_trace(result))
                click.echo()
        if coverage:
            click.echo(render_coverage(run))
            click.echo()
        click.echo(render_summary(run))
    for error in run.errors:
        click.echo(f"error: {error}", err=True)
    if run.errors:
        sys.exit(ExitCode.USAGE)
    if not run.passed:
        sys.exit(ExitCode.FAILED)


def _scenario_names(root: Path, name_filter: str) -> list[str]:
    """For a FILTER that matched no file: it matches file paths, and these are
    the files and the scenarios in them."""
    every = scenario_files(root)
    if not every:
        return []
    lines = ["FILTER matches scenario file paths, not scenario names; the files are:"]
    for path in every:
        try:
            names = [
                s.name
                for s in parse_scenarios(path.read_text(encoding="utf-8"), str(path)).scenarios
            ]
        except (LemongraphError, OSError, UnicodeDecodeError):
            names = ["(unreadable: `lemongraph check` says why)"]
        hit = [n for n in names if name_filter in n]
        lines.append(f"  {path}: {', '.join(names)}")
        if hit:
            lines.append(f"    ({', '.join(hit)} matches {name_filter!r}: give part of this path)")
    return lines


# -- the stream engine --------------------------------------------------------------
