"""The HTTP API of docs/api.md (FastAPI): writes go to the inbox, reads come from
the read model. ``build_api`` returns the ASGI app; :class:`Gateway` holds what
its routes share."""

from __future__ import annotations

import asyncio
import bisect
import hmac
import logging
import re
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any

import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from fastapi import Depends, FastAPI, Header, Query, Request, Security
from fastapi.responses import HTMLResponse, Response, StreamingResponse
from fastapi.security import HTTPBearer
from pydantic import ValidationError

from stream.gateway.capabilities import require
from stream.gateway.docs import install_docs
from stream.gateway.errors import ApiError, error_responses, install_handlers
from stream.gateway.guard import Guard, GuardMiddleware, principal_of
from stream.gateway.models import (
    Accepted,
    AnswerAccepted,
    AnswerBody,
    DecisionList,
    EventBody,
    Health,
    InboundAccepted,
    InboundEmail,
    InterruptList,
    JobList,
    JobStatus,
    JobView,
    JournalList,
    MessageAccepted,
    MessageBody,
    MessageList,
    PlaybookList,
    PlaybookView,
    StartJobBody,
)
from stream.gateway.readmodel import AcceptedWrite, JobEntry, ReadModel, idem
from stream.gateway.schedules import ScheduleModel, install_schedules
from stream.gateway.tokens import Principal
from stream.gateway.views import job_summary, job_view
from topics import (
    APPROVERS_DEFAULT,
    Answerer,
    InboxEvent,
    JobStart,
    JournalInterrupt,
    JournalMail,
    MessageRecord,
    encode,
    event_id,
    inbound_message,
)
from topics.mail import (
    MailSettings,
    SenderNotContact,
    inbound_message_id,
    received,
    sender_of,
    unverified,
)
from topics.replies import ReplyTokenError, read_reply_address

__all__ = ["Gateway", "build_api"]

_BEARER = HTTPBearer(
    auto_error=False,
    description="`lemongraph_sk_...` from `lemongraph token` (or the one `lemongraph dev` prints).",
)
_KEEPALIVE_SECONDS = 15.0
#: A job stream's position: decisions, journal records and messages read for the job.
_POSITION = r"^\s*\d{1,15}\.\d{1,15}\.\d{1,15}\s*$"
_POSITION_RE = re.compile(_POSITION)
#: Seconds a write waits for the broker before it is answered 503 (the producer
#: itself would wait its request_timeout_ms, 15 s): LEMONGRAPH_GATEWAY_WRITE_TIMEOUT.
SEND_TIMEOUT = 1.5

log = logging.getLogger("lemongraph.gateway")


_errors = error_responses


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
    #: The schedules' read model (stream/gateway/schedules.py); one is made
    #: for the model's topics when none is given.
    schedules: ScheduleModel | None = None
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
                self.producer.send_and_wait(topic, value, key=key.encode()),
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
            accepted_at=datetime.now(UTC).isoformat().replace("+00:00", "Z"),
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


async def _may_answer(
    gateway: Gateway, asked: Mapping[str, Any] | None, by: Answerer, principal: Principal
) -> None:
    """Nothing when the token holder may answer the open interrupt ``asked``:
    a question with a ``world`` token, an approval (whose ``approvers`` name
    ``operators``) with an approver's (docs/api.md, "Approvals"). Else the
    refusal is journaled when the interrupt is open (a ``journal.interrupt``
    ``refused``, the interrupt left open) and raised as 403. An ``agent`` or
    ``tool`` token is refused whether or not the interrupt is open."""
    approval = asked is not None and asked.get("kind") == "approval"
    approvers = list((asked or {}).get("approvers") or APPROVERS_DEFAULT)
    try:
        require(principal, "answer_approval" if approval else "answer_question")
        if approval and "operators" not in approvers:
            raise ApiError(
                403, "not_an_approver",
                f"this approval is answered by {', '.join(approvers)} on their own channel, "
                "not through the API (docs/api.md, 'Approvals')",
            )  # fmt: skip
    except ApiError:
        if asked is not None:
            fields = ("job_key", "run_id", "flow", "node", "interrupt_id", "kind")
            refusal = JournalInterrupt(
                **{k: asked[k] for k in fields}, at=_now_iso(), status="refused",
                approvers=approvers if approval else [], by=by,
            )  # fmt: skip
            await gateway.send(gateway.model.topics.journal, refusal.job_key, encode(refusal))
        raise


def _principal(request: Request) -> Principal:
    return principal_of(request.scope)


PrincipalDep = Annotated[Principal, Depends(_principal)]


def build_api(gateway: Gateway) -> FastAPI:
    """The API app."""
    app = FastAPI(
        title="lemongraph gateway",
        version="1",
        summary="Start jobs, send events, read jobs, decisions and playbooks, and run schedules.",
        description=(
            "Every `/v1` call needs `Authorization: Bearer lemongraph_sk_...` "
            "(mint one with `lemongraph token`). Errors are always "
            '`{"error": {"code", "message"}}`. `GET /v1/jobs/{key}/events` also accepts '
            "the token as `?access_token=` because a browser's EventSource cannot send "
            "headers."
        ),
        docs_url=None,
        redoc_url=None,
    )
    install_handlers(app)
    install_docs(app)
    app.add_middleware(GuardMiddleware, guard=gateway.guard)
    model = gateway.model
    secured = [Security(_BEARER)]
    if gateway.schedules is None:
        gateway.schedules = ScheduleModel(model.topics)
    install_schedules(app, gateway, gateway.schedules, secured)

    @app.get("/", include_in_schema=False)
    async def home() -> HTMLResponse:
        return HTMLResponse(
            '<p>lemongraph gateway: <a href="/docs">API docs</a>, '
            '<a href="/openapi.json">OpenAPI</a></p>'
        )

    @app.get("/healthz", response_model=Health, responses={503: {"model": Health}})
    async def healthz() -> Response:
        """Is the broker reachable and the read model caught up? 200 when both, else
        503; also 503, with the ``problem`` named, once a log it follows went
        backwards (the broker was reset under it)."""
        broker = await gateway.broker_reachable()
        schedules = gateway.schedules
        caught_up = model.caught_up and (schedules is None or schedules.caught_up)
        status = "ok" if broker and caught_up else ("starting" if broker else "degraded")
        if model.reset is not None:
            status = "degraded"
        body = Health(
            status=status,
            broker=broker,
            caught_up=caught_up,
            jobs=len(model.jobs),
            playbooks=len(model.playbooks),
            schedules=len(schedules.schedules) if schedules is not None else 0,
            problem=model.reset,
        )
        return Response(
            body.model_dump_json(),
            status_code=200 if status == "ok" else 503,
            media_type="application/json",
        )

    @app.post(
        "/v1/jobs",
        status_code=202,
        response_model=Accepted,
        dependencies=secured,
        responses=_errors(400, 403, 404, 409, 413, 422, 503),
    )
    async def start_job(body: StartJobBody, principal: PrincipalDep) -> Accepted:
        """Start a job: a `job.start` on the inbox, acknowledged before the 202.
        A key in use answers 409, an unknown playbook 404; a token whose source is
        not `world` 403 `source_not_allowed`."""
        require(principal, "start_job")
        if model.playbook(body.playbook_key) is None:
            raise ApiError(404, "playbook_not_found", f"no playbook {body.playbook_key!r}")
        gateway.room()
        async with gateway.lock(body.key):
            if model.entry(body.key) is not None:
                raise ApiError(409, "job_exists", f"job {body.key!r} exists already")
            message = JobStart(
                key=body.key,
                playbook_key=body.playbook_key,
                subject=body.subject,
                contacts=body.contacts,
            )
            write = await gateway.produce(body.key, message)
        return Accepted(
            type="job.start", key=body.key, partition=write.partition, offset=write.offset
        )

    @app.post(
        "/v1/events",
        status_code=202,
        response_model=Accepted,
        dependencies=secured,
        responses=_errors(400, 404, 413, 422, 503),
    )
    async def send_event(body: EventBody, principal: PrincipalDep) -> Accepted:
        """Send an event to a job. Its source is the token's. A retried
        `idempotency_key` answers 202 again and is applied once."""
        require(principal, "send_event")
        async with gateway.lock(body.key):
            entry = model.entry(body.key)
            if entry is None:
                raise ApiError(404, "job_not_found", f"no job {body.key!r}")
            given = body.idempotency_key
            earlier = entry.idempotency.get(idem(principal.source, given)) if given else None
            if earlier is not None:
                return Accepted(
                    type="event",
                    key=body.key,
                    partition=earlier.partition,
                    offset=earlier.offset,
                    event_id=body.idempotency_key,
                    source=earlier.message.get("source"),
                    duplicate=True,
                )
            gateway.room()
            message = InboxEvent(
                key=body.key,
                action=body.action,
                value=body.value,
                properties=body.properties,
                idempotency_key=body.idempotency_key,
                source=principal.source,
            )
            write = await gateway.produce(body.key, message)
        return Accepted(
            type="event",
            key=body.key,
            partition=write.partition,
            offset=write.offset,
            # What verdict explanations will cite (the engine's naming).
            event_id=body.idempotency_key or event_id(write.partition, write.offset),
            source=principal.source,
        )

    @app.post(
        "/v1/jobs/{key}/messages",
        status_code=202,
        response_model=MessageAccepted,
        dependencies=secured,
        responses=_errors(400, 403, 404, 413, 422, 503),
    )
    async def post_message(key: str, body: MessageBody, principal: PrincipalDep) -> MessageAccepted:
        """A person's message in the job's conversation (the web channel): it goes
        on `messages`, where the agents read it, and as a `message_received` event
        (`source: world`) on the inbox. The event proves that someone wrote, never
        what the text claims. A retried `message_id` answers 202 again, once. Only a
        `world` token writes a person's message (403 `source_not_allowed`)."""
        require(principal, "write_message")
        async with gateway.lock(key):
            entry = model.entry(key)
            if entry is None or not entry.visible:
                raise ApiError(404, "job_not_found", f"no job {key!r}")
            gateway.room()
            message_id = body.message_id or f"web-{uuid.uuid4().hex}"
            event_key = f"msg:{message_id}"
            earlier = entry.idempotency.get(idem("world", event_key))
            if earlier is not None or message_id in model.message_ids.get(key, ()):
                return MessageAccepted(
                    key=key, message_id=message_id, event_id=event_key,
                    partition=earlier.partition if earlier else -1,
                    offset=earlier.offset if earlier else -1, duplicate=True,
                )  # fmt: skip
            record, event = inbound_message(
                key, message_id, "web", body.contact, body.text, _now_iso()
            )
            meta = await gateway.send(model.topics.messages, key, encode(record))
            await gateway.produce(key, event)
        return MessageAccepted(
            key=key,
            message_id=message_id,
            event_id=event_key,
            partition=meta.partition,
            offset=meta.offset,
        )

    @app.post(
        "/v1/jobs/{key}/answers",
        status_code=202,
        response_model=AnswerAccepted,
        dependencies=secured,
        responses=_errors(400, 403, 404, 409, 413, 422, 503),
    )
    async def post_answer(key: str, body: AnswerBody, principal: PrincipalDep) -> AnswerAccepted:
        """The answer to a flow's open question or approval: it goes on `messages`
        (inbound, with the interrupt id and who answered), where the agents service
        takes it once and resumes the flow. An interrupt that is not open (unknown,
        answered already, expired) answers 409 `interrupt_not_open` and writes
        nothing; an answer a question does not allow, 422 `answer_not_allowed`. A
        question is answered with a `world` token, an approval only by an approver
        (403 `source_not_allowed` or `not_an_approver`, journaled, nothing else
        written)."""
        async with gateway.lock(key):
            entry = model.entry(key)
            if entry is None or not entry.visible:
                raise ApiError(404, "job_not_found", f"no job {key!r}")
            asked = model.interrupts.get(key, {}).get(body.interrupt_id)
            by = Answerer(source=principal.source, name=principal.name,
                          approver=principal.approver)  # fmt: skip
            await _may_answer(gateway, asked, by, principal)
            if asked is None:
                raise ApiError(
                    409,
                    "interrupt_not_open",
                    f"job {key!r} has no open question {body.interrupt_id!r}: it was answered "
                    "already, expired, or never asked (GET /v1/jobs/{key}/interrupts lists "
                    "the open ones)",
                )
            allowed = list(asked.get("answers") or [])
            if allowed and body.answer not in allowed:
                raise ApiError(
                    422,
                    "answer_not_allowed",
                    f"question {body.interrupt_id!r} takes one of: {', '.join(allowed)}",
                )
            gateway.room()
            message_id = f"answer:{body.interrupt_id}"
            answer = body.answer
            text = answer if isinstance(answer, str) else orjson.dumps(answer).decode()
            record = MessageRecord(
                job_key=key,
                message_id=message_id,
                direction="in",
                channel="web",
                text=text,
                at=_now_iso(),
                interrupt_id=body.interrupt_id,
                answer=body.answer,
                by=by,
            )
            meta = await gateway.send(model.topics.messages, key, encode(record))
            model.answered(key, body.interrupt_id)  # a second answer is refused from now
        return AnswerAccepted(
            key=key,
            interrupt_id=body.interrupt_id,
            message_id=message_id,
            partition=meta.partition,
            offset=meta.offset,
        )

    @app.get(
        "/v1/jobs/{key}/interrupts",
        response_model=InterruptList,
        dependencies=secured,
        responses=_errors(404),
    )
    async def get_interrupts(key: str) -> InterruptList:
        """The job's open flow questions and approvals (what
        `POST /v1/jobs/{key}/answers` accepts), oldest first."""
        entry = model.entry(key)
        if entry is None or not entry.visible:
            raise ApiError(404, "job_not_found", f"no job {key!r}")
        return InterruptList(key=key, interrupts=list(model.interrupts.get(key, {}).values()))

    @app.post(
        "/v1/inbound/email",
        status_code=202,
        response_model=InboundAccepted,
        responses=_errors(400, 401, 403, 404, 413, 422, 503),
    )
    async def inbound_email(request: Request) -> InboundAccepted:
        """For mail providers that deliver by webhook: an email received for a
        `reply+<token>@REPLY_DOMAIN` (or `bounce+...`) address. No bearer token:
        `X-Lemongraph-Signature: sha256=<hex HMAC-SHA256 of the body under
        LEMONGRAPH_INBOUND_SECRET>`. The reply token is checked as the mail ingress
        checks it (403 `reply_refused`, journaled, nothing written), and so is the
        sender: a reply `from` anyone but the contact its address was issued to is
        403 `sender_not_contact` (journaled `unverified`, nothing written). A reply
        becomes a message and its `message_received` event, a bounce `email_bounced`."""
        mail = gateway.mail
        if mail is None or not mail.inbound_secret:
            raise ApiError(
                404, "inbound_not_configured",
                "LEMONGRAPH_INBOUND_SECRET is empty: this gateway has no inbound webhook",
            )  # fmt: skip
        raw = await request.body()
        expected = "sha256=" + hmac.new(mail.inbound_secret.encode(), raw, "sha256").hexdigest()
        given = request.headers.get("x-lemongraph-signature", "")
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise ApiError(
                401, "signature_invalid",
                "X-Lemongraph-Signature is missing or does not match the body "
                "(sha256=<hex HMAC-SHA256 of the exact body under LEMONGRAPH_INBOUND_SECRET>)",
            )  # fmt: skip
        try:
            body = InboundEmail.model_validate_json(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "body"
            raise ApiError(422, "invalid_body", f"{where}: {first['msg']}") from None
        try:
            route = read_reply_address(
                mail.reply_secret, body.to, mail.reply_domain, int(time.time())
            )
        except ReplyTokenError as exc:
            refusal = JournalMail(
                job_key="", at=_now_iso(), direction="in", outcome="refused",
                address=body.from_, detail=f"webhook: {exc.reason}: to {body.to}: {exc}"[:500],
            )  # fmt: skip
            await gateway.send(model.topics.journal, "", encode(refusal))
            raise ApiError(403, "reply_refused", f"{exc.reason} reply address: {exc}") from None
        key = route.job_key
        message_id = inbound_message_id(body.message_id, raw)
        async with gateway.lock(key):
            entry = model.entry(key)
            if entry is None or not entry.visible:
                raise ApiError(404, "job_not_found", f"no job {key!r}")
            try:
                record, event = received(
                    route, message_id, sender_of(body.from_), body.text, _now_iso(), body.reason
                )
            except SenderNotContact as refusal:
                held = unverified(route, refusal, message_id, _now_iso(), "webhook")
                await gateway.send(model.topics.journal, key, encode(held))
                raise ApiError(403, "sender_not_contact", str(refusal)) from None
            event_key = str(event.idempotency_key)
            answer = InboundAccepted(
                key=key, kind="bounce" if record is None else "reply",
                message_id=message_id, event_id=event_key,
            )  # fmt: skip
            remembered = idem(event.source, event_key) in entry.idempotency
            if remembered or message_id in model.message_ids.get(key, ()):
                return answer.model_copy(update={"duplicate": True})
            gateway.room()
            if record is not None:
                await gateway.send(model.topics.messages, key, encode(record))
            await gateway.produce(key, event)
            journaled = JournalMail(
                job_key=key, at=_now_iso(), direction="in",
                outcome="received" if record is not None else "bounced",
                message_id=message_id, address=sender_of(body.from_), detail="webhook",
            )  # fmt: skip
            await gateway.send(model.topics.journal, key, encode(journaled))
        return answer

    @app.get("/v1/dev/mail", dependencies=secured, responses=_errors(404))
    async def dev_mail() -> dict[str, Any]:
        """Under `lemongraph dev` with no LEMONGRAPH_SMTP_URL: the emails the agents
        sent, as its local mail catcher received them (newest 200, oldest first).
        404 `not_dev` anywhere else."""
        if gateway.dev_mail is None:
            raise ApiError(404, "not_dev", "no mail catcher here: only `lemongraph dev` has one")
        return {"mails": gateway.dev_mail()}

    @app.get(
        "/v1/jobs/{key}/messages",
        response_model=MessageList,
        dependencies=secured,
        responses=_errors(404, 422),
    )
    async def get_messages(
        key: str, limit: Annotated[int, Query(ge=1, le=1000)] = 200
    ) -> MessageList:
        """The job's conversation, oldest first: every message in and out (channel,
        direction, contact, text, message id, task, when)."""
        newest, kept = newest_of(model.messages, key, limit)
        total = model.message_totals.get(key, 0)
        return MessageList(key=key, messages=newest, kept=kept, total=total)

    @app.get("/v1/jobs", response_model=JobList, dependencies=secured, responses=_errors(422))
    async def list_jobs(
        status: Annotated[JobStatus | None, Query(description="Only jobs in this status.")] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
        cursor: Annotated[str | None, Query(max_length=200, description="A page's `next`.")] = None,
    ) -> JobList:
        """Jobs by key, a page at a time."""
        # The model keeps the listed keys sorted, in all and by status: a page
        # is a slice of one of those lists, and only its rows are built.
        keys = model.listed if status is None else model.listed_by.get(status, [])
        first = bisect.bisect_right(keys, cursor) if cursor is not None else 0
        chosen = keys[first : first + limit]
        more = first + limit < len(keys)
        total = len(keys)
        page = [_row(model, key) for key in chosen]
        return JobList(jobs=page, total=total, next=page[-1].key if more and page else None)

    def newest_of(
        kept_by_job: Mapping[str, Iterable[dict[str, Any]]], key: str, limit: int
    ) -> tuple[list[dict[str, Any]], int]:
        """The newest ``limit`` records kept for a visible job, and how many are kept."""
        visible(key)
        kept = list(kept_by_job.get(key, ()))
        return kept[-limit:], len(kept)

    def visible(key: str) -> Any:
        entry = model.lookup(key)
        if entry is None or not entry.visible:
            raise ApiError(404, "job_not_found", f"no job {key!r}")
        return entry

    @app.get("/v1/jobs/{key}", response_model=JobView, dependencies=secured, responses=_errors(404))
    async def get_job(key: str) -> JobView:
        """A job: status, milestones with state, deadline and verdict explanation,
        the frontier (the first is the next best step), pending timers, and this
        gateway's accepted writes that no decision reflects yet."""
        return _view(model, visible(key))

    @app.get(
        "/v1/jobs/{key}/decisions",
        response_model=DecisionList,
        dependencies=secured,
        responses=_errors(404, 422),
    )
    async def get_decisions(
        key: str, limit: Annotated[int, Query(ge=1, le=1000)] = 200
    ) -> DecisionList:
        """The audit trail: the job's newest decisions (input, `now`, verdicts with
        explanations, transitions, effects, state hash), oldest first."""
        newest, kept = newest_of(model.decisions, key, limit)
        total = model.decision_totals.get(key, 0)
        return DecisionList(key=key, decisions=newest, kept=kept, total=total)

    @app.get(
        "/v1/jobs/{key}/journal",
        response_model=JournalList,
        dependencies=secured,
        responses=_errors(404, 422),
    )
    async def get_journal(
        key: str, limit: Annotated[int, Query(ge=1, le=1000)] = 200
    ) -> JournalList:
        """The agents' journal for the job: every model call (tokens, latency,
        outcome), tool call (outcome, our idempotency key, the fact recorded)
        and run end, newest last."""
        newest, kept = newest_of(model.journal, key, limit)
        total = model.journal_totals.get(key, 0)
        return JournalList(key=key, records=newest, kept=kept, total=total)

    @app.get(
        "/v1/jobs/{key}/events",
        dependencies=secured,
        responses={
            200: {"content": {"text/event-stream": {}}, "description": "Server-sent events"},
            **_errors(404),
        },
        response_class=StreamingResponse,
    )
    async def job_events(
        key: str,
        access_token: Annotated[
            str | None,
            Query(description="The token, for clients that cannot send headers (EventSource)."),
        ] = None,
        after: Annotated[
            str | None,
            Query(
                pattern=_POSITION,
                description="Resume after `D.J.M`: the `total`s of the job's decisions, "
                "journal and messages as read (the lists' `total`); what came after "
                "them comes first. Without it, only what comes from now on.",
            ),
        ] = None,
        last_event_id: Annotated[
            str | None,
            Header(
                description="Where the stream was (each record's `id`, sent back by "
                "EventSource when it reconnects): it resumes there, before `after`."
            ),
        ] = None,
    ) -> StreamingResponse:
        """Server-sent events as the job changes: `job` (the full view, first at
        once and then on every change), `decision` (each new decision) and
        `journal` (each new record of the agents' journal: model calls, tool
        calls, run ends) and `message` (each new message of the conversation).
        Each record's `id` is where the stream is (`D.J.M`); `after`, or
        `Last-Event-ID` on a reconnect, resumes from such a position."""
        del access_token  # the guard read it
        visible(key)
        start = _position(last_event_id) or _position(after)
        return StreamingResponse(
            _follow(gateway, key, start),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @app.get(
        "/v1/playbooks", response_model=PlaybookList, dependencies=secured, responses=_errors()
    )
    async def list_playbooks() -> PlaybookList:
        """The latest version of every playbook (folder and registry)."""
        return PlaybookList(playbooks=[_playbook(model, k, None) for k in sorted(model.playbooks)])

    @app.get(
        "/v1/playbooks/{key}",
        response_model=PlaybookView,
        dependencies=secured,
        responses=_errors(404, 422),
    )
    async def get_playbook(
        key: str, version: Annotated[int | None, Query(ge=1)] = None
    ) -> PlaybookView:
        """A playbook: the latest version, or `version`."""
        if model.playbook(key, version) is None:
            which = f"{key!r} v{version}" if version is not None else repr(key)
            raise ApiError(404, "playbook_not_found", f"no playbook {which}")
        return _playbook(model, key, version)

    return app


def _playbook(model: ReadModel, key: str, version: int | None) -> PlaybookView:
    versions = sorted(model.playbooks[key])
    chosen = version if version is not None else versions[-1]
    return PlaybookView(
        key=key, version=chosen, versions=versions, spec=model.playbooks[key][chosen]
    )


def _row(model: ReadModel, key: str) -> Any:
    """Job ``key``'s row of the list: from memory, or its evicted summary."""
    entry = model.jobs.get(key)
    if entry is None:
        entry = JobEntry(key, snapshot=model.gone[key], in_memory=False)
    return job_summary(entry).model_copy(update={"in_memory": entry.in_memory})


def _view(model: ReadModel, entry: JobEntry) -> JobView:
    """The job's view; for a job evicted from memory, what its summary says."""
    view = job_view(model, entry)
    if entry.in_memory or entry.snapshot is None:
        return view
    states = entry.snapshot.milestones
    milestones = [
        m.model_copy(update={"state": states.get(m.id, m.state)}) for m in view.milestones
    ]
    return view.model_copy(update={"in_memory": False, "milestones": milestones})


def _now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _newest(kept: Iterable[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """The last ``count`` records kept (all kept, when more came than are kept)."""
    records = list(kept)
    return records[max(0, len(records) - count) :] if count > 0 else []


def _sse(event: str, data: Any, ident: str | None = None) -> bytes:
    head = b"id: " + ident.encode() + b"\n" if ident is not None else b""
    return head + b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def _position(text: str | None) -> tuple[int, int, int] | None:
    """``D.J.M`` (decisions, journal records and messages read for a job) as
    numbers; None for none or for what is not one."""
    if text is None or _POSITION_RE.fullmatch(text.strip()) is None:
        return None
    decisions, journal, messages = (int(part) for part in text.strip().split("."))
    return decisions, journal, messages


async def _follow(
    gateway: Gateway, key: str, start: tuple[int, int, int] | None = None
) -> AsyncIterator[bytes]:
    """The job's stream. Its position counts the records read for the job, of
    each kind; it starts at ``start`` (what the client has: a list's ``total``,
    or the ``id`` of the last record it got), else at what is read now. Records
    past it that are still kept come at once, so that nothing read between the
    client's lists and its stream (or while it reconnected) is lost. A position
    past what this gateway read (one still reading after a restart) waits for it."""
    model = gateway.model
    flag = model.watch(key)
    kinds = (
        ("decision", model.decisions, model.decision_totals),
        ("journal", model.journal, model.journal_totals),
        ("message", model.messages, model.message_totals),
    )
    at = list(start) if start is not None else [totals.get(key, 0) for _, _, totals in kinds]

    def since() -> Iterator[bytes]:
        for i, (event, kept, totals) in enumerate(kinds):
            total = totals.get(key, 0)
            records = _newest(kept.get(key, ()), total - at[i])
            if total > at[i]:
                at[i] = total
            for n, record in enumerate(records):
                # the position after this record (the ones before it of its kind
                # counted, the later kinds not yet)
                here = [*at]
                here[i] = total - len(records) + n + 1
                yield _sse(event, record, ".".join(map(str, here)))

    try:
        yield b"retry: 2000\n\n"
        entry = model.jobs.get(key)
        if entry is not None:
            yield _sse("job", _view(model, entry).model_dump(mode="json"))
        for chunk in since():
            yield chunk
        while not gateway.stopping.is_set():
            try:
                await asyncio.wait_for(flag.wait(), timeout=_KEEPALIVE_SECONDS)
            except TimeoutError:
                yield b": keep-alive\n\n"
                continue
            flag.clear()
            if gateway.stopping.is_set():
                break
            for chunk in since():
                yield chunk
            entry = model.jobs.get(key)
            if entry is not None:
                yield _sse("job", _view(model, entry).model_dump(mode="json"))
    finally:
        model.unwatch(key, flag)
