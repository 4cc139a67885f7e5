"""LemonAutomation's controls of schedules (docs/api.md, "Schedules";
docs/schedules.md, "Run now", "Abort", "Waking many"): run a schedule now,
abort a running run, and wake many schedules at once. Each is a
``schedule.wake`` record on the inbox (its ``control`` ``run``, ``abort`` or
``wake``) that the worker decides on the schedule's partition, exactly once per
request id, and an ``audit`` record; the routes share the schedules' read model
and writing rules (stream/gateway/routes/schedules.py): a ``world`` token.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from pydantic import BaseModel, Field, StrictBool, StrictStr, model_validator

from stream.gateway.errors import BODY_CODES, ApiError, error_responses
from stream.gateway.models import _Body
from stream.gateway.readmodels.schedules import ACTIVE, is_enabled
from stream.gateway.routes.schedules import (
    WakeAccepted,
    found,
    request_id_of,
    schedule_model,
    since_of,
    wake_one,
    writer_of,
)
from stream.gateway.routes.shared import SECURED, GatewayDep
from stream.gateway.schedule_ops import AUDIT_ACTIONS

__all__ = ["abort_schedule_run", "list_audit", "router", "run_schedule", "wake_schedules"]

router = APIRouter(dependencies=SECURED, tags=["schedules"])
_WRITE = ("source_not_allowed", "schedules_loading", "broker_unavailable")
_REQUEST_ID = r"^[A-Za-z0-9._:@-]{1,200}$"
#: The most schedules one wake of many may wake (docs/api.md).
WAKE_MANY_MAX = 500

_IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        pattern=_REQUEST_ID,
        description="Names the request, as `request_id` does.",
    ),
]


class RunBody(_Body):
    """Run the schedule now. ``request_id`` (or the ``Idempotency-Key`` header)
    names the request: the same one again is the same run."""

    context: dict[str, Any] | None = None
    skip_if_running: StrictBool = False
    request_id: StrictStr | None = Field(
        None, min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:@-]+$"
    )


class AbortBody(_Body):
    """Abort the run. ``request_id`` names the request (default
    ``abort-<run id>``: a run is aborted once)."""

    request_id: StrictStr | None = Field(
        None, min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:@-]+$"
    )


class WakeManyBody(_Body):
    """Wake each schedule chosen by exactly one of ``ids`` (those ids),
    ``labels`` (the enabled schedules whose ``meta`` has each of these
    entries) or ``agent`` (the enabled prompt schedules of that agent)."""

    ids: list[StrictStr] | None = Field(None, min_length=1, max_length=WAKE_MANY_MAX)
    labels: dict[str, StrictStr] | None = Field(None, min_length=1, max_length=20)
    agent: StrictStr | None = Field(None, min_length=1, max_length=64)
    context: dict[str, Any] | None = None
    skip_if_running: StrictBool = False
    request_id: StrictStr | None = Field(
        None, min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:@-]+$"
    )

    @model_validator(mode="after")
    def _one_selector(self) -> WakeManyBody:
        given = [n for n in ("ids", "labels", "agent") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of ids, labels or agent")
        return self


class WakeManyAccepted(BaseModel):
    """The wakes written, one per schedule chosen (each as a wake's answer,
    ``duplicate: true`` for one this request id woke already), and the ids
    asked for that no schedule has."""

    accepted: bool = True
    request_id: str
    woken: list[WakeAccepted]
    not_found: list[str] = Field(default_factory=list)


@router.post(
    "/v1/schedules/{schedule_id}/run",
    status_code=202,
    response_model=WakeAccepted,
    operation_id="runSchedule",
    responses=error_responses(*BODY_CODES, *_WRITE, "schedule_not_found"),
)
async def run_schedule(
    gateway: GatewayDep,
    request: Request,
    schedule_id: str,
    body: RunBody | None = None,
    idempotency_key: _IdempotencyKey = None,
) -> WakeAccepted:
    """Run the schedule now, paused or not: a `schedule.wake` with `control:
    run` on the inbox and an `audit` record `run`; 202 with the run's id
    (`mn-`, from the schedule and the request id: the same request again is
    the same run, `duplicate: true`). The run is `triggered_by: manual`, is not
    retried and does not move the schedule's clock."""
    principal = writer_of(gateway, request)
    given = body or RunBody()
    request_id = request_id_of(given.request_id, idempotency_key, "run")
    return await wake_one(
        gateway,
        principal,
        schedule_id,
        request_id,
        given.context,
        given.skip_if_running,
        control="run",
    )


@router.post(
    "/v1/schedules/{schedule_id}/runs/{run_id}/abort",
    status_code=202,
    response_model=WakeAccepted,
    operation_id="abortScheduleRun",
    responses=error_responses(
        *BODY_CODES, *_WRITE, "schedule_not_found", "run_not_found", "run_not_active"
    ),
)
async def abort_schedule_run(
    gateway: GatewayDep,
    request: Request,
    schedule_id: str,
    run_id: str,
    body: AbortBody | None = None,
    idempotency_key: _IdempotencyKey = None,
) -> WakeAccepted:
    """Abort a prompt or command run that is still going: a `schedule.wake`
    with `control: abort` on the inbox and an `audit` record `abort`; 202.
    The worker records the run `aborted` (not retried, delivered nowhere); a
    report that comes for it later changes nothing. 404 `run_not_found` for a
    run this gateway does not know, 409 `run_not_active` for one that ended."""
    principal = writer_of(gateway, request)
    model = schedule_model(gateway)
    found(model, schedule_id)
    known = model.runs.get(schedule_id)
    run = known.get(run_id) if known is not None else None
    if run is None:
        raise ApiError(404, "run_not_found", f"no run {run_id!r} of schedule {schedule_id!r}")
    given = body or AbortBody()
    request_id = request_id_of(given.request_id, idempotency_key, "abort")
    if given.request_id is None and idempotency_key is None:
        request_id = f"abort-{run_id}"  # one abort per run, however often asked
    held = model.wakes.get(schedule_id)
    if run.get("status") not in ACTIVE and (held is None or f"abort:{request_id}" not in held):
        raise ApiError(
            409, "run_not_active", f"run {run_id!r} is not running: it ended {run.get('status')}"
        )
    return await wake_one(
        gateway, principal, schedule_id, request_id, None, control="abort", run_id=run_id
    )


@router.post(
    "/v1/schedules/wake",
    status_code=202,
    response_model=WakeManyAccepted,
    operation_id="wakeSchedules",
    responses=error_responses(*BODY_CODES, *_WRITE, "schedule_not_found"),
)
async def wake_schedules(
    gateway: GatewayDep,
    request: Request,
    body: WakeManyBody,
    idempotency_key: _IdempotencyKey = None,
) -> WakeManyAccepted:
    """Wake many schedules (docs/schedules.md, "Waking many"): by `ids`, by
    `labels` (the enabled schedules whose `meta` has each entry) or by `agent`
    (the enabled prompt schedules of that agent). One `schedule.wake` and one
    `audit` record `wake` per schedule, all with the same request id, each
    decided once by the worker (each schedule's run id is its own). 404
    `schedule_not_found` when nothing matches; ids that match nothing are
    listed in `not_found`."""
    principal = writer_of(gateway, request)
    model = schedule_model(gateway)
    request_id = request_id_of(body.request_id, idempotency_key, "wake")
    chosen, missing = _chosen(model.listed, model.schedules, body)
    if not chosen:
        raise ApiError(404, "schedule_not_found", f"no schedule matches {_asked(body)}")
    woken = [
        await wake_one(gateway, principal, sid, request_id, body.context, body.skip_if_running)
        for sid in chosen
    ]
    return WakeManyAccepted(request_id=request_id, woken=woken, not_found=missing)


def _chosen(
    listed: list[str], schedules: dict[str, Any], body: WakeManyBody
) -> tuple[list[str], list[str]]:
    """The ids to wake, in order, and the asked ids no schedule has."""
    if body.ids is not None:
        unique = list(dict.fromkeys(body.ids))
        return [i for i in unique if i in schedules], [i for i in unique if i not in schedules]
    out: list[str] = []
    for sid in listed:
        spec = schedules[sid].spec
        if not is_enabled(spec):
            continue
        meta = spec.get("meta") or {}
        action = spec.get("action") or {}
        if body.labels is not None:
            matches = all(meta.get(k) == v for k, v in body.labels.items())
        else:
            matches = action.get("type") == "prompt" and action.get("agent") == body.agent
        if matches:
            out.append(sid)
    if len(out) > WAKE_MANY_MAX:
        raise ApiError(
            422,
            "invalid_body",
            f"{_asked(body)} matches {len(out)} schedules, more than {WAKE_MANY_MAX}",
        )
    return out, []


def _asked(body: WakeManyBody) -> str:
    if body.ids is not None:
        return "ids " + ", ".join(body.ids[:5]) + ("..." if len(body.ids) > 5 else "")
    if body.labels is not None:
        return "labels " + ", ".join(f"{k}={v}" for k, v in body.labels.items())
    return f"agent {body.agent}"


class AuditList(BaseModel):
    """Audit records, newest first (at most ``limit``), of the newest
    ``kept`` this gateway holds."""

    records: list[dict[str, Any]]
    kept: int


@router.get(
    "/v1/audit",
    response_model=AuditList,
    operation_id="listAudit",
    responses=error_responses("invalid_query"),
)
async def list_audit(
    gateway: GatewayDep,
    schedule: Annotated[
        str | None, Query(max_length=64, description="Only this schedule's.")
    ] = None,
    action: Annotated[str | None, Query(max_length=20, description="Only this action.")] = None,
    since: Annotated[
        str | None, Query(max_length=40, description="Only those at this instant or after.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> AuditList:
    """The operators' actions on schedules (the `audit` topic, docs/schedules.md,
    "audit"), newest first: create, update, pause, resume, delete (a one-shot's
    removal `by: one-shot`), wake, run and abort, each with who did it and
    when. The gateway holds the newest 10,000; the topic has them all
    (`lemongraph schedule audit`). An `action` that is none of these, or a
    `since` that is not an instant, answers 422 `invalid_query`."""
    if action is not None and action not in AUDIT_ACTIONS:
        raise ApiError(
            422,
            "invalid_query",
            f"action: {action!r} is not an audit action ({', '.join(AUDIT_ACTIONS)})",
        )
    model = schedule_model(gateway)
    records = model.audit_records(limit, schedule, action, since_of(since))
    return AuditList(records=records, kept=len(model.audit))
