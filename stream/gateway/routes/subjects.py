"""Subjects (docs/api.md, "Subjects"; docs/memory.md, "Reading it"): a subject's
profile, now or as of an instant, its jobs, and its erasure; served from the
subjects' read model (stream/gateway/readmodels/memory.py).

**Who may**: a profile is what the world and verified tools said about a
person, so it is read with a ``world`` or ``tool`` token (an agent is given its
subject's current facts by the agents service, bounded, never through the API);
a subject is erased with a ``world`` token only (an operator's), never an
agent's or a tool's (stream/gateway/routes/capabilities.py).

**An erasure is one record**: its ``request_id`` is derived from the subject
and what is erased (the profile's ``updated_at``, else that there was none), and
a DELETE of a subject already erased since its profile last changed answers
202 ``duplicate: true`` with the earlier erasure and writes nothing.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from compiler import from_iso
from stream.gateway.errors import WRITE_CODES, ApiError, error_responses
from stream.gateway.readmodels.memory import SubjectModel, current_facts, facts_as_of
from stream.gateway.retention import describe_retention
from stream.gateway.routes.capabilities import require
from stream.gateway.routes.shared import SECURED, Gateway, GatewayDep, PrincipalDep, now_iso
from stream.gateway.views import list_row
from topics import TOPIC_NAMES, MemoryErase, SubjectProfile, encode

__all__ = ["erase_subject", "router", "subject_jobs", "subject_profile"]

router = APIRouter(dependencies=SECURED, tags=["subjects"])

#: The raw logs that may still hold what a subject's facts came from, and what
#: each holds of it (the 202 of an erasure lists them with their retention).
RAW_LOGS: tuple[tuple[str, str], ...] = (
    ("inbox", "the events that proved its facts, as they were sent"),
    ("decisions", "the decisions that applied them, with their fact.remembered effects"),
    ("memory-facts", "its remembered facts, its jobs' conversation summaries and this erasure "
     "(the memory processor never folds a fact or summary written at or before the erasure "
     "again, on a rebuild included)"),
    ("messages", "the conversations of its jobs"),
    ("journal", "its jobs' model and tool calls, summary calls included (the text as its "
     "opening)"),
    ("engine-jobstate-changelog", "its jobs' states, with their subject and contacts"),
    ("conversations", "the agents' state of its jobs, with their subject and turns (and a "
     "summary while the run that wrote it is in progress)"),
)  # fmt: skip
#: What an erasure removes.
REMOVES = (
    "the subject's profile on the memory topic (a tombstone: compaction then deletes its "
    "earlier records), so no agent, flow or reader is given its facts again",
    "its jobs' conversation summaries kept with the profile (notes a model wrote), so no "
    "agent is shown them again",
    "every fact and summary of the subject written at or before the erasure, including "
    "one that arrives on memory-facts later",
)


class ProfileFactView(BaseModel):
    """One version of one fact (topics ``ProfileFact``)."""

    name: str
    value: Any = None
    properties: dict[str, Any] = Field(default_factory=dict)
    source: str
    event_id: str
    job_key: str
    valid_from: str
    valid_to: str | None = None


class ProfileView(BaseModel):
    """A subject's facts: the current ones, or those in force at ``as_of``."""

    subject: str
    facts: list[ProfileFactView]


class SubjectJob(BaseModel):
    """One job about the subject, with where to read it."""

    key: str
    status: str | None
    playbook_key: str | None
    updated_at: str | None
    links: dict[str, str]


class SubjectJobs(BaseModel):
    subject: str
    jobs: list[SubjectJob]
    total: int


class Erased(BaseModel):
    """The erasure on ``memory-facts`` (acknowledged by the broker), what it
    removes, and what the raw logs keep, each topic's retention with where it
    was learnt (``broker``, or Kafka's ``default``)."""

    accepted: bool = True
    subject: str
    request_id: str
    at: str
    duplicate: bool = False
    partition: int | None = None
    offset: int | None = None
    removes: list[str]
    remains: list[dict[str, Any]]


def _model(gateway: Gateway) -> SubjectModel:
    model = gateway.subjects
    assert model is not None  # build_api made it
    return model


def _caught_up(model: SubjectModel) -> None:
    if not model.caught_up:
        raise ApiError(
            503, "subjects_loading",
            "the gateway has not read the memory topic up to its end yet: retry shortly",
            headers={"Retry-After": "1"},
        )  # fmt: skip


def _held(model: SubjectModel, subject: str) -> SubjectProfile | None:
    try:
        return model.profile(subject)
    except KeyError:
        raise ApiError(
            503, "profile_not_held",
            f"subject {subject!r}'s profile is past this gateway's memory for profiles: "
            "`lemongraph subject show` reads it from the topic",
        ) from None  # fmt: skip


def _instant(text: str) -> datetime:
    try:
        instant = from_iso(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError as exc:
        raise ApiError(
            422, "invalid_query",
            f"as_of: {text!r} is not an ISO-8601 instant with an offset "
            f"(e.g. 2026-12-01T09:00:00Z): {exc}",
        ) from None  # fmt: skip
    return instant.astimezone(UTC)


@router.get(
    "/v1/subjects/{subject}/profile",
    response_model=ProfileView,
    operation_id="getSubjectProfile",
    responses=error_responses(
        "source_not_allowed",
        "subject_not_found",
        "invalid_query",
        "subjects_loading",
        "profile_not_held",
    ),
)
async def subject_profile(
    gateway: GatewayDep,
    principal: PrincipalDep,
    subject: str,
    as_of: Annotated[
        str | None,
        Query(max_length=64, description="An ISO-8601 instant: the facts in force then."),
    ] = None,
) -> ProfileView:
    """A subject's profile: its current facts, or with `as_of` the versions in
    force at that instant (`valid_from <= as_of < valid_to`). 404
    `subject_not_found` for a subject with no profile (never remembered, or
    erased); 422 `invalid_query` for an `as_of` that is not an instant."""
    require(principal, "read_profile")
    instant = _instant(as_of) if as_of is not None else None
    model = _model(gateway)
    _caught_up(model)
    found = _held(model, subject)
    if found is None:
        raise ApiError(404, "subject_not_found", f"no profile for subject {subject!r}")
    facts = current_facts(found) if instant is None else facts_as_of(found, instant)
    return ProfileView(subject=subject, facts=[ProfileFactView(**f) for f in facts])


@router.get(
    "/v1/subjects/{subject}/jobs",
    response_model=SubjectJobs,
    operation_id="listSubjectJobs",
    responses=error_responses("source_not_allowed", "invalid_query"),
)
async def subject_jobs(
    gateway: GatewayDep,
    principal: PrincipalDep,
    subject: str,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> SubjectJobs:
    """The jobs whose subject key is `subject` (its `id`, else its first
    contact's address: docs/memory.md, "Subjects"), newest last, with their
    status and links."""
    require(principal, "read_profile")
    keys = _model(gateway).jobs_of(subject)
    jobs = gateway.model
    rows = []
    for key in keys[-limit:]:
        listed = key in jobs.jobs or key in jobs.gone
        row = list_row(jobs, key) if listed else None
        rows.append(
            SubjectJob(
                key=key,
                status=str(row.status) if row is not None else None,
                playbook_key=row.playbook_key if row is not None else None,
                updated_at=row.updated_at if row is not None else None,
                links=_links(key),
            )
        )
    return SubjectJobs(subject=subject, jobs=rows, total=len(keys))


def _links(key: str) -> dict[str, str]:
    return {
        "job": f"/v1/jobs/{key}",
        "decisions": f"/v1/jobs/{key}/decisions",
        "ui": f"/jobs/{key}",
    }


def erase_id(subject: str, profile_updated_at: str | None) -> str:
    """The erasure's request id, from our data: the subject and what is erased."""
    seed = f"{subject}\n{profile_updated_at or '-'}".encode()
    return "erase-" + hashlib.sha256(seed).hexdigest()[:32]


@router.delete(
    "/v1/subjects/{subject}",
    status_code=202,
    response_model=Erased,
    operation_id="eraseSubject",
    responses=error_responses("source_not_allowed", "subjects_loading", *WRITE_CODES),
)
async def erase_subject(gateway: GatewayDep, principal: PrincipalDep, subject: str) -> Erased:
    """Erase a subject: a `memory.erase` on `memory-facts` (keyed by the
    subject), acknowledged before the 202, which says what it removes and what
    the raw logs keep and for how long. A retry, or a DELETE of a subject
    erased since its profile last changed, answers `duplicate: true` and
    writes nothing. A `world` token only."""
    require(principal, "erase_subject")
    model = _model(gateway)
    _caught_up(model)
    topics = gateway.model.topics
    async with gateway.lock(f"subject\n{subject}"):
        earlier = model.erasure(subject)
        if earlier is not None:
            at, request_id = earlier
            return await _erased(gateway, subject, request_id, at, duplicate=True)
        try:
            held = model.profile(subject)
        except KeyError:
            held = None
        at = now_iso()
        request_id = erase_id(subject, held.updated_at if held is not None else None)
        record = MemoryErase(subject=subject, at=at, request_id=request_id)
        meta = await gateway.send(topics.memory_facts, subject, encode(record))
        model.erasing(subject, at, request_id)
    return await _erased(gateway, subject, request_id, at, meta=meta)


async def _erased(
    gateway: Gateway, subject: str, request_id: str, at: str, *, duplicate: bool = False,
    meta: Any = None,
) -> Erased:  # fmt: skip
    topics = gateway.model.topics
    names = [topics.name(short) for short, _ in RAW_LOGS]
    compacted = {topics.name(short): TOPIC_NAMES[short][1] for short, _ in RAW_LOGS}
    retention = await describe_retention(gateway.bootstrap, gateway.security, names, compacted)
    remains = [
        {**retention[topics.name(short)].json(), "holds": holds} for short, holds in RAW_LOGS
    ]
    return Erased(
        subject=subject,
        request_id=request_id,
        at=at,
        duplicate=duplicate,
        partition=meta.partition if meta is not None else None,
        offset=meta.offset if meta is not None else None,
        removes=list(REMOVES),
        remains=remains,
    )
