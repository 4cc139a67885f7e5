"""The condition language's syntax (docs/conditions.md, 'Grammar'): what parses to which AST, how it
prints back, and what is refused — with the exact line, column and caret."""

from __future__ import annotations

from datetime import timedelta
from typing import cast

import pytest

from compiler import (
    DEFAULT_WINDOW,
    MAX_WINDOW,
    And,
    Compare,
    ConditionError,
    Count,
    Duration,
    Exists,
    Expr,
    Fact,
    FactRef,
    LemongraphError,
    Member,
    Not,
    Or,
    Verdict,
    compile_condition,
)

# -- small builders so the tables read like the conditions they stand for ---------


def ref(name: str, prop: str | None = None) -> FactRef:
    return FactRef(name, prop)


def ex(name: str, prop: str | None = None) -> Exists:
    return Exists(FactRef(name, prop))


def and_(*operands: Expr) -> And:
    return And(operands)


def or_(*operands: Expr) -> Or:
    return Or(operands)


A, B, C, D = ex("a"), ex("b"), ex("c"), ex("d")

# -- valid conditions → AST and canonical text ------------------------------------

VALID: list[tuple[str, Expr, str]] = [
    # bare facts and properties
    ("a", A, "a"),
    ("id_uploaded", ex("id_uploaded"), "id_uploaded"),
    ("order:total", ex("order", "total"), "order:total"),
    ("  order : total  ", ex("order", "total"), "order:total"),
    ("a.b-c:d_e", ex("a.b-c", "d_e"), "a.b-c:d_e"),
    ("_x1", ex("_x1"), "_x1"),
    # names are case-sensitive
    ("Won AND won", and_(ex("Won"), ex("won")), "Won AND won"),
    # names that merely start with (or contain) a keyword stay names
    (
        "android AND order OR counter AND note",
        or_(and_(ex("android"), ex("order")), and_(ex("counter"), ex("note"))),
        "android AND order OR counter AND note",
    ),
    (
        "index AND inbox AND within_x AND notify AND counts",
        and_(ex("index"), ex("inbox"), ex("within_x"), ex("notify"), ex("counts")),
        "index AND inbox AND within_x AND notify AND counts",
    ),
    ("x.within", ex("x.within"), "x.within"),
    # every comparison operator
    ("amount == 1000", Compare(ref("amount"), "==", 1000), "amount == 1000"),
    ("amount > 1000", Compare(ref("amount"), ">", 1000), "amount > 1000"),
    ("amount >= 1000", Compare(ref("amount"), ">=", 1000), "amount >= 1000"),
    ("amount < 1000", Compare(ref("amount"), "<", 1000), "amount < 1000"),
    ("amount <= 1000", Compare(ref("amount"), "<=", 1000), "amount <= 1000"),
    ("amount>=1000", Compare(ref("amount"), ">=", 1000), "amount >= 1000"),
    ("order:total >= 500", Compare(ref("order", "total"), ">=", 500), "order:total >= 500"),
    # numbers: negative, float, exponent, leading/trailing dot
    ("x > -5", Compare(ref("x"), ">", -5), "x > -5"),
    ("x>-5", Compare(ref("x"), ">", -5), "x > -5"),
    ("x >= 99.5", Compare(ref("x"), ">=", 99.5), "x >= 99.5"),
    ("x < -0.25", Compare(ref("x"), "<", -0.25), "x < -0.25"),
    ("x == .5", Compare(ref("x"), "==", 0.5), "x == 0.5"),
    ("x == 1.", Compare(ref("x"), "==", 1.0), "x == 1.0"),
    ("x == 1e3", Compare(ref("x"), "==", 1000.0), "x == 1000.0"),
    ("x == 2.5E-3", Compare(ref("x"), "==", 0.0025), "x == 0.0025"),
    ("x == 007", Compare(ref("x"), "==", 7), "x == 7"),
    (
        "x == 123456789012345678901234567890",
        Compare(ref("x"), "==", 123456789012345678901234567890),
        "x == 123456789012345678901234567890",
    ),
    # strings and their escapes (JSON escapes; printed back with JSON escapes)
    ('status == "won"', Compare(ref("status"), "==", "won"), 'status == "won"'),
    ('status == ""', Compare(ref("status"), "==", ""), 'status == ""'),
    ('s == "a\\"b"', Compare(ref("s"), "==", 'a"b'), 's == "a\\"b"'),
    ('s == "back\\\\slash"', Compare(ref("s"), "==", "back\\slash"), 's == "back\\\\slash"'),
    ('s == "tab\\there"', Compare(ref("s"), "==", "tab\there"), 's == "tab\\there"'),
    ('s == "two\\nlines"', Compare(ref("s"), "==", "two\nlines"), 's == "two\\nlines"'),
    ('s == "caf\\u00e9"', Compare(ref("s"), "==", "café"), 's == "café"'),
    ('s == "café"', Compare(ref("s"), "==", "café"), 's == "café"'),
    ('s == "\\/"', Compare(ref("s"), "==", "/"), 's == "/"'),
    # keywords inside strings are just text
    (
        's == "a AND NOT b WITHIN 5d"',
        Compare(ref("s"), "==", "a AND NOT b WITHIN 5d"),
        's == "a AND NOT b WITHIN 5d"',
    ),
    ('s == "("', Compare(ref("s"), "==", "("), 's == "("'),
    # IN lists: strings, numbers, both
    (
        'plan IN ["pro", "enterprise"]',
        Member(ref("plan"), ("pro", "enterprise")),
        'plan IN ["pro", "enterprise"]',
    ),
    ('x IN [1, "a", -2.5, 3]', Member(ref("x"), (1, "a", -2.5, 3)), 'x IN [1, "a", -2.5, 3]'),
    ("x:p in [7]", Member(ref("x", "p"), (7,)), "x:p IN [7]"),
    ('x IN["a","b"]', Member(ref("x"), ("a", "b")), 'x IN ["a", "b"]'),
    # COUNT, every operator, any spacing and case
    ("COUNT(reminder_sent) >= 3", Count("reminder_sent", ">=", 3), "COUNT(reminder_sent) >= 3"),
    ("COUNT(r) > 0", Count("r", ">", 0), "COUNT(r) > 0"),
    ("COUNT(r) <= 2", Count("r", "<=", 2), "COUNT(r) <= 2"),
    ("COUNT(r) < 1", Count("r", "<", 1), "COUNT(r) < 1"),
    ("COUNT(r) == 0", Count("r", "==", 0), "COUNT(r) == 0"),
    ("count ( r ) == 2", Count("r", "==", 2), "COUNT(r) == 2"),
    ("CoUnT(a.b) >= 10", Count("a.b", ">=", 10), "COUNT(a.b) >= 10"),
    # keywords are case-insensitive
    ("a and b", and_(A, B), "a AND b"),
    ("a AnD b oR nOt c", or_(and_(A, B), Not(C)), "a AND b OR NOT c"),
    ("not a", Not(A), "NOT a"),
    # precedence: NOT > AND > OR
    ("a OR b AND c", or_(A, and_(B, C)), "a OR b AND c"),
    ("a AND b OR c", or_(and_(A, B), C), "a AND b OR c"),
    ("NOT a AND b", and_(Not(A), B), "NOT a AND b"),
    ("NOT a OR b", or_(Not(A), B), "NOT a OR b"),
    ("a OR NOT b AND c", or_(A, and_(Not(B), C)), "a OR NOT b AND c"),
    ("NOT NOT a", Not(Not(A)), "NOT NOT a"),
    # parentheses override precedence and are kept only where needed
    ("NOT (a AND b)", Not(and_(A, B)), "NOT (a AND b)"),
    ("NOT (a OR b)", Not(or_(A, B)), "NOT (a OR b)"),
    ("(a OR b) AND c", and_(or_(A, B), C), "(a OR b) AND c"),
    ("a AND (b OR c) AND d", and_(A, or_(B, C), D), "a AND (b OR c) AND d"),
    ("(a AND b) OR c", or_(and_(A, B), C), "a AND b OR c"),
    ("((a))", A, "a"),
    ("(NOT a)", Not(A), "NOT a"),
    ("NOT (a)", Not(A), "NOT a"),
    ("(a OR b) AND NOT (c OR d)", and_(or_(A, B), Not(or_(C, D))), "(a OR b) AND NOT (c OR d)"),
    # same-operator chains flatten into one n-ary node, parenthesised or not
    ("a AND b AND c", and_(A, B, C), "a AND b AND c"),
    ("a OR b OR c OR d", or_(A, B, C, D), "a OR b OR c OR d"),
    ("(a AND b) AND c", and_(A, B, C), "a AND b AND c"),
    ("a AND (b AND c)", and_(A, B, C), "a AND b AND c"),
    ("(a OR b) OR (c OR d)", or_(A, B, C, D), "a OR b OR c OR d"),
    ("a OR (b OR (c OR d))", or_(A, B, C, D), "a OR b OR c OR d"),
    # multi-line text, tabs and other whitespace
    ("a\n  AND b\n  OR NOT c", or_(and_(A, B), Not(C)), "a AND b OR NOT c"),
    ("\ta\tAND\r\nb\n", and_(A, B), "a AND b"),
    (
        '(order:total >= 500\n OR plan IN ["pro", "enterprise"])\nAND NOT cancelled',
        and_(
            or_(
                Compare(ref("order", "total"), ">=", 500),
                Member(ref("plan"), ("pro", "enterprise")),
            ),
            Not(ex("cancelled")),
        ),
        '(order:total >= 500 OR plan IN ["pro", "enterprise"]) AND NOT cancelled',
    ),
]


@pytest.mark.parametrize(("text", "expected", "canonical"), VALID)
def test_valid_condition_parses_to_ast_and_prints_canonically(
    text: str, expected: Expr, canonical: str
) -> None:
    cond = compile_condition(text)
    assert cond.expr == expected
    # == cannot tell 1 from 1.0: compare the reprs too, which show the types
    assert repr(cond.expr) == repr(expected)
    assert cond.within is None
    assert str(cond) == canonical
    assert cond.text == canonical
    # the canonical text is itself a fixed point
    again = compile_condition(canonical)
    assert again == cond
    assert str(again) == canonical


WITHIN_CASES: list[tuple[str, Duration, timedelta, str]] = [
    ("a WITHIN 24h", Duration(24, "h"), timedelta(hours=24), "a WITHIN 24h"),
    ("a within 7d", Duration(7, "d"), timedelta(days=7), "a WITHIN 7d"),
    ("a WiThIn 90m", Duration(90, "m"), timedelta(minutes=90), "a WITHIN 90m"),
    ("a WITHIN 45s", Duration(45, "s"), timedelta(seconds=45), "a WITHIN 45s"),
    ("a WITHIN 1s", Duration(1, "s"), timedelta(seconds=1), "a WITHIN 1s"),
    ("a WITHIN 180d", Duration(180, "d"), timedelta(days=180), "a WITHIN 180d"),
    ("a WITHIN 4320h", Duration(4320, "h"), timedelta(days=180), "a WITHIN 4320h"),
    ("a WITHIN 259200m", Duration(259200, "m"), timedelta(days=180), "a WITHIN 259200m"),
    ("a WITHIN 15552000s", Duration(15552000, "s"), timedelta(days=180), "a WITHIN 15552000s"),
    ("a WITHIN 024h", Duration(24, "h"), timedelta(hours=24), "a WITHIN 24h"),
    ("a WITHIN   3d   ", Duration(3, "d"), timedelta(days=3), "a WITHIN 3d"),
    ("a\nWITHIN\n3d\n", Duration(3, "d"), timedelta(days=3), "a WITHIN 3d"),
    ("(a OR b)WITHIN 2h", Duration(2, "h"), timedelta(hours=2), "a OR b WITHIN 2h"),
    (
        's == "WITHIN 5d" WITHIN 1d',
        Duration(1, "d"),
        timedelta(days=1),
        's == "WITHIN 5d" WITHIN 1d',
    ),
]


@pytest.mark.parametrize(("text", "within", "window", "canonical"), WITHIN_CASES)
def test_within_sets_the_window(
    text: str, within: Duration, window: timedelta, canonical: str
) -> None:
    cond = compile_condition(text)
    assert cond.within == within
    assert cond.window == window
    assert str(cond) == canonical
    assert compile_condition(canonical) == cond


@pytest.mark.parametrize("text", ["a", "a AND NOT b", 'status == "won"', "COUNT(x) < 3"])
def test_window_defaults_to_thirty_days(text: str) -> None:
    cond = compile_condition(text)
    assert cond.within is None
    assert cond.window == timedelta(days=30)
    assert timedelta(days=30) == DEFAULT_WINDOW
    assert timedelta(days=180) == MAX_WINDOW


def test_pinned_interface_example() -> None:
    cond = compile_condition("order:total >= 500 AND NOT cancelled WITHIN 24h")
    assert cond.window == timedelta(hours=24)
    facts = [Fact("order", properties={"total": 700}, id="e1")]
    assert cond.evaluate(facts, closed=False) is Verdict.UNKNOWN
    assert cond.evaluate(facts, closed=True) is Verdict.TRUE
    # the Fact signature: Fact(name, value=None, properties=None, id=None)
    fact = Fact("order")
    assert (fact.name, fact.value, fact.properties, fact.id) == ("order", None, None, None)
    assert {v.name for v in Verdict} == {"TRUE", "FALSE", "UNKNOWN"}


def test_conditions_compare_by_ast_and_window() -> None:
    assert compile_condition("a and b within 1d") == compile_condition("(a) AND b WITHIN 1d")
    assert hash(compile_condition("a and b")) == hash(compile_condition("a AND b"))
    assert compile_condition("a AND b") != compile_condition("a AND b WITHIN 30d")
    assert compile_condition("a AND b") != compile_condition("b AND a")


def test_atoms_are_distinct_and_in_written_order() -> None:
    cond = compile_condition("b AND (a OR NOT b) AND COUNT(a) > 1 AND a")
    assert cond.atoms == (ex("b"), ex("a"), Count("a", ">", 1))


# -- invalid conditions → ConditionError at an exact line and column ---------------

INVALID: list[tuple[str, int, int, str]] = [
    # a string compared with anything but ==
    ('status > "won"', 1, 8, "a string can only be compared with ==, not >"),
    ('status >= "won"', 1, 8, "a string can only be compared with ==, not >="),
    ('status < "won"', 1, 8, "a string can only be compared with ==, not <"),
    ('status <= "won"', 1, 8, "a string can only be compared with ==, not <="),
    ('a AND\n  order:plan >= "pro"', 2, 14, "a string can only be compared with =="),
    # WITHIN not at the end, twice, zero, too long
    ("a WITHIN 5d AND b", 1, 13, "WITHIN must come at the end"),
    ("WITHIN 5d a", 1, 11, "WITHIN must come at the end"),
    ("a WITHIN 5d\nOR b", 2, 1, "WITHIN must come at the end"),
    ("a WITHIN 5d WITHIN 6d", 1, 13, "WITHIN may appear only once"),
    ("a within 5d AND b WITHIN 6d", 1, 19, "WITHIN may appear only once"),
    ("a WITHIN 0d", 1, 10, "longer than zero"),
    ("a WITHIN 0s", 1, 10, "longer than zero"),
    ("a WITHIN 000h", 1, 10, "longer than zero"),
    ("a WITHIN 181d", 1, 10, "WITHIN 181d is longer than the maximum of 180d"),
    ("a WITHIN 4321h", 1, 10, "longer than the maximum of 180d"),
    ("a WITHIN 259201m", 1, 10, "longer than the maximum of 180d"),
    ("a WITHIN 15552001s", 1, 10, "longer than the maximum of 180d"),
    ("a WITHIN 99999999999999999999999d", 1, 10, "longer than the maximum of 180d"),
    ("a WITHIN 1" + "0" * 5000 + "d", 1, 10, "longer than the maximum of 180d"),
    # WITHIN without a usable duration
    ("a WITHIN", 1, 9, "expected a duration after WITHIN"),
    ("a WITHIN h", 1, 10, "expected a duration after WITHIN"),
    ("a WITHIN -5d", 1, 10, "expected a duration after WITHIN"),
    ("a WITHIN 5", 1, 11, "expected a unit after the number: the units are s (seconds), m"),
    ("a WITHIN\n  12", 2, 5, "expected a unit after the number"),
    ("a WITHIN 5y", 1, 11, "unknown unit 'y'"),
    ("a WITHIN 5days", 1, 11, "unknown unit 'days': write 5days as 5d; the units are s (seconds)"),
    ("a WITHIN 2w", 1, 11, "unknown unit 'w': write 2w as 14d; the units are"),
    # a duration in two units: WITHIN takes one, and the hint gives it
    ("x AND NOT y WITHIN 1d12h", 1, 20, "a WITHIN duration has one unit: write 1d12h as 36h"),
    ("a WITHIN 1h30m", 1, 10, "write 1h30m as 90m"),
    ("a WITHIN 179d48h", 1, 10, "as 181d, which is longer than the maximum of 180d"),
    ("a WITHIN 1d2x", 1, 10, "a WITHIN duration has one unit, not 1d2x: the units are"),
    # a unit spelt out, apart from its number: says so, and lists the units
    (
        "a WITHIN 1 day",
        1,
        12,
        "'day' is not a unit of WITHIN: write the number and its unit together, as 1d; "
        "the units are s (seconds), m (minutes), h (hours) and d (days)",
    ),
    ("a WITHIN 2 weeks", 1, 12, "as 14d"),
    ("a WITHIN 3 hours", 1, 12, "as 3h"),
    ("a WITHIN 5ms", 1, 11, "unknown unit 'ms': the smallest unit is s (seconds), as in 1s"),
    # units under a second, or longer than the maximum: no hint that is wrong
    ("a WITHIN 1 ms", 1, 12, "'ms' is not a unit of WITHIN: the smallest unit is s (seconds)"),
    ("a WITHIN 1 milliseconds", 1, 12, "the smallest unit is s (seconds), as in 1s; the"),
    ("a WITHIN 1 minute", 1, 12, "as 1m;"),
    ("a WITHIN 1 year", 1, 12, "1 year is longer than the maximum window, 180d; the units"),
    ("a WITHIN 7 months", 1, 12, "7 months is longer than the maximum window, 180d"),
    ("a WITHIN 6 months", 1, 12, "as 180d;"),
    ("a WITHIN 5y", 1, 11, "5y is longer than the maximum window, 180d"),
    # COUNT bounds are whole, non-negative numbers
    ("COUNT(x) >= 2.5", 1, 13, "a COUNT bound must be a whole number, not 2.5"),
    ("COUNT(x) > 1e3", 1, 12, "a COUNT bound must be a whole number, not 1e3"),
    ('COUNT(x) == "3"', 1, 13, "a COUNT bound must be a whole number"),
    ("COUNT(x) >= -1", 1, 13, "a COUNT bound cannot be negative (-1)"),
    ("a OR\n COUNT(x) < 0.5", 2, 13, "a COUNT bound must be a whole number"),
    ("COUNT(x)", 1, 9, "expected a comparison"),
    ("COUNT(x:p) > 1", 1, 8, "COUNT takes a plain fact name, without a :property: write COUNT(x)"),
    ("a OR COUNT(reminder_sent:x) > 1", 1, 25, "write COUNT(reminder_sent) (it counts every"),
    ("COUNT x > 1", 1, 7, 'expected "("'),
    # keywords used as names
    ("AND", 1, 1, "an operand is missing before AND"),
    ("a AND or", 1, 7, "an operand is missing after AND: found the keyword OR"),
    ("a:count", 1, 3, "COUNT is a keyword, not a fact name"),
    ("x:IN == 3", 1, 3, "IN is a keyword, not a fact name"),
    ("COUNT(not) > 1", 1, 7, "NOT is a keyword, not a fact name"),
    ("x IN [1] AND in", 1, 14, "IN is a keyword, not a fact name"),
    ("count > 3", 1, 7, "expected \"(\", found '>'"),
    ("within == 3", 1, 8, "expected a duration after WITHIN"),
    ("a AND within", 1, 13, "expected a duration after WITHIN"),
    # unbalanced parentheses and brackets
    ("(a AND b", 1, 9, 'expected ")"'),
    ("((a)", 1, 5, 'expected ")"'),
    ("a AND (b OR c\n", 1, 14, 'expected ")"'),
    ("(a AND b WITHIN 5d", 1, 9, 'expected ")"'),
    ("a)", 1, 2, "found ')'"),
    ("()", 1, 2, "found ')'"),
    ("x IN [1, 2", 1, 11, 'expected "," or "]"'),
    ("x IN []", 1, 7, "found ']'"),
    ("x IN [1,]", 1, 9, "found ']'"),
    ("x IN 1", 1, 6, 'expected "["'),
    # strings: unclosed, single-quoted, bad escapes
    ('x == "abc', 1, 6, "a string that is not closed on its line"),
    ('a AND\nx == "abc\n"', 2, 6, "a string that is not closed on its line"),
    ("x == 'a'", 1, 6, "strings are double-quoted"),
    ('x == "\\q"', 1, 6, "a string with an invalid escape"),
    ('x == "\\u12"', 1, 6, "a string with an invalid escape"),
    # empty text
    ("", 1, 1, "expected a condition, found nothing"),
    ("   ", 1, 4, "expected a condition, found nothing"),
    ("\n\n", 3, 1, "expected a condition, found nothing"),
    ("WITHIN 5d", 1, 1, "expected a condition, found nothing"),
    ("  WITHIN 5d", 1, 3, "expected a condition, found nothing"),
    # other syntax errors
    ("x = 1", 1, 3, "unexpected character '=' (use == to compare)"),
    ("a AND", 1, 6, "an operand is missing after AND, at the end of the condition"),
    # an operator without its operand names the operator, not the token after it
    ("a AND AND NOT b", 1, 7, "an operand is missing after AND: found the keyword AND"),
    ("a OR OR b", 1, 6, "an operand is missing after OR: found the keyword OR"),
    ("a OR", 1, 5, "an operand is missing after OR, at the end of the condition"),
    ("a AND NOT", 1, 10, "an operand is missing after NOT, at the end of the condition"),
    ("a AND NOT OR b", 1, 11, "an operand is missing after NOT: found the keyword OR"),
    ("OR b", 1, 1, "an operand is missing before OR"),
    ("a AND (OR b)", 1, 8, "an operand is missing before OR"),
    ("(a AND) OR b", 1, 7, 'an operand is missing after AND: found ")"'),
    ('x == "a and" AND', 1, 17, "an operand is missing after AND, at the end"),
    ("a AND   \n  ", 1, 6, "missing after AND, at the end of the condition"),
    ("a b", 1, 3, "found 'b'"),
    ("NOT", 1, 4, "an operand is missing after NOT, at the end of the condition"),
    ("x ==", 1, 5, 'expected a "string" or a number'),
    ("x == y", 1, 6, 'expected a "string" or a number'),
    ("x > 1 2", 1, 7, "found '2'"),
    ("a AND\n  b OR\n  c ==", 3, 7, "found the end of the condition"),
    ("a AND b!", 1, 8, "unexpected character '!'"),
    ('status != "lost"', 1, 8, """'!' (there is no !=: write NOT status == "lost")"""),
    ("a AND x:p != 3 WITHIN 1d", 1, 11, "(there is no !=: write NOT x:p == 3)"),
    ("a != b", 1, 3, "unexpected character '!' (there is no !=: write NOT x == y)"),
    ("1 > x", 1, 1, "found '1'"),
    # numbers the printer could not write back, or int() could not read
    ("x > 1e999", 1, 5, "a number too large: 1e999"),
    ("x IN [1, -1e400]", 1, 10, "a number too large"),
    ("x > 1" + "0" * 5000, 1, 5, "a number with too many digits"),
    ("COUNT(x) > 1" + "0" * 5000, 1, 12, "a COUNT bound with too many digits"),
    # nesting deeper than the printer and evaluator can recurse
    ("NOT " * 101 + "a", 1, 401, "nest more than 100 deep"),
    ("(" * 101 + "a" + ")" * 101, 1, 102, "nest more than 100 deep"),
]


def _caret(text: str, line: int, column: int) -> str:
    """The excerpt ConditionError should show: the line, and a caret under the column."""
    row = text.split("\n")[line - 1]
    assert column <= len(row) + 1, "the table points past the end of the line"
    return f"\n  {row}\n  {' ' * (column - 1)}^"


@pytest.mark.parametrize(("text", "line", "column", "fragment"), INVALID)
def test_invalid_condition_raises_at_line_and_column(
    text: str, line: int, column: int, fragment: str
) -> None:
    with pytest.raises(ConditionError) as info:
        compile_condition(text)
    err = info.value
    assert (err.line, err.column) == (line, column), err.reason
    assert fragment in err.reason
    assert err.text == text
    assert err.code == "invalid_condition"
    assert isinstance(err, LemongraphError)
    message = str(err)
    assert message.startswith(f"line {line}, column {column}: {err.reason}\n")
    assert message.endswith(_caret(text, line, column))


@pytest.mark.parametrize("depth", [1, 50, 100])
def test_nesting_up_to_the_limit_is_accepted(depth: int) -> None:
    nots = compile_condition("NOT " * depth + "a")
    parens = compile_condition("(" * depth + "a" + ")" * depth)
    mixed = compile_condition("(NOT " * (depth // 2) + "a" + ")" * (depth // 2))
    expected: Expr = A
    for _ in range(depth):
        expected = Not(expected)
    assert nots.expr == expected
    assert parens.expr == A
    assert str(mixed) == "NOT " * (depth // 2) + "a"
    assert nots.evaluate([], closed=True) is Verdict.of(depth % 2 == 1)
    assert compile_condition(str(nots)) == nots


def test_caret_keeps_tabs_so_it_lines_up() -> None:
    with pytest.raises(ConditionError) as info:
        compile_condition("\ta b")
    assert (info.value.line, info.value.column) == (1, 4)
    assert str(info.value).endswith("\n  \ta b\n  \t  ^")


@pytest.mark.parametrize("value", [None, 42, b"a", ["a"]])
def test_non_text_is_a_condition_error(value: object) -> None:
    with pytest.raises(ConditionError) as info:
        compile_condition(cast(str, value))
    assert (info.value.line, info.value.column) == (1, 1)
    assert "a condition must be text" in info.value.reason
