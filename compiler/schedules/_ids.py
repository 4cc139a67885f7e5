"""The ids and jitter of a schedule's runs (docs/schedules.md, "Exactly
once: slot ids"): derived from the schedule id and the slot, the run or the
request, so a re-decided step names the same runs.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

__all__ = [
    "jitter_ms",
    "manual_run_id",
    "request_run_id",
    "retry_id",
    "slot_id",
    "utc_iso",
]


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def utc_iso(instant: datetime) -> str:
    """An instant as UTC ISO-8601 with a ``Z``."""
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def slot_id(schedule_id: str, nominal: datetime) -> str:
    """A slot's run id and default job key: ``sl-`` + 20 hex of
    sha256(``schedule_id`` newline the nominal instant as UTC ISO-8601)."""
    return "sl-" + _hash(f"{schedule_id}\n{utc_iso(nominal)}")[:20]


def retry_id(root_run_id: str, attempt: int) -> str:
    """The run id of retry ``attempt`` (1, 2, ...) of the run ``root_run_id``."""
    return "rt-" + _hash(f"{root_run_id}\n{attempt}")[:20]


def request_run_id(schedule_id: str, request_id: str) -> str:
    """The run id of a wake with request id ``request_id``."""
    return "wk-" + _hash(f"{schedule_id}\n{request_id}")[:20]


def manual_run_id(schedule_id: str, request_id: str) -> str:
    """The run id of a run now (docs/schedules.md, "Run now") with request id
    ``request_id``: ``mn-`` + 20 hex, so a retried request names the same run."""
    return "mn-" + _hash(f"{schedule_id}\nmanual\n{request_id}")[:20]


def jitter_ms(slot: str, jitter_ms: int) -> int:
    """A slot's deterministic delay: ``int(sha256(slot)[:8], 16) % (jitter_ms + 1)``;
    0 when the jitter is 0."""
    if jitter_ms <= 0:
        return 0
    return int(_hash(slot)[:8], 16) % (jitter_ms + 1)
