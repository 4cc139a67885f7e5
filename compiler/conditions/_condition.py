"""Compiled conditions: evaluation, explanation and incremental monitors (docs/conditions.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from compiler.conditions._ast import And, Atom, Expr, Not, Or
from compiler.conditions._facts import Fact
from compiler.conditions._parser import DEFAULT_WINDOW, Duration, parse
from compiler.conditions._printer import print_atom, print_expr
from compiler.conditions._verdict import Verdict

__all__ = [
    "AtomReport",
    "Condition",
    "Explanation",
    "Monitor",
    "Tally",
    "atoms_of",
    "compile_condition",
    "count",
    "evaluate_expr",
]


@dataclass(frozen=True, slots=True)
class Tally:
    """What a monitor remembers of one atom: how many occurrences matched it, and
    the ids of the first few (enough to prove the verdict, never more)."""

    count: int = 0
    ids: tuple[str, ...] = ()

    def __init__(self, count: int = 0, ids: tuple[str, ...] = ()) -> None:
        # Written out: see compiler/__init__.py, "Compiled".
        object.__setattr__(self, "count", count)
        object.__setattr__(self, "ids", ids)

    def add(self, fact: Fact, cap: int) -> Tally:
        """This tally after one more matching occurrence."""
        ids = self.ids
        if fact.id is not None and len(ids) < cap:
            ids = (*ids, fact.id)
        return Tally(self.count + 1, ids)

    def to_json(self) -> list[Any]:
        """``[count, [ids...]]``, for job state."""
        return [self.count, list(self.ids)]

    @classmethod
    def from_json(cls, data: list[Any]) -> Tally:
        """The inverse of :meth:`to_json`."""
        return cls(int(data[0]), tuple(str(i) for i in data[1]))


_EMPTY = Tally()


@dataclass(frozen=True, slots=True)
class AtomReport:
    """One atom's part in a verdict: its verdict, its match count, and the ids of
    the occurrences that made it so (empty when absence decided it)."""

    atom: str
    verdict: Verdict
    count: int
    evidence: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "atom": self.atom,
            "verdict": self.verdict.value,
            "count": self.count,
            "evidence": list(self.evidence),
        }


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why a condition said what it said."""

    condition: str
    verdict: Verdict
    closed: bool
    atoms: tuple[AtomReport, ...]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict, as written into decision records."""
        return {
            "condition": self.condition,
            "verdict": self.verdict.value,
            "closed": self.closed,
            "atoms": [a.to_json() for a in self.atoms],
        }


def atoms_of(expr: Expr) -> tuple[Atom, ...]:
    """The distinct atoms of ``expr``, in the order they are written."""
    seen: dict[Atom, None] = {}

    def walk(node: Expr) -> None:
        if isinstance(node, Not):
            walk(node.operand)
        elif isinstance(node, And | Or):
            for operand in node.operands:
                walk(operand)
        else:
            seen.setdefault(node, None)

    walk(expr)
    return tuple(seen)


def evaluate_expr(expr: Expr, verdicts: Mapping[Atom, Verdict]) -> Verdict:
    """Combine atom verdicts over ``expr`` with Kleene logic."""
    return _combine(expr, verdicts)


def _combine(expr: Expr, verdicts: Mapping[Atom, Verdict]) -> Verdict:
    if isinstance(expr, Not):
        return ~_combine(expr.operand, verdicts)
    if isinstance(expr, And):
        result = Verdict.TRUE
        for operand in expr.operands:
            result = result & _combine(operand, verdicts)
            if result is Verdict.FALSE:
                break
        return result
    if isinstance(expr, Or):
        result = Verdict.FALSE
        for operand in expr.operands:
            result = result | _combine(operand, verdicts)
            if result is Verdict.TRUE:
                break
        return result
    return verdicts[expr]


def _positional(expr: Expr, positions: Mapping[Atom, int]) -> Callable[[list[Verdict]], Verdict]:
    """``expr`` as a function of its atoms' verdicts given by position: what
    :func:`evaluate_expr` computes, without hashing atoms on every call."""
    if isinstance(expr, Not):
        inner = _positional(expr.operand, positions)
        return lambda verdicts: ~inner(verdicts)
    if isinstance(expr, And | Or):
        parts = tuple(_positional(operand, positions) for operand in expr.operands)
        is_and = isinstance(expr, And)
        stop = Verdict.FALSE if is_and else Verdict.TRUE

        def combine(verdicts: list[Verdict]) -> Verdict:
            result = Verdict.TRUE if is_and else Verdict.FALSE
            for part in parts:
                result = (result & part(verdicts)) if is_and else (result | part(verdicts))
                if result is stop:
                    break
            return result

        return combine
    position = positions[expr]
    return lambda verdicts: verdicts[position]


@dataclass(frozen=True, eq=False)
class Condition:
    """A compiled condition. Build one with :func:`compile_condition`."""

    expr: Expr
    within: Duration | None = None
    atoms: tuple[Atom, ...] = field(init=False)
    #: Per fact name, the atoms it can affect with their tally keys (canonical text).
    _by_name: Mapping[str, tuple[tuple[str, Atom], ...]] = field(init=False, repr=False)
    #: The canonical text, and each atom's (the key of its tally in job state).
    _text: str = field(init=False, repr=False)
    _atom_texts: tuple[str, ...] = field(init=False, repr=False)
    #: The expression over atom verdicts given by position (see :meth:`judge`).
    _combine_at: Callable[[list[Verdict]], Verdict] = field(init=False, repr=False)
    _window: timedelta = field(init=False, repr=False)

    def __post_init__(self) -> None:
        atoms = atoms_of(self.expr)
        by_name: dict[str, list[tuple[str, Atom]]] = {}
        for atom in atoms:
            by_name.setdefault(atom.fact_name, []).append((print_atom(atom), atom))
        text = print_expr(self.expr)
        object.__setattr__(self, "atoms", atoms)
        object.__setattr__(self, "_by_name", {k: tuple(v) for k, v in by_name.items()})
        object.__setattr__(
            self, "_text", text if self.within is None else f"{text} WITHIN {self.within}"
        )
        object.__setattr__(self, "_atom_texts", tuple(print_atom(a) for a in atoms))
        positions = {atom: i for i, atom in enumerate(atoms)}
        object.__setattr__(self, "_combine_at", _positional(self.expr, positions))
        window = self.within.timedelta if self.within is not None else DEFAULT_WINDOW
        object.__setattr__(self, "_window", window)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Condition):
            return NotImplemented
        return self.expr == other.expr and self.within == other.within

    def __hash__(self) -> int:
        return hash((self.expr, self.within))

    @property
    def window(self) -> timedelta:
        """How long the world stays open after the milestone opens (default 30 days)."""
        return self._window

    def __str__(self) -> str:
        return self._text

    @property
    def text(self) -> str:
        """The canonical text (keywords upper-case, minimal parentheses)."""
        return str(self)

    def atoms_for(self, name: str) -> tuple[tuple[str, Atom], ...]:
        """The atoms an occurrence of fact ``name`` can affect, each with the
        key of its tally (its canonical text)."""
        return self._by_name.get(name, ())

    # -- evaluation over a whole list of facts ---------------------------------

    def tally(self, facts: Iterable[Fact]) -> dict[str, Tally]:
        """Count every fact into a fresh tally per atom. Occurrences that share
        an id are one occurrence (a duplicate delivery)."""
        monitor = self.monitor()
        seen: set[str] = set()
        for fact in facts:
            if fact.id is not None:
                if fact.id in seen:
                    continue
                seen.add(fact.id)
            monitor.feed(fact)
        return dict(monitor.tallies)

    def evaluate(self, facts: Iterable[Fact], closed: bool = False) -> Verdict:
        """The verdict over ``facts``; ``closed`` once the window is over."""
        return self.verdict_of(self.tally(facts), closed)

    def explain(self, facts: Iterable[Fact], closed: bool = False) -> Explanation:
        """The verdict over ``facts`` with each atom's verdict and evidence."""
        return self.explain_of(self.tally(facts), closed)

    # -- evaluation over tallies (what monitors and the decision core keep) ------
    #
    # Tallies are keyed by each atom's canonical text, as job state keeps them:
    # a monitor, an explanation and the decision core read the same tallies
    # through the same two functions (:func:`count` and :meth:`judge`).

    def verdict_of(self, tallies: Mapping[str, Tally], closed: bool) -> Verdict:
        """The verdict given each atom's tally (missing atoms have matched nothing)."""
        return self._combine_at(
            [
                a.verdict(tallies.get(text, _EMPTY).count, closed)
                for a, text in zip(self.atoms, self._atom_texts, strict=True)
            ]
        )

    def explain_of(self, tallies: Mapping[str, Tally], closed: bool) -> Explanation:
        """:meth:`judge`, as objects."""
        verdict, data = self.judge(tallies, closed)
        reports = tuple(
            AtomReport(r["atom"], Verdict(r["verdict"]), r["count"], tuple(r["evidence"]))
            for r in data["atoms"]
        )
        return Explanation(self._text, verdict, closed, reports)

    def judge(self, tallies: Mapping[str, Tally], closed: bool) -> tuple[Verdict, dict[str, Any]]:
        """The verdict given the tallies keyed by each atom's canonical text (as
        job state keeps them), with its explanation as JSON-ready data — the
        same data as ``explain_of(...).to_json()``, built without the objects
        (the decision core's inner loop)."""
        verdicts: list[Verdict] = []
        reports: list[dict[str, Any]] = []
        for atom, text in zip(self.atoms, self._atom_texts, strict=True):
            t = tallies.get(text, _EMPTY)
            verdict = atom.verdict(t.count, closed)
            verdicts.append(verdict)
            reports.append(
                {"atom": text, "verdict": verdict.value, "count": t.count, "evidence": list(t.ids)}
            )
        verdict = self._combine_at(verdicts)
        return verdict, {
            "condition": self._text,
            "verdict": verdict.value,
            "closed": closed,
            "atoms": reports,
        }

    def monitor(self) -> Monitor:
        """A fresh incremental monitor over this condition."""
        return Monitor(self)


@dataclass
class Monitor:
    """Feeds occurrences one at a time. Each feed touches only the atoms that
    name the fact, and keeps a count and a few ids per atom, so its cost does not
    grow with the history the job has already seen."""

    condition: Condition
    #: Keyed by each atom's canonical text, as job state keeps them.
    tallies: dict[str, Tally] = field(default_factory=dict)

    def feed(self, fact: Fact) -> None:
        """Count one new occurrence."""
        count(self.condition.atoms_for(fact.name), self.tallies, fact)

    def verdict(self, closed: bool = False) -> Verdict:
        """The verdict now; ``closed`` once the window is over."""
        return self.condition.verdict_of(self.tallies, closed)

    def explain(self, closed: bool = False) -> Explanation:
        """The verdict now, with reasons."""
        return self.condition.explain_of(self.tallies, closed)


def count(atoms: Iterable[tuple[str, Atom]], tallies: dict[str, Tally], fact: Fact) -> None:
    """Count one occurrence of a fact into ``tallies``, for each of ``atoms``
    (tally key, atom) that it matches. The one counting rule: a monitor feeds
    its condition's atoms through it, the decision core its playbook's."""
    for key, atom in atoms:
        if atom.matches(fact):
            tallies[key] = tallies.get(key, _EMPTY).add(fact, atom.evidence_cap)


def compile_condition(text: object) -> Condition:
    """Parse and check a condition. Raises :class:`ConditionError` on bad input,
    anything but text included (a playbook's YAML may hold a number there)."""
    expr, within = parse(text)
    return Condition(expr, within)
