"""What a run is told of its subject (docs/memory.md, "Given to agents",
"Retrieval"), pure: the section in ``compose``, its order, its budget with
10,000 facts, its absence, and recall@5 on the labelled set of
tests/agents/relevance_set.py."""

from __future__ import annotations

import time

from agents.compose import OpenTask, Turn, compose
from agents.memory import estimate_tokens, known_lines, ranked
from tests.agents.relevance_set import FACTS, QUERIES
from tests.agents.test_compose import CATALOG, TASKS
from topics import ProfileFact

#: recall@5 measured on the labelled set is 0.950 (docs/memory.md, "Retrieval"):
#: the floor is a little under it, so a change that ranks worse fails.
RECALL_FLOOR = 0.9
HEAD = "What we know about s-ada:"


def _fact(i: int, name: str, value: object = None, properties: dict[str, object] | None = None,
          source: str = "world") -> ProfileFact:  # fmt: skip
    day = 1 + i % 28
    return ProfileFact.model_validate({
        "name": name, "value": value, "properties": properties or {}, "source": source,
        "event_id": f"e-{i}", "job_key": f"job-{i % 3}",
        "valid_from": f"2026-11-{day:02d}T09:{i % 60:02d}:00Z",
    })  # fmt: skip


PROFILE = [_fact(i, name, value, props, "world" if i % 2 else "tool")
           for i, (name, value, props) in enumerate(FACTS)]  # fmt: skip


def recall_at_5() -> float:
    """The mean, over the queries, of the share of their relevant facts ranked
    in the first five."""
    total = 0.0
    for task, turn, relevant in QUERIES:
        top = [f.name for f in ranked(PROFILE, [task, turn])[:5]]
        total += len(relevant & set(top)) / len(relevant)
    return total / len(QUERIES)


def test_recall_at_5_on_the_labelled_set() -> None:
    assert len(PROFILE) == 60
    assert len(QUERIES) == 40
    assert len({f.name for f in PROFILE}) == 60  # one current version per name
    figure = recall_at_5()
    print(f"recall@5 = {figure:.3f}")
    assert figure >= RECALL_FLOOR


def test_the_section_lists_the_facts_with_their_events_most_relevant_first() -> None:
    facts = [
        _fact(17, "plan_chosen", "pro"),
        _fact(18, "account_activated", source="tool"),
        _fact(19, "meeting_scheduled", properties={"room": "A"}),
    ]
    request = compose(
        CATALOG, playbook_instructions="", tasks=TASKS[:1], subject={"id": "s-ada"},
        contacts=[], turns=[Turn("person", "Which plan am I on?")],
        known=("s-ada", facts), known_tokens=400,
    )  # fmt: skip
    lines = request.instructions.splitlines()
    at = lines.index(HEAD)
    assert lines[at + 1] == "- plan_chosen: pro (world, 2026-11-18, event e-17, job job-2)"
    # "book a call" in the task's instructions: the meeting next; then the rest, newest first
    assert (
        lines[at + 2]
        == '- meeting_scheduled: {"room":"A"} (world, 2026-11-20, event e-19, job job-1)'
    )
    assert lines[at + 3] == "- account_activated (tool, 2026-11-19, event e-18, job job-0)"
    assert lines[at + 4].startswith("Only a tool result")


def test_the_section_is_absent_without_facts_and_never_shows_a_claim_or_a_closed_version() -> None:
    bare = compose(
        CATALOG, playbook_instructions="", tasks=TASKS, subject={}, contacts=[], turns=[]
    )
    assert "What we know" not in bare.instructions
    empty = compose(
        CATALOG, playbook_instructions="", tasks=TASKS, subject={}, contacts=[], turns=[],
        known=("s-ada", []),
    )  # fmt: skip
    assert empty.instructions == bare.instructions
    claim = ProfileFact.model_construct(**{**_fact(1, "plan_chosen", "enterprise").model_dump(),
                                          "source": "agent"})  # fmt: skip
    closed = _fact(2, "plan_chosen", "basic").model_copy(
        update={"valid_to": "2026-11-05T00:00:00Z"}
    )
    lines = known_lines("s-ada", [claim, closed, _fact(3, "plan_chosen", "pro")], ["plan"], 400)
    assert lines == [HEAD, "- plan_chosen: pro (world, 2026-11-04, event e-3, job job-0)"]


def test_ten_thousand_facts_stay_within_the_budget() -> None:
    facts = [
        _fact(i, f"fact_{i}", f"value number {i}", {"note": "x" * (i % 50)}) for i in range(10_000)
    ]
    facts.append(_fact(10_001, "plan_chosen", "pro"))
    started = time.perf_counter()
    lines = known_lines("s-ada", facts, ["Which plan am I on?"], 400)
    seconds = time.perf_counter() - started
    section = "\n".join(lines)
    tokens = estimate_tokens(section)
    print(f"10,000 facts: section {tokens} tokens, {len(lines) - 2} facts shown, {seconds:.3f}s")
    assert tokens <= 400
    assert lines[0] == HEAD
    assert lines[1].startswith("- plan_chosen: pro")
    assert lines[-1] == f"({10_001 - (len(lines) - 2)} more facts not shown.)"
    assert known_lines("s-ada", facts, [], 10) == []  # not even one fits: no section


def test_an_open_task_alone_ranks_too() -> None:
    tasks = [OpenTask("j/pay", "collectPayment", "Ask for the VAT id on the invoice.", "x", ())]
    request = compose(
        CATALOG, playbook_instructions="", tasks=tasks, subject={}, contacts=[], turns=[],
        known=("s-ada", PROFILE), known_tokens=60,
    )  # fmt: skip
    lines = request.instructions.splitlines()
    shown = lines[lines.index(HEAD) + 1]
    assert shown.startswith("- tax_id_provided:"), shown
