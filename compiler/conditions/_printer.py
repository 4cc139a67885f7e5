"""Write an AST back as canonical condition text.

Canonical means: upper-case keywords, single spaces, the fewest parentheses that
keep the tree (NOT > AND > OR), numbers as Python writes them, strings
double-quoted with JSON escapes. ``compile_condition(str(c))`` gives back the
same AST and window.
"""

from __future__ import annotations

import json
from datetime import timedelta

from compiler.conditions._ast import (
    And,
    Atom,
    Compare,
    Exists,
    Expr,
    FactRef,
    Literal,
    Member,
    Not,
    Or,
)

__all__ = ["format_duration", "print_atom", "print_expr"]

_PRECEDENCE = {Or: 1, And: 2, Not: 3}


def _literal(value: Literal) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return repr(value)


def _fact(ref: FactRef) -> str:
    return ref.name if ref.prop is None else f"{ref.name}:{ref.prop}"


def print_atom(atom: Atom) -> str:
    """The canonical text of one atom; also its key in monitor state."""
    if isinstance(atom, Exists):
        return _fact(atom.fact)
    if isinstance(atom, Compare):
        return f"{_fact(atom.fact)} {atom.op} {_literal(atom.value)}"
    if isinstance(atom, Member):
        return f"{_fact(atom.fact)} IN [{', '.join(_literal(v) for v in atom.values)}]"
    return f"COUNT({atom.name}) {atom.op} {atom.bound}"


def _precedence(expr: Expr) -> int:
    return _PRECEDENCE.get(type(expr), 4)


def print_expr(expr: Expr) -> str:
    """The canonical text of an expression."""
    if isinstance(expr, Not):
        inner = print_expr(expr.operand)
        return f"NOT ({inner})" if _precedence(expr.operand) < 3 else f"NOT {inner}"
    if isinstance(expr, And | Or):
        keyword = " AND " if isinstance(expr, And) else " OR "
        mine = _precedence(expr)
        # Children of equal precedence are parenthesised too: the parser flattens
        # `a AND b AND c` into one node, so a nested And can only come from parens.
        parts = [
            f"({print_expr(e)})" if _precedence(e) <= mine else print_expr(e) for e in expr.operands
        ]
        return keyword.join(parts)
    return print_atom(expr)


def format_duration(window: timedelta) -> str:
    """The shortest exact text for a window: 24h, 90m, 7d, 45s."""
    seconds = int(window.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
