"""The words every layer shares: who vouches for an event, and how an event is
named when it has no idempotency key. Declared once, here."""

from __future__ import annotations

from typing import Literal, TypeAlias

__all__ = ["SOURCES", "Source", "event_id"]

#: Who vouches for an event: ``world`` (an inbound event), ``tool`` (a result
#: recorded by trusted code) or ``agent`` (what a model said: never evidence).
Source: TypeAlias = Literal["world", "tool", "agent"]
SOURCES: tuple[Source, ...] = ("world", "tool", "agent")


def event_id(partition: int, offset: int) -> str:
    """The id of an event without an idempotency key: where its producer put it
    on the inbox, ``p<partition>@<offset>`` (verdict explanations cite it)."""
    return f"p{partition}@{offset}"
