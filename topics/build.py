"""Fast builders: the records the decision core and the engine write, as plain
JSON-ready data, without validating our own output on the hot path.

Each builder makes exactly the fields of one model of ``topics`` (the
model named in its docstring), in the order they go on the wire, so a
re-decided record is byte-identical. ``tests/topics/test_builders.py`` proves
that every builder and its model agree on every field: the model accepts what
the builder makes and dumps it back unchanged. Instants arrive as ISO-8601
text (the core's instant codec, ``compiler.to_iso``, formats them).

This module is compiled with the decision core (setup.py), so the core's calls
into it cost what a call inside the core costs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from topics._keys import MAX_KEY_LENGTH, JobKeyError, check_contacts, check_key, check_label
from topics._vocab import SCHEMA, SOURCES

__all__ = [
    "decision_body",
    "decision_record",
    "event_input",
    "explanation",
    "fact_remembered",
    "inbox_event_fields",
    "job_finished",
    "job_snapshot",
    "job_start_fields",
    "memory_fact_record",
    "milestone_snapshot",
    "record_origin",
    "start_input",
    "task_closed",
    "task_closed_record",
    "task_opened",
    "task_opened_record",
    "tick_input",
    "timer",
    "timer_cancelled",
    "timer_set",
    "transition",
    "verdict",
]


# -- a decision's input (StartInput, EventInput, TickInput) ----------------------------


def start_input(
    key: str, playbook_key: str, subject: Mapping[str, Any], contacts: Sequence[Any]
) -> dict[str, Any]:
    """``StartInput``."""
    return {
        "type": "job.start",
        "key": key,
        "playbook_key": playbook_key,
        "subject": dict(subject),
        "contacts": list(contacts),
    }


def event_input(
    action: str,
    value: Any,
    properties: Mapping[str, Any] | None,
    source: str,
    idempotency_key: str | None,
    id: str | None,
) -> dict[str, Any]:
    """``EventInput`` (``idempotency_key`` and ``id`` only when set)."""
    out: dict[str, Any] = {
        "type": "event",
        "action": action,
        "value": value,
        "properties": dict(properties) if properties is not None else {},
        "source": source,
    }
    if idempotency_key is not None:
        out["idempotency_key"] = idempotency_key
    if id is not None:
        out["id"] = id
    return out


def tick_input() -> dict[str, Any]:
    """``TickInput``."""
    return {"type": "tick"}


# -- a decision's parts ------------------------------------------------------------------


def timer(at: str, kind: str, milestone: str) -> dict[str, Any]:
    """``TimerRecord``."""
    return {"at": at, "kind": kind, "milestone": milestone}


def explanation(data: Mapping[str, Any]) -> dict[str, Any]:
    """``ExplanationRecord``, from the core's explanation (the state's): its
    verdict, whether the world was closed, and its atoms. The condition's text
    is left out: it is the playbook's, and the milestone and the playbook
    version name it (docs/kafka.md, "What a record no longer carries")."""
    return {"verdict": data["verdict"], "closed": data["closed"], "atoms": data["atoms"]}


def verdict(milestone: str, at: str | None, data: Mapping[str, Any]) -> dict[str, Any]:
    """``VerdictRecord``: the milestone, the instant (None: the decision's ``now``,
    left out), then its ``ExplanationRecord`` (``explanation``: without the
    condition's text)."""
    out: dict[str, Any] = {"milestone": milestone}
    if at is not None:
        out["at"] = at
    out["verdict"] = data["verdict"]
    out["closed"] = data["closed"]
    out["atoms"] = data["atoms"]
    return out


def transition(
    milestone: str, before: str, after: str, at: str | None, reason: str
) -> dict[str, Any]:
    """``TransitionRecord`` (``at`` None: the decision's ``now``, left out)."""
    if at is None:
        return {"milestone": milestone, "from": before, "to": after, "reason": reason}
    return {"milestone": milestone, "from": before, "to": after, "at": at, "reason": reason}


def task_opened(
    task_id: str, job_key: str, milestone: str, at: str, deadline: str
) -> dict[str, Any]:
    """``TaskOpenedEffect``: a task.opened in a decision's effects. What the task
    asks for (its instructions, the playbook's, its integrations) is the
    playbook's, and the frontier is the decision's own: the task record on
    ``tasks`` carries them (``task_opened_record``; docs/kafka.md, "Records the
    worker writes")."""
    return {
        "type": "task.opened",
        "task_id": task_id,
        "job_key": job_key,
        "milestone": milestone,
        "at": at,
        "deadline": deadline,
    }


def task_closed(
    task_id: str, job_key: str, milestone: str, at: str, outcome: str
) -> dict[str, Any]:
    """``TaskClosedEffect``: a task.closed in a decision's effects."""
    return {
        "type": "task.closed",
        "task_id": task_id,
        "job_key": job_key,
        "milestone": milestone,
        "at": at,
        "outcome": outcome,
    }


def timer_set(at: str, kind: str, milestone: str) -> dict[str, Any]:
    """``TimerSetEffect``."""
    return {"type": "timer.set", "at": at, "kind": kind, "milestone": milestone}


def timer_cancelled(at: str, kind: str, milestone: str) -> dict[str, Any]:
    """``TimerCancelledEffect``."""
    return {"type": "timer.cancelled", "at": at, "kind": kind, "milestone": milestone}


def job_finished(job_key: str, status: str, at: str) -> dict[str, Any]:
    """``JobFinishedEffect``."""
    return {"type": "job.finished", "job_key": job_key, "status": status, "at": at}


def fact_remembered(
    subject: str,
    name: str,
    value: Any,
    properties: Mapping[str, Any] | None,
    source: str,
    event_id: str,
    job_key: str,
    at: str,
) -> dict[str, Any]:
    """``FactRememberedEffect`` (topics/_memory.py)."""
    return {
        "type": "fact.remembered",
        "subject": subject,
        "name": name,
        "value": value,
        "properties": dict(properties) if properties is not None else {},
        "source": source,
        "event_id": event_id,
        "job_key": job_key,
        "at": at,
    }


# -- records on the topics ---------------------------------------------------------------


def memory_fact_record(effect: Mapping[str, Any]) -> dict[str, Any]:
    """``MemoryFact`` (memory-facts topic): the ``fact.remembered`` effect as a record."""
    return {"schema": SCHEMA, **effect, "type": "memory.fact"}


def task_opened_record(
    effect: Mapping[str, Any],
    instructions: str,
    playbook_instructions: str,
    integrations: Sequence[str],
    frontier: Sequence[str],
    playbook_key: str,
    subject: Mapping[str, Any],
    contacts: Sequence[Any],
) -> dict[str, Any]:
    """``TaskOpenedRecord`` (tasks topic): the effect, with what the task asks
    for and what a channel service needs to talk to the job's contacts."""
    return {
        "schema": SCHEMA,
        **effect,
        "instructions": instructions,
        "playbook_instructions": playbook_instructions,
        "integrations": list(integrations),
        "frontier": list(frontier),
        "playbook_key": playbook_key,
        "subject": dict(subject),
        "contacts": list(contacts),
    }


def task_closed_record(effect: Mapping[str, Any]) -> dict[str, Any]:
    """``TaskClosedRecord`` (tasks topic)."""
    return {"schema": SCHEMA, **effect}


def decision_body(
    now: str,
    input: Mapping[str, Any],
    outcome: str,
    refused: str | None,
    seq: int | None,
    fired: list[dict[str, Any]],
    verdicts: list[dict[str, Any]],
    transitions: list[dict[str, Any]],
    effects: list[dict[str, Any]],
    frontier: Sequence[str],
    status: str | None,
    state_hash: str | None,
) -> dict[str, Any]:
    """What the core decided: the part of a ``DecisionRecord`` the core fills
    (``decision_record`` adds where the input came from)."""
    return {
        "now": now,
        "input": input,
        "outcome": outcome,
        "refused": refused,
        "seq": seq,
        "fired": fired,
        "verdicts": verdicts,
        "transitions": transitions,
        "effects": effects,
        "frontier": list(frontier),
        "status": status,
        "state_hash": state_hash,
    }


def record_origin(
    topic: str, partition: int, offset: int, read_partition: int, read_offset: int
) -> dict[str, Any]:
    """``RecordOrigin``: where the producer put the record; ``forwarded``
    (``RecordForward``) only when the copy decided was read elsewhere."""
    out: dict[str, Any] = {"topic": topic, "partition": partition, "offset": offset}
    if read_partition != partition:
        out["forwarded"] = {"partition": read_partition, "offset": read_offset}
    return out


def decision_record(
    job_key: str,
    playbook_key: str | None,
    playbook_version: int | None,
    origin: Mapping[str, Any] | None,
    prev_state_hash: str | None,
    body: Mapping[str, Any],
    record_timestamp: int,
    bound: str | None,
) -> dict[str, Any]:
    """``DecisionRecord`` (decisions topic). ``bound`` (with the record's
    timestamp) is the ``ClockBound``: why ``now`` is not the record's
    timestamp; None when it is."""
    out: dict[str, Any] = {
        "type": "decision",
        "schema": SCHEMA,
        "job_key": job_key,
        "playbook_key": playbook_key,
        "playbook_version": playbook_version,
        "origin": origin,
        "prev_state_hash": prev_state_hash,
        **body,
    }
    if bound is not None:
        out["clock"] = {"record_timestamp": record_timestamp, "bound": bound}
    return out


#: A milestone's optional parts, in the order a snapshot writes them (its
#: explanation apart: ``explanation`` builds it, last).
_MILESTONE_PARTS = ("opened_at", "deadline", "task_at", "settled_at", "outcome")


def milestone_snapshot(state: Mapping[str, Any]) -> dict[str, Any]:
    """``MilestoneSnapshot``, from a milestone's part of job state: only the
    parts it has (a pending milestone is ``{"state": "pending"}``; the model
    reads an absent part as null: docs/kafka.md, "Records the worker writes"),
    ``task_at`` only when it is not ``opened_at`` (a ``due`` held the task
    back), its explanation without the condition's text (``explanation``)."""
    out: dict[str, Any] = {"state": state["status"]}
    for name in _MILESTONE_PARTS:
        value = state.get(name)
        if value is not None:
            out[name] = value
    if "task_at" in out and out["task_at"] == out.get("opened_at"):
        del out["task_at"]  # no due: the task went out when it opened
    data = state.get("explanation")
    if data is not None:
        out["explanation"] = explanation(data)
    return out


def job_snapshot(state: Mapping[str, Any], frontier: Sequence[str]) -> dict[str, Any]:
    """``JobSnapshot`` (a job's view, which the gateway builds: docs/kafka.md, "The
    job table's changelog"), from job state as JSON and the frontier.
    Each milestone's state is in its ``detail`` only, and the state's hash is
    on the decision only (docs/kafka.md, "What a record no longer carries")."""
    parts: Mapping[str, Any] = state["milestones"]
    return {
        "type": "job.snapshot",
        "schema": SCHEMA,
        "key": state["key"],
        "status": state["status"],
        "playbook_key": state["playbook_key"],
        "playbook_version": state["playbook_version"],
        "seq": state["seq"],
        "started_at": state["started_at"],
        "updated_at": state["updated_at"],
        "ended_at": state["ended_at"],
        "events": state["events"],
        "detail": {mid: milestone_snapshot(m) for mid, m in parts.items()},
        "frontier": list(frontier),
        "timers": state["timers"],
    }


# -- the inbox's common records, read without the model ------------------------------
#
# The inverse direction, for the two records most of an inbox holds: the
# fields of an ``InboxEvent`` or a ``JobStart`` from a decoded record, when the
# model would take the record exactly as it is (nothing to coerce, nothing to
# refuse); else None, and the model decides and says what is wrong
# (topics/_codec.py, ``decode_inbox``). Compiled, this costs a fraction of the
# model's validation (benchmarks/README.md, issue 35, third pass);
# tests/topics/test_inbox_checked.py holds the two to the same result on
# generated records, valid and not. ``data`` is what ``orjson.loads`` made of
# a record (its keys strings), within topics/_limits.py's limits.

#: The fields of each, by their names on the wire.
_EVENT_FIELDS: frozenset[str] = frozenset(
    ("type", "schema", "key", "action", "value", "properties", "idempotency_key", "source")
)
_START_FIELDS: frozenset[str] = frozenset(
    ("type", "schema", "key", "playbook_key", "subject", "contacts")
)


class _Absent:
    """Not in the record (None is a value some fields take)."""


_ABSENT = _Absent()


def _common_ok(data: dict[str, Any], fields: frozenset[str]) -> bool:
    """Only ``fields``, the schema version this code reads (an ``int``: the
    model would coerce anything else, or refuse it), and a key that obeys the
    key rule."""
    for name in data:
        if name not in fields:
            return False
    schema = data.get("schema", SCHEMA)
    if type(schema) is not int or schema != SCHEMA:
        return False
    key = data.get("key")
    if type(key) is not str:
        return False
    if _plain_ascii(key) and "/" not in key and key != "." and key != "..":
        return True
    try:
        check_key(key)
    except JobKeyError:
        return False
    return True


def _plain_ascii(value: str) -> bool:
    """Printable ASCII of 1 to 200 characters, without a space at either end:
    what topics/_keys.py's rule takes without looking at each character (the
    rule itself, in plain Python, is for anything else)."""
    return (
        0 < len(value) <= MAX_KEY_LENGTH
        and value.isascii()
        and value.isprintable()
        and value[0] != " "
        and value[-1] != " "
    )


def _text_ok(value: object) -> bool:
    """A ``StrictStr`` of 1 to 200 characters."""
    return type(value) is str and 0 < len(value) <= 200


def _object(value: object) -> dict[str, Any] | None:
    """A ``dict[str, Any]`` field: a copy of the object, ``{}`` when absent,
    None when it is anything else (the model refuses it)."""
    if value is _ABSENT:
        return {}
    if isinstance(value, dict) and type(value) is dict:
        return dict(value)
    return None


def inbox_event_fields(data: dict[str, Any]) -> dict[str, Any] | None:
    """``InboxEvent``'s fields, in the model's order (``schema_`` first), or None."""
    if not _common_ok(data, _EVENT_FIELDS):
        return None
    action = data.get("action")
    value = data.get("value")
    properties = _object(data.get("properties", _ABSENT))
    idempotency_key = data.get("idempotency_key")
    source = data.get("source", "world")
    if not _text_ok(action):
        return None
    # A Scalar keeps its type (pydantic's smart union matches it exactly).
    if value is not None and type(value) not in (str, int, float, bool):
        return None
    if properties is None:
        return None
    if type(source) is not str or source not in SOURCES:
        return None
    if idempotency_key is not None:
        if type(idempotency_key) is not str:
            return None
        if not _plain_ascii(idempotency_key):
            try:
                check_label(idempotency_key, "idempotency key")
            except JobKeyError:
                return None
    return {
        "schema_": SCHEMA,
        "type": "event",
        "key": data["key"],
        "action": action,
        "value": value,
        "properties": properties,
        "idempotency_key": idempotency_key,
        "source": source,
    }


def job_start_fields(data: dict[str, Any]) -> dict[str, Any] | None:
    """``JobStart``'s fields, in the model's order (``schema_`` first), or None."""
    if not _common_ok(data, _START_FIELDS):
        return None
    playbook_key = data.get("playbook_key")
    subject = _object(data.get("subject", _ABSENT))
    contacts = data.get("contacts", _ABSENT)
    if not _text_ok(playbook_key) or subject is None:
        return None
    if contacts is _ABSENT:
        contacts = []
    elif type(contacts) is list:
        try:
            contacts = list(check_contacts(contacts))
        except JobKeyError:
            return None
    else:
        return None
    return {
        "schema_": SCHEMA,
        "type": "job.start",
        "key": data["key"],
        "playbook_key": playbook_key,
        "subject": subject,
        "contacts": contacts,
    }
