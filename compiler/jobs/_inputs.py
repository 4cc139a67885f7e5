"""The three inputs of the decision core: a job start, an event, a tick."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from topics import SOURCES, Source
from topics.build import event_input, start_input, tick_input

from compiler.conditions._facts import Fact

__all__ = ["Event", "Input", "Source", "Start", "Tick", "input_from_json"]

#: ``Source`` and ``SOURCES`` (who vouches for an event; ``agent`` events never
#: count as evidence) are declared once, in topics/.


@dataclass(frozen=True, slots=True)
class Start:
    """Start job ``key`` on playbook ``playbook_key``."""

    key: str
    playbook_key: str
    subject: Mapping[str, Any] = field(default_factory=dict)
    contacts: tuple[Any, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """JSON-ready, with ``type``."""
        return start_input(self.key, self.playbook_key, self.subject, self.contacts)


@dataclass(frozen=True, slots=True)
class Event:
    """Something that happened to the job: one occurrence of the fact ``action``.

    ``id`` names the occurrence in explanations (the stream sets it from the
    record); when absent the idempotency key, then the decision number, stand in.
    """

    action: str
    value: Any = None
    properties: Mapping[str, Any] | None = None
    source: Source = "world"
    idempotency_key: str | None = None
    id: str | None = None

    def __init__(
        self,
        action: str,
        value: Any = None,
        properties: Mapping[str, Any] | None = None,
        source: Source = "world",
        idempotency_key: str | None = None,
        id: str | None = None,
    ) -> None:
        # Written out: see compiler/__init__.py, "Compiled".
        object.__setattr__(self, "action", action)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "properties", properties)
        object.__setattr__(self, "source", source)
        object.__setattr__(self, "idempotency_key", idempotency_key)
        object.__setattr__(self, "id", id)

    def fact(self, fallback_id: str) -> Fact:
        """This event as a fact occurrence."""
        return Fact(
            self.action, self.value, self.properties, self.id or self.idempotency_key or fallback_id
        )

    def to_json(self) -> dict[str, Any]:
        """JSON-ready, with ``type``."""
        return event_input(
            self.action, self.value, self.properties, self.source, self.idempotency_key, self.id
        )


@dataclass(frozen=True, slots=True)
class Tick:
    """The clock moved: fire whatever timers are due."""

    def to_json(self) -> dict[str, Any]:
        """JSON-ready, with ``type``."""
        return tick_input()


Input: TypeAlias = Start | Event | Tick


def input_from_json(data: Mapping[str, Any]) -> Input:
    """Rebuild an input from :meth:`to_json` output (e.g. a decision record)."""
    kind = data.get("type")
    if kind == "job.start":
        return Start(
            data["key"],
            data["playbook_key"],
            dict(data.get("subject") or {}),
            tuple(data.get("contacts") or ()),
        )
    if kind == "event":
        source = data.get("source", "world")
        if source not in SOURCES:
            raise ValueError(f"unknown event source {source!r}")
        return Event(
            data["action"],
            data.get("value"),
            data.get("properties") or None,
            source,
            data.get("idempotency_key"),
            data.get("id"),
        )
    if kind == "tick":
        return Tick()
    raise ValueError(f"unknown input type {kind!r}")
