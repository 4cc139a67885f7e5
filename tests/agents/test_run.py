"""Runs of the conversation agent: the real openai client against the
stand-in model over HTTP, the trusted executor against a real local tool
endpoint. Each test reads what a run published (facts, messages, journal)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from agents.catalog import load_catalog
from agents.compose import Turn
from agents.dev.standin import StandinScript, build_standin
from agents.model import Model, ModelSettings
from agents.run import Conversation, Outbox, RunEnd, Runner
from agents.tools.executor import Executor, derived_key
from topics import (
    InboxEvent,
    JournalMail,
    JournalModelCall,
    JournalRun,
    JournalToolCall,
    MessageRecord,
    TaskClosedRecord,
    TaskOpenedRecord,
)

CATALOG_TEXT = """\
integrations:
  email: {}
  calendar: {tools: [schedule_meeting]}
  crm: {delegate: crm_agent}
  billing: {tools: [charge]}
agents:
  conversation:
    instructions: You help the customer.
    bounds: {max_turns: 4, max_tool_calls: 3}
  crm_agent:
    instructions: You keep the CRM up to date.
    tools: [update_crm]
    bounds: {max_turns: 3, max_tool_calls: 2}
tools:
  schedule_meeting:
    description: Book a meeting.
    parameters: {type: object, properties: {when: {type: string}}, required: [when]}
    http: {url: "${TOOLS}/book"}
    idempotent: true
    records: {fact: meeting_scheduled, properties: {when: "$.when"}}
  update_crm:
    description: Update the CRM.
    parameters: {type: object, properties: {deal: {type: string}}}
    http: {url: "${TOOLS}/crm"}
    idempotent: true
    records: {fact: deal, properties: {stage: "$.stage"}}
  charge:
    description: Charge the card.
    http: {url: "${TOOLS}/charge"}
    idempotent: false
    records: {fact: charged}
"""
CATALOG = load_catalog(CATALOG_TEXT, "c.yaml")


def opened(milestone: str, integrations: list[str], frontier: list[str]) -> TaskOpenedRecord:
    return TaskOpenedRecord(
        task_id=f"job-1/{milestone}",
        job_key="job-1",
        milestone=milestone,
        at="2026-01-05T09:00:00Z",
        instructions=f"Do {milestone}.",
        playbook_instructions="Be brief.",
        integrations=integrations,
        deadline="2026-01-08T09:00:00Z",
        frontier=frontier,
        playbook_key="onboarding",
        contacts=[{"name": "Ada", "email": "ada@example.com"}],
    )


def tools_endpoint(fail: bool = False, answer: Response | None = None) -> FastAPI:
    """Every tool confirms; with ``fail``, each answers 500; with ``answer``,
    each answers that."""
    app = FastAPI()
    app.state.calls = []

    @app.post("/{name}", response_model=None)
    async def tool(name: str, request: Request) -> Any:
        body = await request.json()
        app.state.calls.append((name, request.headers.get("idempotency-key"), body))
        if fail:
            return JSONResponse({"error": "down"}, status_code=500)
        if answer is not None:
            return answer
        return {"when": body.get("when"), "stage": "qualified"}

    return app


class Lane:
    """A stand-in with a script, a tool endpoint, and what runs published."""

    def __init__(
        self,
        serve: Callable[[Any], str],
        rules: list[dict[str, Any]],
        fail: bool,
        answer: Response | None = None,
    ):
        self.model = build_standin(StandinScript.model_validate({"rules": rules}))
        self.model_url = serve(self.model)
        self.tools = tools_endpoint(fail, answer)
        self.tools_url = serve(self.tools)
        self.published: list[tuple[str, str, BaseModel]] = []
        self.saves: list[dict[str, Any]] = []

    def run(self, conv: Conversation) -> RunEnd:
        async def go() -> RunEnd:
            async def publish(topic: str, key: str, record: BaseModel) -> None:
                self.published.append((topic, key, record))

            async def save(c: Conversation) -> None:
                self.saves.append(copy.deepcopy(c.to_json()))

            model = Model(ModelSettings(api_key="sk-test", base_url=f"{self.model_url}/v1"))
            async with httpx2.AsyncClient() as client:
                executor = Executor(CATALOG, client, {"TOOLS": self.tools_url})
                try:
                    return await Runner(CATALOG, model, executor).run(conv, Outbox(publish, save))
                finally:
                    await model.close()

        return asyncio.run(go())

    def of(self, kind: type[BaseModel]) -> list[Any]:
        return [r for _, _, r in self.published if isinstance(r, kind)]

    def facts(self) -> list[InboxEvent]:
        return [r for r in self.of(InboxEvent) if r.source == "tool"]


@pytest.fixture
def lane(serve: Callable[[Any], str]) -> Callable[..., Lane]:
    return lambda rules, fail=False, answer=None: Lane(serve, rules, fail, answer)


def booking_job() -> Conversation:
    conv = Conversation("job-1")
    assert conv.apply(opened("bookCall", ["email", "calendar"], ["bookCall"]))
    conv.add_turn(Turn("person", "Please book tomorrow 10:00"))
    return conv


BOOK = [
    {"when": {"last_message_contains": "book"},
     "call": {"tool": "schedule_meeting", "args": {"when": "tomorrow 10:00"}}},
    {"when": {"tool_result": "schedule_meeting"}, "say": "Your meeting is booked."},
    {"say": "I have booked the meeting."},
]  # fmt: skip


def test_a_claim_without_a_tool_call_is_an_agent_event_and_moves_nothing(lane: Any) -> None:
    run = lane([{"say": "I have booked the meeting."}])
    end = run.run(booking_job())
    assert (end.reason, end.turns, end.tool_calls) == ("done", 1, 0)
    assert run.facts() == []
    [said] = [e for e in run.of(InboxEvent) if e.source == "agent"]
    assert (said.action, said.properties["text"]) == ("agent_said", "I have booked the meeting.")
    [message] = run.of(MessageRecord)
    assert (message.direction, message.text, message.task_id, message.contact) == (
        "out",
        "I have booked the meeting.",
        "job-1/bookCall",
        "ada@example.com",
    )
    [call] = run.of(JournalModelCall)
    assert call.outcome == "ok"
    assert call.tokens is not None
    assert call.tokens.total > 0
    assert [r.ended for r in run.of(JournalRun)] == ["done"]
    assert run.tools.state.calls == []


def test_a_confirmed_tool_call_publishes_its_fact_under_our_key(lane: Any) -> None:
    run = lane(BOOK)
    end = run.run(booking_job())
    assert (end.reason, end.tool_calls) == ("done", 1)
    key = derived_key("job-1/bookCall", "schedule_meeting", {"when": "tomorrow 10:00"}, 1)
    [fact] = run.facts()
    assert (fact.action, fact.properties, fact.idempotency_key) == (
        "meeting_scheduled",
        {"when": "tomorrow 10:00"},
        key,
    )
    assert run.tools.state.calls == [("book", key, {"when": "tomorrow 10:00"})]
    [tool] = run.of(JournalToolCall)
    assert (tool.outcome, tool.key, tool.fact, tool.http_status) == (
        "done",
        key,
        "meeting_scheduled",
        200,
    )
    assert [m.text for m in run.of(MessageRecord)] == ["Your meeting is booked."]


def test_a_failed_endpoint_records_nothing_and_the_model_is_told(lane: Any) -> None:
    run = lane(BOOK, fail=True)
    end = run.run(booking_job())
    assert end.reason == "done"
    assert run.facts() == []
    [tool] = run.of(JournalToolCall)
    assert (tool.outcome, tool.http_status) == ("failed", 500)
    assert "HTTP 500" in tool.result
    # the model's next call answered the tool result (the failure it was told)
    assert [m.text for m in run.of(MessageRecord)] == ["Your meeting is booked."]


@pytest.mark.parametrize(
    "answer",
    [
        Response("<html><body>Bad Gateway</body></html>", media_type="text/html"),
        JSONResponse({"ok": False, "error": "declined"}),
    ],
)
def test_a_200_that_does_not_confirm_records_nothing_and_is_journaled(
    lane: Any, answer: Response
) -> None:
    # docs/agents.md, "What success is"
    run = lane(BOOK, answer=answer)
    end = run.run(booking_job())
    assert end.reason == "done"
    assert run.facts() == []
    [tool] = run.of(JournalToolCall)
    assert (tool.outcome, tool.http_status, tool.fact) == ("failed", 200, None)
    assert tool.result.startswith('{"ok":false,"error":"HTTP 200, but the answer ')
    assert bytes(answer.body).decode().replace('"', '\\"') in tool.result  # its opening
    # the model was told, and said so (its rule answers a tool result)
    assert [m.text for m in run.of(MessageRecord)] == ["Your meeting is booked."]


def test_a_non_idempotent_call_answered_by_an_html_200_is_unknown_and_not_repeated(
    lane: Any,
) -> None:
    run = lane(
        [{"call": {"tool": "charge", "args": {}}}],
        answer=Response("<html>Bad Gateway</html>", media_type="text/html"),
    )
    conv = Conversation("job-1")
    conv.apply(opened("pay", ["billing"], ["pay"]))
    end = run.run(conv)
    assert end.reason == "max_tool_calls"
    assert len(run.tools.state.calls) == 1  # the model asked three times; called once
    assert [t.outcome for t in run.of(JournalToolCall)] == ["outcome_unknown"] * 3
    assert run.facts() == []
    assert "<html>Bad Gateway</html>" in run.of(JournalToolCall)[0].result


def test_a_tool_outside_the_frontier_is_refused_and_never_offered(lane: Any) -> None:
    run = lane(
        [
            {"when": {"tool_result": "charge"}, "say": "I could not charge."},
            {"call": {"tool": "charge", "args": {}}},
        ]
    )
    run.run(booking_job())
    [tool] = run.of(JournalToolCall)
    assert (tool.tool, tool.outcome) == ("charge", "refused")
    assert "not granted" in tool.result
    assert run.tools.state.calls == []
    [first, *_] = run.of(JournalModelCall)
    assert "charge" not in first.request


def test_delegation_the_delegates_tool_result_is_the_evidence(lane: Any) -> None:
    run = lane(
        [
            {"when": {"agent": "crm_agent", "tool_result": "update_crm"}, "say": "CRM updated."},
            {"when": {"agent": "crm_agent"},
             "call": {"tool": "update_crm", "args": {"deal": "D-1"}}},
            {"when": {"tool_result": "crm_agent"}, "say": "The deal is recorded."},
            {"when": {"next_step": "record"},
             "call": {"tool": "crm_agent", "args": {"request": "Record deal D-1."}}},
        ]
    )  # fmt: skip
    conv = Conversation("job-1")
    conv.apply(opened("record", ["crm"], ["record"]))
    end = run.run(conv)
    assert end.reason == "done"
    [fact] = run.facts()
    assert (fact.action, fact.properties) == ("deal", {"stage": "qualified"})
    tools = run.of(JournalToolCall)
    assert [(t.agent, t.tool, t.outcome) for t in tools] == [
        ("crm_agent", "update_crm", "done"),
        ("conversation", "crm_agent", "delegated"),
    ]
    # only the conversation agent talks to the person
    assert [m.text for m in run.of(MessageRecord)] == ["The deal is recorded."]


def test_a_model_that_loops_on_tool_calls_ends_at_the_bound(lane: Any) -> None:
    run = lane([{"call": {"tool": "schedule_meeting", "args": {"when": "again"}}}])
    end = run.run(booking_job())
    assert end.reason == "max_tool_calls"
    assert end.tool_calls == 3
    assert [r.ended for r in run.of(JournalRun)] == ["max_tool_calls"]
    # the same call again is the next occurrence: a new key each time
    keys = [key for _, key, _ in run.tools.state.calls]
    assert len(set(keys)) == 3


def test_a_rerun_after_a_crash_repeats_an_idempotent_call_with_the_same_key(lane: Any) -> None:
    run = lane(BOOK)
    before = booking_job()
    crashed = Conversation.from_json(copy.deepcopy(before.to_json()))
    run.run(before)
    run.run(crashed)  # the state saved before the first run, as after a crash
    [(_, first, _), (_, second, _)] = run.tools.state.calls
    assert first == second
    [one, two] = run.facts()
    assert one.idempotency_key == two.idempotency_key  # the engine applies it once


def test_a_non_idempotent_call_left_unfinished_is_never_repeated(lane: Any) -> None:
    run = lane(
        [
            {"when": {"tool_result": "charge"}, "say": "I am not sure it went through."},
            {"call": {"tool": "charge", "args": {}}},
        ]
    )
    conv = Conversation("job-1")
    conv.apply(opened("pay", ["billing"], ["pay"]))
    run.run(conv)
    assert len(run.tools.state.calls) == 1
    # checkpoints: the model's reply, then the call pending before it is made
    replied, saved = run.saves[:2]
    assert replied["pending"] == {}
    assert list(saved["pending"].values()) == ["charge"]
    # a crash after that checkpoint: the next run finds the call pending
    again = Conversation.from_json(saved)
    assert again.due  # the run that crashed had not finished
    run.run(again)
    assert len(run.tools.state.calls) == 1  # not called again
    outcomes = [t.outcome for t in run.of(JournalToolCall)]
    assert outcomes == ["done", "outcome_unknown"]


def test_a_run_cut_short_replays_the_model_replies_it_paid_for(lane: Any) -> None:
    run = lane(BOOK)
    run.run(booking_job())
    assert run.model.state.calls == 2  # asked to book, then told the result
    [first_said] = run.of(MessageRecord)
    # The crash came right after the first reply was checkpointed (the booking
    # not yet made): the resumed run replays that reply instead of paying again.
    cut = Conversation.from_json(copy.deepcopy(run.saves[0]))
    assert cut.active == "job-1#1"
    assert [step["kind"] for step in cut.tape] == ["model"]
    run.published.clear()
    end = run.run(cut)
    assert run.model.state.calls == 3  # one more: the reply to the tool result
    [(_, first, _), (_, again, _)] = run.tools.state.calls
    assert again == first  # the booking retried under the same key
    [said] = run.of(MessageRecord)
    assert (said.message_id, said.text) == (first_said.message_id, first_said.text)
    [journaled] = run.of(JournalRun)
    assert (journaled.run_id, journaled.replayed, end.turns) == ("job-1#1", 1, 2)
    assert len(run.of(JournalModelCall)) == 1  # the replayed reply is journaled once only
    assert cut.active is None
    assert cut.tape == []


def test_a_run_cut_short_after_a_tool_result_republishes_its_fact_under_its_key(
    lane: Any,
) -> None:
    run = lane(BOOK)
    run.run(booking_job())
    [fact] = run.facts()
    # Cut after the tool's result was checkpointed, perhaps before its fact was sent.
    cut = Conversation.from_json(copy.deepcopy(run.saves[1]))
    assert [step["kind"] for step in cut.tape] == ["model", "tool"]
    run.published.clear()
    run.run(cut)
    assert len(run.tools.state.calls) == 1  # not called again
    assert run.model.state.calls == 3  # only the reply it had not had
    [again] = run.facts()
    assert again == fact  # the same event: the engine applies it once
    assert run.of(JournalToolCall) == []


def test_a_redelivered_task_record_owes_no_run_and_reopens_nothing() -> None:
    conv = Conversation("job-1")
    assert conv.apply(opened("bookCall", ["calendar"], ["bookCall"]))
    assert not conv.apply(opened("bookCall", ["calendar"], ["bookCall"]))
    conv.apply(
        TaskClosedRecord(
            task_id="job-1/bookCall",
            job_key="job-1",
            milestone="bookCall",
            at="2026-01-05T10:00:00Z",
            outcome="done",
        )
    )
    assert conv.open_tasks() == []
    # re-delivered after its close (a worker restarted): not opened again
    assert not conv.apply(opened("bookCall", ["calendar"], ["bookCall"]))
    assert conv.open_tasks() == []
    assert not conv.due
    assert Conversation.from_json(conv.to_json()) == conv


def inbound(message_id: str, text: str, contact: str | None = "ada@example.com") -> MessageRecord:
    return MessageRecord(
        job_key="job-1", message_id=message_id, direction="in", channel="web",
        contact=contact, text=text, at="2026-01-05T09:05:00Z",
    )  # fmt: skip


def test_a_persons_message_is_a_turn_once_and_owes_a_run_while_a_task_is_open() -> None:
    conv = Conversation("job-1")
    assert not conv.receive(inbound("m-1", "Hello?"))  # nothing open: remembered, no run
    assert conv.turns == [Turn("person", "Hello?", "ada@example.com")]
    assert conv.apply(opened("bookCall", ["calendar"], ["bookCall"]))
    assert conv.receive(inbound("m-2", "Book me tomorrow."))
    assert not conv.receive(inbound("m-2", "Book me tomorrow."))  # re-delivered
    assert [t.text for t in conv.turns] == ["Hello?", "Book me tomorrow."]
    assert conv.due
    out = inbound("m-3", "I said it.")
    assert not conv.receive(out.model_copy(update={"direction": "out"}))  # an agent's own
    assert Conversation.from_json(conv.to_json()) == conv


def test_the_agent_answers_the_contact_who_wrote_last_and_never_a_stranger(lane: Any) -> None:
    team = [{"name": "Ada", "email": "ada@example.com"}, {"name": "Bob", "email": "B@Example.com"}]
    for writer, answered in (
        (" <b@EXAMPLE.com> ", "B@Example.com"),  # a contact, however written
        ("mallory@evil.example", "ada@example.com"),  # not a contact: the first one is
        ("ada+jobs@example.com", "ada@example.com"),  # a variant of Ada's is not Ada's
    ):
        run = lane(BOOK)
        conv = Conversation("job-1")
        conv.apply(opened("bookCall", ["email", "calendar"], ["bookCall"]))
        conv.contacts = list(team)
        conv.receive(inbound("m-0", "Hello", contact="b@example.com"))
        conv.receive(inbound("m-1", "Please book tomorrow 10:00", contact=writer))
        run.run(conv)
        [message] = run.of(MessageRecord)
        assert (message.contact, message.text) == (answered, "Your meeting is booked."), writer


def test_the_tasks_one_decision_opens_owe_one_run_once_all_are_in() -> None:
    conv = Conversation("job-1")
    both = ["bookCall", "selfServe"]
    assert conv.apply(opened("bookCall", ["calendar"], both))
    assert conv.waiting() == ["selfServe"]
    assert not conv.due  # the decision's second task.opened is still to come
    assert conv.apply(opened("selfServe", ["email"], both))
    assert conv.due
    assert [t.milestone for t in conv.open_tasks()] == both


def test_the_same_message_again_is_withheld_and_journaled(lane: Any) -> None:
    run = lane([{"say": "Hello! Let us work on bookCall together."}])
    conv = booking_job()
    run.run(conv)
    conv.inputs += 1  # something owed another run; the model says the same again
    run.run(conv)
    [message] = run.of(MessageRecord)
    assert message.message_id == "job-1#1.1"
    [withheld] = run.of(JournalMail)
    assert (withheld.message_id, withheld.outcome) == ("job-1#2.1", "refused")
    assert withheld.detail.startswith("withheld: the same message as job-1#1.1")
    # over another frontier, the same words are a new message
    conv.apply(opened("selfServe", ["email"], ["bookCall", "selfServe"]))
    run.run(conv)
    assert [m.message_id for m in run.of(MessageRecord)] == ["job-1#1.1", "job-1#3.1"]


def closing_lane(lane: Any) -> tuple[Any, Conversation]:
    """A job whose task closed while Ada's message was unanswered."""
    run = lane([{"when": {"closing": True, "agent": "conversation"}, "say": "All set."}])
    conv = booking_job()
    conv.add_turn(Turn("tool", '{"status": "confirmed"}', "schedule_meeting"))
    conv.apply(
        TaskClosedRecord(
            task_id="job-1/bookCall", job_key="job-1", milestone="bookCall",
            at="2026-01-05T10:00:00Z", outcome="done",
        )
    )  # fmt: skip
    return run, conv


def test_a_run_that_ends_with_the_tasks_closed_owes_a_closing_turn(lane: Any) -> None:
    run, conv = closing_lane(lane)
    end = run.run(conv)
    assert end.reason == "task_closed"
    assert conv.closing
    assert run.of(MessageRecord) == []


def test_the_closing_turn_tells_what_was_done_once(lane: Any) -> None:
    run, conv = closing_lane(lane)
    conv.closing = True
    end = asyncio.run(closing(run, conv))
    assert end.reason == "closing"
    [message] = run.of(MessageRecord)
    assert (message.text, message.contact, message.task_id) == (
        "All set.", "ada@example.com", None,
    )  # fmt: skip
    assert not conv.closing
    [call] = run.of(JournalModelCall)
    assert "Closing: no task of this job is open" in call.request
    assert "Done: bookCall" in call.request
    assert [r.ended for r in run.of(JournalRun)] == ["closing"]


def test_a_closing_turn_cut_short_replays_its_reply(lane: Any) -> None:
    run, conv = closing_lane(lane)
    conv.closing = True
    asyncio.run(closing(run, conv))
    # the process died after the reply was checkpointed, before it was sent
    resumed = Conversation.from_json(run.saves[-1])
    assert resumed.active == "job-1#1"
    assert resumed.tape
    run.published.clear()
    asyncio.run(closing(run, resumed))
    assert run.of(JournalModelCall) == []  # not paid for twice
    [message] = run.of(MessageRecord)
    assert (message.message_id, message.text) == ("job-1#1.1", "All set.")
    assert not resumed.closing


async def closing(run: Any, conv: Conversation) -> RunEnd:
    return await drive(run, conv, closing=True)


async def drive(
    run: Any,
    conv: Conversation,
    closing: bool = False,
    on_publish: Callable[[BaseModel], None] = lambda record: None,
) -> RunEnd:
    """A run (the closing turn's with ``closing``) on ``run``'s stand-in and
    tools; ``on_publish`` sees each record as it is published."""

    async def publish(topic: str, key: str, record: BaseModel) -> None:
        run.published.append((topic, key, record))
        on_publish(record)

    async def save(c: Conversation) -> None:
        run.saves.append(copy.deepcopy(c.to_json()))

    model = Model(ModelSettings(api_key="sk-test", base_url=f"{run.model_url}/v1"))
    async with httpx2.AsyncClient() as client:
        executor = Executor(CATALOG, client, {"TOOLS": run.tools_url})
        runner = Runner(CATALOG, model, executor)
        outbox = Outbox(publish, save)
        try:
            return await (runner.close(conv, outbox) if closing else runner.run(conv, outbox))
        finally:
            await model.close()


def test_a_task_that_opens_during_a_run_is_folded_into_its_next_turn(lane: Any) -> None:
    run = lane(BOOK)
    conv = booking_job()
    frontier = ["bookCall", "selfServe"]

    def decided(record: BaseModel) -> None:
        # the booking's fact is decided while the run goes on: selfServe opens
        if isinstance(record, InboxEvent) and record.source == "tool":
            conv.apply(opened("selfServe", ["email"], frontier))

    end = asyncio.run(drive(run, conv, on_publish=decided))
    assert end.reason == "done"
    [_, after] = run.of(JournalModelCall)
    assert "Also open (the person may prefer one of these):" in after.request
    assert "- selfServe: Do selfServe." in after.request
    assert not conv.due  # the run's last turn saw selfServe: no second run owed


def test_the_last_task_closing_owes_one_closing_turn_only_where_a_person_wrote() -> None:
    """docs/agents.md, "The closing turn": the job's last task closing is a change
    the person is told of, once (a re-delivered task.closed owes nothing), and only
    in a job where a person has written."""

    def close(conv: Conversation, milestone: str) -> bool:
        return conv.apply(
            TaskClosedRecord(
                task_id=f"job-1/{milestone}",
                job_key="job-1",
                milestone=milestone,
                at="2026-01-05T10:00:00Z",
                outcome="done",
            )
        )

    silent = Conversation("job-1")
    silent.apply(opened("bookCall", [], ["bookCall"]))
    assert close(silent, "bookCall") is False
    assert silent.closing is False

    talked = Conversation("job-1")
    talked.apply(opened("bookCall", [], ["bookCall", "selfServe"]))
    talked.apply(opened("selfServe", [], ["bookCall", "selfServe"]))
    talked.add_turn(Turn("person", "Hi", "ada@example.com"))
    talked.add_turn(Turn("agent", "Hello!"))
    assert close(talked, "bookCall") is False  # selfServe is still open
    assert talked.closing is False
    assert close(talked, "selfServe") is True
    assert talked.closing is True
    talked.closing = False  # the closing turn was sent (Runner.close)
    assert close(talked, "selfServe") is False  # re-delivered
    assert talked.closing is False


def test_a_message_that_comes_in_while_the_model_answers_is_answered_by_the_next_run(
    lane: Any,
) -> None:
    # A fresh-clone CI run: Ada's "yes" came in while the model was answering the
    # task's opening; the reply was filed after her "yes", so the next run saw the
    # agent's turn last, said its opening again and it was withheld: her "yes" got
    # no answer.
    run = lane([{"when": {"last_message_contains": "yes"}, "say": "Noted: yes."},
                {"say": "I am on it."}])  # fmt: skip
    conv = booking_job()

    def came_in(record: BaseModel) -> None:
        if isinstance(record, JournalModelCall) and "m-yes" not in conv.received:
            conv.receive(inbound("m-yes", "yes"))  # after the compose, before the reply is kept

    assert asyncio.run(drive(run, conv, on_publish=came_in)).reason == "done"
    assert [(t.role, t.text) for t in conv.turns] == [
        ("person", "Please book tomorrow 10:00"),
        ("agent", "I am on it."),
        ("person", "yes"),
    ]
    assert conv.due  # the run's compose did not see the "yes"
    asyncio.run(drive(run, conv))
    assert [m.text for m in run.of(MessageRecord)] == ["I am on it.", "Noted: yes."]
    assert not conv.due


def test_a_message_during_the_closing_turn_owes_another_closing_turn(lane: Any) -> None:
    run, conv = closing_lane(lane)
    conv.closing = True

    def came_in(record: BaseModel) -> None:
        if isinstance(record, JournalModelCall) and "m-late" not in conv.received:
            conv.receive(inbound("m-late", "One more thing?"))

    asyncio.run(drive(run, conv, closing=True, on_publish=came_in))
    assert [t.text for t in conv.turns][-2:] == ["All set.", "One more thing?"]
    assert conv.closing  # the late message is answered by a closing turn of its own
    asyncio.run(closing(run, conv))
    assert not conv.closing
    assert len(run.of(JournalModelCall)) == 2
