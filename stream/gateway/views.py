"""Read-model entries as API responses: a job with its milestones in rank order
(topological depth, then playbook order, as the compiled playbook has them), each
with its verdict explanation and the events that explanation cites."""

from __future__ import annotations

from typing import Any

import topics
from compiler import Milestone, Playbook
from stream.gateway.models import (
    EvidenceEvent,
    JobStatus,
    JobSummary,
    JobView,
    MilestoneView,
    PendingWrite,
    TimerView,
)
from stream.gateway.readmodels.jobs import JobEntry, ReadModel
from topics import ExplanationRecord, JobSnapshot, MilestoneSnapshot, subject_key

__all__ = ["held_view", "job_summary", "job_view", "list_row"]


#: A snapshot's job status as the API says it (the API adds starting and refused).
_VIEW_STATUS: dict[topics.JobStatus, JobStatus] = {
    topics.JobStatus.RUNNING: "running",
    topics.JobStatus.DONE: "done",
    topics.JobStatus.FAILED: "failed",
    topics.JobStatus.COMPLETED_WITH_OVERRIDE: "completed_with_override",
}


def _status(entry: JobEntry) -> JobStatus:
    if entry.snapshot is not None:
        return _VIEW_STATUS[entry.snapshot.status]
    return "refused" if entry.refused is not None else "starting"


def _pending(entry: JobEntry) -> list[PendingWrite]:
    """The job's writes no decision reflects yet: its start while only accepted,
    then its pending events."""
    start = entry.start
    writes = ([start] if entry.snapshot is None and start is not None else []) + entry.pending
    return [
        PendingWrite(
            type="event" if w.type == "event" else "job.start",
            action=w.message.get("action"),
            partition=w.partition,
            offset=w.offset,
            accepted_at=w.accepted_at,
        )
        for w in writes
    ]


def _evidence(
    model: ReadModel, key: str, explanation: ExplanationRecord | None
) -> list[EvidenceEvent]:
    if explanation is None:
        return []
    known: dict[str, dict[str, Any]] = dict(model.events.get(key) or {})
    out: list[EvidenceEvent] = []
    seen: set[str] = set()
    for atom in explanation.atoms:
        for ident in atom.evidence:
            if ident in seen:
                continue
            seen.add(ident)
            event = known.get(ident)
            if event is None:
                out.append(EvidenceEvent(id=ident, action=atom.atom))
                continue
            out.append(
                EvidenceEvent(
                    id=ident,
                    action=str(event.get("action")),
                    value=event.get("value"),
                    properties=dict(event.get("properties") or {}),
                    source=str(event.get("source", "world")),
                    at=event.get("at"),
                )
            )
    return out


def _subject(entry: JobEntry) -> dict[str, Any]:
    start = entry.start
    return entry.subject or (dict(start.message.get("subject") or {}) if start else {})


def _contacts(entry: JobEntry) -> list[Any]:
    start = entry.start
    return entry.contacts or (list(start.message.get("contacts") or []) if start else [])


def _timers(snapshot: JobSnapshot | None) -> list[TimerView]:
    return [TimerView.model_validate(t.model_dump()) for t in snapshot.timers] if snapshot else []


def _playbook_ref(model: ReadModel, entry: JobEntry) -> tuple[str, int | None]:
    """The playbook key and version the job runs: its snapshot's, or for a job
    only accepted, its start's key at the latest version the model knows."""
    snapshot = entry.snapshot
    start = entry.start
    if snapshot is not None:
        playbook_key, version = snapshot.playbook_key, snapshot.playbook_version
    else:
        assert start is not None
        playbook_key, version = str(start.message["playbook_key"]), None
    spec = model.playbook(playbook_key, version) or {}
    if version is None and spec:
        version = int(spec.get("version", 0)) or None
    return playbook_key, version


def _explanation(detail: MilestoneSnapshot | None, condition: str) -> dict[str, Any] | None:
    """The milestone's latest verdict, with its condition's canonical text (as
    the core writes it): a snapshot written since issue 35 leaves the text to
    the playbook (docs/kafka.md, "What a record no longer carries")."""
    if detail is None or detail.explanation is None:
        return None
    out = detail.explanation.model_dump()
    if out["condition"] is None:
        out["condition"] = condition
    return out


def _milestone_view(
    model: ReadModel,
    key: str,
    milestone: Milestone,
    condition: str,
    detail: MilestoneSnapshot | None,
    next_best: bool,
) -> MilestoneView:
    """One milestone of job ``key``; ``detail`` is the snapshot's (None: pending)."""
    m = milestone
    return MilestoneView(
        id=m.id,
        state=detail.state if detail is not None else "pending",
        depth=m.depth,
        needs=list(m.needs),
        merge=m.merge,
        condition=condition,
        instructions=m.instructions,
        next_best=next_best,
        opened_at=detail.opened_at if detail else None,
        deadline=detail.deadline if detail else None,
        # A snapshot leaves task_at out when it is opened_at (docs/kafka.md).
        task_at=(detail.task_at or detail.opened_at) if detail else None,
        settled_at=detail.settled_at if detail else None,
        outcome=detail.outcome if detail else None,
        explanation=_explanation(detail, m.condition.text),
        evidence=_evidence(model, key, detail.explanation if detail else None),
    )


def _milestone_views(
    model: ReadModel, entry: JobEntry, playbook: Playbook | None, frontier: list[str]
) -> list[MilestoneView]:
    """The job's milestones in rank order (none while its playbook is unknown)."""
    snapshot = entry.snapshot
    ranked = playbook.milestones if playbook is not None else ()
    written = {w.id: w for w in playbook.spec.milestones} if playbook is not None else {}
    return [
        _milestone_view(
            model,
            entry.key,
            m,
            written[m.id].condition,
            snapshot.detail.get(m.id) if snapshot is not None else None,
            bool(frontier) and frontier[0] == m.id,
        )
        for m in ranked
    ]


def job_view(model: ReadModel, entry: JobEntry) -> JobView:
    """The full view of one job."""
    snapshot = entry.snapshot
    playbook_key, version = _playbook_ref(model, entry)
    # Rank, depth and goals are the core's (compiler/jobs/_playbook.py), never worked
    # out again here.
    playbook = model.compiled(playbook_key, version)
    frontier = list(snapshot.frontier) if snapshot is not None else []
    milestones = _milestone_views(model, entry, playbook, frontier)
    return JobView(
        key=entry.key,
        status=_status(entry),
        accepted=snapshot is None,
        playbook_key=playbook_key,
        playbook_version=version,
        seq=snapshot.seq if snapshot is not None else 0,
        started_at=snapshot.started_at if snapshot is not None else None,
        updated_at=snapshot.updated_at if snapshot is not None else None,
        ended_at=snapshot.ended_at if snapshot is not None else None,
        events=snapshot.events if snapshot is not None else 0,
        goals=list(playbook.goals) if playbook is not None else [],
        milestones=milestones,
        frontier=frontier,
        next_step=frontier[0] if frontier else None,
        timers=_timers(snapshot),
        pending_writes=_pending(entry),
        refused=entry.refused,
        subject=_subject(entry),
        contacts=_contacts(entry),
        subject_key=subject_key(_subject(entry), _contacts(entry)),
    )


def job_summary(entry: JobEntry) -> JobSummary:
    """A job as a row of the list."""
    snapshot = entry.snapshot
    if snapshot is not None:
        return JobSummary(
            key=entry.key,
            status=snapshot.status,
            accepted=False,
            playbook_key=snapshot.playbook_key,
            playbook_version=snapshot.playbook_version,
            updated_at=snapshot.updated_at or snapshot.started_at,
            milestones=dict(snapshot.milestones),
            next_step=snapshot.frontier[0] if snapshot.frontier else None,
            subject=_subject(entry),
        )
    assert entry.start is not None
    return JobSummary(
        key=entry.key,
        status=_status(entry),
        accepted=True,
        playbook_key=str(entry.start.message["playbook_key"]),
        playbook_version=None,
        updated_at=entry.start.accepted_at,
        milestones={},
        next_step=None,
        subject=_subject(entry),
    )


def list_row(model: ReadModel, key: str) -> JobSummary:
    """Job ``key``'s row of the list: from memory, or its evicted summary."""
    entry = model.jobs.get(key)
    if entry is None:
        entry = JobEntry(key, snapshot=model.gone[key], in_memory=False)
    return job_summary(entry).model_copy(update={"in_memory": entry.in_memory})


def held_view(model: ReadModel, entry: JobEntry) -> JobView:
    """The job's view; for a job evicted from memory, what its summary says."""
    view = job_view(model, entry)
    if entry.in_memory or entry.snapshot is None:
        return view
    states = entry.snapshot.milestones
    milestones = [
        m.model_copy(update={"state": states.get(m.id, m.state)}) for m in view.milestones
    ]
    return view.model_copy(update={"in_memory": False, "milestones": milestones})
