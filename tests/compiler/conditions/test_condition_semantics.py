"""The condition language's meaning (docs/conditions.md, 'Three values'): every atom
kind in an open and a closed world, over present, absent and wrong-typed facts; Kleene
logic; the explanation of a verdict; duplicate deliveries; and incremental monitors.

Every expected verdict below is written out by hand from docs/conditions.md."""

from __future__ import annotations

from typing import Any

import pytest

from compiler import (
    AtomReport,
    Condition,
    Explanation,
    Fact,
    Monitor,
    Tally,
    Verdict,
    compile_condition,
)

T, F, U = Verdict.TRUE, Verdict.FALSE, Verdict.UNKNOWN


def fact(name: str, value: Any = None, id: str | None = None, **props: Any) -> Fact:
    return Fact(name, value=value, properties=props or None, id=id)


def check(text: str, facts: list[Fact], open_: Verdict, closed: Verdict) -> None:
    cond = compile_condition(text)
    assert cond.evaluate(facts, closed=False) is open_, "open world"
    assert cond.evaluate(facts, closed=True) is closed, "closed world"
    assert cond.evaluate(facts) is open_, "the world is open by default"


# An atom that some occurrence satisfies is TRUE in both worlds; one that nothing
# satisfies yet is UNKNOWN while the world is open and FALSE once it closes.
SATISFIED = (T, T)
NOT_YET = (U, F)

# -- f and f:p --------------------------------------------------------------------

EXISTS: list[tuple[str, list[Fact], tuple[Verdict, Verdict]]] = [
    ("paid", [], NOT_YET),
    ("paid", [fact("other")], NOT_YET),
    ("paid", [fact("Paid")], NOT_YET),  # names are case-sensitive
    ("paid", [fact("paid")], SATISFIED),
    ("paid", [fact("other"), fact("paid"), fact("other")], SATISFIED),
    ("paid", [fact("paid", 0)], SATISFIED),
    ("paid", [fact("paid", False)], SATISFIED),
    ("paid", [fact("paid", "")], SATISFIED),
    ("paid", [fact("paid", None, total=5)], SATISFIED),
    ("order:total", [], NOT_YET),
    ("order:total", [fact("order")], NOT_YET),  # no properties at all
    ("order:total", [fact("order", 700)], NOT_YET),  # a value is not a property
    ("order:total", [fact("order", currency="EUR")], NOT_YET),  # another property
    ("order:total", [fact("invoice", total=700)], NOT_YET),  # another fact
    ("order:total", [Fact("order", properties={})], NOT_YET),
    ("order:total", [fact("order", total=700)], SATISFIED),
    ("order:total", [fact("order", total="seven hundred")], SATISFIED),
    ("order:total", [fact("order", total=None)], SATISFIED),  # carries it, valued None
    ("order:total", [fact("order"), fact("order", total=1)], SATISFIED),
]


@pytest.mark.parametrize(("text", "facts", "expected"), EXISTS)
def test_exists(text: str, facts: list[Fact], expected: tuple[Verdict, Verdict]) -> None:
    check(text, facts, *expected)


# -- f OP x, with the value ---------------------------------------------------------

# (op, literal, value, satisfied?) — worked out by hand.
NUMERIC: list[tuple[str, int | float, Any, bool]] = [
    ("==", 1000, 1000, True),
    ("==", 1000, 1000.0, True),
    ("==", 1000, 999, False),
    ("==", 1000, 1001, False),
    ("==", 99.5, 99.5, True),
    ("==", -5, -5, True),
    ("==", 0, 0, True),
    (">", 1000, 1001, True),
    (">", 1000, 1000.5, True),
    (">", 1000, 1000, False),
    (">", 1000, 999, False),
    (">", -5, -4, True),
    (">", -5, -6, False),
    (">=", 1000, 1000, True),
    (">=", 1000, 1001, True),
    (">=", 1000, 999.99, False),
    (">=", 99.5, 99.5, True),
    ("<", 1000, 999, True),
    ("<", 1000, 1000, False),
    ("<", 1000, 1001, False),
    ("<", 0, -0.1, True),
    ("<=", 1000, 1000, True),
    ("<=", 1000, 999, True),
    ("<=", 1000, 1000.01, False),
    ("<=", -5, -5.0, True),
]


@pytest.mark.parametrize(("op", "literal", "value", "satisfied"), NUMERIC)
def test_compare_value(op: str, literal: float, value: Any, satisfied: bool) -> None:
    expected = SATISFIED if satisfied else NOT_YET
    text = f"amount {op} {literal}"
    check(text, [fact("amount", value)], *expected)
    # one satisfying occurrence among others is enough; order does not matter
    noise = [fact("amount", "x"), fact("other", value), fact("amount")]
    check(text, [*noise, fact("amount", value)], *expected)
    check(text, [fact("amount", value), *noise], *expected)


@pytest.mark.parametrize("op", ["==", ">", ">=", "<", "<="])
@pytest.mark.parametrize(
    "facts",
    [
        pytest.param([], id="absent"),
        pytest.param([fact("other", 1000)], id="other-fact"),
        pytest.param([fact("amount")], id="value-none"),
        pytest.param([fact("amount", None, amount=1000)], id="property-not-value"),
        pytest.param([fact("amount", "1000")], id="string"),
        pytest.param([fact("amount", True)], id="true-is-not-1"),
        pytest.param([fact("amount", False)], id="false-is-not-0"),
        pytest.param([fact("amount", [1000])], id="list"),
        pytest.param([fact("amount", {"v": 1000})], id="dict"),
    ],
)
def test_compare_value_absent_or_wrong_type_never_satisfies(op: str, facts: list[Fact]) -> None:
    # each literal below would be satisfied by a well-typed value 1000, 1 or 0
    literal = {"==": 1000, ">": 999, ">=": 1000, "<": 1001, "<=": 1000}[op]
    check(f"amount {op} {literal}", facts, *NOT_YET)
    # ...and a well-typed occurrence next to them does
    check(f"amount {op} {literal}", [*facts, fact("amount", 1000)], *SATISFIED)


def test_booleans_are_not_numbers() -> None:
    check("flag == 1", [fact("flag", True)], *NOT_YET)
    check("flag == 0", [fact("flag", False)], *NOT_YET)
    check("flag >= 0", [fact("flag", True), fact("flag", False)], *NOT_YET)
    check("flag IN [0, 1]", [fact("flag", True), fact("flag", False)], *NOT_YET)
    check("flag:p == 1", [fact("flag", p=True)], *NOT_YET)
    check("flag == 1", [fact("flag", True), fact("flag", 1)], *SATISFIED)


STRINGS: list[tuple[str, Any, bool]] = [
    ("won", "won", True),
    ("won", "Won", False),
    ("won", "won ", False),
    ("won", "lost", False),
    ("won", None, False),
    ("won", 1, False),
    ("1", 1, False),  # a number is not its text
    ("1", "1", True),
    ("", "", True),
    ("", None, False),
    ('a"b', 'a"b', True),
    ("café", "café", True),
]


@pytest.mark.parametrize(("literal", "value", "satisfied"), STRINGS)
def test_compare_string(literal: str, value: Any, satisfied: bool) -> None:
    quoted = '"' + literal.replace('"', '\\"') + '"'
    expected = SATISFIED if satisfied else NOT_YET
    check(f"status == {quoted}", [fact("status", value)], *expected)
    check(f"deal:status == {quoted}", [fact("deal", status=value)], *expected)


def test_number_literal_is_not_matched_by_its_text() -> None:
    check("amount == 5", [fact("amount", "5")], *NOT_YET)
    check("amount > 4", [fact("amount", "5")], *NOT_YET)


# -- f:p OP x ------------------------------------------------------------------------

PROPERTY: list[tuple[str, list[Fact], tuple[Verdict, Verdict]]] = [
    ("order:total >= 500", [fact("order", total=700)], SATISFIED),
    ("order:total >= 500", [fact("order", total=500)], SATISFIED),
    ("order:total >= 500", [fact("order", total=500.0)], SATISFIED),
    ("order:total >= 500", [fact("order", total=499.99)], NOT_YET),
    ("order:total >= 500", [], NOT_YET),
    ("order:total >= 500", [fact("order")], NOT_YET),  # no properties
    ("order:total >= 500", [fact("order", currency="EUR")], NOT_YET),  # missing property
    ("order:total >= 500", [fact("order", total=None)], NOT_YET),  # value None
    ("order:total >= 500", [fact("order", total="700")], NOT_YET),  # a string
    ("order:total >= 500", [fact("order", total=True)], NOT_YET),  # a bool
    ("order:total >= 500", [fact("order", 700)], NOT_YET),  # the value, not the property
    ("order:total >= 500", [fact("invoice", total=700)], NOT_YET),  # another fact
    ("order:total >= 500", [fact("order", total=100), fact("order", total=900)], SATISFIED),
    ("order:total == 0", [fact("order", total=0)], SATISFIED),
    ("order:total == 0", [fact("order", total=False)], NOT_YET),
    ("order:total > -1", [fact("order", total=0)], SATISFIED),
    ("order:total < 10", [fact("order", total=9.5)], SATISFIED),
    ("order:total <= 10", [fact("order", total=11)], NOT_YET),
    ('order:state == "paid"', [fact("order", state="paid")], SATISFIED),
    ('order:state == "paid"', [fact("order", "paid")], NOT_YET),
    ('order:state == "paid"', [fact("order", state=None)], NOT_YET),
    ('order:state == "paid"', [fact("order", state=1)], NOT_YET),
]


@pytest.mark.parametrize(("text", "facts", "expected"), PROPERTY)
def test_compare_property(text: str, facts: list[Fact], expected: tuple[Verdict, Verdict]) -> None:
    check(text, facts, *expected)


# -- f IN [...] ------------------------------------------------------------------------

MEMBER: list[tuple[str, list[Fact], tuple[Verdict, Verdict]]] = [
    ('plan IN ["pro", "enterprise"]', [fact("plan", "pro")], SATISFIED),
    ('plan IN ["pro", "enterprise"]', [fact("plan", "enterprise")], SATISFIED),
    ('plan IN ["pro", "enterprise"]', [fact("plan", "free")], NOT_YET),
    ('plan IN ["pro", "enterprise"]', [fact("plan", "Pro")], NOT_YET),
    ('plan IN ["pro", "enterprise"]', [fact("plan")], NOT_YET),
    ('plan IN ["pro", "enterprise"]', [], NOT_YET),
    ('plan IN ["pro", "enterprise"]', [fact("tier", "pro")], NOT_YET),
    ('plan IN ["pro", "enterprise"]', [fact("plan", "free"), fact("plan", "pro")], SATISFIED),
    ('x IN [1, "1"]', [fact("x", 1)], SATISFIED),
    ('x IN [1, "1"]', [fact("x", 1.0)], SATISFIED),
    ('x IN [1, "1"]', [fact("x", "1")], SATISFIED),
    ('x IN [1, "1"]', [fact("x", True)], NOT_YET),
    ('x IN [1, "1"]', [fact("x", "01")], NOT_YET),
    ('x IN [1, "1"]', [fact("x", 2)], NOT_YET),
    ("x IN [2.5, -1]", [fact("x", -1)], SATISFIED),
    ("x IN [2.5, -1]", [fact("x", 2.5)], SATISFIED),
    ("x IN [2.5, -1]", [fact("x", "2.5")], NOT_YET),
    ("x IN [0]", [fact("x", False)], NOT_YET),
    ("x IN [0]", [fact("x", 0)], SATISFIED),
    ('acct:plan IN ["pro", 3]', [fact("acct", plan=3)], SATISFIED),
    ('acct:plan IN ["pro", 3]', [fact("acct", plan="pro")], SATISFIED),
    ('acct:plan IN ["pro", 3]', [fact("acct", "pro")], NOT_YET),  # value, not property
    ('acct:plan IN ["pro", 3]', [fact("acct", other="pro")], NOT_YET),  # missing
    ('acct:plan IN ["pro", 3]', [fact("acct", plan=None)], NOT_YET),
    ('acct:plan IN ["pro", 3]', [fact("acct", plan="3")], NOT_YET),
]


@pytest.mark.parametrize(("text", "facts", "expected"), MEMBER)
def test_member(text: str, facts: list[Fact], expected: tuple[Verdict, Verdict]) -> None:
    check(text, facts, *expected)


# -- COUNT(f) OP n ---------------------------------------------------------------------

# COUNT(r) OP 2 after k = 0, 1, 2, 3, 4 occurrences of r: (open, closed), by hand.
#   >= / >  TRUE once reached, else UNKNOWN / FALSE
#   <= / <  FALSE once exceeded, else UNKNOWN / TRUE
#   ==      FALSE once passed, else UNKNOWN / (TRUE iff equal)
COUNT_TABLE = {
    ">=": ("UUTTT", "FFTTT"),
    ">": ("UUUTT", "FFFTT"),
    "<=": ("UUUFF", "TTTFF"),
    "<": ("UUFFF", "TTFFF"),
    "==": ("UUUFF", "FFTFF"),
}
_LETTER = {"T": T, "F": F, "U": U}


@pytest.mark.parametrize("op", sorted(COUNT_TABLE))
@pytest.mark.parametrize("k", range(5))
def test_count(op: str, k: int) -> None:
    open_, closed = (_LETTER[row[k]] for row in COUNT_TABLE[op])
    # every occurrence counts, whatever its value or properties; others do not
    facts = [fact("r", i, id=f"r{i}", p=i) for i in range(k)]
    noise = [fact("s", id="s1"), fact("R", id="R1"), fact("other", id="o1")]
    check(f"COUNT(r) {op} 2", facts, open_, closed)
    check(f"COUNT(r) {op} 2", [*noise, *facts, *noise], open_, closed)


COUNT_EDGES: list[tuple[str, list[Fact], tuple[Verdict, Verdict]]] = [
    ("COUNT(r) >= 0", [], (T, T)),  # reached before anything arrives
    ("COUNT(r) > 0", [], (U, F)),
    ("COUNT(r) > 0", [fact("r")], (T, T)),
    ("COUNT(r) < 1", [], (U, T)),  # "never"
    ("COUNT(r) < 1", [fact("r")], (F, F)),
    ("COUNT(r) <= 0", [fact("r")], (F, F)),
    ("COUNT(r) == 0", [], (U, T)),
    ("COUNT(r) == 0", [fact("r")], (F, F)),
    ("COUNT(r) < 0", [], (F, F)),  # no count is below zero
    ("COUNT(r) >= 3", [fact("r"), fact("r"), fact("r")], (T, T)),  # no ids: all count
    ("COUNT(r) >= 3", [fact("r", None), fact("r", "x"), fact("r", True)], (T, T)),
    ("COUNT(r) >= 1", [fact("r", x=1)], (T, T)),
]


@pytest.mark.parametrize(("text", "facts", "expected"), COUNT_EDGES)
def test_count_edges(text: str, facts: list[Fact], expected: tuple[Verdict, Verdict]) -> None:
    check(text, facts, *expected)


# -- duplicate deliveries ---------------------------------------------------------------


def test_duplicate_ids_count_once() -> None:
    facts = [fact("r", id="e1"), fact("r", id="e1"), fact("r", id="e2"), fact("r", id="e1")]
    check("COUNT(r) >= 3", facts, U, F)
    check("COUNT(r) == 2", facts, U, T)
    check("COUNT(r) < 3", facts, U, T)
    report = compile_condition("COUNT(r) >= 3").explain(facts, closed=True).atoms[0]
    assert (report.count, report.evidence) == (2, ("e1", "e2"))


def test_a_duplicate_is_the_first_delivery_again() -> None:
    # the second delivery of e1 carries a different value; it is still the same
    # occurrence, so it cannot satisfy anything
    facts = [fact("amount", 5, id="e1"), fact("amount", 5000, id="e1")]
    check("amount > 1000", facts, U, F)


def test_facts_without_ids_are_never_duplicates() -> None:
    check("COUNT(r) == 3", [fact("r"), fact("r"), fact("r")], U, T)


# -- Kleene's strong three-valued logic ---------------------------------------------------

# The truth tables, by hand.
NOT_TABLE = {T: F, U: U, F: T}
AND_TABLE = {
    (T, T): T, (T, U): U, (T, F): F,
    (U, T): U, (U, U): U, (U, F): F,
    (F, T): F, (F, U): F, (F, F): F,
}  # fmt: skip
OR_TABLE = {
    (T, T): T, (T, U): T, (T, F): T,
    (U, T): T, (U, U): U, (U, F): U,
    (F, T): T, (F, U): U, (F, F): F,
}  # fmt: skip

# Atoms that take each verdict in the open world over WORLD:
# `t` has arrived; `COUNT(f) < 1` is exceeded by the f that arrived; `u` has not arrived.
WORLD = [fact("t", id="t1"), fact("f", id="f1")]
ATOM_FOR = {T: "t", F: "COUNT(f) < 1", U: "u"}
ATOM_FOR_2 = {T: "t2", F: "COUNT(f2) < 1", U: "u2"}
WORLD_2 = [fact("t2", id="t2"), fact("f2", id="f2")]


@pytest.mark.parametrize(("a", "expected"), NOT_TABLE.items())
def test_not(a: Verdict, expected: Verdict) -> None:
    assert ~a is expected
    cond = compile_condition(f"NOT {ATOM_FOR[a]}")
    assert cond.evaluate(WORLD) is expected
    assert compile_condition(f"NOT NOT {ATOM_FOR[a]}").evaluate(WORLD) is a


@pytest.mark.parametrize(("ab", "expected"), AND_TABLE.items())
def test_and(ab: tuple[Verdict, Verdict], expected: Verdict) -> None:
    a, b = ab
    assert (a & b) is expected
    cond = compile_condition(f"{ATOM_FOR[a]} AND {ATOM_FOR_2[b]}")
    assert cond.evaluate(WORLD + WORLD_2) is expected


@pytest.mark.parametrize(("ab", "expected"), OR_TABLE.items())
def test_or(ab: tuple[Verdict, Verdict], expected: Verdict) -> None:
    a, b = ab
    assert (a | b) is expected
    cond = compile_condition(f"{ATOM_FOR[a]} OR {ATOM_FOR_2[b]}")
    assert cond.evaluate(WORLD + WORLD_2) is expected


NARY: list[tuple[str, Verdict]] = [
    ("t AND t2 AND u", U),
    ("u AND COUNT(f) < 1 AND u2", F),  # FALSE anywhere decides AND
    ("COUNT(f) < 1 AND u AND u2", F),
    ("u AND u2 AND COUNT(f) < 1", F),
    ("u OR t OR u2", T),  # TRUE anywhere decides OR
    ("u OR u2 OR t", T),
    ("COUNT(f) < 1 OR COUNT(f2) < 1 OR u", U),
    ("COUNT(f) < 1 OR COUNT(f2) < 1", F),
    ("NOT u OR NOT (t AND u2)", U),
    ("NOT (COUNT(f) < 1 OR u) AND t", U),
    ("NOT (COUNT(f) < 1 OR COUNT(f2) < 1) AND t", T),
    ("u AND NOT u", U),  # Kleene logic: no excluded middle while unknown
    ("u OR NOT u", U),
]


@pytest.mark.parametrize(("text", "expected"), NARY)
def test_nary_kleene(text: str, expected: Verdict) -> None:
    assert compile_condition(text).evaluate(WORLD + WORLD_2) is expected


def test_excluded_middle_returns_when_the_world_closes() -> None:
    assert compile_condition("u OR NOT u").evaluate(WORLD, closed=True) is T
    assert compile_condition("u AND NOT u").evaluate(WORLD, closed=True) is F


def test_verdict_helpers() -> None:
    assert (T.settled, F.settled, U.settled) == (True, True, False)
    assert (Verdict.of(True), Verdict.of(False)) == (T, F)
    assert [v.value for v in (T, F, U)] == ["TRUE", "FALSE", "UNKNOWN"]


# -- the documented examples ------------------------------------------------------------


def test_quiet_hours_complete_when_the_window_closes() -> None:
    cond = compile_condition("NOT user_replied WITHIN 24h")
    assert cond.evaluate([], closed=False) is U
    assert cond.evaluate([], closed=True) is T
    assert cond.evaluate([fact("user_replied")], closed=False) is F


def test_upload_times_out_when_the_window_closes() -> None:
    cond = compile_condition("id_uploaded WITHIN 7d")
    assert cond.evaluate([fact("page_view")], closed=False) is U
    assert cond.evaluate([fact("page_view")], closed=True) is F
    assert cond.evaluate([fact("id_uploaded")], closed=False) is T


# -- explanations ----------------------------------------------------------------------

FIVE = (
    '(order:total >= 500 OR plan IN ["pro", "enterprise"]) AND NOT cancelled'
    " AND COUNT(reminder_sent) < 3"
)
FIVE_FACTS = [
    fact("order", id="e1", total=100),
    fact("order", id="e2", total=700),
    fact("page_view", id="p1"),
    fact("order", id="e3", total=900),
    fact("plan", "pro", id="e4"),
    fact("reminder_sent", id="r1"),
    fact("reminder_sent", id="r2"),
]


def test_explanation_open_world() -> None:
    explanation = compile_condition(FIVE).explain(FIVE_FACTS, closed=False)
    assert explanation == Explanation(
        condition=FIVE,
        verdict=U,
        closed=False,
        atoms=(
            AtomReport("order:total >= 500", T, 2, ("e2",)),  # the first witness only
            AtomReport('plan IN ["pro", "enterprise"]', T, 1, ("e4",)),
            AtomReport("cancelled", U, 0, ()),
            AtomReport("COUNT(reminder_sent) < 3", U, 2, ("r1", "r2")),
        ),
    )


def test_explanation_closed_world_and_json() -> None:
    explanation = compile_condition(FIVE).explain(FIVE_FACTS, closed=True)
    assert explanation.verdict is T
    assert [(a.atom, a.verdict) for a in explanation.atoms] == [
        ("order:total >= 500", T),
        ('plan IN ["pro", "enterprise"]', T),
        ("cancelled", F),
        ("COUNT(reminder_sent) < 3", T),
    ]
    assert explanation.to_json() == {
        "condition": FIVE,
        "verdict": "TRUE",
        "closed": True,
        "atoms": [
            {"atom": "order:total >= 500", "verdict": "TRUE", "count": 2, "evidence": ["e2"]},
            {
                "atom": 'plan IN ["pro", "enterprise"]',
                "verdict": "TRUE",
                "count": 1,
                "evidence": ["e4"],
            },
            {"atom": "cancelled", "verdict": "FALSE", "count": 0, "evidence": []},
            {
                "atom": "COUNT(reminder_sent) < 3",
                "verdict": "TRUE",
                "count": 2,
                "evidence": ["r1", "r2"],
            },
        ],
    }


def test_explanation_of_a_knock_out() -> None:
    facts = [*FIVE_FACTS, fact("cancelled", id="c1"), fact("cancelled", id="c2")]
    explanation = compile_condition(FIVE).explain(facts, closed=False)
    assert explanation.verdict is F
    assert explanation.atoms[2] == AtomReport("cancelled", T, 2, ("c1",))


EVIDENCE: list[tuple[str, int, Verdict, tuple[str, ...]]] = [
    # COUNT keeps the first bound + 1 ids: enough to show the bound reached or passed
    ("COUNT(r) >= 2", 5, T, ("r0", "r1", "r2")),
    ("COUNT(r) >= 2", 1, U, ("r0",)),
    ("COUNT(r) > 2", 5, T, ("r0", "r1", "r2")),
    ("COUNT(r) < 2", 5, F, ("r0", "r1", "r2")),
    ("COUNT(r) <= 3", 9, F, ("r0", "r1", "r2", "r3")),
    ("COUNT(r) == 0", 2, F, ("r0",)),
    ("COUNT(r) == 1", 1, U, ("r0",)),
    ("COUNT(r) >= 0", 3, T, ("r0",)),
    ("COUNT(r) == 1", 0, U, ()),
    # existential atoms keep one witness
    ("r", 4, T, ("r0",)),
    ("r:n", 4, T, ("r0",)),
    ("r:n >= 2", 4, T, ("r2",)),
    ("r IN [3, 1]", 4, T, ("r1",)),
    ("r == 9", 4, U, ()),
]


@pytest.mark.parametrize(("text", "k", "verdict", "evidence"), EVIDENCE)
def test_evidence(text: str, k: int, verdict: Verdict, evidence: tuple[str, ...]) -> None:
    facts = [fact("r", i, id=f"r{i}", n=i) for i in range(k)]
    (report,) = compile_condition(text).explain(facts).atoms
    assert report.verdict is verdict
    assert report.evidence == evidence
    expected_count = {"r:n >= 2": max(k - 2, 0), "r IN [3, 1]": 2, "r == 9": 0}.get(text, k)
    assert report.count == expected_count


def test_occurrences_without_ids_count_but_cite_nothing() -> None:
    (report,) = compile_condition("COUNT(r) >= 2").explain([fact("r"), fact("r", id="x")]).atoms
    assert (report.verdict, report.count, report.evidence) == (T, 2, ("x",))


def test_repeated_atom_is_reported_once() -> None:
    explanation = compile_condition("a AND (a OR b) AND NOT a").explain([fact("a", id="1")])
    assert [r.atom for r in explanation.atoms] == ["a", "b"]
    assert explanation.verdict is F


def test_explanation_names_the_canonical_condition_with_window() -> None:
    explanation = compile_condition("a  and  not b within 2h").explain([])
    assert explanation.condition == "a AND NOT b WITHIN 2h"


# -- monitors --------------------------------------------------------------------------

MONITOR_CASES: list[tuple[str, list[Fact]]] = [
    (FIVE, FIVE_FACTS),
    (FIVE, [*FIVE_FACTS, fact("reminder_sent", id="r3"), fact("plan", "pro", id="e5")]),
    ("COUNT(r) == 2 OR r:x > 1", [fact("r", id="1"), fact("r", id="2", x=2), fact("r", id="3")]),
    ("NOT a AND COUNT(a) < 2", [fact("b", id="1"), fact("a", id="2")]),
    ('s == "won" OR s IN ["lost", 3]', [fact("s", 3, id="1"), fact("s", "won", id="2")]),
    ("a OR b", []),
]


@pytest.mark.parametrize(("text", "facts"), MONITOR_CASES)
@pytest.mark.parametrize("closed", [False, True])
def test_monitor_matches_evaluate(text: str, facts: list[Fact], closed: bool) -> None:
    cond = compile_condition(text)
    monitor = cond.monitor()
    assert isinstance(monitor, Monitor)
    for i, occurrence in enumerate(facts):
        monitor.feed(occurrence)
        # after each occurrence, the same as evaluating everything so far
        assert monitor.verdict(closed) is cond.evaluate(facts[: i + 1], closed)
        assert monitor.explain(closed) == cond.explain(facts[: i + 1], closed)
    assert monitor.verdict(closed) is cond.evaluate(facts, closed)
    assert monitor.explain(closed) == cond.explain(facts, closed)


def test_monitor_state_is_small_and_serialisable() -> None:
    cond = compile_condition("COUNT(r) >= 2 AND r:x == 1")
    monitor = cond.monitor()
    for i in range(1000):
        monitor.feed(fact("r", id=f"r{i}", x=i))
    # one tally per atom, keyed by its text as job state keeps it, never more
    # ids than the atom can use
    assert {text: t.to_json() for text, t in monitor.tallies.items()} == {
        "COUNT(r) >= 2": [1000, ["r0", "r1", "r2"]],
        "r:x == 1": [1, ["r1"]],
    }
    copy = Monitor(cond, {a: Tally.from_json(t.to_json()) for a, t in monitor.tallies.items()})
    assert copy.explain(closed=True) == monitor.explain(closed=True)
    assert copy.verdict() is T


def test_condition_built_from_an_ast_evaluates_like_the_compiled_one() -> None:
    compiled = compile_condition(FIVE + " WITHIN 24h")
    built = Condition(compiled.expr, compiled.within)
    assert built == compiled
    for closed in (False, True):
        assert built.explain(FIVE_FACTS, closed) == compiled.explain(FIVE_FACTS, closed)
