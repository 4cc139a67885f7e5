"""Bytes ↔ messages. orjson on the hot path; errors say what is wrong."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import TypeAdapter, ValidationError

from topics._errors import ContractError, describe_errors
from topics._limits import MAX_RECORD_BYTES, LimitError, exact_numbers, plain_json
from topics._messages import InboxEvent, InboxMessage, JobStart, ScheduleWake

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
            # Each field is measured as the gateway measures a body's fields.
            for name, item in data.items():
                plain_json(item, str(name))
    except orjson.JSONDecodeError as exc:
        raise RecordError(f"not JSON: {exc}") from None
    except LimitError as exc:
        raise RecordError(str(exc)) from None
    if not isinstance(data, dict):
        raise RecordError(f"expected a JSON object, got {type(data).__name__}")
    if "type" not in data:
        raise RecordError("type: missing (expected 'job.start', 'event' or 'schedule.wake')")
    try:
        message: JobStart | InboxEvent | ScheduleWake = _INBOX.validate_python(data)
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
