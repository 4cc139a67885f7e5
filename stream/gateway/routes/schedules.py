"""The schedules' routes (docs/api.md, "Schedules"): ``/v1/schedules...``,
served from the schedules' read model (stream/gateway/readmodels/schedules.py).

**Who may write**: reading takes any valid token; creating, changing, deleting
and waking a schedule take a token whose source is ``world`` (an operator's or
the world's systems'): a ``tool`` or ``agent`` token is refused 403
``source_not_allowed``, so that no agent can schedule work for itself. Every
write also puts an ``audit`` record whose ``by`` is the token's name.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Query, Request
from pydantic import BaseModel, Field, StrictBool, StrictStr

import stream.gateway.schedule_ops as ops
from compiler import ORIGIN_HEADER, OriginError, parse_origin
from stream.gateway.errors import BODY_CODES, ApiError, error_responses
from stream.gateway.guard import principal_of
from stream.gateway.models import _Body
from stream.gateway.readmodels.schedules import (
    RUN_STATUSES,
    ScheduleEntry,
    ScheduleModel,
    WakeWrite,
    is_enabled,
)
from stream.gateway.routes.capabilities import require
from stream.gateway.routes.shared import SECURED, Gateway, GatewayDep, page
from stream.gateway.tokens import Principal

__all__ = [
    "create_schedule",
    "delete_schedule",
    "get_schedule",
    "list_schedules",
    "router",
    "schedule_runs",
    "since_of",
    "update_schedule",
    "wake_one",
    "wake_schedule",
]

#: Next slots in a schedule's view, and in a row of the list.
VIEW_SLOTS = 5
ROW_SLOTS = 3

router = APIRouter(dependencies=SECURED, tags=["schedules"])
#: What every schedule write may answer besides its own refusals: a token that
#: may not write (403), the topic not read to its end yet or the broker not
#: taking the write (503).
_WRITE = ("source_not_allowed", "schedules_loading", "broker_unavailable")


# -- bodies --------------------------------------------------------------------------------


class SlotView(BaseModel):
    """A slot: its UTC instant, and its wall time in the schedule's timezone."""

    utc: str
    local: str
    abbreviation: str
    timezone: str


class HealthRun(BaseModel):
    """The newest run that ran: its id, status, trigger, and when it took that status."""

    run_id: str
    status: str
    triggered_by: str
    at: str | None = None


class HealthAlert(BaseModel):
    """The newest heartbeat alert (docs/schedules.md, "Heartbeats")."""

    run_id: str
    severity: str
    at: str | None = None


class ScheduleHealthView(BaseModel):
    """A schedule's health (docs/schedules.md, "Health"), counted over the
    records ``schedule-runs`` still holds: its last run and next slot, the
    retry runs, the suppressed heartbeats, the missed slots, the skipped ones,
    the failures (``failed``, ``timeout``, ``refused``) in all and in a row
    (since the newest ``completed`` or ``suppressed``), the runs the worker's
    sweep ended ``timeout`` (no report in time: ``stale_recoveries``), and
    the heartbeat alerts."""

    last_run: HealthRun | None = None
    next_run: str | None = None
    retries: int = 0
    suppressed: int = 0
    missed: int = 0
    skipped: int = 0
    failed: int = 0
    failed_in_a_row: int = 0
    stale_recoveries: int = 0
    alerts: int = 0
    last_alert: HealthAlert | None = None


class ScheduleView(BaseModel):
    """A schedule: its definition (as validated: defaults filled in, the
    schedule's cron), whether it runs, its next slots, and its runs as known
    from ``schedule-runs``."""

    id: str
    name: str
    enabled: bool
    schedule: str  # as written (a shorthand, or cron); "" for a one-shot
    cron: str  # the same as 5-field cron
    #: A one-shot's instant (docs/schedules.md, "One-shot schedules"), else None.
    at: str | None = None
    timezone: str
    #: The catch-up window in effect (``spec`` leaves the default out):
    #: ``2h`` as set, or ``one period (30m, the default)``.
    catchup_window_effective: str
    spec: dict[str, Any]
    updated_at: str
    by: str
    next: list[SlotView]
    last_run: dict[str, Any] | None = None
    active_runs: list[dict[str, Any]] = Field(default_factory=list)
    runs_kept: int = 0
    health: ScheduleHealthView = Field(default_factory=ScheduleHealthView)
    #: A create's or change's warnings: a ``start_job`` naming a playbook not
    #: registered (``action.playbook_key: no playbook ... (did you mean ...)``).
    warnings: list[str] = Field(default_factory=list)


class ScheduleList(BaseModel):
    schedules: list[ScheduleView]
    total: int
    next: str | None = None


class RunList(BaseModel):
    """A schedule's runs, newest first; ``next`` is the cursor of the next page."""

    schedule_id: str
    runs: list[dict[str, Any]]
    kept: int
    next: int | None = None


class Deleted(BaseModel):
    id: str
    deleted: bool = True
    partition: int
    offset: int


class WakeBody(_Body):
    """Fire the schedule now. ``request_id`` (or the ``Idempotency-Key`` header)
    names the request: the same one again is one wake."""

    context: dict[str, Any] | None = None
    skip_if_running: StrictBool = False
    request_id: StrictStr | None = Field(
        None, min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:@-]+$"
    )


class WakeAccepted(BaseModel):
    """The wake command on the inbox (the broker acknowledged it). ``run_id`` is
    the run it starts (or the run recorded ``skipped``)."""

    accepted: bool = True
    schedule_id: str
    request_id: str
    run_id: str
    partition: int
    offset: int
    duplicate: bool = False


_BODY_EXAMPLE = {
    "id": "lead-review",
    "name": "Lead review",
    "schedule": "weekdays at 09:30",
    "timezone": "America/New_York",
    "action": {"type": "start_job", "playbook_key": "lead-qualification"},
}
_PATCH_EXAMPLES = {"pause": {"value": {"enabled": False}}}
_REQUEST_ID = r"^[A-Za-z0-9._:@-]{1,200}$"


# -- what the routes share -----------------------------------------------------------------


def schedule_model(gateway: Gateway) -> ScheduleModel:
    model = gateway.schedules
    assert model is not None  # build_api made it
    return model


def writer_of(gateway: Gateway, request: Request) -> Principal:
    principal = principal_of(request.scope)
    require(principal, "write_schedules")
    if not schedule_model(gateway).caught_up:
        raise ApiError(
            503, "schedules_loading",
            "the gateway has not read the schedules topic up to its end yet: retry shortly",
            headers={"Retry-After": "1"},
        )  # fmt: skip
    return principal


def found(model: ScheduleModel, sid: str) -> ScheduleEntry:
    entry = model.get(sid)
    if entry is None:
        raise ApiError(404, "schedule_not_found", f"no schedule {sid!r}")
    return entry


def _view(model: ScheduleModel, entry: ScheduleEntry, slots: int = VIEW_SLOTS) -> ScheduleView:
    spec = entry.spec
    upcoming = [SlotView(**s.json()) for s in ops.spec_slots(spec, datetime.now(UTC), slots)]
    health = model.health_of(entry.id).to_json(upcoming[0].utc if upcoming else None)
    return ScheduleView(
        id=entry.id,
        name=str(spec.get("name") or entry.id),
        enabled=is_enabled(spec),
        schedule=str(spec.get("schedule", "")),
        at=spec.get("at"),
        cron=ops.cron_of(spec),
        catchup_window_effective=ops.catchup_window(spec),
        timezone=str(spec.get("timezone") or "UTC"),
        spec=spec,
        updated_at=entry.updated_at,
        by=entry.by,
        next=upcoming,
        last_run=model.last_run(entry.id),
        active_runs=model.active_runs(entry.id),
        runs_kept=len(model.runs.get(entry.id, ())),
        health=ScheduleHealthView.model_validate(health),
    )


def _valid(data: object, before: dict[str, Any] | None = None) -> dict[str, Any]:
    """The definition normalised, or 422; a one-shot's instant (new, or
    moved from ``before``'s) must be to come."""
    try:
        spec = ops.normalise(data, "<request body>")
        if before is None or spec.get("at") != before.get("at"):
            ops.refuse_past(spec, datetime.now(UTC))
        return spec
    except ops.Invalid as exc:
        raise ApiError(
            422, "invalid_schedule", exc.message,
            extra={"field": exc.field, "position": exc.position},
        ) from None  # fmt: skip


def _warnings(gateway: Gateway, spec: dict[str, Any]) -> list[str]:
    """The playbooks registered are known once the jobs' read model has
    read the ``playbooks`` topic to its end."""
    jobs = gateway.model
    return ops.playbook_warnings(spec, jobs.playbooks if jobs.caught_up else None)


async def put(gateway: Gateway, write: ops.Write) -> Any:
    return await gateway.send(
        write.full_topic(schedule_model(gateway).topics), write.key, write.value
    )


async def _publish(
    gateway: Gateway, spec: dict[str, Any], by: str, action: str, detail: dict[str, Any]
) -> None:
    at = ops.now_iso()
    meta = await put(gateway, ops.definition(spec, by, at))
    schedule_model(gateway).define(ScheduleEntry(str(spec["id"]), spec, at, by, meta.offset))
    await put(gateway, ops.audit(action, str(spec["id"]), by, detail, at))
    gateway.accepted_writes += 1


# -- the routes ----------------------------------------------------------------------------


@router.post(
    "/v1/schedules",
    status_code=201,
    response_model=ScheduleView,
    operation_id="createSchedule",
    responses=error_responses(
        *BODY_CODES, *_WRITE, "invalid_schedule", "schedule_exists", "schedules_full"
    ),
)
async def create_schedule(
    gateway: GatewayDep,
    request: Request,
    body: Annotated[dict[str, Any], Body(openapi_examples={"a": {"value": _BODY_EXAMPLE}})],
) -> ScheduleView:
    """Create a schedule (docs/schedules.md): validated, then its definition
    on `schedules` and an `audit` record `create`; 201 with the definition
    as normalised and its next 5 slots. An id in use answers 409
    `schedule_exists`; an invalid definition 422 `invalid_schedule` with
    `field` and, in a cron expression, `position`. A `start_job` naming a
    playbook not registered is accepted with `warnings`."""
    model = schedule_model(gateway)
    principal = writer_of(gateway, request)
    spec = _valid(body)
    sid = str(spec["id"])
    async with gateway.lock("\x00schedule/" + sid):
        if model.get(sid) is not None:
            raise ApiError(
                409, "schedule_exists",
                f"schedule {sid!r} exists already: change it with PATCH /v1/schedules/{sid}",
            )  # fmt: skip
        if model.full():
            raise ApiError(
                503, "schedules_full",
                f"this gateway holds {model.schedules_kept} schedules, its bound",
            )  # fmt: skip
        await _publish(gateway, spec, principal.name, "create", {"spec": spec})
    answer = _view(model, found(model, sid))
    answer.warnings = _warnings(gateway, spec)
    return answer


@router.get(
    "/v1/schedules",
    response_model=ScheduleList,
    operation_id="listSchedules",
    responses=error_responses("invalid_query"),
)
async def list_schedules(
    gateway: GatewayDep,
    enabled: Annotated[bool | None, Query(description="Only enabled (or paused) ones.")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=200, description="A page's `next`.")] = None,
) -> ScheduleList:
    """Schedules by id, a page at a time, each with its next 3 slots and its
    `health` (docs/schedules.md, "Health")."""
    model = schedule_model(gateway)
    ids = model.listed if enabled is None else model.listed_by[enabled]
    chosen, after = page(ids, cursor, limit)
    rows = [_view(model, model.schedules[i], ROW_SLOTS) for i in chosen]
    return ScheduleList(schedules=rows, total=len(ids), next=after)


@router.get(
    "/v1/schedules/{schedule_id}",
    response_model=ScheduleView,
    operation_id="getSchedule",
    responses=error_responses("schedule_not_found"),
)
async def get_schedule(gateway: GatewayDep, schedule_id: str) -> ScheduleView:
    """A schedule: its definition, next 5 slots (in its timezone and UTC; none
    while paused), its last run, its active runs and its `health`: last run,
    next run, retries, suppressed, missed, skipped, failed (in all and in a
    row), stale recoveries and heartbeat alerts (docs/schedules.md, "Health")."""
    model = schedule_model(gateway)
    return _view(model, found(model, schedule_id))


@router.patch(
    "/v1/schedules/{schedule_id}",
    response_model=ScheduleView,
    operation_id="updateSchedule",
    responses=error_responses(*BODY_CODES, *_WRITE, "invalid_schedule", "schedule_not_found"),
)
async def update_schedule(
    gateway: GatewayDep,
    request: Request,
    schedule_id: str,
    body: Annotated[
        dict[str, Any], Body(openapi_examples={"pause": {"value": {"enabled": False}}})
    ],
) -> ScheduleView:
    """Change some fields (a field given replaces the old one whole; `null`
    resets it to its default). `{"enabled": false}` pauses, `true` resumes:
    audited `pause` / `resume`; any other change `update`. The whole
    definition is validated again (422 as for a create); no change writes
    nothing."""
    model = schedule_model(gateway)
    principal = writer_of(gateway, request)
    async with gateway.lock("\x00schedule/" + schedule_id):
        entry = found(model, schedule_id)
        try:
            wanted = ops.merged(entry.spec, body)
        except ops.Invalid as exc:
            raise ApiError(
                422,
                "invalid_schedule",
                exc.message,
                extra={"field": exc.field, "position": None},
            ) from None
        spec = _valid(wanted, entry.spec)
        if spec != entry.spec:
            action, detail = ops.change_action(entry.spec, spec)
            await _publish(gateway, spec, principal.name, action, detail)
    answer = _view(model, found(model, schedule_id))
    answer.warnings = _warnings(gateway, spec)
    return answer


@router.delete(
    "/v1/schedules/{schedule_id}",
    response_model=Deleted,
    operation_id="deleteSchedule",
    responses=error_responses(*_WRITE, "schedule_not_found"),
)
async def delete_schedule(gateway: GatewayDep, request: Request, schedule_id: str) -> Deleted:
    """Delete a schedule: a tombstone on `schedules` and an `audit` record
    `delete`. Its runs stay on `schedule-runs`; a run still active is
    recorded `aborted` by the worker."""
    model = schedule_model(gateway)
    principal = writer_of(gateway, request)
    async with gateway.lock("\x00schedule/" + schedule_id):
        found(model, schedule_id)
        meta = await put(gateway, ops.tombstone(schedule_id))
        model.remove(schedule_id, meta.offset)
        await put(gateway, ops.audit("delete", schedule_id, principal.name))
        gateway.accepted_writes += 1
    return Deleted(id=schedule_id, partition=meta.partition, offset=meta.offset)


@router.post(
    "/v1/schedules/{schedule_id}/wake",
    status_code=202,
    response_model=WakeAccepted,
    operation_id="wakeSchedule",
    responses=error_responses(
        *BODY_CODES, *_WRITE, "invalid_query", "invalid_header", "schedule_not_found"
    ),
)
async def wake_schedule(
    gateway: GatewayDep,
    request: Request,
    schedule_id: str,
    body: WakeBody | None = None,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            pattern=_REQUEST_ID,
            description="Names the request, as `request_id` does.",
        ),
    ] = None,
    origin_header: Annotated[
        str | None,
        Header(
            alias=ORIGIN_HEADER,
            max_length=2200,
            description="The prompt runs the wake comes from, `<schedule id>/<run id>` "
            "comma-separated, oldest first: the agents service's executor sends it "
            'with every tool call of a prompt run (docs/schedules.md, "Wake loops").',
        ),
    ] = None,
) -> WakeAccepted:
    """Fire the schedule now: a `schedule.wake` on the inbox and an `audit`
    record `wake`; 202. The run carries `context`; with `skip_if_running` it
    is recorded `skipped` while a run is active (and a paused schedule's
    wake is recorded `skipped` too). The same `request_id` (or
    `Idempotency-Key`) again is one wake: `duplicate: true`."""
    principal = writer_of(gateway, request)
    given = body or WakeBody()
    request_id = request_id_of(given.request_id, idempotency_key, "wake")
    origin = _origin(origin_header)
    return await wake_one(
        gateway, principal, schedule_id, request_id, given.context, given.skip_if_running, origin
    )


def request_id_of(given: str | None, header: str | None, kind: str) -> str:
    """A write's request id: the body's, else the ``Idempotency-Key`` header's
    (422 when both differ), else a new one (``<kind>-<uuid>``)."""
    if given and header and given != header:
        raise ApiError(422, "invalid_body", "request_id and the Idempotency-Key header differ")
    return given or header or f"{kind}-{uuid.uuid4().hex}"


async def wake_one(
    gateway: Gateway,
    principal: Principal,
    schedule_id: str,
    request_id: str,
    context: dict[str, Any] | None,
    skip_if_running: bool = False,
    origin: tuple[str, ...] = (),
    control: str = "wake",
    run_id: str | None = None,
) -> WakeAccepted:
    """Put one ``schedule.wake`` on the inbox (``control``: ``wake``, ``run`` or
    ``abort`` of ``run_id``, docs/schedules.md) and its ``audit`` record
    (``wake``, ``run`` or ``abort``), once per request id: the same request
    again answers the first one's ``duplicate: true``. 404 for a schedule not
    defined."""
    model = schedule_model(gateway)
    remembered = request_id if control == "wake" else f"{control}:{request_id}"
    async with gateway.lock("\x00schedule/" + schedule_id):
        found(model, schedule_id)
        held = model.wakes.get(schedule_id)
        earlier = held.get(remembered) if held is not None else None
        if earlier is not None:
            return WakeAccepted(
                schedule_id=schedule_id, request_id=request_id, run_id=earlier.run_id,
                partition=earlier.partition, offset=earlier.offset, duplicate=True,
            )  # fmt: skip
        if control == "abort":
            assert run_id is not None
            target = run_id
        elif control == "run":
            target = ops.manual_run_id(schedule_id, request_id)
        else:
            target = ops.wake_run_id(schedule_id, request_id)
        write = ops.wake(schedule_id, request_id, context, skip_if_running, origin, control, run_id)
        meta = await put(gateway, write)
        detail: dict[str, Any] = {"request_id": request_id, "run_id": target}
        if control != "abort":
            detail.update(skip_if_running=skip_if_running, context=context)
        if origin:
            detail["origin"] = list(origin)
        await put(gateway, ops.audit(control, schedule_id, principal.name, detail))
        model.remember_wake(schedule_id, WakeWrite(remembered, target, meta.partition, meta.offset))
        gateway.accepted_writes += 1
    return WakeAccepted(
        schedule_id=schedule_id, request_id=request_id, run_id=target,
        partition=meta.partition, offset=meta.offset,
    )  # fmt: skip


def since_of(text: str | None) -> datetime | None:
    """``?since=``: an ISO 8601 instant with its offset; 422 ``invalid_query``
    otherwise."""
    if text is None:
        return None
    try:
        instant = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        instant = None
    if instant is None or instant.tzinfo is None:
        raise ApiError(
            422, "invalid_query", f"since: {text!r} is not an ISO 8601 instant with its offset"
        )
    return instant


def _origin(header: str | None) -> tuple[str, ...]:
    """A wake's origin from its header (docs/schedules.md, "Wake loops"): the
    worker refuses a wake whose origin names the schedule; 422 ``invalid_header``
    when it is malformed."""
    if not header:
        return ()
    try:
        return parse_origin(header)
    except OriginError as exc:
        raise ApiError(422, "invalid_header", str(exc)) from None


@router.get(
    "/v1/schedules/{schedule_id}/runs",
    response_model=RunList,
    operation_id="listScheduleRuns",
    responses=error_responses("schedule_not_found", "invalid_query"),
)
async def schedule_runs(
    gateway: GatewayDep,
    schedule_id: str,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[int | None, Query(ge=0, description="A page's `next`.")] = None,
    status: Annotated[str | None, Query(max_length=20, description="Only this status.")] = None,
    since: Annotated[
        str | None,
        Query(
            max_length=40, description="Only runs started (or slotted) at this instant or after."
        ),
    ] = None,
) -> RunList:
    """The schedule's runs, newest first (pending, running, completed,
    refused, failed, timeout, aborted, suppressed, missed, skipped), each as
    its records on `schedule-runs` say, and `refused` (with the core's reason
    as `error`) when the core refused the job.start or event a run sent (read
    from `decisions`); at most the newest 200 are kept. A
    `status` that is none of these, or a `since` (runs started, or slotted, at
    that instant or after) that is not an instant, answers 422 `invalid_query`."""
    model = schedule_model(gateway)
    if status is not None and status not in RUN_STATUSES:
        raise ApiError(
            422, "invalid_query",
            f"status: {status!r} is not a run status ({', '.join(RUN_STATUSES)})",
        )  # fmt: skip
    found(model, schedule_id)
    runs, more = model.newest_runs(schedule_id, limit, cursor, status, since_of(since))
    return RunList(
        schedule_id=schedule_id,
        runs=runs,
        kept=len(model.runs.get(schedule_id, ())),
        next=more,
    )
