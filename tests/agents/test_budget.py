"""One budget per run, across delegates (docs/agents.md, "Bounds"): ``check``
refuses a delegation cycle and a chain deeper than the limit; a run whose
catalog has a cycle anyway (built here without ``check``) ends by the run's
bound, says so to the person, and the job answers their next message."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest
from fastapi import FastAPI
from pydantic import BaseModel

import agents.run as run_module
from agents.catalog import (
    MAX_DELEGATION_DEPTH,
    AgentSpec,
    Bounds,
    Catalog,
    CatalogError,
    HttpAction,
    IntegrationSpec,
    ToolSpec,
    load_catalog,
)
from agents.compose import Turn
from agents.dev.standin import StandinScript, build_standin
from agents.model import Model, ModelSettings
from agents.run import Conversation, Outbox, RunEnd, Runner, stopped_text
from agents.service import AgentService, Where
from agents.tools.executor import Executor
from stream.runtime.config import Settings
from topics import Headers, JournalRun, JournalToolCall, MessageRecord, TaskOpenedRecord

# -- check ----------------------------------------------------------------------------


def catalog_text(delegates: dict[str, list[str]]) -> str:
    """A catalog whose integration ``crm`` grants ``a``; each agent's delegates."""
    lines = [
        "integrations:",
        "  crm: {delegate: a}",
        "agents:",
        "  conversation: {instructions: x}",
    ]
    lines += [f"  {name}: {{instructions: x, delegates: [{', '.join(d)}]}}" for name, d in
              delegates.items()]  # fmt: skip
    return "\n".join(lines) + "\n"


def problems_of(text: str) -> tuple[str, ...]:
    with pytest.raises(CatalogError) as caught:
        load_catalog(text, "c.yaml")
    return caught.value.problems


def test_check_refuses_two_agents_that_delegate_to_each_other() -> None:
    [problem] = problems_of(catalog_text({"a": ["b"], "b": ["a"]}))
    assert problem.startswith("c.yaml:5:35: agents.a: a delegation cycle: a → b → a")
    assert "(integration crm grants a)" in problem


def test_check_refuses_a_longer_cycle_and_names_it() -> None:
    [problem] = problems_of(catalog_text({"a": ["b"], "b": ["c"], "c": ["a"]}))
    assert "a delegation cycle: a → b → c → a" in problem


def test_check_refuses_a_cycle_no_integration_reaches() -> None:
    # reached by no job's run, but a prompt schedule may start with any agent
    [problem] = problems_of(catalog_text({"a": [], "x": ["y"], "y": ["x"]}))
    assert problem.startswith("c.yaml:6:35: agents.x: a delegation cycle: x → y → x;")


def test_check_refuses_a_chain_deeper_than_the_limit_and_takes_one_at_it() -> None:
    names = ["a", "b", "c", "d"]
    chain = {n: names[i + 1 : i + 2] for i, n in enumerate(names)}
    assert MAX_DELEGATION_DEPTH == 3  # conversation → a → b → c
    load_catalog(catalog_text({n: chain[n] for n in "abc"} | {"c": []}), "c.yaml")
    [problem] = problems_of(catalog_text(chain))
    assert problem.endswith(
        "agents.conversation: a chain of delegates 4 deep: conversation → a → b → c → d; at most 3"
    )


# -- a run --------------------------------------------------------------------------------

#: Each agent hands the request on: conversation → a → b → a → ...
HAND_ON = [
    {"when": {"last_message_contains": "thanks"}, "say": "You are welcome."},
    {"when": {"agent": "a"}, "call": {"tool": "b", "args": {"request": "go on"}}},
    {"when": {"agent": "b"}, "call": {"tool": "a", "args": {"request": "go on"}}},
    {"when": {"agent": "c"}, "call": {"tool": "lookup", "args": {}}},
    {"when": {"next_step": "desk"}, "call": {"tool": "c", "args": {"request": "help"}}},
    {"call": {"tool": "a", "args": {"request": "help"}}},
]  # fmt: skip


def cyclic(run: Bounds, delegate: Bounds | None = None) -> Catalog:
    """a ↔ b, granted by ``crm``: what ``check`` refuses, built without it."""
    own = delegate or Bounds()
    lookup = ToolSpec(
        description="Look it up.", idempotent=True, writes=False,
        http=HttpAction(url="${TOOLS}/lookup"),
    )  # fmt: skip
    return Catalog(
        "built",
        {"crm": IntegrationSpec(delegate="a"), "desk": IntegrationSpec(delegate="c")},
        {
            "conversation": AgentSpec(instructions="Help.", bounds=run),
            "a": AgentSpec(instructions="A.", delegates=("b",), bounds=own),
            "b": AgentSpec(instructions="B.", delegates=("a",), bounds=own),
            "c": AgentSpec(instructions="C.", tools=("lookup",), bounds=own),
        },
        {"lookup": lookup},
        {},
    )


def opened(key: str, integration: str = "crm") -> TaskOpenedRecord:
    return TaskOpenedRecord(
        task_id=f"{key}/{integration}", job_key=key, milestone=integration,
        at="2026-01-05T09:00:00Z", instructions="Do it.", playbook_instructions="",
        integrations=[integration], deadline="2026-01-08T09:00:00Z", frontier=[integration],
        playbook_key="p",
    )  # fmt: skip


def lookup_endpoint() -> FastAPI:
    app = FastAPI()

    @app.post("/lookup")
    async def lookup() -> dict[str, Any]:
        return {"found": True}

    return app


def run_once(
    serve: Callable[[Any], str], catalog: Catalog, integration: str
) -> tuple[RunEnd, int, list[BaseModel]]:
    """One run of a job on ``catalog``: how it ended, the model calls the
    stand-in answered, and what the run published."""
    standin = build_standin(StandinScript.model_validate({"rules": HAND_ON}))
    model_url, tools_url = serve(standin), serve(lookup_endpoint())
    conv = Conversation("job-1")
    conv.apply(opened("job-1", integration))
    conv.add_turn(Turn("person", "Please help."))
    published: list[BaseModel] = []

    async def publish(topic: str, key: str, record: BaseModel) -> None:
        published.append(record)

    async def save(c: Conversation) -> None:
        pass

    async def go() -> RunEnd:
        model = Model(ModelSettings(api_key="sk-test", base_url=f"{model_url}/v1"))
        async with httpx2.AsyncClient() as client:
            executor = Executor(catalog, client, {"TOOLS": tools_url})
            try:
                return await Runner(catalog, model, executor).run(conv, Outbox(publish, save))
            finally:
                await model.close()

    end = asyncio.run(go())
    return end, standin.state.calls, published


@pytest.mark.parametrize(
    ("integration", "run", "ended"),
    [
        ("crm", Bounds(max_turns=5), "max_turns"),
        ("crm", Bounds(max_tool_calls=3), "max_tool_calls"),
        ("crm", Bounds(max_tokens=1), "max_tokens"),
        ("desk", Bounds(max_tool_calls=4), "max_tool_calls"),
    ],
)
def test_delegates_draw_on_the_runs_budget_their_own_bounds_only_narrow_it(
    serve: Callable[[Any], str], integration: str, run: Bounds, ended: str
) -> None:
    # the delegates' own bounds are far larger than the run's: the run's hold
    end, calls, published = run_once(
        serve, cyclic(run, Bounds(max_turns=100, max_tool_calls=100)), integration
    )
    assert end.reason == ended
    assert calls == end.turns
    assert calls <= (1 if ended == "max_tokens" else run.max_turns)
    assert end.tool_calls <= run.max_tool_calls
    [journaled] = [r for r in published if isinstance(r, JournalRun)]
    assert journaled.ended == ended


def test_a_delegation_deeper_than_the_limit_is_refused_and_the_model_told(
    serve: Callable[[Any], str],
) -> None:
    end, calls, published = run_once(serve, cyclic(Bounds(max_turns=8)), "crm")
    assert (end.reason, calls) == ("max_turns", 8)
    tools = [r for r in published if isinstance(r, JournalToolCall)]
    refused = [t for t in tools if t.outcome == "refused"]
    assert refused
    # the agent 3 deep (a, after conversation → a → b → a) is refused its call to b
    assert {(t.agent, t.tool) for t in refused} == {("a", "b")}
    assert "delegates go 3 deep at most" in refused[0].result


# -- in the service ------------------------------------------------------------------------


def inbound(key: str, message_id: str, text: str) -> MessageRecord:
    return MessageRecord(
        job_key=key, message_id=message_id, direction="in", channel="web",
        contact="ada@example.com", text=text, at="2026-01-05T09:05:00Z",
    )  # fmt: skip


class Service:
    """The agents service in this process on ``catalog``, the stand-in
    answering its runs, what it produced recorded (the changelog refused while
    ``refuse`` says so)."""

    def __init__(self, tmp_path: Path, serve: Callable[[Any], str], catalog: Catalog) -> None:
        self.standin = build_standin(StandinScript.model_validate({"rules": HAND_ON}))
        model = ModelSettings(api_key="sk-test", base_url=f"{serve(self.standin)}/v1")
        self.service = AgentService(Settings(data_dir=tmp_path), catalog, model)
        self.service.send = self.send
        self.records: list[dict[str, Any]] = []
        self.refuse: Callable[[dict[str, Any]], bool] = lambda conv: False

    async def send(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Headers | None,
        partition: int | None,
    ) -> None:  # fmt: skip
        record = orjson.loads(value or b"{}")
        if topic == self.service.topics.conversations and self.refuse(record):
            self.refuse = lambda conv: False  # once
            raise RuntimeError("the changelog refused the checkpoint")
        self.records.append(record)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("type") == kind]

    async def take(self, record: BaseModel, topic: str) -> None:
        """A record of partition 0 as the stream takes it; then its runs end."""
        where = Where(topic, 0, 0, 0, b"job-1", [])
        self.service.reading(0, True)
        await self.service.on_record(record.model_dump_json(by_alias=True).encode(), where)
        self.service.reading(0, False)
        await asyncio.gather(*self.service.running.values())

    def walk(self, steps: Callable[[], Any]) -> None:
        async def go() -> None:
            self.service.partitions[0] = asyncio.Event()
            self.service.partitions[0].set()
            try:
                await steps()
            finally:
                await self.service.close()

        asyncio.run(go())


def test_a_run_ended_by_its_bound_says_so_and_the_next_message_gets_a_run(
    tmp_path: Path, serve: Callable[[Any], str]
) -> None:
    lane = Service(tmp_path, serve, cyclic(Bounds(max_turns=6)))
    tasks, messages = lane.service.topics.tasks, lane.service.topics.messages

    async def steps() -> None:
        await lane.take(opened("job-1"), tasks)
        assert lane.standin.state.calls == 6  # the run's budget, delegates included
        assert [r["ended"] for r in lane.of("journal.run")] == ["max_turns"]
        assert [m["text"] for m in lane.of("message")] == [stopped_text("max_turns")]
        await lane.take(inbound("job-1", "m-1", "thanks"), messages)
        assert [m["text"] for m in lane.of("message")][1:] == ["You are welcome."]
        assert [r["ended"] for r in lane.of("journal.run")] == ["max_turns", "done"]
        assert [r["run_id"] for r in lane.of("journal.run")] == ["job-1#1", "job-1#2"]

    lane.walk(steps)


def test_a_run_that_fails_is_journaled_and_logged_and_the_next_message_gets_a_run(
    tmp_path: Path,
    serve: Callable[[Any], str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fault of ours inside a run (here: composing its request raises) ends it
    ``error``, logged by the runner; a checkpoint the changelog refuses is not the
    run's fault: the service ends the run ``output_failed`` (docs/agents.md,
    "Output bounds"). After each, the next message gets a run."""
    lane = Service(tmp_path, serve, cyclic(Bounds(max_turns=6)))
    tasks, messages = lane.service.topics.tasks, lane.service.topics.messages
    real_compose = run_module.compose

    def compose_fails_once(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(run_module, "compose", real_compose)
        raise RuntimeError("a fault of ours")

    monkeypatch.setattr(run_module, "compose", compose_fails_once)

    async def steps() -> None:
        with caplog.at_level(logging.ERROR):
            await lane.take(opened("job-1"), tasks)
        assert lane.standin.state.calls == 0
        assert [r["ended"] for r in lane.of("journal.run")] == ["error"]
        [line] = [r for r in caplog.records if r.name == "agents.run"]
        assert line.getMessage() == "agents: job-1: run job-1#1 (conversation) stopped on an error"
        assert line.exc_info is not None
        assert "a fault of ours" in str(line.exc_info[1])
        assert lane.service.load("job-1").active is None
        # the checkpoint of the next run's first paid reply is refused
        lane.refuse = lambda conv: bool(conv.get("tape"))
        caplog.clear()
        with caplog.at_level(logging.ERROR):
            await lane.take(inbound("job-1", "m-1", "hello"), messages)
        assert [r["ended"] for r in lane.of("journal.run")] == ["error", "output_failed"]
        assert any(
            r.name == "agents.service" and "ended (output_failed)" in r.getMessage()
            for r in caplog.records
        )
        assert lane.service.load("job-1").active is None
        await lane.take(inbound("job-1", "m-2", "thanks"), messages)
        assert [m["text"] for m in lane.of("message")][-1] == "You are welcome."
        assert [r["run_id"] for r in lane.of("journal.run")][-1] == "job-1#3"

    lane.walk(steps)
