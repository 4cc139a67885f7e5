"""``lemongraph replay``: re-run the recorded decision log through the pure core
and prove it reaches the same states, or show what another playbook version
would have decided on the same history."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import orjson
from pydantic import ValidationError

from compiler import JobGraph, JobState, Playbook, Step, from_iso, input_from_json
from stream.cli.common import native
from stream.engine.registry import Registry
from stream.runtime.command import env_settings, require_kafka
from stream.runtime.errors import ExitCode
from stream.runtime.files import load_playbook_file
from stream.runtime.kafka import read_topic, run
from topics import DecisionRecord, Topics, first_error

__all__ = ["JobReplay", "ReplayReport", "replay", "replay_decisions", "what_if"]

#: The parts of a decision record that the pure core reproduces.
_COMPARED = (
    "outcome",
    "seq",
    "fired",
    "verdicts",
    "transitions",
    "effects",
    "frontier",
    "status",
    "state_hash",
)


@dataclass
class JobReplay:
    """One job's replay."""

    key: str
    decisions: int = 0
    duplicates: int = 0  # byte-identical re-emissions (a crash between ack and state write)
    mismatches: list[str] = field(default_factory=list)
    state: JobState | None = None


@dataclass
class ReplayReport:
    """Every job replayed, and what did not match."""

    jobs: dict[str, JobReplay] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """No mismatch anywhere."""
        return all(not j.mismatches for j in self.jobs.values())

    @property
    def decisions(self) -> int:
        """Decisions re-run."""
        return sum(j.decisions for j in self.jobs.values())


#: What a ``task.opened`` effect carried before issue 35 and no longer does (the
#: task record on ``tasks`` does): left out of an older log's effects when they
#: are compared (docs/kafka.md, "What a record no longer carries").
_TASK_ASKS = ("instructions", "playbook_instructions", "integrations", "frontier")


def _effects_now(effects: Any) -> Any:
    """Recorded effects in the shape the core writes now."""
    if not isinstance(effects, list):
        return effects
    return [
        {k: v for k, v in e.items() if k not in _TASK_ASKS}
        if isinstance(e, dict) and e.get("type") == "task.opened"
        else e
        for e in effects
    ]


def _parts_now(parts: Any, now: Any, drop: tuple[str, ...]) -> Any:
    """Recorded verdicts or transitions in the shape the core writes now: a log
    written before issue 35 carries each one's ``at`` when it is the decision's
    ``now``, and each verdict's condition text, which is the playbook's
    (docs/kafka.md, "What a record no longer carries")."""
    if not isinstance(parts, list):
        return parts
    return [
        {k: v for k, v in x.items() if k not in drop and not (k == "at" and v == now)}
        if isinstance(x, dict)
        else x
        for x in parts
    ]


def _differences(recorded: dict[str, Any], step: Step) -> list[str]:
    again = step.to_json()
    now = recorded.get("now")
    recorded = {
        **recorded,
        "effects": _effects_now(recorded.get("effects")),
        "verdicts": _parts_now(recorded.get("verdicts"), now, ("condition",)),
        "transitions": _parts_now(recorded.get("transitions"), now, ()),
    }
    out = []
    for name in _COMPARED:
        if recorded.get(name) != again.get(name):
            out.append(
                f"{name}: recorded {_short(recorded.get(name))}, replayed {_short(again.get(name))}"
                + (_rule_changed(recorded.get(name)) if name == "effects" else "")
            )
    return out


def _rule_changed(effects: Any) -> str:
    """Name the rule when recorded effects are of a core from before effects
    described only the remaining work (docs/decisions.md, "Replaying an older
    log")."""
    if not isinstance(effects, list):
        return ""
    kinds = [(e.get("type"), e.get("task_id")) for e in effects if isinstance(e, dict)]
    opened = {task for kind, task in kinds if kind == "task.opened"}
    closed = {task for kind, task in kinds if kind == "task.closed"}
    if opened & closed or (opened and ("job.finished", None) in kinds):
        return (
            " (recorded by a core that emitted tasks opened and closed in one step; "
            "effects now describe only the work that remains: docs/decisions.md)"
        )
    return ""


def _short(value: Any) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) <= 160 else text[:157] + "..."


def replay_decisions(
    records: Iterable[dict[str, Any]], registry: Registry, job: str | None = None
) -> ReplayReport:
    """Re-run decision records (in log order) and compare each with its record."""
    report = ReplayReport()
    seen: dict[str, set[bytes]] = {}
    for record in records:
        key = record.get("job_key")
        if not isinstance(key, str) or (job is not None and key != job):
            continue
        replay = report.jobs.setdefault(key, JobReplay(key))
        fingerprint = orjson.dumps(record, option=orjson.OPT_SORT_KEYS)
        if fingerprint in seen.setdefault(key, set()):
            replay.duplicates += 1
            continue
        seen[key].add(fingerprint)
        replay.decisions += 1
        where = f"decision seq {record.get('seq')} ({record.get('origin')})"
        try:
            decision = DecisionRecord.model_validate(record)
        except ValidationError as exc:
            replay.mismatches.append(f"{where}: not a decision record: {first_error(exc)}")
            continue
        if decision.prev_state_hash != (replay.state.hash if replay.state else None):
            replay.mismatches.append(
                f"{where}: prev_state_hash does not follow the previous decision"
            )
        if decision.playbook_key is None or decision.playbook_version is None:
            # Refused before the core ran (unknown job or playbook): nothing to re-run.
            if decision.outcome != "refused":
                replay.mismatches.append(f"{where}: no playbook, yet not refused")
            continue
        graph = registry.graph(decision.playbook_key, decision.playbook_version)
        if graph is None:
            replay.mismatches.append(
                f"{where}: playbook {decision.playbook_key} v{decision.playbook_version} unknown"
            )
            continue
        try:
            step = graph.next(
                replay.state,
                from_iso(decision.now),
                input_from_json(decision.input.model_dump(mode="json", exclude_unset=True)),
            )
        except (KeyError, ValueError, TypeError) as exc:
            replay.mismatches.append(f"{where}: cannot re-run: {exc}")
            continue
        replay.mismatches.extend(f"{where}: {d}" for d in _differences(record, step))
        if step.state is not None:
            replay.state = step.state
    return report


def what_if(
    records: Iterable[dict[str, Any]], playbook: Playbook, job: str | None = None
) -> dict[str, tuple[str | None, JobState | None]]:
    """For each job on ``playbook``'s key: the status its log recorded last, and
    the state ``playbook`` reaches on the same inputs at the same instants."""
    graph = JobGraph(playbook)
    out: dict[str, tuple[str | None, JobState | None]] = {}
    seen: set[bytes] = set()
    for record in records:
        key = record.get("job_key")
        if not isinstance(key, str) or (job is not None and key != job):
            continue
        if record.get("playbook_key") != playbook.key or record.get("outcome") != "applied":
            continue
        fingerprint = orjson.dumps(record, option=orjson.OPT_SORT_KEYS)
        if fingerprint in seen:
            continue
        seen.add(fingerprint)
        _, state = out.get(key, (None, None))
        step = graph.next(state, from_iso(record["now"]), input_from_json(record["input"]))
        out[key] = (record.get("status"), step.state if step.state is not None else state)
    return out


@click.command()
@click.option("--job", help="Only this job.")
@click.option("--verify", is_flag=True, help="Exit 1 on any state-hash or effect mismatch.")
@click.option(
    "--with-playbook",
    "other",
    type=click.Path(path_type=Path, exists=True),
    help="Show what this playbook file would have decided on the same history.",
)
def replay(job: str | None, verify: bool, other: Path | None) -> None:
    """Re-run the decision log through the pure core and compare. With
    --with-playbook, exit 1 when no job of the log runs that playbook's key."""
    from stream.engine.worker import prepare_registry

    native()
    settings = env_settings()
    bootstrap = require_kafka(settings)

    async def load() -> tuple[list[dict[str, object]], object]:
        records = [
            orjson.loads(r.value)
            async for r in read_topic(bootstrap, Topics(settings.topic_prefix).decisions)
            if r.value is not None
        ]
        registry, _problems = await prepare_registry(settings, lambda _line: None)
        return records, registry

    records, registry = run(load())
    if other is not None:
        playbook = load_playbook_file(other)
        compared = what_if(records, playbook, job)
        if not any(state is not None for _recorded, state in compared.values()):
            click.echo(_nobody_runs(records, playbook.key, job), err=True)
            sys.exit(ExitCode.FAILED)
        for key, (recorded, state) in sorted(compared.items()):
            if state is None:
                continue
            states = ", ".join(f"{k}={v.status}" for k, v in state.milestones.items())
            click.echo(
                f"{key}: recorded {recorded}; with {playbook.key} v{playbook.version}: "
                f"{state.status} ({states})"
            )
        return
    report = replay_decisions(records, registry, job)
    for replayed in report.jobs.values():
        for mismatch in replayed.mismatches:
            click.echo(f"MISMATCH {replayed.key}: {mismatch}")
    duplicates = sum(j.duplicates for j in report.jobs.values())
    click.echo(
        f"replayed {report.decisions} decisions of {len(report.jobs)} jobs"
        + (f" ({duplicates} identical re-emissions skipped)" if duplicates else "")
        + (": all states and effects match" if report.ok else ": MISMATCHES found")
    )
    if verify and not report.ok:
        sys.exit(ExitCode.FAILED)


def _nobody_runs(records: list[dict[str, object]], key: str, job: str | None) -> str:
    """What ``replay --with-playbook`` says when no job of the log runs ``key``."""
    runs: dict[str, set[str]] = {}
    for record in records:
        if record.get("outcome") == "applied" and isinstance(record.get("playbook_key"), str):
            runs.setdefault(str(record["playbook_key"]), set()).add(str(record.get("job_key")))
    if job is not None:
        theirs = sorted(k for k, jobs in runs.items() if job in jobs)
        if not theirs:
            return f"replay: no applied decision of job {job!r} in the log: nothing to compare"
        return (
            f"replay: job {job!r} runs {', '.join(theirs)}, not {key!r}: nothing to compare "
            f"(--with-playbook replays the jobs of the playbook key in the file)"
        )
    used = (
        ", ".join(
            f"{k} ({len(j)} job{'' if len(j) == 1 else 's'})" for k, j in sorted(runs.items())
        )
        or "none"
    )
    return (
        f"replay: no job in the decision log runs playbook {key!r}: nothing to compare "
        f"(--with-playbook replays the jobs of the playbook key in the file; the log's "
        f"playbooks: {used})"
    )
