"""A realistic event mix on the onboarding playbook."""

from __future__ import annotations

import random

from topics import SOURCES, InboxEvent, JobStart

__all__ = ["decides", "onboarding_mix"]


def onboarding_mix(jobs: int, seed: int = 1, prefix: str = "job") -> list[JobStart | InboxEvent]:
    """Inbox messages for ``jobs`` onboarding jobs, interleaved as live traffic
    would be, each job's own records in order.

    Per job: a start; an ID upload (90%), sometimes retried with the same
    idempotency key; then self-service, a booked call or a cancelled call; an
    activation (70%, from the world, a tool, or an agent's unverified claim).
    About 4 records per job.
    """
    # A reproducible workload, not a secret.
    rng = random.Random(seed)  # noqa: S311
    queues: list[list[JobStart | InboxEvent]] = []
    for i in range(jobs):
        key = f"{prefix}-{i:06d}"
        job: list[JobStart | InboxEvent] = [
            JobStart(key=key, playbook_key="onboarding", subject={"n": i})
        ]
        if rng.random() < 0.9:
            upload = InboxEvent(
                key=key,
                action="id_uploaded",
                idempotency_key=f"{key}-id",
                properties={"kind": "passport"},
            )
            job.append(upload)
            if rng.random() < 0.1:
                job.append(upload)
            action = rng.choice(
                ["self_service_completed", "meeting_scheduled", "meeting_cancelled"]
            )
            job.append(InboxEvent(key=key, action=action))
            if rng.random() < 0.7:
                job.append(
                    InboxEvent(key=key, action="account_activated", source=rng.choice(SOURCES))
                )
        queues.append(job)
    out: list[JobStart | InboxEvent] = []
    # Round-robin in random order: many jobs in flight at once, each in order.
    while queues:
        rng.shuffle(queues)
        still = []
        for job in queues:
            out.append(job.pop(0))
            if job:
                still.append(job)
        queues = still
    return out


def decides(mix: list[JobStart | InboxEvent]) -> list[bool]:
    """For each record of ``mix``, whether it makes a decision: every record
    does but a retried idempotency key (applied once already: no decision)."""
    seen: set[tuple[str, str]] = set()
    out: list[bool] = []
    for m in mix:
        key = m.idempotency_key if isinstance(m, InboxEvent) else None
        out.append(key is None or (m.key, key) not in seen)
        if key is not None:
            seen.add((m.key, key))
    return out
