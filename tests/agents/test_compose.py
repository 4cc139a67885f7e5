"""Composition over the frontier: exactly what the model is given (pure)."""

from __future__ import annotations

from agents.catalog import load_catalog
from agents.compose import DELEGATE_PARAMETERS, OpenTask, Turn, compose, compose_closing
from tests.agents.test_catalog import GOOD

CATALOG = load_catalog(
    GOOD.replace("integrations:\n", "integrations:\n  email: {}\n  billing: {tools: [bill]}\n")
    + """\
  bill:
    description: Send the bill.
    http: {url: "http://billing/bill"}
""",
    "c.yaml",
)

TASKS = [
    OpenTask("j/bookCall", "bookCall", "Offer a call and book it.", "2026-01-08T09:00:00Z",
             ("email", "calendar")),
    OpenTask("j/selfServe", "selfServe", "Point to the guide.", "2026-01-08T09:00:00Z",
             ("email",)),
    OpenTask("j/record", "record", "Record the deal.", "2026-01-09T09:00:00Z", ("crm",)),
]  # fmt: skip


def test_a_three_task_frontier_gives_the_next_step_first_and_exactly_the_granted_tools() -> None:
    request = compose(
        CATALOG,
        playbook_instructions="Be brief.",
        tasks=TASKS,
        subject={"company": "Acme"},
        contacts=[{"name": "Ada", "email": "ada@example.com"}],
        turns=[Turn("person", "Hi"), Turn("agent", "Hello Ada")],
    )
    assert request.agent == "conversation"
    assert request.instructions.splitlines() == [
        "Agent: conversation",
        "You help the customer through onboarding.",
        "Playbook: Be brief.",
        "Next best step: bookCall",
        "  Offer a call and book it. (deadline 2026-01-08T09:00:00Z)",
        "Also open (the person may prefer one of these):",
        "- selfServe: Point to the guide. (deadline 2026-01-08T09:00:00Z)",
        "- record: Record the deal. (deadline 2026-01-09T09:00:00Z)",
        'Subject: {"company":"Acme"}',
        'Contacts: [{"email":"ada@example.com","name":"Ada"}]',
        "Only a tool result confirms that something happened; say nothing happened that no "
        "tool result in this conversation confirms.",
    ]
    assert request.messages == (("user", "Hi"), ("assistant", "Hello Ada"))
    # calendar grants schedule_meeting, crm the CRM agent; billing is on no open task
    assert [(t.name, t.kind) for t in request.tools] == [
        ("schedule_meeting", "tool"),
        ("crm_agent", "delegate"),
    ]
    assert request.tools[0].parameters == CATALOG.tools["schedule_meeting"].parameters
    assert request.tools[1].parameters == DELEGATE_PARAMETERS
    assert request.offers("update_crm") is None  # the delegate's tool is the delegate's


def test_a_delegate_gets_only_its_own_tools_and_the_request() -> None:
    request = compose(
        CATALOG,
        playbook_instructions="Be brief.",
        tasks=TASKS,
        subject={},
        contacts=[],
        turns=[],
        agent="crm_agent",
        request="Record deal D-1.",
    )
    assert request.instructions.splitlines()[:3] == [
        "Agent: crm_agent",
        "You keep the CRM up to date.",
        "You were asked: Record deal D-1.",
    ]
    assert "Next best step" not in request.instructions
    assert [t.name for t in request.tools] == ["update_crm"]


def test_the_history_is_bounded_and_the_cut_is_said() -> None:
    turns = [Turn("person", f"message {i}") for i in range(30)]
    request = compose(
        CATALOG,
        playbook_instructions="",
        tasks=TASKS[:1],
        subject={},
        contacts=[],
        turns=turns,
        history=5,
    )
    assert [text for _, text in request.messages] == [f"message {i}" for i in range(25, 30)]
    assert "(25 earlier turns of this conversation are not shown.)" in request.instructions


def test_no_open_task_offers_nothing() -> None:
    request = compose(
        CATALOG, playbook_instructions="", tasks=[], subject={}, contacts=[], turns=[]
    )
    assert request.tools == ()
    assert "No task is open" in request.instructions


def test_a_closing_turn_says_what_was_done_and_offers_nothing() -> None:
    turns = [Turn("person", "Yes, activate it"), Turn("tool", '{"active": true}', "activate")]
    request = compose_closing(
        CATALOG,
        playbook_instructions="Be brief.",
        closed={"collectIdentity": "done", "bookCall": "dropped", "activateAccount": "done"},
        subject={"company": "Acme"},
        contacts=[],
        turns=turns,
    )
    lines = request.instructions.splitlines()
    assert lines[0] == "Agent: conversation"
    assert "Playbook: Be brief." in lines
    assert lines[-5:-1] == [
        "Done: collectIdentity, activateAccount",
        "Not done: bookCall (dropped)",
        'Subject: {"company":"Acme"}',
        "Contacts: []",
    ]
    assert any(line.startswith("Closing: no task of this job is open") for line in lines)
    assert not any(line.startswith("Next best step:") for line in lines)
    assert request.tools == ()
    assert request.messages == (
        ("user", "Yes, activate it"),
        ("user", '(tool result from activate) {"active": true}'),
    )
