"""The RocksDB stores the agents' processes keep under LEMONGRAPH_DATA_DIR
(docs/operations.md): a module of its own, below the service and the channels
that both open one; and the bound of what the agents service stores per job (a
conversation's checkpoint: docs/agents.md, "Output bounds")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from rocksdict import Rdict
from stream.runtime.errors import StorageError

from agents.errors import AgentsError

__all__ = ["CHECKPOINT_MAX_BYTES", "CheckpointTooLarge", "fitted", "open_store"]


def open_store(path: Path, process: str) -> Rdict:
    """A RocksDB store of ``lemongraph <process>``; a clear error when another
    process has it open."""
    try:
        return Rdict(str(path))
    except Exception as exc:  # rocksdict raises a bare Exception
        if "lock" in str(exc).lower():
            raise StorageError(
                f"{path}: another lemongraph {process} process uses this data folder; give "
                "each process its own LEMONGRAPH_DATA_DIR"
            ) from None
        raise StorageError(f"{path}: the store of {process} cannot be opened: {exc}") from None


#: The most a conversation's checkpoint may take, as JSON: below the agents
#: producer's ``max_request_size`` (Faust's default, 1,000,000 bytes), which
#: also holds the record's key, headers and framing (docs/agents.md, "Output
#: bounds").
CHECKPOINT_MAX_BYTES = 900_000


class CheckpointTooLarge(AgentsError):
    """A conversation whose checkpoint is over :data:`CHECKPOINT_MAX_BYTES` even
    with none of its turns: what is left is what a replay needs (the run's
    tape, the open tasks, the subject, the flows' state)."""


def fitted(data: dict[str, Any], bound: int = CHECKPOINT_MAX_BYTES) -> tuple[bytes, int]:
    """The checkpoint of a conversation (``Conversation.to_json``) within
    ``bound`` bytes, its oldest turns dropped first as far as needed (the model
    is sent only the newest): (its JSON, how many turns were dropped).
    :class:`CheckpointTooLarge` when it is over even without turns."""
    raw = orjson.dumps(data)
    if len(raw) <= bound:
        return raw, 0
    turns = list(data.get("turns") or [])
    over = len(raw) - bound
    dropped = freed = 0
    while dropped < len(turns) and freed < over:
        freed += len(orjson.dumps(turns[dropped])) + 1  # and its comma
        dropped += 1
    raw = orjson.dumps({**data, "turns": turns[dropped:]})
    if len(raw) > bound:
        raise CheckpointTooLarge(
            f"the conversation's checkpoint is {len(raw):,} bytes without {dropped} of its "
            f"turns, over the bound of {bound:,} (its run's tape, tasks, subject and flows)"
        )
    return raw, dropped
