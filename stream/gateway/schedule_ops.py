"""Operator actions on schedules, shared by the gateway's routes and the
``lemongraph schedule`` commands (docs/api.md, "Schedules"; docs/schedules.md):
validate a definition, merge a partial update, say which audit action a change
is, build the records (definition, tombstone, wake, audit) as :class:`Write` records,
compute the next slots, and fold a schedule's run records into runs. The
gateway produces the writes with its producer; the CLI (stream/cli/schedule.py)
with its own, straight to Kafka as ``start-job`` does.

Nothing here decides when a schedule fires: that is the worker's
(``compiler.schedule_step``). What is written here is what an operator asked.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any
from zoneinfo import ZoneInfo

import orjson

from compiler import (
    LemongraphError,
    ScheduleHealth,
    default_target,
    health_alert,
    health_of_run,
)
from stream.gateway.readmodels.run_verdicts import judge
from stream.runtime.errors import ShellError
from topics import (
    HEARTBEAT_ALERT,
    AuditRecord,
    LimitError,
    ScheduleRecord,
    ScheduleWake,
    Topics,
    encode,
    plain_json,
)

__all__ = [
    "AUDIT_ACTIONS",
    "Invalid",
    "Slot",
    "Write",
    "audit",
    "catchup_window",
    "change_action",
    "cron_of",
    "definition",
    "fold_run",
    "health_line",
    "health_of",
    "iso",
    "manual_run_id",
    "merged",
    "next_slots",
    "normalise",
    "one_shot_instant",
    "playbook_warnings",
    "refuse_past",
    "spec_slots",
    "tombstone",
    "wake",
    "wake_run_id",
]

AUDIT_ACTIONS = ("create", "update", "pause", "resume", "delete", "wake", "run", "abort")
#: Fields a partial update may not change: the id is the record key.
FIXED = ("id",)


class Invalid(ShellError, ValueError):
    """A definition (or expression) that does not validate: the message names
    the field; ``field`` and ``position`` (1-based, in a cron expression) say
    where when the validator knows."""

    def __init__(self, message: str, field: str | None = None, position: int | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        self.position = position


def _invalid(exc: Exception, default_field: str | None = None) -> Invalid:
    field = getattr(exc, "field", None) or default_field
    position = getattr(exc, "position", None)
    message = getattr(exc, "message", None) or str(exc)
    return Invalid(
        str(message).splitlines()[0] if message else "invalid",
        str(field) if field is not None else None,
        position if isinstance(position, int) and not isinstance(position, bool) else None,
    )


def iso(instant: datetime) -> str:
    """An instant as the API writes it: UTC, seconds, ``Z``."""
    return instant.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def now_iso() -> str:
    return iso(datetime.now(UTC))


def normalise(data: object, source: str = "<schedule>") -> dict[str, Any]:
    """The definition as validated and normalised by the core
    (``compiler.validate_schedule``); :class:`Invalid` otherwise."""
    from compiler import validate_schedule

    try:
        spec = dict(validate_schedule(data, source).to_json())
    except (LemongraphError, ValueError, TypeError) as exc:
        raise _invalid(exc) from None
    try:
        # What the topics take (64-bit integers, finite numbers, bounded nesting).
        plain_json(spec)
    except LimitError as exc:
        where = str(exc).split(":", 1)[0]
        raise Invalid(str(exc), where or None) from None
    return spec


def playbook_warnings(spec: Mapping[str, Any], playbooks: Collection[str] | None) -> list[str]:
    """A warning when a ``start_job`` schedule names a playbook that is not among
    ``playbooks`` (those registered, as the ``playbooks`` topic holds them; None:
    not known). Not a refusal: another process may register it later; until then
    each run's ``job.start`` is refused by the worker (docs/schedules.md, "start_job")."""
    action = spec.get("action")
    if playbooks is None or not isinstance(action, Mapping) or action.get("type") != "start_job":
        return []
    key = str(action.get("playbook_key"))
    if key in playbooks:
        return []
    near = difflib.get_close_matches(key, sorted(playbooks), n=1, cutoff=0.6)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return [
        f"action.playbook_key: no playbook {key!r} is registered{hint}: until one is, each "
        "run's job.start is refused (the run reads refused, with the core's reason)"
    ]


@dataclass(frozen=True)
class Slot:
    """A slot: its UTC instant and its wall time in the schedule's timezone."""

    utc: datetime
    timezone: str

    @property
    def local(self) -> datetime:
        return self.utc.astimezone(ZoneInfo(self.timezone))

    def json(self) -> dict[str, str]:
        local = self.local
        return {
            "utc": iso(self.utc),
            "local": local.replace(microsecond=0).isoformat(),
            "abbreviation": local.tzname() or "",
            "timezone": self.timezone,
        }

    def line(self) -> str:
        """``2026-03-08T07:00:00Z  2026-03-08 03:00 EDT (America/New_York)``."""
        local = self.local
        return f"{iso(self.utc)}  {local:%Y-%m-%d %H:%M} {local.tzname()} ({self.timezone})"


def next_slots(expr: str, tz: str, after: datetime, count: int) -> list[Slot]:
    """The first ``count`` slots of ``expr`` (cron or a shorthand) in ``tz``
    strictly after ``after``; :class:`Invalid` naming the field otherwise."""
    from compiler import next_slot, parse_cron

    try:
        cron = parse_cron(expr)
    except (LemongraphError, ValueError) as exc:
        raise _invalid(exc, "schedule") from None
    slots: list[Slot] = []
    at = after.astimezone(UTC)
    try:
        for _ in range(count):
            at = next_slot(cron, tz, at)  # an unknown zone: ScheduleError on "timezone"
            slots.append(Slot(at, tz))
    except (LemongraphError, ValueError) as exc:
        if slots:  # no slot for 50 years: what there is
            return slots
        raise _invalid(exc, "timezone") from None
    return slots


def cron_of(spec: Mapping[str, Any]) -> str:
    """A stored definition's schedule as 5-field cron (a shorthand normalised;
    a one-shot's: its instant's minute on its wall clock)."""
    from compiler import parse_cron, validate_schedule

    if spec.get("at") is not None:
        try:
            return str(validate_schedule(spec).cron.expr)
        except (LemongraphError, ValueError):
            return ""
    try:
        return str(parse_cron(str(spec.get("schedule", ""))).expr)
    except (LemongraphError, ValueError):
        return str(spec.get("schedule", ""))


def spec_slots(spec: Mapping[str, Any], after: datetime, count: int) -> list[Slot]:
    """A stored definition's next slots after ``after`` (none while paused; a
    one-shot's instant while it is to come)."""
    if spec.get("enabled", True) is False:
        return []
    tz = str(spec.get("timezone") or "UTC")
    if spec.get("at") is not None:
        instant = one_shot_instant(spec)
        return [Slot(instant, tz)] if instant is not None and instant > after else []
    try:
        return next_slots(str(spec["schedule"]), str(spec.get("timezone") or "UTC"), after, count)
    except (Invalid, KeyError):
        return []


def catchup_window(spec: Mapping[str, Any]) -> str:
    """The catch-up window in effect: as set, or the default, one period of the
    schedule (its length when the schedule is regular: ``one period (30m, the
    default)``). The stored definition leaves a default window out."""
    if spec.get("catchup_window"):
        return str(spec["catchup_window"])
    if spec.get("at") is not None:
        return "none: a one-shot fires however late (the default)"
    from compiler import format_offset

    slots = spec_slots({**spec, "enabled": True}, datetime.now(UTC), 8)
    gaps = {b.utc - a.utc for a, b in pairwise(slots)}
    if len(gaps) == 1:
        return f"one period ({format_offset(gaps.pop())}, the default)"
    return "one period, the default (the time back to the slot before: the newest slot due fires)"


def one_shot_instant(spec: Mapping[str, Any]) -> datetime | None:
    """A one-shot's instant (``at``, as normalised: UTC with ``Z``), else None."""
    at = spec.get("at")
    if not isinstance(at, str):
        return None
    try:
        return datetime.fromisoformat(at.replace("Z", "+00:00"))
    except ValueError:
        return None


def refuse_past(spec: Mapping[str, Any], now: datetime) -> None:
    """A one-shot created (or moved) to an instant that has passed is refused
    (docs/schedules.md, "One-shot schedules"): :class:`Invalid` on ``at``."""
    instant = one_shot_instant(spec)
    if instant is not None and instant <= now:
        raise Invalid(
            f"at: {spec['at']} has passed (it is {iso(now)}): a one-shot runs at an instant "
            "to come; for now, use a run now (POST /v1/schedules/{id}/run)",
            "at",
        )


def merged(spec: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """A partial update: ``patch``'s top-level fields replace ``spec``'s (an
    ``action`` or ``meta`` given is given whole); a field set to null goes back
    to its default. The id cannot change (:class:`Invalid`)."""
    out = dict(spec)
    if patch.get("command") is not None:
        out.pop("action", None)  # the seed's form of a command action (docs/schedules.md)
    # A clock replaces an instant, and an instant a clock (docs/schedules.md, "One-shot").
    if patch.get("schedule") is not None:
        out.pop("at", None)
    if patch.get("at") is not None:
        out.pop("schedule", None)
    # The default target follows the owner (docs/schedules.md, "Delivery"): a
    # deliver_to that is the owner's default is given again from the new definition.
    action, owner = spec.get("action"), spec.get("job_key")
    owner = owner if isinstance(owner, str) else None
    if (
        "deliver_to" not in patch
        and isinstance(action, Mapping)
        and spec.get("deliver_to") == default_target(owner, action)
    ):
        out.pop("deliver_to", None)
    for name, value in patch.items():
        if name in FIXED and value != spec.get(name):
            raise Invalid(f"{name}: a schedule's id cannot change (create a new one)", name)
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def change_action(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The audit action of a change from ``old`` to ``new`` and its detail:
    ``pause`` or ``resume`` when only ``enabled`` changed (detail
    ``{"enabled": false}`` / ``{"enabled": true}``), else ``update`` (detail
    ``{"changed": [names]}``)."""
    names = sorted(set(old) | set(new))
    changed = [n for n in names if old.get(n) != new.get(n)]
    if changed == ["enabled"]:
        enabled = new.get("enabled", True) is not False
        return ("resume" if enabled else "pause"), {"enabled": enabled}
    return "update", {"changed": changed}


@dataclass(frozen=True)
class Write:
    """One record to produce: topic (short name), key, value (None: a tombstone)."""

    topic: str
    key: str
    value: bytes | None

    def full_topic(self, topics: Topics) -> str:
        return str(getattr(topics, self.topic.replace("-", "_")))


def definition(spec: Mapping[str, Any], by: str, at: str | None = None) -> Write:
    """The definition's record on ``schedules`` (key: the id)."""
    record = ScheduleRecord(spec=dict(spec), updated_at=at or now_iso(), by=by)
    return Write("schedules", str(spec["id"]), encode(record))


def tombstone(schedule_id: str) -> Write:
    """The tombstone that deletes schedule ``schedule_id``."""
    return Write("schedules", schedule_id, None)


def audit(
    action: str,
    schedule_id: str,
    by: str,
    detail: Mapping[str, Any] | None = None,
    at: str | None = None,
) -> Write:
    """An operator action's record on ``audit`` (key: the schedule id)."""
    record = AuditRecord(
        action=action,  # one of AUDIT_ACTIONS (the record checks it)
        target=f"schedule:{schedule_id}",
        by=by,
        at=at or now_iso(),
        detail=dict(detail or {}),
    )
    return Write("audit", schedule_id, encode(record))


def wake(
    schedule_id: str,
    request_id: str,
    context: Mapping[str, Any] | None = None,
    skip_if_running: bool = False,
    origin: Sequence[str] = (),
    control: str = "wake",
    run_id: str | None = None,
) -> Write:
    """The ``schedule.wake`` command on the inbox (key: the schedule id);
    ``origin``: the prompt runs it comes from (docs/schedules.md, "Wake loops");
    ``control``: ``wake``, ``run`` (a run now) or ``abort`` (of the run
    ``run_id``; docs/schedules.md, "Run now", "Abort"). A plain wake is
    written as before the controls were (no ``control`` field)."""
    message = ScheduleWake.model_validate(
        {
            "schedule_id": schedule_id,
            "request_id": request_id,
            "context": dict(context) if context is not None else None,
            "skip_if_running": skip_if_running,
            "origin": list(origin),
            "control": control,
            "run_id": run_id,
        }
    )
    data = message.dump()
    if control == "wake":
        del data["control"], data["run_id"]
    return Write("inbox", schedule_id, encode(data))


def manual_run_id(schedule_id: str, request_id: str) -> str:
    """The run id the worker gives the run now of ``request_id``."""
    from compiler import manual_run_id as run_id

    return str(run_id(schedule_id, request_id))


def wake_run_id(schedule_id: str, request_id: str) -> str:
    """The run id the worker gives the wake run of ``request_id``."""
    from compiler import request_run_id

    return str(request_run_id(schedule_id, request_id))


def fold_run(earlier: Mapping[str, Any] | None, record: Mapping[str, Any]) -> dict[str, Any]:
    """A run as its records so far say: a later record of the same ``run_id``
    (its end) overrides what it sets, and keeps what it leaves out."""
    if earlier is None:
        return dict(record)
    return {**earlier, **{k: v for k, v in record.items() if v is not None}}


def runs_of(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``schedule.run`` records (oldest first) folded into runs, newest first
    (by the first record of each run)."""
    runs: dict[str, dict[str, Any]] = {}
    for record in records:
        if record.get("type") != "schedule.run":
            continue
        rid = str(record.get("run_id"))
        runs[rid] = fold_run(runs.get(rid), record)
    return list(reversed(runs.values()))


def health_of(
    records: Iterable[Mapping[str, Any]], verdicts: Mapping[str, str | None]
) -> ScheduleHealth:
    """A schedule's health (docs/schedules.md, "Health") from its records on
    ``schedule-runs``, oldest first, each run judged by ``verdicts`` (mark →
    the core's reason when it refused the run's input, stream/gateway/readmodels/run_verdicts.py):
    folded as the gateway's read model folds them."""
    runs: dict[str, dict[str, Any]] = {}
    health = ScheduleHealth()
    for record in records:
        kind = record.get("type")
        if kind == HEARTBEAT_ALERT:
            health = health_alert(health, record)
        elif kind == "schedule.run":
            rid = str(record.get("run_id"))
            earlier = runs.get(rid)
            runs[rid] = judge(fold_run(earlier, record), verdicts)
            health = health_of_run(health, earlier, runs[rid])
    return health


def health_line(health: Mapping[str, Any]) -> str:
    """A ``health`` object as ``lemongraph schedule show`` prints it:
    ``health: last run sl-… completed at …; retries 0, suppressed 2, ...``."""
    last = health.get("last_run")
    said = f"last run {last['run_id']} {last['status']} at {last['at']}" if last else "no run yet"
    names = ("retries", "suppressed", "missed", "skipped", "failed", "failed_in_a_row")
    counts = ", ".join(
        f"{name.replace('_', ' ')} {health[name]}"
        for name in (*names, "stale_recoveries", "alerts")
    )
    alert = health.get("last_alert")
    if alert:
        counts += f" (the last {alert['severity']}, run {alert['run_id']})"
    return f"health: {said}; {counts}"


def decode(value: bytes | None) -> dict[str, Any] | None:
    """A record's JSON object value, or None (a tombstone, or not an object)."""
    if value is None:
        return None
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None
