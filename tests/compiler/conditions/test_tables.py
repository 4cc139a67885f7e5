"""The condition parser loads the LALR tables scripts/grammar built
(compiler/conditions/_tables.py) instead of building the grammar at import
(docs/operations.md, "How long a start takes"); it must parse, and fail, exactly
as the parser built from condition.lark does."""

from __future__ import annotations

import pytest
from lark import Lark, Tree, UnexpectedInput

from compiler.conditions import _parser, _tables

PARSED = [
    "a",
    "not a",
    "a and b or not (c or d)",
    "count(answer) >= 2",
    'tier == "gold" AND region IN ["eu", "us", 3]',
    "meeting:scheduled and crm:updated.v2 > -1.5e3",
    "((a))",
    "NOT NOT a OR b AND c",
]
REFUSED = ["", "a and", "count(a)", "a == ", "a in []", "(a", "a b", '"x" == a', "a ==== 1", "é"]


def _refusal(parser: Lark, text: str) -> tuple[str, int, object]:
    with pytest.raises(UnexpectedInput) as caught:
        parser.parse(text)
    exc = caught.value
    return type(exc).__name__, exc.pos_in_stream, sorted(getattr(exc, "expected", ()) or ())


def test_the_tables_are_this_grammars_and_this_larks() -> None:
    # What `scripts/grammar --check` compares.
    assert _parser.grammar_key(_parser.GRAMMAR) == _tables.KEY, "run scripts/grammar"


def test_the_loaded_parser_parses_and_refuses_as_the_built_one() -> None:
    built = _parser.build_lark()
    loaded = _parser._LARK
    assert loaded is not built
    for text in PARSED:
        tree = loaded.parse(text)
        assert isinstance(tree, Tree)
        assert tree == built.parse(text), text
        assert tree.meta.column == built.parse(text).meta.column  # propagate_positions
    for text in REFUSED:
        assert _refusal(loaded, text) == _refusal(built, text), text


def test_stale_tables_are_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not hasattr(_parser._LARK, "source_grammar")  # loaded, not built
    monkeypatch.setattr(_tables, "KEY", _parser.grammar_key(_parser.GRAMMAR + "\n"))
    rebuilt = _parser._load_lark()
    assert rebuilt.source_grammar == _parser.GRAMMAR  # built from the grammar
    assert rebuilt.parse("a and b") == _parser._LARK.parse("a and b")
