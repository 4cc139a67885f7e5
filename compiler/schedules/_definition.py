"""Schedule definitions and their validation (docs/schedules.md, "A
schedule's fields").

Pure: :func:`validate_schedule` turns what a user wrote (an API body, a
``schedules.yaml`` item, a ``schedules`` record's ``spec``) into a frozen
:class:`Schedule`, or raises :class:`ScheduleError` naming the field path.
``Schedule.to_json()`` gives the definition back, normalised (defaults filled,
durations in their compound form), and ``validate_schedule`` of it is the same
schedule.
"""

from __future__ import annotations

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
    parse_cron,
    zone,
)
from compiler.schedules._ids import slot_id, utc_iso

__all__ = [
    "MAX_DURATION_MS",
    "OVERLAPS",
    "PLACEHOLDER",
    "REPORTED_ACTIONS",
    "SEVERITIES",
    "Overlap",
    "Schedule",
    "default_target",
    "duration_text",
    "plain_data",
    "render_key",
    "slugify",
    "validate_schedule",
]

#: A heartbeat alert's severities (docs/schedules.md, "Heartbeats"): ``meta.severity``
#: (default ``warning``) for a reply that is not ``HEARTBEAT_OK``, ``critical`` for
#: a run that failed or timed out.
SEVERITIES = ("info", "warning", "critical")
Overlap = Literal["skip", "buffer_one", "allow_all"]
OVERLAPS: tuple[Overlap, ...] = ("skip", "buffer_one", "allow_all")
ACTION_TYPES = ("start_job", "send_event", "prompt", "command")
#: The actions whose runs stay active until the agents service reports them
#: (or they time out): the overlap, timeout and retry policies apply to them
#: (docs/schedules.md, "Overlap").
REPORTED_ACTIONS = ("prompt", "command")
#: A catalog tool's name, as the catalog allows it (docs/agents.md).
_TOOL = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]{0,63}")

#: the longest jitter, timeout, retry_backoff or catchup_window (366 days)
MAX_DURATION_MS = 366 * 86_400_000
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_FIELDS = (
    "id",
    "name",
    "schedule",
    "at",
    "timezone",
    "action",
    "command",
    "enabled",
    "jitter",
    "timeout",
    "max_retries",
    "retry_backoff",
    "overlap",
    "catchup_window",
    "deliver_to",
    "job_key",
    "meta",
)
_ACTION_FIELDS = {
    "start_job": ("type", "playbook_key", "subject", "key"),
    "send_event": ("type", "job_key", "event"),
    "prompt": ("type", "agent", "prompt"),
    "command": ("type", "tool", "args"),
}
#: The fields of the seed's form, ``command: {tool: NAME, args: {...}}``.
_COMMAND_FIELDS = ("tool", "args")
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
    "cmd": "command",
    "script": "command",
    "run": "command",
    "arguments": "args",
    "params": "args",
    "parameters": "args",
    "input": "args",
}
_PLACEHOLDERS = ("slot", "schedule", "date", "time", "instant")
#: A ``{placeholder}`` of a key template (render_key fills them).
PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
#: the longest a run's key template may make a slot id look (a sample render)
_SAMPLE = datetime(2026, 1, 5, 9, 30, tzinfo=UTC)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Schedule:
    """A valid schedule definition. Durations are in milliseconds;
    ``catchup_window_ms`` is None for the default (one period: the newest slot
    due catches up, older ones are missed). ``action`` is the normalised action
    object (``{"type": "start_job", "playbook_key": ..., "subject"?, "key"?}``,
    ``{"type": "send_event", "job_key": ..., "event": {...}}``,
    ``{"type": "prompt", "agent": ..., "prompt": ...}`` or
    ``{"type": "command", "tool": ..., "args": {...}}``)."""

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
    #: The job whose conversation the schedule was created from, its owner
    #: (docs/schedules.md, "Delivery"): a prompt or command schedule of a job
    #: delivers to ``web:<job_key>`` unless ``deliver_to`` says otherwise.
    #: None: an operator's schedule.
    job_key: str | None = None
    #: A one-shot's instant (docs/schedules.md, "One-shot schedules"): it runs
    #: once, then is removed; its ``cron`` is that instant's minute on its wall
    #: clock, shown, never evaluated. None: a schedule on a clock.
    at_ms: int | None = None

    @property
    def one_shot(self) -> bool:
        return self.at_ms is not None

    @property
    def action_type(self) -> str:
        return str(self.action["type"])

    @property
    def heartbeat(self) -> bool:
        return self.meta.get("heartbeat") is True

    @property
    def severity(self) -> str:
        """A heartbeat alert's severity when its reply is not ``HEARTBEAT_OK``:
        ``meta.severity``, default ``warning`` (docs/schedules.md, "Heartbeats")."""
        return str(self.meta.get("severity") or "warning")

    def to_json(self) -> dict[str, Any]:
        """The normalised definition (the ``schedules`` record's ``spec``)."""
        out: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "schedule": self.cron.source,
            "timezone": self.timezone,
            "action": plain_data(self.action),
            "enabled": self.enabled,
            "jitter": duration_text(self.jitter_ms),
            "timeout": duration_text(self.timeout_ms),
            "max_retries": self.max_retries,
            "retry_backoff": duration_text(self.retry_backoff_ms),
            "overlap": self.overlap,
            "deliver_to": self.deliver_to,
            "meta": plain_data(self.meta),
        }
        if self.catchup_window_ms is not None:
            out["catchup_window"] = duration_text(self.catchup_window_ms)
        if self.job_key is not None:
            out["job_key"] = self.job_key
        if self.at_ms is not None:
            del out["schedule"]
            out = {"at": utc_iso(_EPOCH + timedelta(milliseconds=self.at_ms)), **out}
        return out


def plain_data(value: Any) -> Any:
    """``value`` with every mapping a dict with text keys and every sequence a list."""
    if isinstance(value, Mapping):
        return {str(k): plain_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_data(v) for v in value]
    return value


def duration_text(ms: int) -> str:
    """Whole seconds as a compound duration (``1h30m``)."""
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
        raise ScheduleError(name, f"must be at least {duration_text(minimum)}, got {value!r}")
    if ms > MAX_DURATION_MS:
        # Longer ones put instants past what a datetime holds (a tick would fail).
        raise ScheduleError(
            name, f"must be at most {duration_text(MAX_DURATION_MS)}, got {value!r}"
        )
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
    ident = _id_of(data.get("id"), name)
    timezone = data.get("timezone", "UTC")
    if timezone is None:
        timezone = "UTC"
    if not isinstance(timezone, str):
        raise ScheduleError("timezone", f"must be an IANA time zone name, got {timezone!r}")
    at_ms: int | None = None
    if data.get("at") is not None:
        if data.get("schedule") is not None:
            raise ScheduleError(
                "at", "give schedule (a clock) or at (one instant, a one-shot), not both"
            )
        at_ms, cron = _one_shot(data["at"], timezone)
    elif "schedule" not in data or data["schedule"] is None:
        raise ScheduleError(
            "schedule", "this field is required (or at: an instant, for a one-shot)"
        )
    else:
        cron = parse_cron(data["schedule"])
    zone(timezone)
    action = _action(_action_of(data))
    enabled = data.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ScheduleError("enabled", f"must be true or false, got {enabled!r}")
    retries = data.get("max_retries", 0)
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 100:
        raise ScheduleError("max_retries", f"must be a whole number 0-100, got {retries!r}")
    overlap = data.get("overlap", "skip")
    if overlap not in OVERLAPS:
        raise ScheduleError("overlap", f"must be one of {', '.join(OVERLAPS)}, got {overlap!r}")
    owner = _owner(data.get("job_key"))
    deliver_to = data.get("deliver_to")
    if deliver_to is None or deliver_to in ("", "auto"):
        deliver_to = default_target(owner, action)
    _deliver_to(deliver_to)
    meta = _meta(data.get("meta", {}), action)
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
        job_key=owner,
        meta=plain_data(meta),
        at_ms=at_ms,
    )
    template = action.get("key")
    if isinstance(template, str):
        try:
            check_key(render_key(template, schedule, _SAMPLE), "the rendered key")
        except JobKeyError as exc:
            raise ScheduleError("action.key", str(exc)) from None
    return schedule


def _one_shot(value: object, timezone: str) -> tuple[int, Cron]:
    """A one-shot's ``at`` (docs/schedules.md, "One-shot schedules"): an ISO
    8601 instant with its offset (``2026-03-09T18:15:00+01:00``, ``...Z``), or
    the aware datetime YAML reads from one, in whole seconds. Its epoch ms and
    the cron of its minute on the schedule's wall clock (what lists show)."""
    instant = value
    if isinstance(value, str):
        try:
            instant = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ScheduleError(
                "at", f"{value!r} is not an ISO 8601 instant such as 2026-03-09T18:15:00+01:00"
            ) from None
    if not isinstance(instant, datetime):
        raise ScheduleError("at", f"must be an ISO 8601 instant with its offset, got {value!r}")
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ScheduleError(
            "at", f"{value!r} has no offset: write Z or +01:00 so that it names one instant"
        )
    if instant.microsecond:
        raise ScheduleError("at", f"{value!r}: an instant in whole seconds")
    try:
        local = instant.astimezone(zone(timezone))
    except ScheduleError:
        local = instant.astimezone(UTC)  # the time zone's own error comes next
    ms = (instant - _EPOCH) // timedelta(milliseconds=1)
    expr = f"{local.minute} {local.hour} {local.day} {local.month} *"
    return ms, Cron(expr, utc_iso(instant))


def _id_of(given: object, name: str) -> str:
    """The schedule's id: as given, else derived from its name."""
    if given is None:
        ident = slugify(name)
        if not ident:
            raise ScheduleError("id", f"cannot be derived from the name {name!r}: give an id")
        return ident
    if not isinstance(given, str) or not _ID.fullmatch(given):
        raise ScheduleError(
            "id",
            f"{given!r} is not a schedule id: 1-64 characters of letters, digits, '.', '_' "
            "and '-', starting with a letter or digit",
        )
    return given


def _meta(meta: object, action: Mapping[str, Any]) -> Mapping[str, Any]:
    """``meta`` (None: empty), whose ``heartbeat`` only a prompt schedule may set."""
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
    severity = meta.get("severity")
    if heartbeat and severity is not None and severity not in SEVERITIES:
        raise ScheduleError(
            "meta.severity",
            f"a heartbeat's alerts are {', '.join(SEVERITIES)} (default warning), got {severity!r}",
        )
    return meta


def _owner(job_key: object) -> str | None:
    """``job_key``: the job a schedule was created from (None: an operator's)."""
    if job_key is None:
        return None
    if not isinstance(job_key, str):
        raise ScheduleError("job_key", f"must be a job key, got {job_key!r}")
    try:
        check_key(job_key, "the job key")
    except JobKeyError as exc:
        raise ScheduleError("job_key", str(exc)) from None
    return job_key


def default_target(job_key: str | None, action: Mapping[str, Any]) -> str:
    """Where a schedule delivers when ``deliver_to`` is not given (or ``auto``):
    the conversation of the job it was created from (``web:<job_key>``) for a
    prompt or command schedule, since those deliver; ``none`` for an operator's
    schedule (no ``job_key``) and for ``start_job`` and ``send_event``, which
    deliver nothing (docs/schedules.md, "Delivery")."""
    if job_key is not None and action.get("type") in REPORTED_ACTIONS:
        return f"web:{job_key}"
    return "none"


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
        "deliver_to",
        f"must be none, auto, web:<job key> or email:<address>, got {target!r}",
    )


def _action_of(data: Mapping[str, Any]) -> dict[str, Any]:
    """The action as written: ``action``, or the seed's form ``command: {tool,
    args}``, which is the action ``{type: command, tool, args}``
    (docs/schedules.md, "Command jobs")."""
    command = data.get("command")
    if command is None:
        return _action(data.get("action"))
    if data.get("action") is not None:
        raise ScheduleError(
            "command",
            "give action or command, not both (command: {tool, args} is the action "
            "{type: command, tool, args})",
        )
    if not isinstance(command, Mapping):
        raise ScheduleError("command", "must be an object: {tool: NAME, args: {...}}")
    _unknown(command, _COMMAND_FIELDS, "command.")
    return _command(command, "command.")


def _command(raw: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """A command action: a catalog tool's name and its arguments, a JSON object
    (the catalog, which the compiler does not read, checks both: docs/schedules.md,
    "Command jobs")."""
    tool = _text(raw, "tool", f"{prefix}tool")
    assert tool is not None
    if not _TOOL.fullmatch(tool):
        raise ScheduleError(
            f"{prefix}tool",
            f"{tool!r} is not a tool name: 1-64 letters, digits, '_' and '-', starting with "
            "a letter or '_'",
        )
    args = raw.get("args")
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        raise ScheduleError(
            f"{prefix}args",
            f"must be a JSON object (the tool's arguments), got {type(args).__name__}",
        )
    _json_value(args, f"{prefix}args")
    return {"type": "command", "tool": tool, "args": plain_data(args)}


def _json_value(value: object, path: str) -> None:
    """Refuse what JSON cannot carry (a YAML date, a non-text key, NaN)."""
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ScheduleError(path, f"{value!r} is not a JSON number")
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _json_value(item, f"{path}.{index}")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ScheduleError(path, f"the key {key!r} is not text: JSON keys are text")
            _json_value(item, f"{path}.{key}")
        return
    raise ScheduleError(
        path, f"{value!r} ({type(value).__name__}) is not JSON: quote it to make it text"
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
    if kind == "command":
        return _command(raw, "action.")
    if kind == "start_job":
        out["playbook_key"] = _text(raw, "playbook_key", "action.playbook_key")
        subject = raw.get("subject")
        if subject is not None:
            if not isinstance(subject, Mapping):
                raise ScheduleError("action.subject", "must be an object")
            out["subject"] = plain_data(subject)
        key = _text(raw, "key", "action.key", required=False)
        if key is not None:
            for match in PLACEHOLDER.finditer(key):
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
            item["value"] = plain_data(event["value"])
        properties = event.get("properties")
        if properties is not None:
            if not isinstance(properties, Mapping):
                raise ScheduleError("action.event.properties", "must be an object")
            item["properties"] = plain_data(properties)
        out["event"] = item
    else:
        out["agent"] = _text(raw, "agent", "action.agent")
        out["prompt"] = _text(raw, "prompt", "action.prompt")
    return out


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
    return PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group()), template)
