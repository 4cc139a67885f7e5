"""What the gateway's read model holds per job (stream/gateway/readmodels/jobs.py): the
writes this gateway accepted, and each job's entry."""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from topics import JobSnapshot

__all__ = ["AcceptedWrite", "JobEntry", "idem"]


def idem(source: object, key: object) -> str:
    """How an idempotency key is remembered: per source, as the engine does
    (compiler ``remembered_key``), so one source's key never blocks another's."""
    return f"{source or 'world'}:{key}"


@dataclass(frozen=True, slots=True)
class AcceptedWrite:
    """A record this gateway produced to the inbox."""

    type: str  # job.start | event
    partition: int
    offset: int
    accepted_at: str
    message: dict[str, Any]
    #: When it was accepted (seconds since the epoch), for ``pending_ttl``.
    at: float = field(default_factory=time.time)


@dataclass
class JobEntry:
    """Everything the read model knows about one job."""

    key: str
    snapshot: JobSnapshot | None = None
    start: AcceptedWrite | None = None
    pending: list[AcceptedWrite] = field(default_factory=list)
    refused: str | None = None
    idempotency: OrderedDict[str, AcceptedWrite] = field(default_factory=OrderedDict)
    #: The job's subject and contacts, from its applied start.
    subject: dict[str, Any] = field(default_factory=dict)
    contacts: list[Any] = field(default_factory=list)
    #: False for a job brought back from eviction: ``snapshot`` is only its
    #: summary (status, milestone states) until the next snapshot arrives.
    in_memory: bool = True

    @property
    def exists(self) -> bool:
        """Known to the engine, or started through this gateway and not refused."""
        return self.snapshot is not None or (self.start is not None and self.refused is None)

    @property
    def visible(self) -> bool:
        """Readable: known to the engine, or started through this gateway (even
        when the engine refused the start: the reader learns why)."""
        return self.snapshot is not None or self.start is not None
