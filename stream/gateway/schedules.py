"""Schedules in the gateway (docs/api.md, "Schedules"): the read model fed by
the compacted ``schedules`` topic and by ``schedule-runs``, and the routes
``/v1/schedules...``.

**The read model** (:class:`ScheduleModel`) follows both topics from the
beginning with a consumer of its own (no group), beside the jobs' read model. A
definition this gateway wrote is applied at once, from the broker's
acknowledgement (a client reads its own write); the same record read back later
changes nothing, and a record older than what is held (by offset) is ignored.

**What it keeps** (docs/api.md, "A schedule's runs"): every
definition up to ``schedules_kept`` (past it, further ids read from the topic
are counted in ``untracked`` and not served, and a create answers 503
``schedules_full``); per schedule its newest ``runs_kept`` runs (the records of
one ``run_id`` folded into one run); and the runs of all schedules together
within ``runs_bytes`` (as JSON): past it, the oldest run of the schedule whose
runs changed least recently goes. Everything dropped stays on the topics
(``lemongraph schedule runs`` reads them all).

**Who may write**: reading takes any valid token; creating, changing, deleting
and waking a schedule take a token whose source is ``world`` (an operator's or
the world's systems'): a ``tool`` or ``agent`` token is refused 403
``source_not_allowed``, so that no agent can schedule work for itself. Every
write also puts an ``audit`` record whose ``by`` is the token's name.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, get_args

import orjson
from aiokafka import AIOKafkaConsumer
from fastapi import Body, FastAPI, Header, Query, Request
from pydantic import BaseModel, Field, StrictBool, StrictStr, ValidationError

from stream.gateway import schedule_ops as ops
from stream.gateway.capabilities import require
from stream.gateway.errors import ApiError, error_responses
from stream.gateway.guard import principal_of
from stream.gateway.models import _Body
from stream.gateway.readmodel import assign_from_start
from stream.gateway.tokens import Principal
from stream.runtime.kafka import KafkaSecurity, caught_up, client_kwargs
from stream.runtime.partitions import home_partition
from topics import ScheduleRecord, ScheduleRunRecord, Topics

if TYPE_CHECKING:
    from stream.gateway.api import Gateway

__all__ = ["ScheduleModel", "install_schedules"]

log = logging.getLogger("lemongraph.gateway")

#: Definitions held in all (docs/operations.md, "The gateway's memory").
SCHEDULES_KEPT = 100_000
#: Runs held per schedule (the newest), and the bytes of all runs held.
RUNS_KEPT = 200
RUNS_BYTES = 32 << 20
#: Wake requests this gateway remembers per schedule (a retried request id is
#: answered ``duplicate`` without a second write; the worker de-duplicates too).
WAKES_KEPT = 64
#: Next slots in a schedule's view, and in a row of the list.
VIEW_SLOTS = 5
ROW_SLOTS = 3
#: Run statuses that mean "still going".
ACTIVE = ("pending", "running")
#: Every run status (``?status=`` of the runs takes one of them).
RUN_STATUSES: tuple[str, ...] = get_args(ScheduleRunRecord.model_fields["status"].annotation)


@dataclass
class ScheduleEntry:
    """A definition as the ``schedules`` topic (or this gateway's write) holds it."""

    id: str
    spec: dict[str, Any]
    updated_at: str
    by: str
    offset: int = -1  # on the schedule's partition; -1: not known


@dataclass(frozen=True)
class WakeWrite:
    request_id: str
    run_id: str
    partition: int
    offset: int


class ScheduleModel:
    """Definitions by id (listed in id order) and their newest runs."""

    def __init__(
        self,
        topics: Topics,
        *,
        schedules_kept: int = SCHEDULES_KEPT,
        runs_kept: int = RUNS_KEPT,
        runs_bytes: int = RUNS_BYTES,
    ) -> None:
        self.topics = topics
        self.schedules_kept = schedules_kept
        self.runs_kept = runs_kept
        self.runs_bytes = runs_bytes
        self.schedules: dict[str, ScheduleEntry] = {}
        self.listed: list[str] = []  # ids, sorted
        #: The same ids by whether the schedule is enabled (True) or paused.
        self.listed_by: dict[bool, list[str]] = {True: [], False: []}
        #: The offset of the newest record read or written per id (a deleted
        #: id's too, so that an older record read late does not bring it back).
        self._offsets: OrderedDict[str, int] = OrderedDict()
        #: Runs per schedule by run id, in the order first seen; each with its
        #: ``seq`` (a count per schedule, the page cursor) and its size.
        self.runs: dict[str, OrderedDict[str, dict[str, Any]]] = {}
        self._seq: dict[str, int] = {}
        self._sizes: dict[str, dict[str, int]] = {}
        self._lru: OrderedDict[str, None] = OrderedDict()  # schedules with runs, stalest first
        self.runs_held = 0
        self.wakes: dict[str, OrderedDict[str, WakeWrite]] = {}
        self.untracked = 0  # definitions past schedules_kept, not held
        self.dropped_runs = 0  # runs dropped for the bounds
        self.skipped = 0  # records that did not decode
        self.caught_up = False
        self.following = False
        #: The ``schedules`` topic's partition count, once known (see :meth:`apply`).
        self.partitions = 0

    # -- definitions ----------------------------------------------------------------

    def get(self, schedule_id: str) -> ScheduleEntry | None:
        return self.schedules.get(schedule_id)

    def full(self) -> bool:
        return len(self.schedules) >= self.schedules_kept

    def _newer(self, schedule_id: str, offset: int) -> bool:
        """Is a record at ``offset`` newer than what is held for the id?"""
        if offset < 0:
            return True
        known = self._offsets.get(schedule_id, -1)
        if offset < known:
            return False
        self._offsets[schedule_id] = offset
        self._offsets.move_to_end(schedule_id)
        while len(self._offsets) > 2 * self.schedules_kept:
            old, _ = self._offsets.popitem(last=False)
            if old in self.schedules:  # still defined: keep its offset
                self._offsets[old] = self.schedules[old].offset
        return True

    def define(self, entry: ScheduleEntry) -> None:
        """A definition read from the topic, or written by this gateway."""
        if not self._newer(entry.id, entry.offset):
            return
        earlier = self.schedules.get(entry.id)
        if earlier is None:
            if self.full():
                self.untracked += 1
                return
            bisect.insort(self.listed, entry.id)
        else:
            _unsort(self.listed_by[_enabled(earlier.spec)], entry.id)
        bisect.insort(self.listed_by[_enabled(entry.spec)], entry.id)
        self.schedules[entry.id] = entry

    def remove(self, schedule_id: str, offset: int = -1) -> None:
        """A tombstone read from the topic, or written by this gateway: the
        definition and its runs go."""
        if not self._newer(schedule_id, offset):
            return
        earlier = self.schedules.pop(schedule_id, None)
        if earlier is not None:
            _unsort(self.listed, schedule_id)
            _unsort(self.listed_by[_enabled(earlier.spec)], schedule_id)
        self.wakes.pop(schedule_id, None)
        for _run in list(self.runs.get(schedule_id, ())):
            self._drop_oldest(schedule_id)
        self.runs.pop(schedule_id, None)
        self._sizes.pop(schedule_id, None)
        self._seq.pop(schedule_id, None)
        self._lru.pop(schedule_id, None)

    # -- runs -------------------------------------------------------------------------

    def run(self, record: dict[str, Any]) -> None:
        """A ``schedule.run`` record: a new run, or a later state of one held."""
        sid = str(record["schedule_id"])
        rid = str(record["run_id"])
        held = self.runs.setdefault(sid, OrderedDict())
        sizes = self._sizes.setdefault(sid, {})
        earlier = held.get(rid)
        if earlier is None:
            while len(held) >= self.runs_kept and self._drop_oldest(sid):
                pass
            held = self.runs.setdefault(sid, held)  # emptied: dropped from the maps
            sizes = self._sizes.setdefault(sid, sizes)
            seq = self._seq.get(sid, 0) + 1
            self._seq[sid] = seq
            folded = {**ops.fold_run(None, record), "seq": seq}
        else:
            folded = {**ops.fold_run(earlier, record), "seq": earlier["seq"]}
            self.runs_held -= sizes.get(rid, 0)
        size = len(orjson.dumps(folded))
        held[rid] = folded
        sizes[rid] = size
        self.runs_held += size
        self._lru[sid] = None
        self._lru.move_to_end(sid)
        while self.runs_held > self.runs_bytes and self._lru:
            stalest = next(iter(self._lru))
            if not self._drop_oldest(stalest):
                self._lru.pop(stalest, None)

    def _drop_oldest(self, sid: str) -> bool:
        held = self.runs.get(sid)
        if not held:
            return False
        rid, _ = held.popitem(last=False)
        self.runs_held -= self._sizes.get(sid, {}).pop(rid, 0)
        self.dropped_runs += 1
        if not held:
            # Nothing held of it: its entries go too, or a stream of run records
            # of ids never defined (or deleted) would grow these maps without
            # bound; a defined schedule keeps its counter (the page cursor).
            self._lru.pop(sid, None)
            self.runs.pop(sid, None)
            self._sizes.pop(sid, None)
            if sid not in self.schedules:
                self._seq.pop(sid, None)
        return True

    def newest_runs(
        self, sid: str, limit: int, before: int | None = None, status: str | None = None
    ) -> tuple[list[dict[str, Any]], int | None]:
        """Runs newest first (by first sight), those with ``seq < before``; and
        the cursor of the next page (None: no more)."""
        out: list[dict[str, Any]] = []
        for run in reversed(self.runs.get(sid, {}).values()):
            if before is not None and run["seq"] >= before:
                continue
            if status is not None and run.get("status") != status:
                continue
            if len(out) == limit:
                return out, int(out[-1]["seq"])
            out.append(run)
        return out, None

    def last_run(self, sid: str) -> dict[str, Any] | None:
        held = self.runs.get(sid)
        return next(reversed(held.values())) if held else None

    def active_runs(self, sid: str) -> list[dict[str, Any]]:
        return [r for r in self.runs.get(sid, {}).values() if r.get("status") in ACTIVE]

    # -- wakes --------------------------------------------------------------------------

    def remember_wake(self, sid: str, write: WakeWrite) -> None:
        held = self.wakes.setdefault(sid, OrderedDict())
        held[write.request_id] = write
        while len(held) > WAKES_KEPT:
            held.popitem(last=False)

    # -- following the topics -------------------------------------------------------------

    def apply(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        offset: int,
        partition: int | None = None,
    ) -> None:
        """One record of ``schedules`` or ``schedule-runs``; one that does not
        decode is counted and skipped, and so is a definition off its home
        partition (when ``partition`` and :attr:`partitions` are known): the
        worker dead-letters it (docs/kafka.md, "schedules"), so it is no schedule."""
        try:
            if topic == self.topics.schedules:
                if key is None:
                    raise ValueError("a schedule record without a key")
                if (
                    partition is not None
                    and self.partitions
                    and home_partition(key, self.partitions) != partition
                ):
                    raise ValueError(f"not on its home partition (on {partition})")
                sid = key.decode()
                if value is None:
                    self.remove(sid, offset)
                    return
                record = ScheduleRecord.model_validate_json(value)
                spec = {**record.spec, "id": sid}
                self.define(ScheduleEntry(sid, spec, record.updated_at, record.by, offset))
            elif topic == self.topics.schedule_runs and value is not None:
                data = orjson.loads(value)
                if isinstance(data, dict) and data.get("type") == "schedule.run":
                    self.run(ScheduleRunRecord.model_validate(data).dump())
        except (ValidationError, ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            self.skipped += 1
            log.debug("schedules read model: skipped a record of %s: %s", topic, exc)

    async def follow(
        self,
        bootstrap: str,
        security: KafkaSecurity,
        stopping: asyncio.Event,
        say: Callable[[str], None] = log.info,
    ) -> None:
        """Read both topics from the beginning and keep following until
        ``stopping`` is set."""
        consumer = AIOKafkaConsumer(
            **client_kwargs(bootstrap, security),
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            names = [self.topics.schedules, self.topics.schedule_runs]
            tps = await assign_from_start(consumer, names, stopping)
            if not tps:
                return
            self.partitions = sum(1 for tp in tps if tp.topic == self.topics.schedules)
            self.following = True
            while not stopping.is_set():
                batches = await consumer.getmany(timeout_ms=200, max_records=2000)
                for tp, records in batches.items():
                    for r in records:
                        self.apply(tp.topic, r.key, r.value, r.offset, tp.partition)
                now = await caught_up(consumer, tps)
                if now and not self.caught_up:
                    say(f"gateway: schedules caught up ({len(self.schedules)} schedules)")
                self.caught_up = now
        finally:
            self.following = False
            await consumer.stop()


# -- bodies --------------------------------------------------------------------------------


class SlotView(BaseModel):
    """A slot: its UTC instant, and its wall time in the schedule's timezone."""

    utc: str
    local: str
    abbreviation: str
    timezone: str


class ScheduleView(BaseModel):
    """A schedule: its definition (as validated: defaults filled in, the
    schedule's cron), whether it runs, its next slots, and its runs as known
    from ``schedule-runs``."""

    id: str
    name: str
    enabled: bool
    schedule: str  # as written (a shorthand, or cron)
    cron: str  # the same as 5-field cron
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


def _enabled(spec: dict[str, Any]) -> bool:
    return spec.get("enabled", True) is not False


def _unsort(ids: list[str], sid: str) -> None:
    """Remove ``sid`` from the sorted ``ids``."""
    at = bisect.bisect_left(ids, sid)
    if at < len(ids) and ids[at] == sid:
        del ids[at]


# -- routes --------------------------------------------------------------------------------


def install_schedules(
    app: FastAPI, gateway: Gateway, model: ScheduleModel, secured: list[Any]
) -> None:
    """Add the ``/v1/schedules`` routes to ``app`` (``model``: the gateway's)."""
    topics = model.topics

    def writer(request: Request) -> Principal:
        principal = principal_of(request.scope)
        require(principal, "write_schedules")
        if not model.caught_up:
            raise ApiError(
                503, "schedules_loading",
                "the gateway has not read the schedules topic up to its end yet: retry shortly",
                headers={"Retry-After": "1"},
            )  # fmt: skip
        return principal

    def found(sid: str) -> ScheduleEntry:
        entry = model.get(sid)
        if entry is None:
            raise ApiError(404, "schedule_not_found", f"no schedule {sid!r}")
        return entry

    def view(entry: ScheduleEntry, slots: int = VIEW_SLOTS) -> ScheduleView:
        spec = entry.spec
        return ScheduleView(
            id=entry.id,
            name=str(spec.get("name") or entry.id),
            enabled=_enabled(spec),
            schedule=str(spec.get("schedule", "")),
            cron=ops.cron_of(spec),
            catchup_window_effective=ops.catchup_window(spec),
            timezone=str(spec.get("timezone") or "UTC"),
            spec=spec,
            updated_at=entry.updated_at,
            by=entry.by,
            next=[SlotView(**s.json()) for s in ops.spec_slots(spec, datetime.now(UTC), slots)],
            last_run=model.last_run(entry.id),
            active_runs=model.active_runs(entry.id),
            runs_kept=len(model.runs.get(entry.id, ())),
        )

    def valid(data: object) -> dict[str, Any]:
        try:
            return ops.normalise(data, "<request body>")
        except ops.Invalid as exc:
            raise ApiError(
                422, "invalid_schedule", exc.message,
                extra={"field": exc.field, "position": exc.position},
            ) from None  # fmt: skip

    def warnings(spec: dict[str, Any]) -> list[str]:
        """The playbooks registered are known once the jobs' read model has
        read the ``playbooks`` topic to its end."""
        jobs = gateway.model
        return ops.playbook_warnings(spec, jobs.playbooks if jobs.caught_up else None)

    async def put(write: ops.Write) -> Any:
        return await gateway.send(write.full_topic(topics), write.key, write.value)

    async def publish(spec: dict[str, Any], by: str, action: str, detail: dict[str, Any]) -> None:
        at = ops.now_iso()
        meta = await put(ops.definition(spec, by, at))
        model.define(ScheduleEntry(str(spec["id"]), spec, at, by, meta.offset))
        await put(ops.audit(action, str(spec["id"]), by, detail, at))
        gateway.accepted_writes += 1

    @app.post(
        "/v1/schedules",
        status_code=201,
        response_model=ScheduleView,
        dependencies=secured,
        responses=error_responses(400, 403, 409, 413, 422, 503),
    )
    async def create_schedule(
        request: Request,
        body: Annotated[dict[str, Any], Body(openapi_examples={"a": {"value": _BODY_EXAMPLE}})],
    ) -> ScheduleView:
        """Create a schedule (docs/schedules.md): validated, then its definition
        on `schedules` and an `audit` record `create`; 201 with the definition
        as normalised and its next 5 slots. An id in use answers 409
        `schedule_exists`; an invalid definition 422 `invalid_schedule` with
        `field` and, in a cron expression, `position`. A `start_job` naming a
        playbook not registered is accepted with `warnings`."""
        principal = writer(request)
        spec = valid(body)
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
            await publish(spec, principal.name, "create", {"spec": spec})
        answer = view(found(sid))
        answer.warnings = warnings(spec)
        return answer

    @app.get(
        "/v1/schedules",
        response_model=ScheduleList,
        dependencies=secured,
        responses=error_responses(422),
    )
    async def list_schedules(
        enabled: Annotated[bool | None, Query(description="Only enabled (or paused) ones.")] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
        cursor: Annotated[str | None, Query(max_length=200, description="A page's `next`.")] = None,
    ) -> ScheduleList:
        """Schedules by id, a page at a time, each with its next 3 slots."""
        ids = model.listed if enabled is None else model.listed_by[enabled]
        first = bisect.bisect_right(ids, cursor) if cursor is not None else 0
        chosen = ids[first : first + limit]
        more = first + limit < len(ids)
        rows = [view(model.schedules[i], ROW_SLOTS) for i in chosen]
        return ScheduleList(
            schedules=rows, total=len(ids), next=chosen[-1] if more and chosen else None
        )

    @app.get(
        "/v1/schedules/{schedule_id}",
        response_model=ScheduleView,
        dependencies=secured,
        responses=error_responses(404),
    )
    async def get_schedule(schedule_id: str) -> ScheduleView:
        """A schedule: its definition, next 5 slots (in its timezone and UTC; none
        while paused), its last run and its active runs."""
        return view(found(schedule_id))

    @app.patch(
        "/v1/schedules/{schedule_id}",
        response_model=ScheduleView,
        dependencies=secured,
        responses=error_responses(400, 403, 404, 413, 422, 503),
    )
    async def update_schedule(
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
        principal = writer(request)
        async with gateway.lock("\x00schedule/" + schedule_id):
            entry = found(schedule_id)
            try:
                wanted = ops.merged(entry.spec, body)
            except ops.Invalid as exc:
                raise ApiError(
                    422,
                    "invalid_schedule",
                    exc.message,
                    extra={"field": exc.field, "position": None},
                ) from None
            spec = valid(wanted)
            if spec != entry.spec:
                action, detail = ops.change_action(entry.spec, spec)
                await publish(spec, principal.name, action, detail)
        answer = view(found(schedule_id))
        answer.warnings = warnings(spec)
        return answer

    @app.delete(
        "/v1/schedules/{schedule_id}",
        response_model=Deleted,
        dependencies=secured,
        responses=error_responses(403, 404, 503),
    )
    async def delete_schedule(request: Request, schedule_id: str) -> Deleted:
        """Delete a schedule: a tombstone on `schedules` and an `audit` record
        `delete`. Its runs stay on `schedule-runs`; a run still active is
        recorded `aborted` by the worker."""
        principal = writer(request)
        async with gateway.lock("\x00schedule/" + schedule_id):
            found(schedule_id)
            meta = await put(ops.tombstone(schedule_id))
            model.remove(schedule_id, meta.offset)
            await put(ops.audit("delete", schedule_id, principal.name))
            gateway.accepted_writes += 1
        return Deleted(id=schedule_id, partition=meta.partition, offset=meta.offset)

    @app.post(
        "/v1/schedules/{schedule_id}/wake",
        status_code=202,
        response_model=WakeAccepted,
        dependencies=secured,
        responses=error_responses(400, 403, 404, 413, 422, 503),
    )
    async def wake_schedule(
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
    ) -> WakeAccepted:
        """Fire the schedule now: a `schedule.wake` on the inbox and an `audit`
        record `wake`; 202. The run carries `context`; with `skip_if_running` it
        is recorded `skipped` while a run is active (and a paused schedule's
        wake is recorded `skipped` too). The same `request_id` (or
        `Idempotency-Key`) again is one wake: `duplicate: true`."""
        principal = writer(request)
        given = body or WakeBody()
        if given.request_id and idempotency_key and given.request_id != idempotency_key:
            raise ApiError(422, "invalid_body", "request_id and the Idempotency-Key header differ")
        request_id = given.request_id or idempotency_key or f"wake-{uuid.uuid4().hex}"
        async with gateway.lock("\x00schedule/" + schedule_id):
            found(schedule_id)
            held = model.wakes.get(schedule_id)
            earlier = held.get(request_id) if held is not None else None
            if earlier is not None:
                return WakeAccepted(
                    schedule_id=schedule_id, request_id=request_id, run_id=earlier.run_id,
                    partition=earlier.partition, offset=earlier.offset, duplicate=True,
                )  # fmt: skip
            run_id = ops.wake_run_id(schedule_id, request_id)
            meta = await put(
                ops.wake(schedule_id, request_id, given.context, given.skip_if_running)
            )
            detail = {
                "request_id": request_id,
                "run_id": run_id,
                "skip_if_running": given.skip_if_running,
                "context": given.context,
            }
            await put(ops.audit("wake", schedule_id, principal.name, detail))
            model.remember_wake(
                schedule_id, WakeWrite(request_id, run_id, meta.partition, meta.offset)
            )
            gateway.accepted_writes += 1
        return WakeAccepted(
            schedule_id=schedule_id, request_id=request_id, run_id=run_id,
            partition=meta.partition, offset=meta.offset,
        )  # fmt: skip

    @app.get(
        "/v1/schedules/{schedule_id}/runs",
        response_model=RunList,
        dependencies=secured,
        responses=error_responses(404, 422),
    )
    async def schedule_runs(
        schedule_id: str,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
        cursor: Annotated[int | None, Query(ge=0, description="A page's `next`.")] = None,
        status: Annotated[str | None, Query(max_length=20, description="Only this status.")] = None,
    ) -> RunList:
        """The schedule's runs, newest first (pending, running, completed,
        failed, timeout, aborted, suppressed, missed, skipped), each as its
        records on `schedule-runs` say; at most the newest 200 are kept. A
        `status` that is none of these answers 422 `invalid_query`."""
        if status is not None and status not in RUN_STATUSES:
            raise ApiError(
                422, "invalid_query",
                f"status: {status!r} is not a run status ({', '.join(RUN_STATUSES)})",
            )  # fmt: skip
        found(schedule_id)
        runs, more = model.newest_runs(schedule_id, limit, cursor, status)
        return RunList(
            schedule_id=schedule_id,
            runs=runs,
            kept=len(model.runs.get(schedule_id, ())),
            next=more,
        )
