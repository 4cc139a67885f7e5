"""Dead letters (docs/kafka.md): why a record could not be used and where it
was read, as the headers of a copy of its bytes.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from topics._vocab import SCHEMA

__all__ = [
    "DEADLETTER_HEADERS",
    "DeadLetter",
    "Headers",
]


#: The header names of a dead letter (the usual dead-letter-queue shape, as
#: Kafka Connect writes it): the record's value and key are the original's,
#: byte for byte, and these headers say where it came from and why.
DEADLETTER_HEADERS = {
    "schema": "lemongraph.dlq.schema",
    "topic": "lemongraph.dlq.topic",
    "partition": "lemongraph.dlq.partition",
    "offset": "lemongraph.dlq.offset",
    "timestamp": "lemongraph.dlq.timestamp",
    "reason": "lemongraph.dlq.reason",
    "at": "lemongraph.dlq.at",
}

#: A reason is cut to this many characters, so that the headers stay small.
REASON_MAX = 1000

Headers = list[tuple[str, bytes]]


class DeadLetter(BaseModel):
    """Why a record could not be used and where it was read: the headers of its
    dead letter, whose key and value are the original record's bytes.

    A dead letter is never larger than the record it carries plus these headers
    (well under 1 KB): write it with :meth:`headers`, read it back with
    :meth:`from_headers`, and :meth:`describe` it for people.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_: int = Field(SCHEMA, alias="schema", ge=1, le=SCHEMA)
    topic: str
    partition: int
    offset: int
    #: The original record's timestamp (epoch ms; -1: it had none).
    timestamp: int = -1
    reason: str
    at: str

    @classmethod
    def of(
        cls,
        topic: str,
        partition: int,
        offset: int,
        reason: str,
        at: str,
        timestamp: int = -1,
    ) -> DeadLetter:
        """The dead letter of the record at ``topic``/``partition``/``offset``."""
        if len(reason) > REASON_MAX:
            reason = reason[: REASON_MAX - 3] + "..."
        return cls(
            topic=topic,
            partition=partition,
            offset=offset,
            timestamp=timestamp,
            reason=reason,
            at=at,
        )

    def headers(self, original: Sequence[tuple[str, bytes]] = ()) -> Headers:
        """The record headers: the original record's own (a dead-letter header it
        carried is replaced), then these."""
        names = DEADLETTER_HEADERS
        ours = [
            (names["schema"], str(self.schema_).encode()),
            (names["topic"], self.topic.encode()),
            (names["partition"], str(self.partition).encode()),
            (names["offset"], str(self.offset).encode()),
            (names["timestamp"], str(self.timestamp).encode()),
            (names["reason"], self.reason.encode()),
            (names["at"], self.at.encode()),
        ]
        mine = {name for name, _ in ours}
        return [(n, v) for n, v in original if n not in mine] + ours

    @classmethod
    def from_headers(cls, headers: Sequence[tuple[str, bytes]]) -> DeadLetter:
        """Read the headers of a dead letter back. Raises ``ValueError`` when it
        is not one."""
        by_name = {name: value for name, value in headers}
        data: dict[str, Any] = {}
        for field_name, header in DEADLETTER_HEADERS.items():
            if header in by_name:
                data[field_name] = by_name[header].decode("utf-8", "replace")
        return cls.model_validate(data)

    def describe(self, key: bytes | None, value: bytes | None) -> dict[str, Any]:
        """JSON-ready: these fields, then the key and the value, each as text
        when it is UTF-8 (``key``, ``value_text``) and else as base64
        (``key_b64``, ``value_b64``). ``lemongraph tail deadletter`` prints this."""
        out: dict[str, Any] = {"type": "deadletter", **self.model_dump(mode="json", by_alias=True)}
        out["key"], out["key_b64"] = _text_or_b64(key)
        out["value_text"], out["value_b64"] = _text_or_b64(value)
        out["value_bytes"] = None if value is None else len(value)
        return out


def _text_or_b64(raw: bytes | None) -> tuple[str | None, str | None]:
    if raw is None:
        return None, None
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, base64.b64encode(raw).decode()
