"""Schedules in the gateway (docs/api.md, "Schedules"): the read model fed by
the compacted ``schedules`` topic, by ``schedule-runs`` and by ``audit`` (its
newest ``AUDIT_KEPT`` records, for ``GET /v1/audit``); the routes
``/v1/schedules...`` are in stream/gateway/routes/schedules.py.

**The read model** (:class:`ScheduleModel`) follows both topics from the
beginning with a consumer of its own (no group), beside the jobs' read model,
in the loop of stream/gateway/readmodels/follow.py (which notices a broker reset, as the
jobs' one does). A definition this gateway wrote is applied at once, from the
broker's acknowledgement (a client reads its own write); the same record read
back later changes nothing, and a record older than what is held (by offset) is
ignored.

**A run the core refused** (docs/schedules.md, "Run statuses"): the jobs' read
model hands this one every decision it reads (:meth:`ScheduleModel.decided`), and
a ``completed`` run whose ``job.start`` or event the core refused reads
``refused`` with the core's reason (stream/gateway/readmodels/run_verdicts.py), whichever
of the run and the decision is read first.

**What it keeps** (docs/api.md, "A schedule's runs"): every
definition up to ``schedules_kept`` (past it, further ids read from the topic
are counted in ``untracked`` and not served, and a create answers 503
``schedules_full``); per schedule its newest ``runs_kept`` runs (the records of
one ``run_id`` folded into one run); and the runs of all schedules together
within ``runs_bytes`` (as JSON): past it, the oldest run of the schedule whose
runs changed least recently goes. Everything dropped stays on the topics
(``lemongraph schedule runs`` reads them all).

**Health** (docs/schedules.md, "Health"): per schedule, the counters
``compiler.health_of_run`` folds from every run record read (and the alerts,
and the refusals read from ``decisions``), a few numbers each, kept while the
schedule is defined or has runs held: they count every record the topic still
holds, not only the runs held.
"""

from __future__ import annotations

import bisect
import logging
from collections import OrderedDict, deque
from dataclasses import dataclass
from datetime import datetime
from typing import Any, get_args

import orjson
from aiokafka.structs import TopicPartition
from pydantic import ValidationError

import stream.gateway.schedule_ops as ops
from compiler import ScheduleHealth, health_alert, health_of_run, health_refused
from stream.gateway.readmodels.follow import Followed
from stream.gateway.readmodels.run_verdicts import REFUSED, decision_mark, judge, run_marks
from stream.runtime.partitions import home_partition
from topics import (
    HEARTBEAT_ALERT,
    AuditRecord,
    HeartbeatAlert,
    ScheduleRecord,
    ScheduleRunRecord,
    Topics,
)

__all__ = ["ScheduleEntry", "ScheduleModel", "WakeWrite", "is_enabled"]

log = logging.getLogger("lemongraph.gateway")

#: Definitions held in all (docs/operations.md, "The gateway's memory").
SCHEDULES_KEPT = 100_000
#: Runs held per schedule (the newest), and the bytes of all runs held.
RUNS_KEPT = 200
RUNS_BYTES = 32 << 20
#: Wake requests this gateway remembers per schedule (a retried request id is
#: answered ``duplicate`` without a second write; the worker de-duplicates too).
WAKES_KEPT = 64
#: Audit records held, of all schedules (the newest): ``GET /v1/audit``.
AUDIT_KEPT = 10_000
#: Run statuses that mean "still going".
ACTIVE = ("pending", "running")
#: Every run status (``?status=`` of the runs takes one of them): those of
#: ``schedule-runs``, and ``refused``, read from ``decisions``
#: (stream/gateway/readmodels/run_verdicts.py).
RUN_STATUSES: tuple[str, ...] = (
    *get_args(ScheduleRunRecord.model_fields["status"].annotation),
    REFUSED,
)
#: What decisions said of the inputs runs may have sent, by mark (the newest):
#: a decision read before its run (the two topics are read by two consumers).
VERDICTS_KEPT = 20_000


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


class ScheduleModel(Followed):
    """Definitions by id (listed in id order) and their newest runs."""

    def __init__(
        self,
        topics: Topics,
        *,
        schedules_kept: int = SCHEDULES_KEPT,
        runs_kept: int = RUNS_KEPT,
        runs_bytes: int = RUNS_BYTES,
    ) -> None:
        super().__init__()
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
        #: Per schedule: its health (docs/schedules.md, "Health").
        self.health: dict[str, ScheduleHealth] = {}
        self.wakes: dict[str, OrderedDict[str, WakeWrite]] = {}
        #: The newest ``audit`` records, oldest first (docs/api.md, "The audit").
        self.audit: deque[dict[str, Any]] = deque(maxlen=AUDIT_KEPT)
        #: Decisions of inputs runs may have sent: mark → the core's reason when
        #: refused, None when taken (the first decision of a mark counts).
        self.verdicts: OrderedDict[str, str | None] = OrderedDict()
        #: Held ``completed`` runs with a job whose input's decision is not read
        #: yet: mark → (schedule id, run id).
        self._awaiting: dict[str, tuple[str, str]] = {}
        self.untracked = 0  # definitions past schedules_kept, not held
        self.dropped_runs = 0  # runs dropped for the bounds
        self.skipped = 0  # records that did not decode
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
            _unsort(self.listed_by[is_enabled(earlier.spec)], entry.id)
        bisect.insort(self.listed_by[is_enabled(entry.spec)], entry.id)
        self.schedules[entry.id] = entry

    def remove(self, schedule_id: str, offset: int = -1) -> None:
        """A tombstone read from the topic, or written by this gateway: the
        definition and its runs go."""
        if not self._newer(schedule_id, offset):
            return
        earlier = self.schedules.pop(schedule_id, None)
        if earlier is not None:
            _unsort(self.listed, schedule_id)
            _unsort(self.listed_by[is_enabled(earlier.spec)], schedule_id)
        self.wakes.pop(schedule_id, None)
        for _run in list(self.runs.get(schedule_id, ())):
            self._drop_oldest(schedule_id)
        self.runs.pop(schedule_id, None)
        self._sizes.pop(schedule_id, None)
        self._seq.pop(schedule_id, None)
        self._lru.pop(schedule_id, None)
        self.health.pop(schedule_id, None)

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
            self._forget_marks(earlier)
        folded = judge(folded, self.verdicts)
        self.health[sid] = health_of_run(self.health.get(sid), earlier, folded)
        for mark in run_marks(folded):  # still completed: its input's decision is to come
            self._awaiting[mark] = (sid, rid)
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
        rid, run = held.popitem(last=False)
        self._forget_marks(run)
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
                self.health.pop(sid, None)
        return True

    def _forget_marks(self, run: dict[str, Any]) -> None:
        for mark in run_marks(run):
            self._awaiting.pop(mark, None)

    def decided(self, record: dict[str, Any]) -> None:
        """A decision read from ``decisions`` (by the jobs' read model): a held
        run whose input it refused reads ``refused`` with the core's reason."""
        found = decision_mark(record)
        if found is None:
            return
        mark, reason = found
        if mark in self.verdicts:
            return  # the first decision of an input counts (a re-sent start is refused)
        self.verdicts[mark] = reason
        while len(self.verdicts) > VERDICTS_KEPT:
            self.verdicts.popitem(last=False)
        where = self._awaiting.pop(mark, None)
        if where is None:
            return
        sid, rid = where
        held = self.runs.get(sid, OrderedDict())
        run = held.get(rid)
        if run is None:
            return
        self._forget_marks(run)
        if reason is None:
            return
        sizes = self._sizes.setdefault(sid, {})
        self.runs_held -= sizes.get(rid, 0)
        judged = {**run, "status": REFUSED, "error": reason}
        self.health[sid] = health_refused(self.health.get(sid), rid)
        held[rid] = judged
        sizes[rid] = len(orjson.dumps(judged))
        self.runs_held += sizes[rid]

    def newest_runs(
        self,
        sid: str,
        limit: int,
        before: int | None = None,
        status: str | None = None,
        since: datetime | None = None,
    ) -> tuple[list[dict[str, Any]], int | None]:
        """Runs newest first (by first sight), those with ``seq < before`` (and
        ``status``, and started, or slotted, or recorded at ``since`` or after);
        and the cursor of the next page (None: no more)."""
        out: list[dict[str, Any]] = []
        for run in reversed(self.runs.get(sid, {}).values()):
            if before is not None and run["seq"] >= before:
                continue
            if status is not None and run.get("status") != status:
                continue
            if since is not None and not _at_or_after(
                run.get("started_at") or run.get("slot") or run.get("at"), since
            ):
                continue
            if len(out) == limit:
                return out, int(out[-1]["seq"])
            out.append(run)
        return out, None

    def alert(self, record: dict[str, Any]) -> None:
        """A ``heartbeat.alert`` record (docs/schedules.md, "Heartbeats"): counted
        in its schedule's health while the schedule is defined or has runs held
        (its run's record comes before it)."""
        sid = str(record["schedule_id"])
        if sid in self.schedules or sid in self.runs:
            self.health[sid] = health_alert(self.health.get(sid), record)

    def health_of(self, sid: str) -> ScheduleHealth:
        """Schedule ``sid``'s health (no runs read yet: every counter 0)."""
        return self.health.get(sid) or ScheduleHealth()

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

    def audit_records(
        self,
        limit: int,
        schedule: str | None = None,
        action: str | None = None,
        since: datetime | None = None,
    ) -> list[dict[str, Any]]:
        """The audit records held, newest first, of ``schedule``, of
        ``action``, at ``since`` or after; at most ``limit``."""
        target = f"schedule:{schedule}" if schedule is not None else None
        out: list[dict[str, Any]] = []
        for record in reversed(self.audit):
            if len(out) == limit:
                break
            if target is not None and record.get("target") != target:
                continue
            if action is not None and record.get("action") != action:
                continue
            if since is not None and not _at_or_after(record.get("at"), since):
                continue
            out.append(record)
        return out

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
            elif topic == self.topics.audit and value is not None:
                self.audit.append(AuditRecord.model_validate_json(value).dump())
            elif topic == self.topics.schedule_runs and value is not None:
                data = orjson.loads(value)
                kind = data.get("type") if isinstance(data, dict) else None
                if kind == "schedule.run":
                    self.run(ScheduleRunRecord.model_validate(data).dump())
                elif kind == HEARTBEAT_ALERT:
                    self.alert(HeartbeatAlert.model_validate(data).dump())
        except (ValidationError, ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            self.skipped += 1
            log.debug("schedules read model: skipped a record of %s: %s", topic, exc)

    def followed(self) -> list[str]:
        return [self.topics.schedules, self.topics.schedule_runs, self.topics.audit]

    def take(self, tp: TopicPartition, key: bytes | None, value: bytes | None, offset: int) -> None:
        self.apply(tp.topic, key, value, offset, tp.partition)

    def assigned(self, tps: list[TopicPartition]) -> None:
        self.partitions = sum(1 for tp in tps if tp.topic == self.topics.schedules)

    def caught_up_line(self) -> str:
        return f"gateway: schedules caught up ({len(self.schedules)} schedules)"


def _at_or_after(text: object, since: datetime) -> bool:
    """Is the instant ``text`` (ISO 8601, ``Z``) at ``since`` or after? One
    that does not read as an instant is not."""
    if not isinstance(text, str):
        return False
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")) >= since
    except ValueError:
        return False


def is_enabled(spec: dict[str, Any]) -> bool:
    """Does the schedule run (``enabled`` absent or true) or is it paused?"""
    return spec.get("enabled", True) is not False


def _unsort(ids: list[str], sid: str) -> None:
    """Remove ``sid`` from the sorted ``ids``."""
    at = bisect.bisect_left(ids, sid)
    if at < len(ids) and ids[at] == sid:
        del ids[at]
