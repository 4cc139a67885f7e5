"""Three-valued truth (docs/conditions.md, 'Three values'): an enum, never
``None`` or a bool pretending."""

from __future__ import annotations

import enum

__all__ = ["Verdict"]


class Verdict(enum.Enum):
    """A condition's answer. Combined with Kleene's strong three-valued logic."""

    FALSE = "FALSE"
    UNKNOWN = "UNKNOWN"
    TRUE = "TRUE"

    @property
    def settled(self) -> bool:
        """TRUE or FALSE: nothing that can still arrive will change it."""
        return self is not Verdict.UNKNOWN

    def __invert__(self) -> Verdict:
        return _NOT[self]

    def __and__(self, other: Verdict) -> Verdict:
        return self if _RANK[self] <= _RANK[other] else other

    def __or__(self, other: Verdict) -> Verdict:
        return self if _RANK[self] >= _RANK[other] else other

    @classmethod
    def of(cls, value: bool) -> Verdict:
        """TRUE or FALSE from a bool."""
        return cls.TRUE if value else cls.FALSE


# Kleene logic is min/max over FALSE < UNKNOWN < TRUE, and NOT is the mirror.
_RANK = {Verdict.FALSE: 0, Verdict.UNKNOWN: 1, Verdict.TRUE: 2}
_NOT = {Verdict.FALSE: Verdict.TRUE, Verdict.UNKNOWN: Verdict.UNKNOWN, Verdict.TRUE: Verdict.FALSE}
