"""Property tests for the condition language (docs/conditions.md), with hypothesis:

1. soundness — a settled open-world verdict is the verdict of every extension
   of the facts, open or closed (monotone), and agrees with a reference
   evaluator written here from docs/conditions.md;
2. round trip — compile(print(ast)) gives the same AST, and printing is idempotent;
3. robustness — arbitrary text raises nothing but ConditionError, at a real position.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import cast

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler import (
    And,
    Atom,
    Compare,
    Condition,
    ConditionError,
    Count,
    Duration,
    Exists,
    Expr,
    Fact,
    FactRef,
    Member,
    Not,
    Or,
    Verdict,
    compile_condition,
)
from compiler.conditions._printer import print_atom, print_expr

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

OPS = ["==", ">", ">=", "<", "<="]
KEYWORDS = {"and", "or", "not", "in", "count", "within"}

# -- strategies: a small vocabulary, so that facts and conditions meet -------------

NAMES = ["a", "b", "order"]
PROPS = ["p", "total"]
NUMBERS: st.SearchStrategy[int | float] = st.one_of(
    st.integers(-2, 3), st.sampled_from([0.5, -1.5, 2.0])
)
STRINGS = st.sampled_from(["x", "y", ""])
LITERALS: st.SearchStrategy[int | float | str] = st.one_of(NUMBERS, STRINGS)

small_refs = st.builds(FactRef, st.sampled_from(NAMES), st.none() | st.sampled_from(PROPS))


def atoms(
    refs: st.SearchStrategy[FactRef],
    names: st.SearchStrategy[str],
    numbers: st.SearchStrategy[int | float],
    strings: st.SearchStrategy[str],
) -> st.SearchStrategy[Atom]:
    literals: st.SearchStrategy[int | float | str] = st.one_of(numbers, strings)
    return st.one_of(
        st.builds(Exists, refs),
        st.builds(Compare, refs, st.sampled_from(OPS), numbers),
        st.builds(Compare, refs, st.just("=="), strings),  # strings only with ==
        st.builds(Member, refs, st.lists(literals, min_size=1, max_size=3).map(tuple)),
        st.builds(Count, names, st.sampled_from(OPS), st.integers(0, 4)),
    )


def expressions(leaves: st.SearchStrategy[Atom]) -> st.SearchStrategy[Expr]:
    def extend(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
        operands = st.lists(children, min_size=2, max_size=3).map(tuple)
        return st.one_of(st.builds(Not, children), operands.map(And), operands.map(Or))

    return st.recursive(leaves, extend, max_leaves=8)


small_exprs = expressions(atoms(small_refs, st.sampled_from(NAMES), NUMBERS, STRINGS))

# values a fact may carry, including the wrong types
VALUES = st.one_of(st.none(), st.booleans(), NUMBERS, STRINGS, st.sampled_from([1.0, 3, -2.0, "1"]))


def fact_lists(prefix: str, max_size: int = 8) -> st.SearchStrategy[list[Fact]]:
    """Occurrences with unique ids (ids from ``prefix``), some without an id."""
    shape = st.tuples(
        st.sampled_from([*NAMES, "zzz"]),
        VALUES,
        st.none() | st.dictionaries(st.sampled_from(PROPS), VALUES, max_size=2),
        st.booleans(),
    )
    return st.lists(shape, max_size=max_size).map(
        lambda shapes: [
            Fact(name, value, props, f"{prefix}{i}" if has_id else None)
            for i, (name, value, props, has_id) in enumerate(shapes)
        ]
    )


# -- a reference evaluator, written from docs/conditions.md alone ------------------------------


def _number(value: object) -> bool:
    return type(value) in (int, float)


def _equal(value: object, literal: int | float | str) -> bool:
    if isinstance(literal, str):
        return isinstance(value, str) and value == literal
    return _number(value) and value == literal


def _reads(ref: FactRef, occurrence: Fact) -> tuple[bool, object]:
    if occurrence.name != ref.name:
        return False, None
    if ref.prop is None:
        return True, occurrence.value
    props = occurrence.properties or {}
    return (ref.prop in props), props.get(ref.prop)


def _holds(atom: Atom, occurrence: Fact) -> bool:
    if isinstance(atom, Count):
        return occurrence.name == atom.name
    present, value = _reads(atom.fact, occurrence)
    if not present:
        return False
    if isinstance(atom, Exists):
        return True
    if isinstance(atom, Member):
        return any(_equal(value, v) for v in atom.values)
    if atom.op == "==":
        return _equal(value, atom.value)
    if not _number(value) or isinstance(atom.value, str):
        return False
    number = float(value) if isinstance(value, float) else int(cast(int, value))
    return {
        ">": number > atom.value,
        ">=": number >= atom.value,
        "<": number < atom.value,
        "<=": number <= atom.value,
    }[atom.op]


def _count_verdict(op: str, n: int, bound: int, closed: bool) -> Verdict:
    if closed:
        return Verdict.of(
            {">=": n >= bound, ">": n > bound, "<=": n <= bound, "<": n < bound, "==": n == bound}[
                op
            ]
        )
    # open: only what no further occurrence can change is settled
    if op in (">=", ">") and (n >= bound if op == ">=" else n > bound):
        return Verdict.TRUE
    if op in ("<=", "==") and n > bound:
        return Verdict.FALSE
    if op == "<" and n >= bound:
        return Verdict.FALSE
    return Verdict.UNKNOWN


def reference(expr: Expr, facts: list[Fact], closed: bool) -> Verdict:
    if isinstance(expr, Not):
        inner = reference(expr.operand, facts, closed)
        return {Verdict.TRUE: Verdict.FALSE, Verdict.FALSE: Verdict.TRUE}.get(inner, inner)
    if isinstance(expr, And | Or):
        verdicts = [reference(e, facts, closed) for e in expr.operands]
        decisive = Verdict.FALSE if isinstance(expr, And) else Verdict.TRUE
        if decisive in verdicts:
            return decisive
        return Verdict.UNKNOWN if Verdict.UNKNOWN in verdicts else ~decisive
    n = sum(1 for f in facts if _holds(expr, f))
    if isinstance(expr, Count):
        return _count_verdict(expr.op, n, expr.bound, closed)
    if n:
        return Verdict.TRUE
    return Verdict.FALSE if closed else Verdict.UNKNOWN


# -- (1) soundness and monotonicity --------------------------------------------------


@SETTINGS
@given(small_exprs, fact_lists("e"), fact_lists("x"))
def test_settled_open_verdict_holds_for_every_extension(
    expr: Expr, facts: list[Fact], extra: list[Fact]
) -> None:
    cond = Condition(expr)
    verdict = cond.evaluate(facts, closed=False)
    extended = facts + extra
    if verdict.settled:
        assert cond.evaluate(extended, closed=True) is verdict
        assert cond.evaluate(extended, closed=False) is verdict  # monotone
        assert cond.evaluate(facts, closed=True) is verdict
    # closing the world always settles the verdict
    assert cond.evaluate(extended, closed=True).settled


@SETTINGS
@given(small_exprs, fact_lists("e"), st.booleans())
def test_verdict_agrees_with_the_reference_evaluator(
    expr: Expr, facts: list[Fact], closed: bool
) -> None:
    assert Condition(expr).evaluate(facts, closed) is reference(expr, facts, closed)


@SETTINGS
@given(small_exprs, fact_lists("e"), st.booleans())
def test_judging_tallies_by_text_agrees_with_the_explanation(
    expr: Expr, facts: list[Fact], closed: bool
) -> None:
    # The decision core's fast path (tallies keyed by atom text, JSON built
    # directly) must say exactly what the explanation objects say.
    cond = Condition(expr)
    tallies = cond.tally(facts)
    assert set(tallies) <= {print_atom(atom) for atom in cond.atoms}  # keyed as job state is
    explanation = cond.explain_of(tallies, closed)
    verdict, data = cond.judge(tallies, closed)
    assert verdict is explanation.verdict is reference(expr, facts, closed)
    assert data == explanation.to_json()
    assert cond.verdict_of(tallies, closed) is verdict


@SETTINGS
@given(small_exprs, fact_lists("e", max_size=12))
def test_monitor_fed_one_at_a_time_matches_evaluate(expr: Expr, facts: list[Fact]) -> None:
    cond = Condition(expr)
    monitor = cond.monitor()
    previous = Verdict.UNKNOWN
    for i, occurrence in enumerate(facts):
        monitor.feed(occurrence)
        verdict = monitor.verdict()
        assert verdict is cond.evaluate(facts[: i + 1])
        if previous.settled:
            assert verdict is previous  # once settled, it stays
        previous = verdict
    for closed in (False, True):
        assert monitor.explain(closed) == cond.explain(facts, closed)


@SETTINGS
@given(small_exprs, fact_lists("e"), st.data())
def test_duplicate_deliveries_change_nothing(
    expr: Expr, facts: list[Fact], data: st.DataObject
) -> None:
    with_ids = [f for f in facts if f.id is not None]
    repeats = data.draw(st.lists(st.sampled_from(with_ids), max_size=4)) if with_ids else []
    cond = Condition(expr)
    for closed in (False, True):
        assert cond.explain(facts + repeats, closed) == cond.explain(facts, closed)


# -- (2) round trip --------------------------------------------------------------------

name_text = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.\-]{0,6}", fullmatch=True).filter(
    lambda s: s.lower() not in KEYWORDS
)
rich_refs = st.builds(FactRef, name_text, st.none() | name_text)
rich_numbers: st.SearchStrategy[int | float] = st.one_of(
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=False, allow_infinity=False),
)
rich_exprs = expressions(atoms(rich_refs, name_text, rich_numbers, st.text(max_size=8)))


@st.composite
def durations(draw: st.DrawFn) -> Duration:
    unit, seconds = draw(st.sampled_from([("s", 1), ("m", 60), ("h", 3600), ("d", 86400)]))
    return Duration(draw(st.integers(1, 180 * 86400 // seconds)), unit)


def flatten(expr: Expr) -> Expr:
    """Merge an And directly inside an And (an Or inside an Or) — what the parser does."""
    if isinstance(expr, Not):
        return Not(flatten(expr.operand))
    if isinstance(expr, And | Or):
        kind = type(expr)
        operands: list[Expr] = []
        for operand in map(flatten, expr.operands):
            operands.extend(operand.operands if isinstance(operand, kind) else (operand,))
        return kind(tuple(operands))
    return expr


@SETTINGS
@given(rich_exprs, st.none() | durations())
def test_compile_of_print_gives_the_same_ast(expr: Expr, within: Duration | None) -> None:
    text = str(Condition(expr, within))
    again = compile_condition(text)
    # == cannot tell 2 from 2.0: the reprs show the types
    assert repr(again.expr) == repr(flatten(expr))
    assert again.within == within
    assert again.window == (within.timedelta if within else timedelta(days=30))
    # printing is idempotent: the canonical text is a fixed point
    assert str(again) == str(compile_condition(str(again)))
    assert compile_condition(print_expr(expr)).expr == again.expr


@SETTINGS
@given(rich_exprs.map(flatten), st.none() | durations())
def test_flattened_ast_round_trips_exactly(expr: Expr, within: Duration | None) -> None:
    cond = Condition(expr, within)
    again = compile_condition(str(cond))
    assert again == cond
    assert repr(again.expr) == repr(expr)
    assert str(again) == str(cond)


# -- (3) arbitrary text ------------------------------------------------------------------

TOKENS = [
    *NAMES, "order:total", "x.y-z", ":", "(", ")", "[", "]", ",", "AND", "and", "OR",
    "or", "NOT", "not", "IN", "in", "COUNT", "count", "WITHIN", "within", "==", ">", ">=",
    "<", "<=", "=", "!", "-", ".", "1", "-5", "2.5", ".5", "1.", "1e3", "1e999", "-0",
    '"won"', '""', '"a\\"b"', '"\\q"', '"\\u00e9"', '"unclosed', "'x'", "24h", "0d", "180d",
    "181d", "5y", "5", "d", "h", "99999999999999999999d", "9" * 5000, "1" + "0" * 4400 + "d",
    "NOT " * 120, "(" * 120, ")" * 30, "\\", "#", "é", "\u00a0", "\x00",
]  # fmt: skip
SEPARATORS = ["", " ", " ", "  ", "\n", "\t", "\r\n"]

token_text = st.lists(
    st.tuples(st.sampled_from(TOKENS), st.sampled_from(SEPARATORS)), max_size=25
).map(lambda parts: "".join(token + sep for token, sep in parts))


def _compile_or_explain(text: str) -> None:
    error: ConditionError | None = None
    try:
        cond = compile_condition(text)
    except ConditionError as caught:
        error = caught
    if error is None:
        # whatever parses, prints back to the same condition
        assert compile_condition(str(cond)) == cond
        cond.evaluate([Fact("a", 1, {"p": 1}, "e1")], closed=True)
        return
    assert error.line >= 1
    assert error.column >= 1
    # the position is inside the text (or just past the end of its line)
    rows = text.split("\n")
    assert error.line <= len(rows)
    assert error.column <= len(rows[error.line - 1]) + 1
    assert error.reason
    assert re.match(rf"line {error.line}, column {error.column}: ", str(error))
    assert str(error).endswith("^")


@settings(max_examples=500, deadline=None)
@given(st.text())
def test_arbitrary_text_raises_only_condition_error(text: str) -> None:
    _compile_or_explain(text)


@settings(max_examples=500, deadline=None)
@given(token_text)
def test_token_soup_raises_only_condition_error(text: str) -> None:
    _compile_or_explain(text)


@SETTINGS
@given(small_exprs, st.sampled_from(["", " WITHIN 5d", " within 180d"]), st.data())
def test_corrupted_valid_text_raises_only_condition_error(
    expr: Expr, within: str, data: st.DataObject
) -> None:
    text = print_expr(expr) + within
    cut = data.draw(st.integers(0, len(text)))
    insert = data.draw(st.sampled_from(TOKENS[:-6]) | st.text(max_size=3))
    _compile_or_explain(text[:cut] + insert + text[cut:])
    _compile_or_explain(text[:cut])
