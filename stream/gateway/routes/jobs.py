"""Jobs (docs/api.md, "Starting a job", "Reading a job"): start one, list them,
read one, its decisions and its journal."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from stream.gateway.errors import BODY_CODES, WRITE_CODES, ApiError, error_responses
from stream.gateway.models import (
    Accepted,
    DecisionList,
    JobList,
    JobStatus,
    JobView,
    JournalList,
    StartJobBody,
)
from stream.gateway.routes.capabilities import require
from stream.gateway.routes.shared import SECURED, GatewayDep, PrincipalDep, newest_of, page, visible
from stream.gateway.views import held_view, list_row
from topics import JobStart

__all__ = ["get_decisions", "get_job", "get_journal", "list_jobs", "router", "start_job"]

router = APIRouter(dependencies=SECURED, tags=["jobs"])


@router.post(
    "/v1/jobs",
    status_code=202,
    response_model=Accepted,
    operation_id="startJob",
    responses=error_responses(
        *BODY_CODES, *WRITE_CODES, "source_not_allowed", "playbook_not_found", "job_exists"
    ),
)
async def start_job(gateway: GatewayDep, body: StartJobBody, principal: PrincipalDep) -> Accepted:
    """Start a job: a `job.start` on the inbox, acknowledged before the 202.
    A key in use answers 409, an unknown playbook 404; a token whose source is
    not `world` 403 `source_not_allowed`."""
    require(principal, "start_job")
    model = gateway.model
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
    return Accepted(type="job.start", key=body.key, partition=write.partition, offset=write.offset)


@router.get(
    "/v1/jobs",
    response_model=JobList,
    operation_id="listJobs",
    responses=error_responses("invalid_query"),
)
async def list_jobs(
    gateway: GatewayDep,
    status: Annotated[JobStatus | None, Query(description="Only jobs in this status.")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=200, description="A page's `next`.")] = None,
) -> JobList:
    """Jobs by key, a page at a time."""
    # The model keeps the listed keys sorted, in all and by status: a page
    # is a slice of one of those lists, and only its rows are built.
    model = gateway.model
    keys = model.listed if status is None else model.listed_by.get(status, [])
    chosen, after = page(keys, cursor, limit)
    return JobList(jobs=[list_row(model, key) for key in chosen], total=len(keys), next=after)


@router.get(
    "/v1/jobs/{key}",
    response_model=JobView,
    operation_id="getJob",
    responses=error_responses("job_not_found"),
)
async def get_job(gateway: GatewayDep, key: str) -> JobView:
    """A job: status, milestones with state, deadline and verdict explanation,
    the frontier (the first is the next best step), pending timers, and this
    gateway's accepted writes that no decision reflects yet."""
    return held_view(gateway.model, visible(gateway.model, key))


@router.get(
    "/v1/jobs/{key}/decisions",
    response_model=DecisionList,
    operation_id="listDecisions",
    responses=error_responses("job_not_found", "invalid_query"),
)
async def get_decisions(
    gateway: GatewayDep, key: str, limit: Annotated[int, Query(ge=1, le=1000)] = 200
) -> DecisionList:
    """The audit trail: the job's newest decisions (input, `now`, verdicts with
    explanations, transitions, effects, state hash), oldest first."""
    model = gateway.model
    newest, kept = newest_of(model, model.decisions, key, limit)
    total = model.decision_totals.get(key, 0)
    return DecisionList(key=key, decisions=newest, kept=kept, total=total)


@router.get(
    "/v1/jobs/{key}/journal",
    response_model=JournalList,
    operation_id="listJournal",
    responses=error_responses("job_not_found", "invalid_query"),
)
async def get_journal(
    gateway: GatewayDep, key: str, limit: Annotated[int, Query(ge=1, le=1000)] = 200
) -> JournalList:
    """The agents' journal for the job: every model call (tokens, latency,
    outcome), tool call (outcome, our idempotency key, the fact recorded)
    and run end, newest last."""
    model = gateway.model
    newest, kept = newest_of(model, model.journal, key, limit)
    total = model.journal_totals.get(key, 0)
    return JournalList(key=key, records=newest, kept=kept, total=total)
