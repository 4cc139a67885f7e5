"""Bytes ↔ messages. orjson on the hot path; errors say what is wrong."""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from pydantic import TypeAdapter, ValidationError

from topics._errors import ContractError, describe_errors
from topics._limits import MAX_RECORD_BYTES, LimitError, exact_numbers, plain_json
from topics._messages import InboxEvent, InboxMessage, JobStart, ScheduleWake
from topics.build import inbox_event_fields, job_start_fields

__all__ = ["RecordError", "decode_inbox", "encode"]

_INBOX: TypeAdapter[Any] = TypeAdapter(InboxMessage)


class RecordError(ContractError):
    """A record that cannot be used; ``reason`` says why, in words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def encode(data: Any) -> bytes:
    """A message (pydantic model or JSON-ready data) as compact JSON bytes."""
    if hasattr(data, "dump"):
        data = data.dump()
    return orjson.dumps(data)


def decode_inbox(
    raw: bytes | None, key: bytes | None = None
) -> JobStart | InboxEvent | ScheduleWake:
    """An inbox record (``JobStart``, ``InboxEvent`` or ``ScheduleWake``). The
    record key, when given, must be the job key (a wake's: the schedule id).
    Records beyond the limits of ``topics/_limits.py`` (size, nesting, 64-bit
    integers) are refused here, so that nothing after the decoder fails on
    their shape. Raises
    :class:`RecordError`."""
    if raw is None:
        raise RecordError("empty record (no value)")
    if len(raw) > MAX_RECORD_BYTES:
        raise RecordError(
            f"record of {len(raw):,} bytes is larger than the limit of {MAX_RECORD_BYTES:,}"
        )
    try:
        data = exact_numbers(raw, orjson.loads(raw))
        if isinstance(data, dict):
            # Each field is measured as the gateway measures a body's fields
            # (text, null and booleans are within every limit: most fields).
            for name, item in data.items():
                if not (item is None or type(item) is str or type(item) is bool):
                    plain_json(item, name)
    except orjson.JSONDecodeError as exc:
        raise RecordError(f"not JSON: {exc}") from None
    except LimitError as exc:
        raise RecordError(str(exc)) from None
    if not isinstance(data, dict):
        raise RecordError(f"expected a JSON object, got {type(data).__name__}")
    if "type" not in data:
        raise RecordError("type: missing (expected 'job.start', 'event' or 'schedule.wake')")
    message: JobStart | InboxEvent | ScheduleWake | None = checked_inbox(data)
    if message is None:
        try:
            message = _INBOX.validate_python(data)
        except ValidationError as exc:
            raise RecordError(describe_errors(exc)) from None
    # Bytes, not decoded text: the partition is chosen from the key's bytes, and
    # two keys that are not UTF-8 would decode alike (U+FFFD) and be one job on
    # two partitions.
    if key is not None and key != message.key.encode():
        what = "schedule id" if isinstance(message, ScheduleWake) else "job key"
        raise RecordError(
            f"record key {key.decode('utf-8', 'replace')!r} is not the {what} {message.key!r}"
        )
    return message


# -- the common records, without the model -------------------------------------------
#
# pydantic's validation was most of decode_inbox (5.8 of 7.9 µs per record;
# benchmarks/README.md, issue 35). An event or a job start whose every field is
# plainly what the model asks for is read by topics/build.py's compiled
# ``inbox_event_fields`` / ``job_start_fields`` and made into the model here
# without validating it again; anything else (a wake, a field of another type,
# a value the model would coerce or refuse) is left to the model, so every
# refusal and its reason is the model's.


def checked_inbox(data: dict[str, Any]) -> JobStart | InboxEvent | None:
    """``data`` (a decoded inbox record) as the model it is, when it is an event
    or a job start that the model takes as it is; else None (the model decides,
    and says what is wrong)."""
    kind = data["type"]
    if kind == "event":
        values = inbox_event_fields(data)
        return None if values is None else _built(InboxEvent, values, data)
    if kind == "job.start":
        values = job_start_fields(data)
        return None if values is None else _built(JobStart, values, data)
    return None


_M = TypeVar("_M", InboxEvent, JobStart)
_new = object.__new__
_set = object.__setattr__


def _built(model: type[_M], values: dict[str, Any], data: dict[str, Any]) -> _M:
    """An instance of ``model`` holding ``values`` (every field, in the model's
    order), as validating ``data`` would have made it: what ``model_construct``
    does (pydantic 2's four instance attributes), without its generic walk over
    the fields, which cost more than validating."""
    given = set(data)
    if "schema" in data:
        given.discard("schema")
        given.add("schema_")
    instance = _new(model)
    _set(instance, "__dict__", values)
    _set(instance, "__pydantic_fields_set__", given)
    _set(instance, "__pydantic_extra__", None)
    _set(instance, "__pydantic_private__", None)
    return instance
