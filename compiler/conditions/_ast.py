"""The condition AST: frozen nodes, and the meaning of every atom (docs/conditions.md,
'Three values').

Each atom answers two questions, and nothing else in the package decides them:
``matches(fact)`` — does this occurrence count for the atom — and
``verdict(count, closed)`` — what the atom says after ``count`` matching
occurrences, with the world open (window running) or closed (window over).
Because an atom's verdict depends only on that count, a monitor can keep one
integer per atom and never look at history again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal as TypingLiteral
from typing import TypeAlias

from compiler.conditions._facts import Fact
from compiler.conditions._verdict import Verdict

__all__ = [
    "And",
    "Atom",
    "Compare",
    "Count",
    "Exists",
    "Expr",
    "FactRef",
    "Literal",
    "Member",
    "Not",
    "Op",
    "Or",
]

#: The most occurrence ids one atom keeps as evidence.
MAX_EVIDENCE = 10

Op: TypeAlias = TypingLiteral["==", ">", ">=", "<", "<="]
Literal: TypeAlias = int | float | str


@dataclass(frozen=True, slots=True)
class FactRef:
    """``name`` reads the occurrence's value; ``name:prop`` reads property ``prop``."""

    name: str
    prop: str | None = None

    def read(self, fact: Fact) -> tuple[bool, object]:
        """``(present, value)`` of what this reference reads on ``fact``."""
        if self.prop is None:
            return True, fact.value
        return fact.prop(self.prop)


def _is_number(value: object) -> bool:
    # bool is an int in Python, but `true` is not the number 1 in a condition.
    return isinstance(value, int | float) and not isinstance(value, bool)


def _satisfies(value: object, op: Op, literal: Literal) -> bool:
    """Does ``value`` satisfy ``op literal``? A value of the wrong type never does."""
    if isinstance(literal, str):
        return op == "==" and isinstance(value, str) and value == literal
    if not _is_number(value):
        return False
    number = value
    assert isinstance(number, int | float)
    if op == "==":
        return number == literal
    if op == ">":
        return number > literal
    if op == ">=":
        return number >= literal
    if op == "<":
        return number < literal
    return number <= literal


def _existential(count: int, closed: bool) -> Verdict:
    """TRUE once some occurrence matched; else UNKNOWN (open) or FALSE (closed)."""
    if count > 0:
        return Verdict.TRUE
    return Verdict.FALSE if closed else Verdict.UNKNOWN


@dataclass(frozen=True, slots=True)
class Exists:
    """``f`` or ``f:p`` — some occurrence of ``f`` (carrying ``p``) exists."""

    fact: FactRef

    @property
    def fact_name(self) -> str:
        """The fact this atom reads."""
        return self.fact.name

    def matches(self, fact: Fact) -> bool:
        """Does this occurrence count for the atom?"""
        return fact.name == self.fact.name and self.fact.read(fact)[0]

    def verdict(self, count: int, closed: bool) -> Verdict:
        """The atom's verdict after ``count`` matching occurrences."""
        return _existential(count, closed)

    @property
    def evidence_cap(self) -> int:
        """How many matching occurrence ids prove the verdict (one witness)."""
        return 1


@dataclass(frozen=True, slots=True)
class Compare:
    """``f OP x`` / ``f:p OP x`` — some occurrence's value (or property) satisfies it."""

    fact: FactRef
    op: Op
    value: Literal

    @property
    def fact_name(self) -> str:
        """The fact this atom reads."""
        return self.fact.name

    def matches(self, fact: Fact) -> bool:
        """Does this occurrence count for the atom?"""
        if fact.name != self.fact.name:
            return False
        present, value = self.fact.read(fact)
        return present and _satisfies(value, self.op, self.value)

    def verdict(self, count: int, closed: bool) -> Verdict:
        """The atom's verdict after ``count`` matching occurrences."""
        return _existential(count, closed)

    @property
    def evidence_cap(self) -> int:
        """How many matching occurrence ids prove the verdict (one witness)."""
        return 1


@dataclass(frozen=True, slots=True)
class Member:
    """``f IN [x, y]`` / ``f:p IN [...]`` — some occurrence equals one of the values."""

    fact: FactRef
    values: tuple[Literal, ...]

    @property
    def fact_name(self) -> str:
        """The fact this atom reads."""
        return self.fact.name

    def matches(self, fact: Fact) -> bool:
        """Does this occurrence count for the atom?"""
        if fact.name != self.fact.name:
            return False
        present, value = self.fact.read(fact)
        return present and any(_satisfies(value, "==", v) for v in self.values)

    def verdict(self, count: int, closed: bool) -> Verdict:
        """The atom's verdict after ``count`` matching occurrences."""
        return _existential(count, closed)

    @property
    def evidence_cap(self) -> int:
        """How many matching occurrence ids prove the verdict (one witness)."""
        return 1


@dataclass(frozen=True, slots=True)
class Count:
    """``COUNT(f) OP n`` — how many occurrences of ``f`` the job has received.

    Lower bounds (``>=``, ``>``) become TRUE once reached; upper bounds (``<=``,
    ``<``) become FALSE once exceeded; ``==`` is FALSE once passed and otherwise
    waits for the window to close.
    """

    name: str
    op: Op
    bound: int

    @property
    def fact_name(self) -> str:
        """The fact this atom reads."""
        return self.name

    def matches(self, fact: Fact) -> bool:
        """Does this occurrence count for the atom?"""
        return fact.name == self.name

    def verdict(self, count: int, closed: bool) -> Verdict:
        """The atom's verdict after ``count`` matching occurrences."""
        undecided = Verdict.FALSE if closed else Verdict.UNKNOWN
        if self.op == ">=":
            return Verdict.TRUE if count >= self.bound else undecided
        if self.op == ">":
            return Verdict.TRUE if count > self.bound else undecided
        if self.op == "<=":
            if count > self.bound:
                return Verdict.FALSE
            return Verdict.TRUE if closed else Verdict.UNKNOWN
        if self.op == "<":
            if count >= self.bound:
                return Verdict.FALSE
            return Verdict.TRUE if closed else Verdict.UNKNOWN
        # ==
        if count > self.bound:
            return Verdict.FALSE
        return Verdict.of(count == self.bound) if closed else Verdict.UNKNOWN

    @property
    def evidence_cap(self) -> int:
        """Ids enough to prove any verdict — the bound reached, or passed by one —
        but never more than ``MAX_EVIDENCE``, so state stays small for large bounds."""
        return min(self.bound + 1, MAX_EVIDENCE)


Atom: TypeAlias = Exists | Compare | Member | Count


@dataclass(frozen=True, slots=True)
class Not:
    """``NOT e``."""

    operand: Expr


@dataclass(frozen=True, slots=True)
class And:
    """``a AND b AND ...`` — n-ary; nested ANDs are flattened when built."""

    operands: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Or:
    """``a OR b OR ...`` — n-ary; nested ORs are flattened when built."""

    operands: tuple[Expr, ...]


Expr: TypeAlias = Atom | Not | And | Or
