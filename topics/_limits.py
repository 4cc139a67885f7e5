"""What an inbox record may hold, checked once at the edge (the inbox decoder and
the gateway apply the same limits), so that nothing past it can fail on shape.

* nesting at most :data:`MAX_DEPTH` levels (orjson refuses to *write* more
  than 254, so a deeper record could be read but never decided);
* integers within 64 bits (a JSON parser reads a longer one as a float, and
  would silently change it);
* finite numbers;
* at most :data:`MAX_RECORD_BYTES` bytes per record, small enough that a
  forwarded copy or a dead letter of it (the same bytes plus a few headers)
  still fits Apache Kafka's default ``max.message.bytes`` (1,048,588).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from topics._errors import ContractError

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "MAX_DEPTH",
    "MAX_RECORD_BYTES",
    "LimitError",
    "exact_numbers",
    "plain_json",
]

MAX_DEPTH = 32
MAX_RECORD_BYTES = 1_000_000
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

#: 19 digits in a row: the only way to spell an integer beyond 64 bits.
_LONG_DIGITS = re.compile(rb"\d{19}")
#: Every byte but the ASCII digits (what ``bytes.translate`` deletes to count them).
_NOT_DIGITS = bytes(b for b in range(256) if not 0x30 <= b <= 0x39)


class LimitError(ContractError):
    """A value beyond the limits; the message names where (``properties.a.b``)."""


def plain_json(value: Any, where: str = "", depth: int = 0) -> Any:
    """``value`` unchanged when it is within the limits, else :class:`LimitError`."""
    if depth > MAX_DEPTH:
        raise LimitError(f"{where or 'value'}: nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise LimitError(f"{where or 'value'}: integers must fit in 64 bits")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise LimitError(f"{where or 'value'}: numbers must be finite")
        return value
    if isinstance(value, dict):
        for name, item in value.items():
            plain_json(item, f"{where}.{name}" if where else str(name), depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            plain_json(item, f"{where}[{index}]", depth + 1)
    return value


def _int64(text: str) -> int:
    number = int(text)
    if not INT64_MIN <= number <= INT64_MAX:
        raise LimitError(f"integer {text[:24]}{'...' if len(text) > 24 else ''} is beyond 64 bits")
    return number


def exact_numbers(raw: bytes, parsed: Any) -> Any:
    """``parsed`` (what orjson read from ``raw``), re-read exactly when ``raw``
    may hold an integer beyond 64 bits, which orjson turns into a float.
    Raises :class:`LimitError` for such an integer."""
    # A record with fewer than 19 digits in all cannot hold such a run; counting
    # them (the bytes without the others) costs a fifth of the search.
    if len(raw.translate(None, _NOT_DIGITS)) < 19 or _LONG_DIGITS.search(raw) is None:
        return parsed
    return json.loads(raw, parse_int=_int64)
