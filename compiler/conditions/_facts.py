"""Facts: what a condition reads. One occurrence per event delivered to a job."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Fact", "Scalar"]

#: A value a fact or one of its properties may carry.
Scalar = str | int | float | bool | None


@dataclass(frozen=True, slots=True)
class Fact:
    """One occurrence of the fact ``name`` (an event's ``action``).

    ``value`` is the event's optional scalar value, ``properties`` its named
    properties, ``id`` the event id that explanations cite as evidence.
    """

    name: str
    value: Any = None
    properties: Mapping[str, Any] | None = field(default=None, hash=False)
    id: str | None = None

    def __init__(
        self,
        name: str,
        value: Any = None,
        properties: Mapping[str, Any] | None = None,
        id: str | None = None,
    ) -> None:
        # Written out: see compiler/__init__.py, "Compiled".
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "properties", properties)
        object.__setattr__(self, "id", id)

    def prop(self, key: str) -> tuple[bool, Any]:
        """``(True, value)`` when the occurrence carries property ``key``."""
        if self.properties is None or key not in self.properties:
            return False, None
        return True, self.properties[key]
