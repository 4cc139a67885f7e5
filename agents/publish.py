"""How the agents service's parts write records (docs/agents.md, "Runs"): the
callables a run, a flow and a scheduled prompt are given to publish with. A module
of their own, below everything that publishes, so that no part imports another
one above it for a type."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

from pydantic import BaseModel
from topics import Headers

__all__ = ["Publish", "Send"]

#: ``publish(topic, key, record)``: a record of a run, acknowledged when awaited
#: (``memory-facts``: a conversation's summary, keyed by its subject).
Publish = Callable[
    [Literal["inbox", "messages", "journal", "memory-facts"], str, BaseModel], Awaitable[None]
]
#: ``send(topic, key, value, headers, partition)``, acknowledged when awaited.
Send = Callable[[str, bytes | None, bytes | None, Headers | None, int | None], Awaitable[None]]
