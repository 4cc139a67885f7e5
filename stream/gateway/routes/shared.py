"""What the routes of stream/gateway/routes/ share: the :class:`Gateway` (the
read models, the producer, the guard), reached by a route through the
:data:`GatewayDep` dependency (``request.app.state.gateway``, set by
``build_api`` in stream/gateway/api.py); the caller's principal
(:data:`PrincipalDep`); the bearer scheme of every ``/v1`` route; and cursor
paging over a sorted list of keys (docs/api.md)."""

from __future__ import annotations

import asyncio
import bisect
import logging
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from fastapi import Depends, Request, Security
from fastapi.security import HTTPBearer

from stream.gateway.errors import ApiError
from stream.gateway.guard import Guard, principal_of
from stream.gateway.readmodels.jobs import AcceptedWrite, JobEntry, ReadModel
from stream.gateway.readmodels.memory import SubjectModel
from stream.gateway.readmodels.reply_lookup import ReceivedIds, ReplyTokens
from stream.gateway.readmodels.schedules import ScheduleModel
from stream.gateway.tokens import Principal
from stream.runtime.filestore import FileStore
from stream.runtime.kafka import KafkaSecurity
from stream.runtime.tracing import current_headers
from topics import InboxEvent, JobStart, encode
from topics.mail import MailSettings

__all__ = [
    "SECURED",
    "SEND_TIMEOUT",
    "Gateway",
    "GatewayDep",
    "PrincipalDep",
    "gateway_of",
    "newest_of",
    "now_iso",
    "page",
    "visible",
]

_BEARER = HTTPBearer(
    auto_error=False,
    description="`lemongraph_sk_...` from `lemongraph token` (or the one `lemongraph dev` prints).",
)
#: What every ``/v1`` route but the inbound webhook depends on (the guard checks
#: the token itself; this puts the scheme in the OpenAPI document).
SECURED = [Security(_BEARER)]
#: Seconds a write waits for the broker before it is answered 503 (the producer
#: itself would wait its request_timeout_ms, 15 s): LEMONGRAPH_GATEWAY_WRITE_TIMEOUT.
SEND_TIMEOUT = 1.5

log = logging.getLogger("lemongraph.gateway")


@dataclass
class Gateway:
    """What the routes share: the read model, the producer, the guard."""

    model: ReadModel
    producer: AIOKafkaProducer
    guard: Guard
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    broker_ok: bool = False
    broker_checked: float = 0.0
    accepted_writes: int = 0
    #: How long a write waits for the broker's acknowledgement before its 503.
    send_timeout: float = SEND_TIMEOUT
    #: Under ``lemongraph dev``: what its local mail catcher caught.
    dev_mail: Callable[[], list[dict[str, Any]]] | None = None
    #: The email channel's settings (the inbound webhook checks with them).
    mail: MailSettings | None = None
    #: The short reply tokens of the outbound email read (made with ``mail``).
    tokens: ReplyTokens | None = None
    #: The person's messages on ``messages``, by job and id (the webhook's).
    received: ReceivedIds = field(default_factory=ReceivedIds)
    #: The schedules' read model (stream/gateway/readmodels/schedules.py); one is made
    #: for the model's topics when none is given.
    schedules: ScheduleModel | None = None
    #: The subjects' read model (stream/gateway/readmodels/memory.py); one is made
    #: for the model's topics when none is given.
    subjects: SubjectModel | None = None
    #: File channels' files (stream/runtime/filestore.py); build_api makes one
    #: under ``data/files`` with the default limits when none is given.
    files: FileStore | None = None
    #: The broker and how to reach it (an erasure reads the topics' retention).
    bootstrap: str = ""
    security: KafkaSecurity | None = None
    _locks: weakref.WeakValueDictionary[str, asyncio.Lock] = field(
        default_factory=weakref.WeakValueDictionary
    )

    def lock(self, key: str) -> asyncio.Lock:
        """One lock per job key: writes to a job are checked and produced in turn."""
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        return lock

    def room(self) -> None:
        """503 ``gateway_full`` while the writes no decision reflects yet hold
        their whole budget (the workers are down or behind): a new write would
        only grow the gateway's memory."""
        if self.model.full():
            raise ApiError(
                503,
                "gateway_full",
                "the workers have not decided this gateway's earlier writes yet, and those "
                "hold all the memory set aside for them: nothing was written. Retry later",
                headers={"Retry-After": str(max(1, round(self.model.pending_ttl / 10)))},
            )

    async def send(self, topic: str, key: str, value: bytes | None, *, start: bool = False) -> Any:
        """Produce one record and wait for the broker's acknowledgement (its
        metadata), at most :attr:`send_timeout` seconds; 503 when it did not
        come. A send given up on may still land (the producer keeps it), so
        the 503 says so (for a ``start``: that a retry may then answer 409
        ``job_exists`` for the client's own job); the detail goes to the log,
        not to the client."""
        try:
            return await asyncio.wait_for(
                # The request's trace, when the gateway traces (docs/operations.md,
                # "Tracing"): in the record's headers, never its value.
                self.producer.send_and_wait(
                    topic, value, key=key.encode(), headers=current_headers()
                ),
                timeout=self.send_timeout,
            )
        except (KafkaError, TimeoutError) as exc:
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            log.warning("gateway: a write to %s was not acknowledged: %s", topic, detail)
            retry = (
                "Retrying is safe: a job is never started twice, but if this start did land "
                "a retry answers 409 job_exists for this very job (read GET /v1/jobs/{key} "
                "to tell)"
                if start
                else "Retrying is safe: an event with the same idempotency_key, or a message "
                "with the same message_id, is applied once"
            )
            raise ApiError(
                503,
                "broker_unavailable",
                f"the broker did not acknowledge the write within {self.send_timeout:g}s: "
                f"it may or may not have been accepted. {retry}",
                headers={"Retry-After": "1"},
            ) from None

    async def produce(self, key: str, message: JobStart | InboxEvent) -> AcceptedWrite:
        """Put ``message`` on the inbox and wait for the broker's acknowledgement."""
        meta = await self.send(
            self.model.topics.inbox, key, encode(message), start=message.type == "job.start"
        )
        write = AcceptedWrite(
            type=message.type,
            partition=meta.partition,
            offset=meta.offset,
            accepted_at=now_iso(),
            message=message.dump(),
        )
        self.model.accepted(key, write)
        self.accepted_writes += 1
        return write

    async def broker_reachable(self) -> bool:
        """Metadata from the broker within a few seconds (cached for 2 s)."""
        now = self.guard.monotonic()
        if now - self.broker_checked < 2.0:
            return self.broker_ok
        try:
            await asyncio.wait_for(self.producer.client.fetch_all_metadata(), timeout=3)
            self.broker_ok = True
        except Exception:  # any failure means "not reachable", which is the answer
            self.broker_ok = False
        self.broker_checked = now
        return self.broker_ok


def gateway_of(request: Request) -> Gateway:
    """The gateway the app serves (``build_api`` put it in the app's state)."""
    gateway: Gateway = request.app.state.gateway
    return gateway


def _principal(request: Request) -> Principal:
    return principal_of(request.scope)


GatewayDep = Annotated[Gateway, Depends(gateway_of)]
PrincipalDep = Annotated[Principal, Depends(_principal)]


def page(keys: list[str], cursor: str | None, limit: int) -> tuple[list[str], str | None]:
    """A page of the sorted ``keys``: the first ``limit`` after ``cursor`` (a
    page's ``next``; None: from the first), and the next page's cursor (None
    on the last page)."""
    first = bisect.bisect_right(keys, cursor) if cursor is not None else 0
    chosen = keys[first : first + limit]
    more = first + limit < len(keys)
    return chosen, chosen[-1] if more and chosen else None


def visible(model: ReadModel, key: str) -> JobEntry:
    """The job ``key`` a reader may read (in memory or evicted); 404 else."""
    entry = model.lookup(key)
    if entry is None or not entry.visible:
        raise ApiError(404, "job_not_found", f"no job {key!r}")
    return entry


def newest_of(
    model: ReadModel, kept_by_job: Mapping[str, Iterable[dict[str, Any]]], key: str, limit: int
) -> tuple[list[dict[str, Any]], int]:
    """The newest ``limit`` records kept for a visible job, and how many are kept."""
    visible(model, key)
    kept = list(kept_by_job.get(key, ()))
    return kept[-limit:], len(kept)


def now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")
