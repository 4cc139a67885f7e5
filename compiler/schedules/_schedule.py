"""Schedule definitions, their validation, and the ids and jitter of their runs
(docs/schedules.md, "A schedule's fields", "Exactly once: slot ids").

Pure: :func:`validate_schedule` turns what a user wrote (an API body, a
``schedules.yaml`` item, a ``schedules`` record's ``spec``) into a frozen
:class:`Schedule`, or raises :class:`ScheduleError` naming the field path.
``Schedule.to_json()`` gives the definition back, normalised (defaults filled,
durations in their compound form), and ``validate_schedule`` of it is the same
schedule.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from topics import JobKeyError, check_key

from compiler._durations import format_offset, parse_duration
from compiler._source import did_you_mean
from compiler.schedules._cron import (
    Cron,
    ScheduleError,
    count_slots,
    next_slot,
    parse_cron,
    previous_slot,
    slots_between,
    zone,
)

__all__ = [
    "HEARTBEAT_OK",
    "MAX_RECORDS",
    "MAX_REQUESTS",
    "OVERLAPS",
    "ActiveRun",
    "Define",
    "Deliver",
    "Dispatch",
    "Overlap",
    "Pending",
    "Remove",
    "Report",
    "RetryDue",
    "RunRecorded",
    "Schedule",
    "ScheduleEffect",
    "ScheduleInput",
    "ScheduleState",
    "ScheduleStep",
    "ScheduleTick",
    "TriggeredBy",
    "Wake",
    "jitter_ms",
    "render_key",
    "request_run_id",
    "retry_id",
    "schedule_step",
    "slot_id",
    "slugify",
    "validate_schedule",
]

Overlap = Literal["skip", "buffer_one", "allow_all"]
OVERLAPS: tuple[Overlap, ...] = ("skip", "buffer_one", "allow_all")
ACTION_TYPES = ("start_job", "send_event", "prompt")

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_FIELDS = (
    "id",
    "name",
    "schedule",
    "timezone",
    "action",
    "enabled",
    "jitter",
    "timeout",
    "max_retries",
    "retry_backoff",
    "overlap",
    "catchup_window",
    "deliver_to",
    "meta",
)
_ACTION_FIELDS = {
    "start_job": ("type", "playbook_key", "subject", "key"),
    "send_event": ("type", "job_key", "event"),
    "prompt": ("type", "agent", "prompt"),
}
_EVENT_FIELDS = ("action", "value", "properties")
_SYNONYMS = {
    "cron": "schedule",
    "expression": "schedule",
    "tz": "timezone",
    "time_zone": "timezone",
    "zone": "timezone",
    "retries": "max_retries",
    "backoff": "retry_backoff",
    "catchup": "catchup_window",
    "catch_up_window": "catchup_window",
    "deliver": "deliver_to",
    "playbook": "playbook_key",
    "job": "job_key",
    "text": "prompt",
    "message": "prompt",
}
_PLACEHOLDERS = ("slot", "schedule", "date", "time", "instant")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
#: the longest a run's key template may make a slot id look (a sample render)
_SAMPLE = datetime(2026, 1, 5, 9, 30, tzinfo=UTC)


@dataclass(frozen=True)
class Schedule:
    """A valid schedule definition. Durations are in milliseconds;
    ``catchup_window_ms`` is None for the default (one period: the newest slot
    due catches up, older ones are missed). ``action`` is the normalised action
    object (``{"type": "start_job", "playbook_key": ..., "subject"?, "key"?}``,
    ``{"type": "send_event", "job_key": ..., "event": {...}}`` or
    ``{"type": "prompt", "agent": ..., "prompt": ...}``)."""

    id: str
    name: str
    cron: Cron
    timezone: str
    action: Mapping[str, Any]
    enabled: bool = True
    jitter_ms: int = 0
    timeout_ms: int = 300_000
    max_retries: int = 0
    retry_backoff_ms: int = 30_000
    overlap: Overlap = "skip"
    catchup_window_ms: int | None = None
    deliver_to: str = "none"
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def action_type(self) -> str:
        return str(self.action["type"])

    @property
    def heartbeat(self) -> bool:
        return self.meta.get("heartbeat") is True

    def to_json(self) -> dict[str, Any]:
        """The normalised definition (the ``schedules`` record's ``spec``)."""
        out: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "schedule": self.cron.source,
            "timezone": self.timezone,
            "action": _plain(self.action),
            "enabled": self.enabled,
            "jitter": _duration(self.jitter_ms),
            "timeout": _duration(self.timeout_ms),
            "max_retries": self.max_retries,
            "retry_backoff": _duration(self.retry_backoff_ms),
            "overlap": self.overlap,
            "deliver_to": self.deliver_to,
            "meta": _plain(self.meta),
        }
        if self.catchup_window_ms is not None:
            out["catchup_window"] = _duration(self.catchup_window_ms)
        return out


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _duration(ms: int) -> str:
    if ms % 1000:
        raise ValueError(f"{ms} ms is not a whole number of seconds")  # pragma: no cover
    return format_offset(timedelta(milliseconds=ms))


def slugify(name: str) -> str:
    """The default id of a schedule named ``name``: lower case, runs of other
    characters than ``[a-z0-9]`` as one ``-``, at most 64 characters."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug[:64].rstrip("-")


def _unknown(data: Mapping[str, Any], known: tuple[str, ...], prefix: str) -> None:
    for key in data:
        if key not in known:
            near = _SYNONYMS.get(str(key).lower())
            if near not in known:
                near = did_you_mean(str(key), known)
            raise ScheduleError(
                f"{prefix}{key}",
                f"unknown field {key!r}" + (f" (did you mean {near!r}?)" if near else ""),
            )


def _text(data: Mapping[str, Any], name: str, path: str, required: bool = True) -> str | None:
    value = data.get(name)
    if value is None:
        if required:
            raise ScheduleError(path, "this field is required")
        return None
    if not isinstance(value, str) or not value.strip():
        raise ScheduleError(path, "must be a non-empty string")
    return value


def _ms_of(data: Mapping[str, Any], name: str, default: int, minimum: int) -> int:
    value = data.get(name)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ScheduleError(name, f"must be a duration such as 30s, 5m or 2h, got {value!r}")
    try:
        delta = parse_duration(value)
    except ValueError as exc:
        raise ScheduleError(name, str(exc)) from None
    except OverflowError:  # more days than a timedelta holds
        delta = timedelta.max
    ms = int(delta.total_seconds()) * 1000
    if ms < minimum:
        raise ScheduleError(name, f"must be at least {_duration(minimum)}, got {value!r}")
    if ms > MAX_DURATION_MS:
        # Longer ones put instants past what a datetime holds (a tick would fail).
        raise ScheduleError(name, f"must be at most {_duration(MAX_DURATION_MS)}, got {value!r}")
    return ms


def validate_schedule(data: object, source: str = "<schedule>") -> Schedule:
    """``data`` (a definition) → :class:`Schedule`, or :class:`ScheduleError`
    whose ``field`` is the path at fault and whose message starts with it.
    ``source`` names the document (kept on the error as ``error.source``)."""
    try:
        return _validate(data)
    except ScheduleError as exc:
        exc.source = source  # type: ignore[attr-defined]
        raise


def _validate(data: object) -> Schedule:
    if not isinstance(data, Mapping):
        raise ScheduleError("schedule", "a schedule definition must be an object")
    _unknown(data, _FIELDS, "")
    name = _text(data, "name", "name")
    assert name is not None
    if len(name) > 200:
        raise ScheduleError("name", "at most 200 characters")
    given = data.get("id")
    if given is None:
        ident = slugify(name)
        if not ident:
            raise ScheduleError("id", f"cannot be derived from the name {name!r}: give an id")
    elif not isinstance(given, str) or not _ID.fullmatch(given):
        raise ScheduleError(
            "id",
            f"{given!r} is not a schedule id: 1-64 characters of letters, digits, '.', '_' "
            "and '-', starting with a letter or digit",
        )
    else:
        ident = given
    if "schedule" not in data or data["schedule"] is None:
        raise ScheduleError("schedule", "this field is required")
    cron = parse_cron(data["schedule"])
    timezone = data.get("timezone", "UTC")
    if timezone is None:
        timezone = "UTC"
    if not isinstance(timezone, str):
        raise ScheduleError("timezone", f"must be an IANA time zone name, got {timezone!r}")
    zone(timezone)
    action = _action(data.get("action"))
    enabled = data.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ScheduleError("enabled", f"must be true or false, got {enabled!r}")
    retries = data.get("max_retries", 0)
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 100:
        raise ScheduleError("max_retries", f"must be a whole number 0-100, got {retries!r}")
    overlap = data.get("overlap", "skip")
    if overlap not in OVERLAPS:
        raise ScheduleError("overlap", f"must be one of {', '.join(OVERLAPS)}, got {overlap!r}")
    deliver_to = data.get("deliver_to", "none")
    _deliver_to(deliver_to)
    meta = data.get("meta", {})
    if meta is None:
        meta = {}
    if not isinstance(meta, Mapping):
        raise ScheduleError("meta", "must be an object")
    heartbeat = meta.get("heartbeat")
    if heartbeat is not None and not isinstance(heartbeat, bool):
        raise ScheduleError("meta.heartbeat", f"must be true or false, got {heartbeat!r}")
    if heartbeat and action["type"] != "prompt":
        raise ScheduleError(
            "meta.heartbeat", "a heartbeat is a prompt schedule: action.type must be prompt"
        )
    catchup = None
    if data.get("catchup_window") is not None:
        catchup = _ms_of(data, "catchup_window", 0, 60_000)
    schedule = Schedule(
        id=ident,
        name=name,
        cron=cron,
        timezone=timezone,
        action=action,
        enabled=enabled,
        jitter_ms=_ms_of(data, "jitter", 0, 0),
        timeout_ms=_ms_of(data, "timeout", 300_000, 1000),
        max_retries=retries,
        retry_backoff_ms=_ms_of(data, "retry_backoff", 30_000, 0),
        overlap=overlap,
        catchup_window_ms=catchup,
        deliver_to=deliver_to,
        meta=_plain(meta),
    )
    template = action.get("key")
    if isinstance(template, str):
        try:
            check_key(render_key(template, schedule, _SAMPLE), "the rendered key")
        except JobKeyError as exc:
            raise ScheduleError("action.key", str(exc)) from None
    return schedule


def _deliver_to(target: object) -> None:
    if target == "none":
        return
    if isinstance(target, str):
        kind, sep, rest = target.partition(":")
        if sep and kind == "web":
            try:
                check_key(rest, "the job key")
            except JobKeyError as exc:
                raise ScheduleError("deliver_to", f"{target!r}: {exc}") from None
            return
        if sep and kind == "email" and re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", rest):
            return
    raise ScheduleError(
        "deliver_to", f"must be none, web:<job key> or email:<address>, got {target!r}"
    )


def _action(raw: object) -> dict[str, Any]:
    if raw is None:
        raise ScheduleError("action", "this field is required")
    if not isinstance(raw, Mapping):
        raise ScheduleError("action", "must be an object with a type")
    kind = raw.get("type")
    if kind not in ACTION_TYPES:
        raise ScheduleError(
            "action.type", f"must be one of {', '.join(ACTION_TYPES)}, got {kind!r}"
        )
    _unknown(raw, _ACTION_FIELDS[kind], "action.")
    out: dict[str, Any] = {"type": kind}
    if kind == "start_job":
        out["playbook_key"] = _text(raw, "playbook_key", "action.playbook_key")
        subject = raw.get("subject")
        if subject is not None:
            if not isinstance(subject, Mapping):
                raise ScheduleError("action.subject", "must be an object")
            out["subject"] = _plain(subject)
        key = _text(raw, "key", "action.key", required=False)
        if key is not None:
            for match in _PLACEHOLDER.finditer(key):
                if match.group(1) not in _PLACEHOLDERS:
                    raise ScheduleError(
                        "action.key",
                        f"unknown placeholder {match.group()!r} at position "
                        f"{match.start() + 1} (known: "
                        + ", ".join("{" + p + "}" for p in _PLACEHOLDERS)
                        + ")",
                    )
            out["key"] = key
    elif kind == "send_event":
        job_key = _text(raw, "job_key", "action.job_key")
        assert job_key is not None
        try:
            check_key(job_key, "the job key")
        except JobKeyError as exc:
            raise ScheduleError("action.job_key", str(exc)) from None
        out["job_key"] = job_key
        event = raw.get("event")
        if not isinstance(event, Mapping):
            raise ScheduleError("action.event", "must be an object with an action")
        _unknown(event, _EVENT_FIELDS, "action.event.")
        item: dict[str, Any] = {"action": _text(event, "action", "action.event.action")}
        if "value" in event and event["value"] is not None:
            item["value"] = _plain(event["value"])
        properties = event.get("properties")
        if properties is not None:
            if not isinstance(properties, Mapping):
                raise ScheduleError("action.event.properties", "must be an object")
            item["properties"] = _plain(properties)
        out["event"] = item
    else:
        out["agent"] = _text(raw, "agent", "action.agent")
        out["prompt"] = _text(raw, "prompt", "action.prompt")
    return out


# -- ids --------------------------------------------------------------------------


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _iso(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def slot_id(schedule_id: str, nominal: datetime) -> str:
    """A slot's run id and default job key: ``sl-`` + 20 hex of
    sha256(``schedule_id`` newline the nominal instant as UTC ISO-8601)."""
    return "sl-" + _hash(f"{schedule_id}\n{_iso(nominal)}")[:20]


def retry_id(root_run_id: str, attempt: int) -> str:
    """The run id of retry ``attempt`` (1, 2, ...) of the run ``root_run_id``."""
    return "rt-" + _hash(f"{root_run_id}\n{attempt}")[:20]


def request_run_id(schedule_id: str, request_id: str) -> str:
    """The run id of a wake with request id ``request_id``."""
    return "wk-" + _hash(f"{schedule_id}\n{request_id}")[:20]


def jitter_ms(slot: str, jitter_ms: int) -> int:
    """A slot's deterministic delay: ``int(sha256(slot)[:8], 16) % (jitter_ms + 1)``;
    0 when the jitter is 0."""
    if jitter_ms <= 0:
        return 0
    return int(_hash(slot)[:8], 16) % (jitter_ms + 1)


def render_key(template: str, schedule: Schedule, nominal: datetime) -> str:
    """A ``start_job`` key template with its placeholders filled: ``{slot}``,
    ``{schedule}``, ``{date}`` (local YYYY-MM-DD of the nominal instant),
    ``{time}`` (local HHMM), ``{instant}`` (UTC YYYYMMDDTHHMMZ)."""
    utc = nominal.astimezone(UTC)
    local = utc.astimezone(zone(schedule.timezone))
    values = {
        "slot": slot_id(schedule.id, utc),
        "schedule": schedule.id,
        "date": local.strftime("%Y-%m-%d"),
        "time": local.strftime("%H%M"),
        "instant": utc.strftime("%Y%m%dT%H%MZ"),
    }
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group()), template)


# -- the state machine (docs/schedules.md, "Downtime and catch-up", "Overlap") --

#: at most this many records of one kind (missed, coalesced) per step; past it,
#: one record stands for the rest (``missed_count``, ``slot`` to ``slot_last``)
MAX_RECORDS = 100
#: the longest jitter, timeout, retry_backoff or catchup_window (366 days)
MAX_DURATION_MS = 366 * 86_400_000
#: the wake request ids a state remembers for de-duplication
MAX_REQUESTS = 64
#: Prompt runs one schedule may have active at once (docs/schedules.md, "Overlap");
#: a run beyond is recorded ``skipped``.
MAX_ACTIVE = 32
#: the longest output excerpt a run record carries
MAX_OUTPUT = 2000
HEARTBEAT_OK = "HEARTBEAT_OK"

TriggeredBy = Literal["schedule", "manual", "wake", "retry"]


@dataclass(frozen=True)
class ActiveRun:
    """A prompt run dispatched and not yet ended."""

    run_id: str
    slot_ms: int | None
    triggered_by: TriggeredBy
    attempt: int
    root_run_id: str
    started_ms: int
    deadline_ms: int
    context: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Pending:
    """``buffer_one``: the slot waiting for the active run to end."""

    run_id: str
    slot_ms: int


@dataclass(frozen=True)
class RetryDue:
    """Retry ``attempt`` (1, 2, ...) of the run ``root_run_id``, due at ``due_ms``."""

    root_run_id: str
    attempt: int
    due_ms: int
    slot_ms: int | None


@dataclass(frozen=True)
class ScheduleState:
    """What the worker keeps per schedule (JSON-able: :meth:`to_json`,
    :meth:`from_json`). ``next_slot_ms``: the nominal instant of the oldest slot
    not yet handled (None while paused); ``last_slot_ms``: the newest slot
    handled (fired, skipped or missed)."""

    schedule: Schedule
    version: int
    next_slot_ms: int | None
    last_slot_ms: int | None
    active: tuple[ActiveRun, ...] = ()
    buffered: Pending | None = None
    retries: tuple[RetryDue, ...] = ()
    requests: tuple[str, ...] = ()

    def due_ms(self) -> int | None:
        """When the next tick has something to do: the earliest of the next
        slot's fire instant (nominal + its jitter), the active runs' deadlines
        and the retries' dues, or a buffered slot's fire instant when no run is
        active (kept while switched off: the first tick releases it); None when
        nothing is due ever."""
        candidates = [run.deadline_ms for run in self.active]
        if self.buffered is not None and not self.active:
            candidates.append(_fire_ms(self.schedule, self.buffered.slot_ms))
        candidates += [retry.due_ms for retry in self.retries]
        if self.next_slot_ms is not None:
            candidates.append(_fire_ms(self.schedule, self.next_slot_ms))
        return min(candidates) if candidates else None

    def to_json(self) -> dict[str, Any]:
        return {
            "schedule": self.schedule.to_json(),
            "version": self.version,
            "next": self.next_slot_ms,
            "last": self.last_slot_ms,
            "active": [
                [
                    r.run_id,
                    r.slot_ms,
                    r.triggered_by,
                    r.attempt,
                    r.root_run_id,
                    r.started_ms,
                    r.deadline_ms,
                    _plain(r.context) if r.context is not None else None,
                ]
                for r in self.active
            ],
            "buffered": ([self.buffered.run_id, self.buffered.slot_ms] if self.buffered else None),
            "retries": [[r.root_run_id, r.attempt, r.due_ms, r.slot_ms] for r in self.retries],
            "requests": list(self.requests),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ScheduleState:
        buffered = data.get("buffered")
        return cls(
            schedule=validate_schedule(data["schedule"]),
            version=int(data["version"]),
            next_slot_ms=data.get("next"),
            last_slot_ms=data.get("last"),
            active=tuple(
                ActiveRun(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7])
                for a in data.get("active", ())
            ),
            buffered=Pending(buffered[0], buffered[1]) if buffered else None,
            retries=tuple(RetryDue(r[0], r[1], r[2], r[3]) for r in data.get("retries", ())),
            requests=tuple(data.get("requests", ())),
        )


# inputs


@dataclass(frozen=True)
class Define:
    """A definition applied: create, update, pause (``enabled: false``), resume."""

    schedule: Schedule


@dataclass(frozen=True)
class Remove:
    """The schedule deleted (a tombstone)."""


@dataclass(frozen=True)
class ScheduleTick:
    """The clock reached ``now``: fire what is due."""


@dataclass(frozen=True)
class Wake:
    """Fire now (docs/schedules.md, "Wake")."""

    request_id: str
    context: Mapping[str, Any] | None = None
    skip_if_running: bool = False


@dataclass(frozen=True)
class Report:
    """How a prompt run ended (a ``schedule.report`` record)."""

    run_id: str
    status: Literal["completed", "failed"]
    output: str = ""
    error: str | None = None


ScheduleInput = Define | Remove | ScheduleTick | Wake | Report


# effects


@dataclass(frozen=True)
class Dispatch:
    """Carry out a run's action. ``action`` is the schedule's action object (a
    prompt's text has ``Context: <json>`` appended when the run carries a
    context); ``job_key``: the job a ``start_job`` starts (the slot id, the
    rendered key template, or the run id of a wake/retry run) or the job a
    ``send_event`` goes to; ``deadline_ms``: a prompt run's timeout instant."""

    run_id: str
    schedule_id: str
    slot_ms: int | None
    triggered_by: TriggeredBy
    attempt: int
    root_run_id: str
    action: Mapping[str, Any]
    context: Mapping[str, Any] | None = None
    job_key: str | None = None
    deadline_ms: int | None = None


@dataclass(frozen=True)
class RunRecorded:
    """A ``schedule.run`` record (every field of ``topics.ScheduleRunRecord``)."""

    run: Mapping[str, Any]


@dataclass(frozen=True)
class Deliver:
    """Send ``text`` to ``target`` (``web:<job>`` or ``email:<address>``)."""

    run_id: str
    target: str
    text: str


ScheduleEffect = Dispatch | RunRecorded | Deliver


@dataclass(frozen=True)
class ScheduleStep:
    """The new state (None: removed) and the effects, in order."""

    state: ScheduleState | None
    effects: tuple[ScheduleEffect, ...]


def _dt(ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


def _to_ms(instant: datetime) -> int:
    delta = instant.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    return delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000


def _fire_ms(schedule: Schedule, slot_ms: int) -> int:
    if not schedule.jitter_ms:
        return slot_ms
    return slot_ms + jitter_ms(slot_id(schedule.id, _dt(slot_ms)), schedule.jitter_ms)


class _Decision:
    """One step's working state: the fields of the state being decided and the
    effects so far."""

    def __init__(self, state: ScheduleState, now: datetime) -> None:
        self.schedule = state.schedule
        self.version = state.version
        self.next_slot_ms = state.next_slot_ms
        self.last_slot_ms = state.last_slot_ms
        self.active = list(state.active)
        self.buffered = state.buffered
        self.retries = list(state.retries)
        self.requests = state.requests
        self.now = now
        self.now_ms = _to_ms(now)
        self.at = _iso(now)
        self.effects: list[ScheduleEffect] = []
        #: False: the global switch is off (see :func:`schedule_step`).
        self.firing = True

    def state(self) -> ScheduleState:
        return ScheduleState(
            schedule=self.schedule,
            version=self.version,
            next_slot_ms=self.next_slot_ms,
            last_slot_ms=self.last_slot_ms,
            active=tuple(self.active),
            buffered=self.buffered,
            retries=tuple(self.retries),
            requests=self.requests,
        )

    def step(self) -> ScheduleStep:
        return ScheduleStep(self.state(), tuple(self.effects))

    # records

    def record(
        self,
        run_id: str,
        status: str,
        triggered_by: TriggeredBy,
        slot_ms: int | None,
        *,
        attempt: int = 0,
        root_run_id: str | None = None,
        started_ms: int | None = None,
        ended: bool = False,
        output: str | None = None,
        error: str | None = None,
        suppressed: bool = False,
        context: Mapping[str, Any] | None = None,
        job_key: str | None = None,
        delivered_to: str | None = None,
        slot_last_ms: int | None = None,
        missed_count: int | None = None,
    ) -> None:
        self.effects.append(
            RunRecorded(
                {
                    "type": "schedule.run",
                    "schema": 1,
                    "schedule_id": self.schedule.id,
                    "run_id": run_id,
                    "status": status,
                    "triggered_by": triggered_by,
                    "slot": _iso(_dt(slot_ms)) if slot_ms is not None else None,
                    "slot_last": _iso(_dt(slot_last_ms)) if slot_last_ms is not None else None,
                    "missed_count": missed_count,
                    "attempt": attempt,
                    "root_run_id": root_run_id or run_id,
                    "started_at": _iso(_dt(started_ms)) if started_ms is not None else None,
                    "ended_at": self.at if ended else None,
                    "at": self.at,
                    "output": output[:MAX_OUTPUT] if output is not None else None,
                    "error": error,
                    "suppressed": suppressed,
                    "context": _plain(context) if context is not None else None,
                    "job_key": job_key,
                    "delivered_to": delivered_to,
                }
            )
        )

    def slot_record(self, slot_ms: int, status: str, error: str) -> None:
        run = slot_id(self.schedule.id, _dt(slot_ms))
        self.record(run, status, "schedule", slot_ms, error=error)

    def span_record(self, first_ms: int, last_ms: int, count: int, status: str, error: str) -> None:
        run = slot_id(self.schedule.id, _dt(first_ms))
        self.record(
            run,
            status,
            "schedule",
            first_ms,
            error=error,
            slot_last_ms=last_ms,
            missed_count=count,
        )

    # firing

    def fire(
        self,
        run_id: str,
        triggered_by: TriggeredBy,
        slot_ms: int | None,
        attempt: int = 0,
        root_run_id: str | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> None:
        schedule = self.schedule
        root = root_run_id or run_id
        action: dict[str, Any] = _plain(schedule.action)
        kind = action["type"]
        if kind == "prompt" and len(self.active) >= MAX_ACTIVE:
            # allow_all and wakes add runs; each stays in the state until it ends
            self.record(
                run_id,
                "skipped",
                triggered_by,
                slot_ms,
                attempt=attempt,
                root_run_id=root,
                error=f"too many runs active ({MAX_ACTIVE}): the oldest is {self.active[0].run_id}",
                context=context,
            )
            return
        job_key: str | None = None
        deadline: int | None = None
        if kind == "start_job":
            template = action.get("key")
            if triggered_by == "schedule" and slot_ms is not None and template:
                job_key = render_key(template, schedule, _dt(slot_ms))
            else:
                job_key = run_id
        elif kind == "send_event":
            job_key = action["job_key"]
        else:
            deadline = self.now_ms + schedule.timeout_ms
            if context:
                action["prompt"] = f"{action['prompt']}\n\nContext: {_canonical(context)}"
        self.effects.append(
            Dispatch(
                run_id,
                schedule.id,
                slot_ms,
                triggered_by,
                attempt,
                root,
                action,
                _plain(context) if context is not None else None,
                job_key,
                deadline,
            )
        )
        if kind == "prompt":
            assert deadline is not None
            self.active.append(
                ActiveRun(
                    run_id,
                    slot_ms,
                    triggered_by,
                    attempt,
                    root,
                    self.now_ms,
                    deadline,
                    _plain(context) if context is not None else None,
                )
            )
            status = "running"
            ended = False
        else:
            status = "completed"
            ended = True
        self.record(
            run_id,
            status,
            triggered_by,
            slot_ms,
            attempt=attempt,
            root_run_id=root,
            started_ms=self.now_ms,
            ended=ended,
            context=context,
            job_key=job_key,
        )

    def fire_slot(self, slot_ms: int) -> None:
        """A slot whose turn came: the overlap policy decides (prompt runs only
        are ever active)."""
        run = slot_id(self.schedule.id, _dt(slot_ms))
        if self.active and self.schedule.overlap != "allow_all":
            if self.schedule.overlap == "skip":
                self.slot_record(
                    slot_ms, "skipped", f"overlap: run {self.active[0].run_id} still running"
                )
                return
            if self.buffered is not None:
                self.slot_record(
                    self.buffered.slot_ms,
                    "skipped",
                    f"overlap: buffered slot replaced by the slot of {_iso(_dt(slot_ms))}",
                )
            self.buffered = Pending(run, slot_ms)
            return
        self.fire(run, "schedule", slot_ms)

    # ends

    def end(self, run: ActiveRun, status: str, output: str | None, error: str | None) -> None:
        self.active = [a for a in self.active if a.run_id != run.run_id]
        schedule = self.schedule
        suppressed = status == "suppressed"
        target = schedule.deliver_to
        delivered_to = None
        # Switched off, nothing is delivered either: the global switch silences
        # every schedule (docs/schedules.md, "The global switch").
        if not suppressed and target != "none" and self.firing:
            if status == "completed":
                text = f"{schedule.name}: {output or ''}"
            else:
                text = f"{schedule.name} ({status}): {error or status}"
            self.effects.append(Deliver(run.run_id, target, text))
            delivered_to = target
        self.record(
            run.run_id,
            status,
            run.triggered_by,
            run.slot_ms,
            attempt=run.attempt,
            root_run_id=run.root_run_id,
            started_ms=run.started_ms,
            ended=True,
            output=output,
            error=error,
            suppressed=suppressed,
            context=run.context,
            delivered_to=delivered_to,
        )
        if (
            status in ("failed", "timeout")
            and run.triggered_by in ("schedule", "retry")
            and run.attempt < schedule.max_retries
        ):
            self.retries.append(
                RetryDue(
                    run.root_run_id,
                    run.attempt + 1,
                    self.now_ms + schedule.retry_backoff_ms,
                    run.slot_ms,
                )
            )
        self.release_buffered()

    def release_buffered(self) -> None:
        if self.buffered is None or self.active or not self.firing:
            return
        pending, self.buffered = self.buffered, None
        if not self.schedule.enabled:
            self.slot_record(pending.slot_ms, "skipped", "paused")
            return
        self.fire(pending.run_id, "schedule", pending.slot_ms)

    # the tick

    def tick(self) -> None:
        now_ms = self.now_ms
        for run in list(self.active):
            if run.deadline_ms <= now_ms:
                self.end(
                    run,
                    "timeout",
                    None,
                    f"timeout: no report within {_duration(self.schedule.timeout_ms)}",
                )
        self.release_buffered()  # a slot kept while switched off (see schedule_step)
        due = sorted(
            (r for r in self.retries if r.due_ms <= now_ms), key=lambda r: (r.due_ms, r.root_run_id)
        )
        for retry in due:
            self.retries.remove(retry)
            rerun = retry_id(retry.root_run_id, retry.attempt)
            if not self.schedule.enabled:
                self.record(
                    rerun,
                    "skipped",
                    "retry",
                    retry.slot_ms,
                    attempt=retry.attempt,
                    root_run_id=retry.root_run_id,
                    error="paused",
                )
                continue
            self.fire(rerun, "retry", retry.slot_ms, retry.attempt, retry.root_run_id)
        if self.next_slot_ms is not None and self.next_slot_ms <= now_ms:
            self.slots()

    def slots(self) -> None:
        """The slots in [next slot, now] (docs/schedules.md, "Downtime and catch-up"), in
        time bounded by :data:`MAX_RECORDS`, not by the downtime."""
        schedule = self.schedule
        cron, tz = schedule.cron, schedule.timezone
        assert self.next_slot_ms is not None
        first = _dt(self.next_slot_ms)
        now = self.now
        spread = timedelta(milliseconds=schedule.jitter_ms)
        if not schedule.jitter_ms:
            following = next_slot(cron, tz, first)
            if following > now:
                # The common tick: one slot due, no jitter (the same outcome as below).
                width = schedule.catchup_window_ms
                if width is None or first >= now - timedelta(milliseconds=width):
                    self.fire_slot(self.next_slot_ms)
                else:
                    self.slot_record(
                        self.next_slot_ms, "missed", "missed: older than the catch-up window"
                    )
                self.last_slot_ms = self.next_slot_ms
                self.next_slot_ms = _to_ms(following)
                return
        # The newest slot whose fire instant (nominal + jitter) has come.
        settled = previous_slot(cron, tz, now - spread)
        candidates = [settled] if settled is not None and settled >= first else []
        low = max(first - timedelta(microseconds=1), now - spread)
        if schedule.jitter_ms:
            candidates += slots_between(cron, tz, low, now, 1000)
        fire = None
        for candidate in candidates:
            if _fire_ms(schedule, _to_ms(candidate)) <= self.now_ms:
                fire = candidate
        # The catch-up window: a slot older than its start is missed. Default
        # (one period): the newest settled slot opens it.
        if schedule.catchup_window_ms is None:
            start = settled if settled is not None else first
        else:
            start = now - spread - timedelta(milliseconds=schedule.catchup_window_ms)
        if fire is not None and fire < start:
            fire = None
        # The window's slots before the one that fires, newest first, at most
        # MAX_RECORDS (older ones count as missed).
        window: list[datetime] = []
        if fire is not None:
            cursor = fire
            while len(window) < MAX_RECORDS:
                before = previous_slot(cron, tz, cursor - timedelta(microseconds=1))
                if before is None or before < start or before < first:
                    break
                window.append(before)
                cursor = before
            if len(window) == MAX_RECORDS:
                start = window[-1]
            window.reverse()
        # Missed: [first, start).
        cursor = first
        count = 0
        while cursor < start and count < MAX_RECORDS:
            self.slot_record(_to_ms(cursor), "missed", "missed: older than the catch-up window")
            self.last_slot_ms = _to_ms(cursor)
            count += 1
            cursor = next_slot(cron, tz, cursor)
        if cursor < start:
            last = previous_slot(cron, tz, start - timedelta(microseconds=1))
            assert last is not None
            total = count_slots(cron, tz, cursor - timedelta(microseconds=1), last)
            self.span_record(
                _to_ms(cursor),
                _to_ms(last),
                total,
                "missed",
                f"missed: {total} slots older than the catch-up window",
            )
            self.last_slot_ms = _to_ms(last)
            cursor = next_slot(cron, tz, last)
        if fire is None:
            self.next_slot_ms = _to_ms(cursor)
            return
        for slot in window:
            if schedule.overlap == "allow_all":
                self.fire_slot(_to_ms(slot))
            else:
                self.slot_record(_to_ms(slot), "skipped", "coalesced")
        self.fire_slot(_to_ms(fire))
        self.last_slot_ms = _to_ms(fire)
        self.next_slot_ms = _to_ms(next_slot(cron, tz, fire))


def _canonical(value: Any) -> str:
    import json

    return json.dumps(_plain(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def schedule_step(
    state: ScheduleState | None, now: datetime, item: ScheduleInput, *, firing: bool = True
) -> ScheduleStep:
    """Decide ``item`` at ``now`` (docs/schedules.md, "Downtime and catch-up", "Overlap").
    Pure and deterministic: the same state, instant and input give equal
    effects. ``state`` None: no schedule (only :class:`Define` does anything).

    ``firing`` False is the global switch turned off (docs/schedules.md, "The
    global switch"): a :class:`Define` applies without first deciding what was
    due, and a :class:`Report` ends its run without releasing a buffered slot
    (it fires at the first tick once firing again). Nothing is dispatched; a
    :class:`ScheduleTick` must not be sent then."""
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"now must be a timezone-aware datetime, got {now!r}")
    if state is None:
        if not isinstance(item, Define):
            return ScheduleStep(None, ())
        schedule = item.schedule
        upcoming = (
            _to_ms(next_slot(schedule.cron, schedule.timezone, now)) if schedule.enabled else None
        )
        return ScheduleStep(ScheduleState(schedule, 1, upcoming, None), ())
    decision = _Decision(state, now)
    decision.firing = firing
    if isinstance(item, ScheduleTick):
        decision.tick()
    elif isinstance(item, Define):
        _define(decision, item.schedule)
    elif isinstance(item, Remove):
        for run in decision.active:
            decision.record(
                run.run_id,
                "aborted",
                run.triggered_by,
                run.slot_ms,
                attempt=run.attempt,
                root_run_id=run.root_run_id,
                started_ms=run.started_ms,
                ended=True,
                error="aborted: the schedule was removed",
                context=run.context,
            )
        if decision.buffered is not None:
            decision.slot_record(decision.buffered.slot_ms, "skipped", "the schedule was removed")
        return ScheduleStep(None, tuple(decision.effects))
    elif isinstance(item, Wake):
        _wake(decision, item)
    elif isinstance(item, Report):
        ended = next((a for a in decision.active if a.run_id == item.run_id), None)
        if ended is None:
            return ScheduleStep(state, ())  # late, duplicate, or after a timeout
        if item.status == "completed":
            quiet = state.schedule.heartbeat and item.output.strip() == HEARTBEAT_OK
            decision.end(ended, "suppressed" if quiet else "completed", item.output, None)
        else:
            decision.end(ended, "failed", item.output or None, item.error or "failed")
    else:  # pragma: no cover
        raise TypeError(f"not a schedule input: {item!r}")
    return decision.step()


def _define(decision: _Decision, schedule: Schedule) -> None:
    """An update: what was due under the old definition is decided first; then
    the next slot is the first after max(now, last slot) (unchanged when the
    expression and time zone are); paused: none. Switched off (``firing``
    False), nothing due is decided: it comes due at the first tick after."""
    if decision.firing:
        decision.tick()
    previous = decision.schedule
    decision.schedule = schedule
    decision.version += 1
    if decision.buffered is not None and (not schedule.enabled or schedule.overlap != "buffer_one"):
        pending, decision.buffered = decision.buffered, None
        decision.slot_record(
            pending.slot_ms, "skipped", "paused" if not schedule.enabled else "overlap changed"
        )
    if not schedule.enabled:
        decision.next_slot_ms = None
        return
    if (
        previous.enabled
        and decision.next_slot_ms is not None
        and (previous.cron.expr, previous.timezone) == (schedule.cron.expr, schedule.timezone)
    ):
        return  # the same clock: a slot still waiting for its jitter keeps its turn
    after = decision.now
    if decision.last_slot_ms is not None and decision.last_slot_ms > decision.now_ms:
        after = _dt(decision.last_slot_ms)
    elif not decision.firing and previous.enabled and decision.next_slot_ms is not None:
        # Switched off, what came due is still undecided: the new clock's slots
        # since then come due (and are caught up or missed) once firing again.
        after = _dt(min(decision.next_slot_ms, decision.now_ms) - 1)
    decision.next_slot_ms = _to_ms(next_slot(schedule.cron, schedule.timezone, after))


def _wake(decision: _Decision, item: Wake) -> None:
    if item.request_id in decision.requests:
        return
    decision.requests = (*decision.requests, item.request_id)[-MAX_REQUESTS:]
    run = request_run_id(decision.schedule.id, item.request_id)
    context = item.context
    if not decision.schedule.enabled:
        decision.record(run, "skipped", "wake", None, error="paused", context=context)
        return
    if item.skip_if_running and decision.active:
        decision.record(
            run,
            "skipped",
            "wake",
            None,
            error=f"skip_if_running: run {decision.active[0].run_id} is running",
            context=context,
        )
        return
    decision.fire(run, "wake", None, context=context)
