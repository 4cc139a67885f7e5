"""``lemongraph replay``: re-run the recorded decision log through the pure core
and prove it reaches the same states, or show what another playbook version
would have decided on the same history."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import ValidationError

from compiler import JobGraph, JobState, Playbook, Step, from_iso, input_from_json
from stream.engine.registry import Registry
from topics import DecisionRecord, first_error

__all__ = ["JobReplay", "ReplayReport", "replay_decisions", "what_if"]

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


def _differences(recorded: dict[str, Any], step: Step) -> list[str]:
    again = step.to_json()
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
