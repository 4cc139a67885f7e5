"""Text → AST: the lark grammar, the WITHIN clause, and the static checks.

Nothing here lets a lark exception escape: every problem becomes a
:class:`ConditionError` with a line, a column, a caret and what was expected.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from datetime import timedelta
from importlib import resources
from typing import Any, cast

import lark
from lark import (
    Lark,
    Token,
    Transformer,
    Tree,
    UnexpectedCharacters,
    UnexpectedEOF,
    UnexpectedInput,
)
from lark import UnexpectedToken as LarkUnexpectedToken
from lark.exceptions import VisitError

from compiler._errors import ConditionError
from compiler.conditions import _tables
from compiler.conditions._ast import (
    And,
    Compare,
    Count,
    Exists,
    Expr,
    FactRef,
    Literal,
    Member,
    Not,
    Op,
    Or,
)

__all__ = ["DEFAULT_WINDOW", "MAX_WINDOW", "Duration", "parse"]

#: The window of a condition without WITHIN (docs/conditions.md, 'Windows').
DEFAULT_WINDOW = timedelta(days=30)
#: The longest window a condition may ask for.
MAX_WINDOW = timedelta(days=180)
#: How deep parentheses and NOTs may nest. The AST is walked recursively (here, by
#: the printer and by evaluation), so unbounded nesting would end in RecursionError.
MAX_NESTING = 100

KEYWORDS = frozenset({"and", "or", "not", "in", "count", "within"})
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}

GRAMMAR = resources.files(__package__).joinpath("condition.lark").read_text(encoding="utf-8")


def grammar_key(grammar: str) -> str:
    """What a parser's tables depend on: the grammar's text and lark's version."""
    return f"sha256:{hashlib.sha256(grammar.encode()).hexdigest()} lark {lark.__version__}"


def build_lark() -> Lark:
    """The parser, built from the grammar (LALR analysis: about 45 ms of CPU)."""
    return Lark(GRAMMAR, parser="lalr", propagate_positions=True, maybe_placeholders=False)


def _load_lark() -> Lark:
    """The parser from the tables scripts/grammar built from this grammar with this
    lark (about 1 ms; docs/operations.md, "How long a start takes"), as lark's own
    standalone parsers load theirs; built here when the tables are stale."""
    if grammar_key(GRAMMAR) != _tables.KEY:
        return build_lark()
    tables = _tables.TABLES
    loaded = Lark._load_from_dict(tables["data"], tables["memo"])  # type: ignore[no-untyped-call]
    return cast(Lark, loaded)


_LARK = _load_lark()

# What the parser expected, in words a playbook author knows.
_EXPECTED_WORDS = {
    "NAME": "a fact name",
    "NUMBER": "a number",
    "STRING": 'a "string"',
    "OP": "a comparison (==, >, >=, <, <=)",
    "LPAR": '"("',
    "RPAR": '")"',
    "LSQB": '"["',
    "RSQB": '"]"',
    "COMMA": '","',
    "COLON": '":"',
    "_AND": "AND",
    "_OR": "OR",
    "_NOT": "NOT",
    "_IN": "IN",
    "_COUNT": "COUNT",
    "$END": "the end of the condition",
}

# A WITHIN keyword outside string literals: strings are matched first and skipped.
_WITHIN_SCAN = re.compile(r'"(?:[^"\\\n]|\\.)*"|(?<![\w.\-])(?P<kw>within)(?![\w.\-])', re.I)
_DURATION = re.compile(r"\s*(?P<amount>\d+)(?P<unit>[A-Za-z]*)(?P<rest>.*)", re.S)


@dataclass(frozen=True, slots=True)
class Duration:
    """A WITHIN duration as written: ``amount`` of ``unit`` (s, m, h or d)."""

    amount: int
    unit: str

    @property
    def timedelta(self) -> timedelta:
        """The duration as a timedelta."""
        return timedelta(seconds=self.amount * _UNITS[self.unit])

    def __str__(self) -> str:
        return f"{self.amount}{self.unit}"


def _position(text: str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of a character offset."""
    line = text.count("\n", 0, offset) + 1
    start = text.rfind("\n", 0, offset) + 1
    return line, offset - start + 1


def _error_at(text: str, offset: int, reason: str) -> ConditionError:
    line, column = _position(text, offset)
    return ConditionError(reason, text, line, column)


def parse(text: object) -> tuple[Expr, Duration | None]:
    """Parse a whole condition: its expression and its WITHIN clause, if any."""
    if not isinstance(text, str):
        raise ConditionError(f"a condition must be text, not {type(text).__name__}", "", 1, 1)
    body, within = _split_within(text)
    if not body.strip():
        where = len(body) if within is not None else len(text)
        raise _error_at(text, where, "expected a condition, found nothing")
    _check_operands(text, body)
    try:
        tree = _LARK.parse(body)
        _check_nesting(text, tree)
        expr = cast(Expr, _ToAst(text).transform(tree))
    except VisitError as exc:
        if isinstance(exc.orig_exc, ConditionError):
            raise exc.orig_exc from None
        raise  # a bug in the transformer, not bad input
    except UnexpectedInput as exc:
        raise _syntax_error(text, body, exc) from None
    return expr, within


def _split_within(text: str) -> tuple[str, Duration | None]:
    """Split off ``WITHIN duration``; it may appear once, at the very end."""
    keywords = [m for m in _WITHIN_SCAN.finditer(text) if m.group("kw")]
    if not keywords:
        return text, None
    if len(keywords) > 1:
        raise _error_at(text, keywords[1].start("kw"), "WITHIN may appear only once")
    keyword = keywords[0]
    after = keyword.end("kw")
    match = _DURATION.match(text, after)
    if match is None:
        raise _error_at(
            text, _skip_space(text, after), "expected a duration after WITHIN, like 24h or 7d"
        )
    digits, unit = match.group("amount").lstrip("0") or "0", match.group("unit")
    # int() refuses thousands of digits, and timedelta overflows long before: a
    # number this long is over the maximum in any unit, so cap it before converting.
    amount = int(digits) if len(digits) <= 12 else 10**12
    unit_at = match.start("unit")
    rest = match.group("rest")
    if not unit and re.match(r"\s+[A-Za-z]+\s*$", rest):
        # `WITHIN 1 day`: a unit, spelt out and apart from its number.
        word = rest.strip()
        raise _error_at(
            text,
            _skip_space(text, match.start("rest")),
            f"{word!r} is not a unit of WITHIN: "
            f"{_written(int(match.group('amount')[:12]), word, apart=True)}; {_UNIT_NAMES}",
        )
    if unit in _UNITS and re.fullmatch(r"(\d+[A-Za-z]+)+\s*", rest):
        # `WITHIN 1d12h`: a duration in two units; WITHIN takes one.
        raise _error_at(text, match.start("amount"), _one_unit(match.group()))
    if rest.strip():
        rest_at = _skip_space(text, match.start("rest"))
        raise _error_at(text, rest_at, "WITHIN must come at the end of the condition")
    if not unit:
        raise _error_at(text, unit_at, f"expected a unit after the number: {_UNIT_NAMES}")
    if unit not in _UNITS:
        hint = _written(amount, unit, apart=False)
        raise _error_at(text, unit_at, f"unknown unit {unit!r}: {hint}{_UNIT_NAMES}")
    duration = Duration(amount, unit)
    if amount == 0:
        raise _error_at(text, match.start("amount"), "a WITHIN window must be longer than zero")
    if amount * _UNITS[unit] > MAX_WINDOW.total_seconds():
        raise _error_at(
            text, match.start("amount"), f"WITHIN {digits}{unit} is longer than the maximum of 180d"
        )
    return text[: keyword.start("kw")], duration


_UNIT_NAMES = "the units are s (seconds), m (minutes), h (hours) and d (days), as in 7d"


def _written(amount: int, word: str, *, apart: bool) -> str:
    """What to write for ``amount word`` (a unit WITHIN does not know): ``1 day`` →
    ``as 1d``, ``2 weeks`` → ``as 14d``; a unit under a second, or an amount over
    the maximum, says so. ``apart``: the word was written apart from its number
    (the hint then ends the reason; otherwise it leads the list of units)."""
    lower = word.lower()
    seconds: int | None
    if lower.startswith(("ms", "milli", "us", "µs", "micro", "ns", "nano")):
        seconds = None
    elif lower.startswith("w"):
        seconds = amount * 7 * 86400
    elif lower.startswith("mo"):
        seconds = amount * 30 * 86400
    elif lower.startswith("y"):
        seconds = amount * 365 * 86400
    elif lower[0] in _UNITS:
        seconds = amount * _UNITS[lower[0]]
    else:
        return "write the number and its unit together" if apart else ""
    if seconds is None:
        hint = "the smallest unit is s (seconds), as in 1s"
    elif seconds > MAX_WINDOW.total_seconds():
        hint = (
            f"{amount}{' ' if apart else ''}{word} is longer than the maximum window, "
            f"{MAX_WINDOW.days}d"
        )
    else:
        written = _single_unit(seconds)
        if apart:
            return f"write the number and its unit together, as {written}"
        hint = f"write {amount}{word} as {written}"
    return hint if apart else hint + "; "


def _single_unit(seconds: int) -> str:
    """``seconds`` in the largest unit that divides it: 129600 → ``36h``."""
    for unit in ("d", "h", "m", "s"):
        if seconds % _UNITS[unit] == 0:
            return f"{seconds // _UNITS[unit]}{unit}"
    raise AssertionError("s divides every whole number of seconds")  # pragma: no cover


def _one_unit(written: str) -> str:
    """The reason for a duration in several units (``1d12h``): WITHIN takes one."""
    parts = re.findall(r"(\d+)([A-Za-z]+)", written)
    if any(unit not in _UNITS for _, unit in parts):
        return f"a WITHIN duration has one unit, not {written.strip()}: {_UNIT_NAMES}"
    seconds = sum(int(n[:12]) * _UNITS[unit] for n, unit in parts)
    reason = f"a WITHIN duration has one unit: write {written.strip()} as {_single_unit(seconds)}"
    if seconds > MAX_WINDOW.total_seconds():
        reason += f", which is longer than the maximum of {MAX_WINDOW.days}d"
    return reason


# The words of a condition, for finding an operator without an operand: strings
# (skipped), names and keywords, parentheses.
_WORDS = re.compile(r'"(?:[^"\\\n]|\\.)*"|[A-Za-z_][A-Za-z0-9_.\-]*|[()]|[^\s]')
_BINARY = ("and", "or")


def _check_operands(text: str, body: str) -> None:
    """Refuse AND, OR or NOT without its operand (``a AND AND NOT b``, ``a OR``,
    ``AND b``), naming the operator; lark would report the token after it, or
    read the second AND as a fact name."""
    words = [(m.group(), m.start()) for m in _WORDS.finditer(body)]
    for i, (word, at) in enumerate(words):
        kind = word.lower()
        if kind not in (*_BINARY, "not"):
            continue
        before = words[i - 1][0].lower() if i > 0 else None
        after = words[i + 1] if i + 1 < len(words) else None
        if before == ":" or (before == "(" and i > 1 and words[i - 2][0].lower() == "count"):
            continue  # where only a name fits: the keyword-as-name message says it
        if kind in _BINARY and (before is None or before in (*_BINARY, "not", "(")):
            raise _error_at(text, at, f"an operand is missing before {word.upper()}")
        if after is None:
            raise _error_at(
                text,
                len(body.rstrip()),
                f"an operand is missing after {word.upper()}, at the end of the condition",
            )
        if after[0].lower() in _BINARY or after[0] == ")":
            found = f"the keyword {after[0].upper()}" if after[0] != ")" else '")"'
            raise _error_at(
                text, after[1], f"an operand is missing after {word.upper()}: found {found}"
            )


def _check_nesting(text: str, tree: Tree[Token]) -> None:
    """Refuse parentheses and NOTs nested deeper than :data:`MAX_NESTING` (iteratively:
    the point is not to recurse on a tree of any depth)."""
    stack: list[tuple[Tree[Token], int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if node.data in ("or_", "not_") and node is not tree:
            depth += 1  # every "(" opens an or_ node; every NOT is a not_ node
            if depth > MAX_NESTING:
                line, column = getattr(node.meta, "line", 1), getattr(node.meta, "column", 1)
                raise ConditionError(
                    f"parentheses and NOT nest more than {MAX_NESTING} deep", text, line, column
                )
        stack.extend((child, depth) for child in node.children if isinstance(child, Tree))


def _skip_space(text: str, offset: int) -> int:
    while offset < len(text) and text[offset].isspace():
        offset += 1
    return offset


def _describe(token: Token) -> str:
    if token.type == "$END":
        return "the end of the condition"
    return repr(str(token))


def _expected(names: set[str] | frozenset[str]) -> str:
    words = sorted({_EXPECTED_WORDS.get(n, n) for n in names})
    if not words:
        return "nothing more"
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _syntax_error(text: str, body: str, exc: UnexpectedInput) -> ConditionError:
    if isinstance(exc, UnexpectedCharacters):
        at = exc.pos_in_stream or 0
        char = body[at] if at < len(body) else ""
        hint = " (use == to compare)" if char == "=" else ""
        if body.startswith("!=", at):
            hint = f" (there is no !=: write {_not_equal(body, at)})"
        if char == "'":
            hint = ' (strings are double-quoted: "like this")'
        if char == '"':
            reason = "a string that is not closed on its line"
        else:
            reason = f"unexpected character {char!r}{hint}"
            allowed = exc.allowed or set()
            if allowed and char != "!":  # the != hint says what to write
                reason += f"; expected {_expected(allowed)}"
        return _error_at(text, at, reason)
    if isinstance(exc, LarkUnexpectedToken | UnexpectedEOF):
        token = exc.token
        expected = exc.expected if isinstance(exc, UnexpectedEOF) else exc.accepts or exc.expected
        offset = token.start_pos if token.start_pos is not None else len(body)
        if token.type == "$END":
            offset = len(body.rstrip())
        found = _describe(token)
        word = str(token).lower()
        count = _COUNT_OPEN.search(body, 0, offset)
        if token.type == "COLON" and count is not None:
            name = count.group("name")
            return _error_at(
                text,
                offset,
                f"COUNT takes a plain fact name, without a :property: "
                f"write COUNT({name}) (it counts every {name} fact)",
            )
        if token.type == "NAME" and word in KEYWORDS:
            found = f"the keyword {str(token).upper()}"
        return _error_at(text, offset, f"expected {_expected(set(expected))}, found {found}")
    return _error_at(text, 0, "not a valid condition")  # pragma: no cover - lark's own kinds


# `COUNT(name` right before the token lark stopped at.
_COUNT_OPEN = re.compile(r"(?<![\w.\-])count\s*\(\s*(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)\s*$", re.I)
_FACT_BEFORE = re.compile(r"[A-Za-z_][\w.\-]*(:[A-Za-z_][\w.\-]*)?\s*$")
_LITERAL_AFTER = re.compile(r'\s*("(?:[^"\\\n]|\\.)*"|-?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?)')


def _not_equal(body: str, at: int) -> str:
    """``NOT fact == value`` for the ``fact != value`` at ``at`` (generic when the
    operands are not plain)."""
    fact = _FACT_BEFORE.search(body, 0, at)
    value = _LITERAL_AFTER.match(body, at + 2)
    if fact is None or value is None:
        return "NOT x == y"
    return f"NOT {fact.group().strip()} == {value.group(1)}"


def _number(token: Token) -> int | float:
    raw = str(token)
    if re.fullmatch(r"-?\d+", raw):
        return int(raw)  # ValueError beyond int()'s digit limit; the caller reports it
    return float(raw)


class _ToAst(Transformer[Token, Any]):
    """lark tree → frozen AST, with the static checks that need positions."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self._text = text

    def _fail(self, token: Token, reason: str) -> ConditionError:
        return ConditionError(reason, self._text, token.line or 1, token.column or 1)

    def NAME(self, token: Token) -> Token:  # lark calls a terminal's callback by its name
        if str(token).lower() in KEYWORDS:
            raise self._fail(token, f"{str(token).upper()} is a keyword, not a fact name")
        return token

    def NUMBER(self, token: Token) -> Token:
        return token

    def STRING(self, token: Token) -> Token:
        return token

    def _literal(self, token: Token) -> Literal:
        if token.type == "STRING":
            try:
                value = json.loads(str(token))
            except ValueError:
                raise self._fail(token, "a string with an invalid escape") from None
            assert isinstance(value, str)
            return value
        try:
            number = _number(token)
        except ValueError:  # more digits than int() converts
            raise self._fail(token, "a number with too many digits") from None
        if not math.isfinite(number):  # 1e999 is inf, which has no text to print back
            raise self._fail(token, f"a number too large: {token}")
        return number

    def fact(self, items: list[Token]) -> FactRef:
        return FactRef(str(items[0]), str(items[1]) if len(items) > 1 else None)

    def exists(self, items: list[FactRef]) -> Exists:
        return Exists(items[0])

    def compare(self, items: list[Any]) -> Compare:
        ref, op, token = items
        value = self._literal(token)
        if isinstance(value, str) and str(op) != "==":
            raise self._fail(op, f"a string can only be compared with ==, not {op}")
        return Compare(ref, cast(Op, str(op)), value)

    def member(self, items: list[Any]) -> Member:
        ref, *tokens = items
        return Member(ref, tuple(self._literal(t) for t in tokens))

    def count(self, items: list[Token]) -> Count:
        name, op, token = items
        if token.type != "NUMBER" or not re.fullmatch(r"-?\d+", str(token)):
            raise self._fail(token, f"a COUNT bound must be a whole number, not {token}")
        try:
            bound = int(str(token))
        except ValueError:  # more digits than int() converts
            raise self._fail(token, "a COUNT bound with too many digits") from None
        if bound < 0:
            raise self._fail(token, f"a COUNT bound cannot be negative ({bound})")
        return Count(str(name), cast(Op, str(op)), bound)

    def not_(self, items: list[Expr]) -> Not:
        return Not(items[0])

    def and_(self, items: list[Expr]) -> Expr:
        return _flatten(And, items)

    def or_(self, items: list[Expr]) -> Expr:
        return _flatten(Or, items)


def _flatten(kind: type[And] | type[Or], items: list[Expr]) -> Expr:
    if len(items) == 1:
        return items[0]
    operands: list[Expr] = []
    for item in items:
        operands.extend(item.operands if isinstance(item, kind) else (item,))
    return kind(tuple(operands))
