"""Job views from the jobs' states (docs/kafka.md, "The job table's changelog"):
the gateway's read model (stream/gateway/readmodels/jobs.py) follows the workers'
table changelog, and each job row's state, with the frontier its playbook version
gives it, becomes the job's view (``JobSnapshot``): what the workers wrote to a
``jobs`` topic of their own before issue 35 (``topics.build.job_snapshot``).

A state read before its playbook version's record (a catch-up merges the topics by
time, so it rarely is) waits here for it, the latest per job."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import orjson

from compiler import JobGraph, JobState, Playbook
from topics import JobSnapshot, stored_job_state
from topics.build import job_snapshot

__all__ = ["JobStates", "snapshot_of_state"]

log = logging.getLogger("lemongraph.gateway")

#: A playbook version: its key and version.
Pin = tuple[str, int]


def snapshot_of_state(state: dict[str, Any], playbook: Playbook | None) -> JobSnapshot:
    """A job's view from its state (as JSON) and its playbook version (None:
    a spec no worker could compile, so no frontier)."""
    return _view(state, playbook)[0]


def _view(state: dict[str, Any], playbook: Playbook | None) -> tuple[JobSnapshot, int]:
    """The view, and what it weighs as JSON (what the read model holds of
    it: the state's idempotency keys and tallies are not part of it)."""
    frontier = JobGraph(playbook).frontier(JobState.from_json(state)) if playbook else ()
    view = job_snapshot(state, frontier)
    return JobSnapshot.model_validate(view), len(orjson.dumps(view))


class JobStates:
    """Rows of the job table's changelog made into job views. ``spec`` and
    ``compiled`` give a playbook version's record and its compiled playbook
    (None: not read yet, or not valid)."""

    def __init__(
        self,
        spec: Callable[[str, int], dict[str, Any] | None],
        compiled: Callable[[str, int], Playbook | None],
    ) -> None:
        self._spec = spec
        self._compiled = compiled
        self._waiting: dict[Pin, dict[str, bytes]] = {}

    def view(
        self, key: bytes | None, value: bytes, seq_held: Callable[[str], int | None]
    ) -> tuple[JobSnapshot, int] | None:
        """The view of a job row and the bytes it weighs; None for the
        workers' own rows, for a state whose ``seq`` is the one held already
        (``seq_held``: the row was written again only for its header), and for
        one whose playbook version is not read yet (kept until it is)."""
        raw = stored_job_state(key, value)
        if raw is None:
            return None
        data = orjson.loads(raw)
        job, pin = str(data["key"]), (str(data["playbook_key"]), int(data["playbook_version"]))
        if seq_held(job) == data["seq"]:
            return None
        if self._spec(*pin) is None:
            if pin not in self._waiting:  # (during a catch-up, for a moment at most)
                log.info(
                    "gateway: job %r runs playbook %s v%d, not read on `playbooks` yet: "
                    "its view (and any other job's of that version) waits for it",
                    job, pin[0], pin[1],
                )  # fmt: skip
            self._waiting.setdefault(pin, {})[job] = value
            return None
        return _view(data, self._compiled(*pin))

    def placed(self, pin: Pin) -> list[tuple[bytes, bytes]]:
        """The rows that waited for playbook version ``pin``, now read: (key, value)."""
        return [(job.encode(), value) for job, value in self._waiting.pop(pin, {}).items()]
