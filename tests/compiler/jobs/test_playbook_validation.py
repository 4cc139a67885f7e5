"""Playbook validation (docs/playbooks.md, 'Checking a playbook'): every refusal names
the playbook (the source), the milestone and the position (line, column), and bad
conditions carry a caret.

Every expected line and column below was counted by hand from the text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compiler import PlaybookError, PlaybookProblem, compile_playbook, load_playbook
from stream.runtime.files import load_playbook_file

HEAD = "key: p\nversion: 1\n"


def refused(text: str, source: str = "pb.yaml") -> tuple[PlaybookProblem, ...]:
    with pytest.raises(PlaybookError) as info:
        load_playbook(text, source)
    problems = info.value.problems
    assert problems, "a refusal lists at least one problem"
    return problems


def only(text: str, source: str = "pb.yaml") -> PlaybookProblem:
    problems = refused(text, source)
    assert len(problems) == 1, [str(p) for p in problems]
    return problems[0]


def assert_at(p: PlaybookProblem, line: int, column: int, milestone: str | None) -> None:
    assert (p.line, p.column, p.milestone) == (line, column, milestone), repr(p)


def assert_caret(p: PlaybookProblem, text: str, token: str) -> None:
    """The excerpt quotes the file line and puts a caret under ``token``."""
    assert p.line is not None
    assert p.column is not None
    row = text.splitlines()[p.line - 1]
    assert row[p.column - 1 :].startswith(token), (row, p.column)
    assert p.excerpt is not None
    quoted, caret = p.excerpt.splitlines()
    assert quoted.strip() == row.strip()
    assert caret.strip() == "^"
    assert quoted.index(row.strip()) - row.index(row.strip()) + p.column - 1 == caret.index("^")


# -- the graph ---------------------------------------------------------------


def test_unknown_needs() -> None:
    text = HEAD + (
        "milestones:\n"
        "  - id: a\n"
        "    condition: x\n"
        "  - id: b\n"
        "    needs: [a, ghost]\n"  # line 7; 'ghost' at column 16
        "    condition: y\n"
    )
    p = only(text)
    assert p.source == "pb.yaml"
    assert_at(p, 7, 16, "b")
    assert "ghost" in p.message
    assert "unknown" in p.message
    assert str(p).startswith("pb.yaml:7:16: milestone b: ")


def test_a_two_step_cycle_is_named() -> None:
    text = HEAD + (
        "goals: [c]\n"
        "milestones:\n"
        "  - id: a\n"
        "    needs: [b]\n"  # line 6
        "    condition: x\n"
        "  - id: b\n"
        "    needs: [a]\n"
        "    condition: y\n"
        "  - id: c\n"
        "    needs: [a]\n"
        "    condition: z\n"
    )
    p = only(text)
    assert "a → b → a" in p.message
    assert "cycle" in p.message
    assert p.milestone == "a"
    assert p.line == 6


def test_a_three_step_cycle_is_named_in_order() -> None:
    text = HEAD + (
        "goals: [d]\n"
        "milestones:\n"
        "  - id: d\n"
        "    needs: [a]\n"
        "    condition: w\n"
        "  - id: a\n"
        "    needs: [c]\n"  # line 9
        "    condition: x\n"
        "  - id: b\n"
        "    needs: [a]\n"
        "    condition: y\n"
        "  - id: c\n"
        "    needs: [b]\n"
        "    condition: z\n"
    )
    p = only(text)
    assert "a → c → b → a" in p.message
    assert (p.milestone, p.line) == ("a", 9)


def test_a_milestone_needing_itself_names_the_milestone() -> None:
    text = HEAD + "milestones:\n  - id: a\n    needs: [a]\n    condition: x\n"
    p = only(text)
    assert_at(p, 5, 13, "a")


def test_a_milestone_needing_itself_is_refused() -> None:
    text = HEAD + "milestones:\n  - id: a\n    needs: [a]\n    condition: x\n"
    p = only(text)
    assert (p.line, p.column) == (5, 13)
    assert "itself" in p.message


def test_duplicate_ids() -> None:
    text = HEAD + (
        "milestones:\n"
        "  - id: a\n"
        "    condition: x\n"
        "  - id: a\n"  # line 6; the id value at column 9
        "    condition: y\n"
    )
    p = only(text)
    assert_at(p, 6, 9, "a")
    assert "duplicate" in p.message
    assert "'a'" in p.message


def test_unknown_goals() -> None:
    text = HEAD + (
        "goals: [a, nope]\n"  # line 3; 'nope' at column 12
        "milestones:\n"
        "  - id: a\n"
        "    condition: x\n"
    )
    p = only(text)
    assert_at(p, 3, 12, None)
    assert "nope" in p.message
    assert "goals" in p.message


def test_empty_goals() -> None:
    text = HEAD + "goals: []\nmilestones:\n  - id: a\n    condition: x\n"
    p = only(text)
    assert p.line == 3
    assert "goal" in p.message


def test_a_milestone_that_leads_to_no_goal() -> None:
    text = HEAD + (
        "goals: [a]\n"
        "milestones:\n"
        "  - id: a\n"
        "    condition: x\n"
        "  - id: stray\n"  # line 7
        "    condition: y\n"
    )
    p = only(text)
    assert_at(p, 7, 9, "stray")
    assert "no goal" in p.message


def test_a_chain_feeding_only_a_stray_leads_to_no_goal() -> None:
    text = HEAD + (
        "goals: [a]\n"
        "milestones:\n"
        "  - id: a\n"
        "    condition: x\n"
        "  - id: b\n"  # line 7
        "    condition: y\n"
        "  - id: c\n"  # line 9
        "    needs: [b]\n"
        "    condition: z\n"
    )
    problems = refused(text)
    assert sorted((p.milestone, p.line) for p in problems) == [("b", 7), ("c", 9)]
    assert all("no goal" in p.message for p in problems)


def test_default_goals_are_the_milestones_nothing_needs() -> None:
    text = HEAD + (
        "milestones:\n"
        "  - id: a\n"
        "    condition: x\n"
        "  - id: b\n"
        "    needs: [a]\n"
        "    condition: y\n"
        "  - id: c\n"
        "    condition: z\n"
    )
    assert load_playbook(text).goals == ("b", "c")


def test_every_problem_is_listed_at_once() -> None:
    text = HEAD + (
        "goals: [zz]\n"  # line 3
        "milestones:\n"
        "  - id: a\n"
        "    condition: x\n"
        "  - id: a\n"  # line 7
        "    needs: [ghost]\n"  # line 8
        "    condition: y AND\n"  # line 9
    )
    problems = refused(text)
    lines = sorted(p.line for p in problems if p.line is not None)
    assert lines == [3, 7, 8, 9]
    text_all = "\n".join(p.message for p in problems)
    for fragment in ("zz", "duplicate", "ghost", "condition"):
        assert fragment in text_all


# -- conditions ----------------------------------------------------------------


def test_bad_condition_plain_scalar() -> None:
    text = HEAD + (
        "milestones:\n  - id: a\n    condition: x AND y)\n"  # line 5; the ')' at column 23
    )
    p = only(text)
    assert_at(p, 5, 23, "a")
    assert p.message.startswith("condition: ")
    assert_caret(p, text, ")")


def test_bad_condition_double_quoted_scalar() -> None:
    text = HEAD + (
        'milestones:\n  - id: a\n    condition: "x AND y)"\n'  # line 5; the ')' at column 24
    )
    p = only(text)
    assert_at(p, 5, 24, "a")
    assert_caret(p, text, ")")


def test_bad_condition_single_quoted_scalar() -> None:
    text = HEAD + "milestones:\n  - id: a\n    condition: 'x AND y)'\n"
    p = only(text)
    assert_at(p, 5, 24, "a")
    assert_caret(p, text, ")")


def test_bad_condition_block_scalar() -> None:
    text = HEAD + (
        "milestones:\n"
        "  - id: a\n"
        "    condition: |\n"
        "      x AND\n"  # line 6
        "      y)\n"  # line 7; the ')' at column 8
    )
    p = only(text)
    assert_at(p, 7, 8, "a")
    assert_caret(p, text, ")")


def test_bad_condition_folded_block_scalar_on_its_first_line() -> None:
    text = HEAD + (
        "milestones:\n  - id: a\n    condition: >\n      x AND y)\n"  # line 6; the ')' at column 14
    )
    p = only(text)
    assert_at(p, 6, 14, "a")
    assert_caret(p, text, ")")


def test_the_error_text_shows_the_file_line_and_a_caret() -> None:
    text = HEAD + "milestones:\n  - id: a\n    condition: x AND y)\n"
    with pytest.raises(PlaybookError) as info:
        load_playbook(text, "books/p.yaml")
    message = str(info.value)
    first, quoted, caret = message.splitlines()
    assert first.startswith("books/p.yaml:5:23: milestone a: condition: ")
    assert quoted.strip() == "condition: x AND y)"
    assert caret.index("^") == quoted.index(")")


@pytest.mark.parametrize(
    ("window", "ok"),
    [
        ("180d", True),
        ("4320h", True),
        ("15552000s", True),
        ("181d", False),
        ("4321h", False),
        ("15552001s", False),
    ],
)
def test_within_at_most_180_days(window: str, ok: bool) -> None:
    text = HEAD + f"milestones:\n  - id: a\n    condition: x WITHIN {window}\n"
    if ok:
        assert load_playbook(text).milestones[0].condition.window.days == 180
        return
    p = only(text)
    # "    condition: x WITHIN " is 24 characters: the amount starts at column 25.
    assert_at(p, 5, 25, "a")
    assert "180d" in p.message
    assert_caret(p, text, window)


@pytest.mark.parametrize("op", [">", ">=", "<", "<="])
def test_strings_only_with_equals(op: str) -> None:
    text = HEAD + f"milestones:\n  - id: a\n    condition: 'stage {op} \"won\"'\n"
    p = only(text)
    # "    condition: 'stage " is 22 characters: the operator at column 23.
    assert_at(p, 5, 23, "a")
    assert f"not {op}" in p.message
    assert "==" in p.message
    assert_caret(p, text, op)


def test_strings_with_equals_and_in_are_fine() -> None:
    text = HEAD + (
        'milestones:\n  - id: a\n    condition: \'stage == "won" OR plan IN ["pro", "team"]\'\n'
    )
    assert load_playbook(text).milestones[0].id == "a"


# -- the fields ------------------------------------------------------------------


def test_unknown_field() -> None:
    text = HEAD + (
        "milestones:\n  - id: a\n    condition: x\n    colour: red\n"  # line 6
    )
    problems = refused(text)
    p = problems[0]
    assert_at(p, 6, 13, "a")
    assert "unknown field 'colour'" in p.message


@pytest.mark.parametrize(
    ("field", "meant"),
    [("after", "needs"), ("nedds", "needs"), ("conditon", "condition"), ("name", "id")],
)
def test_an_unknown_milestone_field_says_which_was_meant(field: str, meant: str) -> None:
    text = HEAD + f"milestones:\n  - id: a\n    condition: x\n    {field}: [a]\n"
    message = refused(text)[-1].message
    assert message.endswith(f"unknown field {field!r} (did you mean {meant!r}?)"), message


def test_an_unknown_field_far_from_any_gets_no_guess() -> None:
    text = HEAD + "milestones:\n  - id: a\n    condition: x\n    colour: red\n"
    assert refused(text)[0].message.endswith("unknown field 'colour'")


def test_an_unknown_top_level_field_says_which_was_meant() -> None:
    text = HEAD + "title: Onboarding\nmilestones:\n  - id: a\n    condition: x\n"
    assert only(text).message.endswith("unknown field 'title' (did you mean 'name'?)")


def test_unknown_top_level_field() -> None:
    text = HEAD + "owner: me\nmilestones:\n  - id: a\n    condition: x\n"
    p = only(text)
    assert (p.line, p.milestone) == (3, None)
    assert "unknown field 'owner'" in p.message


def test_missing_field() -> None:
    text = HEAD + "milestones:\n  - id: a\n    instructions: hi\n"
    problems = refused(text)
    p = problems[0]
    assert p.milestone == "a"
    assert p.line == 4
    assert "condition" in p.message
    assert "required" in p.message


def test_missing_top_level_field() -> None:
    text = "key: p\nmilestones:\n  - id: a\n    condition: x\n"
    p = only(text)
    assert "version" in p.message
    assert "required" in p.message


@pytest.mark.parametrize("due", ["soon", "0s", "2 hours", "2h1d"])
def test_bad_due(due: str) -> None:
    text = HEAD + f"milestones:\n  - id: a\n    condition: x\n    due: {due}\n"
    problems = refused(text)
    p = problems[0]
    assert_at(p, 6, 10, "a")
    assert "due" in p.message


@pytest.mark.parametrize(
    ("condition", "due", "window"),
    [
        ("x AND NOT y WITHIN 4h", "5h", "its window, WITHIN 4h"),
        ("x WITHIN 4h", "4h", "its window, WITHIN 4h"),  # settle fires before due
        ("x", "31d", "its window, the default 30d (no WITHIN)"),
    ],
)
def test_a_due_not_shorter_than_the_window_is_refused(
    condition: str, due: str, window: str
) -> None:
    text = HEAD + f"milestones:\n  - id: a\n    condition: {condition}\n    due: {due}\n"
    p = only(text)
    assert_at(p, 6, 10, "a")
    assert p.message == (
        f"due: {due} is not shorter than {window}: the milestone settles when its window "
        "closes, so its task could never go out; make due shorter or the window longer"
    )


def test_a_due_inside_the_window_is_accepted() -> None:
    load_playbook(HEAD + "milestones:\n  - id: a\n    condition: x WITHIN 4h\n    due: 3h59m\n")


def test_a_registered_version_with_a_late_due_still_loads() -> None:
    """The rule is for files (and inline scenario playbooks); a spec read back from
    the playbooks topic, registered before it, still compiles."""
    spec = {
        "key": "p",
        "version": 1,
        "milestones": [{"id": "a", "condition": "x WITHIN 1h", "due": "2h"}],
    }
    assert compile_playbook(spec).by_id["a"].due is not None
    with pytest.raises(PlaybookError, match="due: 2h is not shorter than its window"):
        compile_playbook(spec, check_due=True)


@pytest.mark.parametrize(
    "extra",
    ["    colour: red\n", "    due: soon\n"],
    ids=["unknown-field", "bad-due"],
)
def test_one_bad_milestone_field_is_one_problem(extra: str) -> None:
    text = HEAD + "milestones:\n  - id: a\n    condition: x\n" + extra
    only(text)


def test_version_must_be_an_integer() -> None:
    text = "key: p\nversion: '1'\nmilestones:\n  - id: a\n    condition: x\n"
    p = only(text)
    assert (p.line, p.column) == (2, 10)
    assert "version" in p.message


def test_a_playbook_must_be_a_mapping() -> None:
    p = only("- a\n- b\n")
    assert "mapping" in p.message


# -- the text --------------------------------------------------------------------


def test_malformed_yaml() -> None:
    text = HEAD + "milestones: [\n"
    p = only(text, "broken.yaml")
    assert p.source == "broken.yaml"
    assert p.line == 4
    assert p.column == 1
    assert str(p).startswith("broken.yaml:4:1: ")


def test_an_empty_file() -> None:
    p = only("", "empty.yaml")
    assert p.source == "empty.yaml"
    assert "empty" in p.message


def test_duplicate_yaml_keys() -> None:
    text = HEAD + "key: q\nmilestones:\n  - id: a\n    condition: x\n"
    p = only(text)
    assert (p.line, p.column) == (3, 1)
    assert "'key'" in p.message
    assert "twice" in p.message


def test_duplicate_keys_inside_a_milestone() -> None:
    text = HEAD + "milestones:\n  - id: a\n    condition: x\n    condition: y\n"
    p = only(text)
    assert (p.line, p.column) == (6, 5)
    assert "'condition'" in p.message


# -- JSON playbooks ----------------------------------------------------------------


JSON_OK = {
    "key": "pj",
    "version": 2,
    "complete_when": "any",
    "milestones": [
        {"id": "a", "condition": "x WITHIN 1d"},
        {"id": "b", "needs": ["a"], "condition": "y", "due": "2h"},
    ],
}


def test_a_json_playbook_loads() -> None:
    pb = load_playbook(json.dumps(JSON_OK, indent=2), "pj.json")
    assert (pb.key, pb.version, pb.complete_when, pb.goals) == ("pj", 2, "any", ("b",))
    assert [m.id for m in pb.milestones] == ["a", "b"]
    assert pb.by_id["b"].due is not None
    assert pb.by_id["b"].due.total_seconds() == 7200


def test_a_json_playbook_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "pj.json"
    path.write_text(json.dumps(JSON_OK), encoding="utf-8")
    assert load_playbook_file(path).key == "pj"


def test_compile_playbook_from_data() -> None:
    assert compile_playbook(JSON_OK).key == "pj"
    with pytest.raises(PlaybookError) as info:
        compile_playbook({**JSON_OK, "goals": ["nope"]}, "data")
    (p,) = info.value.problems
    assert p.source == "data"
    assert "nope" in p.message


def test_a_bad_condition_in_json_points_into_the_file() -> None:
    text = (
        "{\n"
        '  "key": "p",\n'
        '  "version": 1,\n'
        '  "milestones": [\n'
        '    {"id": "a", "condition": "x AND y)"}\n'  # line 5; ')' at column 38
        "  ]\n"
        "}\n"
    )
    p = only(text, "p.json")
    assert p.source == "p.json"
    assert_at(p, 5, 38, "a")
    assert_caret(p, text, ")")


def test_unknown_needs_in_json() -> None:
    text = (
        "{\n"
        '  "key": "p",\n'
        '  "version": 1,\n'
        '  "milestones": [\n'
        '    {"id": "a", "needs": ["ghost"], "condition": "x"}\n'  # 'ghost' at column 27
        "  ]\n"
        "}\n"
    )
    p = only(text, "p.json")
    assert_at(p, 5, 27, "a")
    assert "ghost" in p.message


def test_malformed_json() -> None:
    p = only('{"key": "p", "version": 1,, "milestones": []}', "p.json")
    assert (p.source, p.line, p.column) == ("p.json", 1, 27)


def test_duplicate_json_keys() -> None:
    text = '{"key": "p", "version": 1, "key": "q", "milestones": [{"id": "a", "condition": "x"}]}'
    p = only(text, "p.json")
    assert (p.line, p.column) == (1, 28)
    assert "twice" in p.message


def test_a_playbook_file_that_cannot_be_read_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "missing.yaml"
    with pytest.raises(PlaybookError) as info:
        load_playbook_file(path)
    (p,) = info.value.problems
    assert p.source == str(path)
    assert "cannot read" in p.message


# -- scenario files get the same guesses -------------------------------------------------


def test_an_unknown_scenario_field_says_which_was_meant() -> None:
    from compiler import ScenarioError, parse_scenarios

    text = (
        "playbook: x.yaml\nscenarios:\n  - name: a\n    base: 2026-01-05T09:00:00Z\n"
        "    events:\n      - {at: 1h, action: x, props: {}}\n    expected: {status: done}\n"
        "  - name: b\n    base: 2026-01-05T09:00:00Z\n    expect: {stauts: done}\n"
    )
    with pytest.raises(ScenarioError) as info:
        parse_scenarios(text, "s.yaml")
    message = str(info.value)
    assert "unknown field 'props' (did you mean 'properties'?)" in message
    assert "unknown field 'expected' (did you mean 'expect'?)" in message
    assert "unknown field 'stauts' (did you mean 'status'?)" in message
