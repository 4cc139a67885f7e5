"""Output bounds, each against the real part: the model's reply (the stand-in
over HTTP, both APIs), a tool's answer (a local endpoint), the conversation's
checkpoint and a record the agents service cannot take (the service in this
process, its producer recorded). docs/agents.md, "Output bounds"."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest
from fastapi import FastAPI

from agents.catalog import load_catalog
from agents.compose import ModelRequest
from agents.dev.standin import StandinScript, build_standin
from agents.model import MAX_REPLY_BYTES, Model, ModelError, ModelSettings
from agents.service import AgentService, Where
from agents.stores import CheckpointTooLarge, fitted
from agents.tools.executor import FACT_MAX_BYTES, Executor, Outcome, tool_response_bound
from stream.runtime.config import Settings
from tests.agents import test_service_live as live
from tests.agents.test_service_live import CATALOG, inbound
from topics import DeadLetter, Headers, TaskOpenedRecord

TOOLS = load_catalog(
    """\
integrations:
  desk: {tools: [book, charge, note]}
agents:
  conversation: {instructions: Help.}
tools:
  book:
    description: Books; safe to retry.
    http: {url: "${DESK_URL}/answer"}
    idempotent: true
    records: {fact: booked, properties: {when: "$.when"}}
  charge:
    description: Charges; not safe to retry.
    http: {url: "${DESK_URL}/answer"}
    records: {fact: charged}
  note:
    description: Records the whole padding as its fact.
    http: {url: "${DESK_URL}/answer"}
    idempotent: true
    records: {fact: noted, properties: {padding: "$.padding"}}
""",
    "c.yaml",
)


def desk(padding: int) -> FastAPI:
    """Answers every call with what it booked and ``padding`` bytes beside it."""
    app = FastAPI()

    @app.post("/answer")
    async def answer() -> dict[str, Any]:
        return {"status": "confirmed", "when": "10:00", "padding": "p" * padding}

    return app


def call(url: str, tool: str, max_response: int | None = None) -> Outcome:
    async def go() -> Outcome:
        async with httpx2.AsyncClient() as client:
            bound = {} if max_response is None else {"max_response": max_response}
            executor = Executor(TOOLS, client, {"DESK_URL": url}, **bound)
            return await executor.run(
                job_key="job-1", task_id="job-1/work", name=tool, arguments="{}",
                granted={"book", "charge", "note"}, occurrence=1,
            )  # fmt: skip

    return asyncio.run(go())


def test_a_tool_answer_within_the_bound_records_its_fact_and_the_model_sees_it_cut(
    serve: Callable[[Any], str],
) -> None:
    outcome = call(serve(desk(3_000_000)), "book")  # 3 MB, under the default 4 MiB
    assert outcome.status == "done"
    assert outcome.fact is not None
    assert outcome.fact.properties == {"when": "10:00"}
    assert len(outcome.output) == 2000
    assert outcome.output.endswith("ppp... [cut: 3,000,071 characters in all]")


def test_a_tool_answer_over_the_bound_is_cut_unread_and_said_so(
    serve: Callable[[Any], str],
) -> None:
    url = serve(desk(3_000_000))
    note = "over LEMONGRAPH_MAX_TOOL_RESPONSE_BYTES (100,000 bytes): cut there and not read"
    retried = call(url, "book", max_response=100_000)
    assert (retried.status, retried.fact, retried.http_status) == ("failed", None, 200)
    assert note in retried.output
    assert '{\\"status\\":\\"confirmed\\"' in retried.output  # its opening, for the journal
    unknown = call(url, "charge", max_response=100_000)
    assert (unknown.status, unknown.fact) == ("outcome_unknown", None)
    assert note in unknown.output
    assert "do not repeat it" in unknown.output


def test_a_fact_over_its_bound_is_not_recorded_and_the_model_is_told(
    serve: Callable[[Any], str],
) -> None:
    outcome = call(serve(desk(FACT_MAX_BYTES)), "note")
    assert (outcome.status, outcome.fact) == ("done", None)
    assert f"over {FACT_MAX_BYTES:,}: not recorded" in outcome.output


def test_the_bounds_are_settings() -> None:
    env = {"LEMONGRAPH_MAX_REPLY_BYTES": "1_000", "LEMONGRAPH_MAX_TOOL_RESPONSE_BYTES": "2000"}
    assert ModelSettings.from_env(env).max_reply_bytes == 1000
    assert ModelSettings.from_env({}).max_reply_bytes == MAX_REPLY_BYTES == 65_536
    assert tool_response_bound(env) == 2000
    assert tool_response_bound({}) == 4 << 20
    with pytest.raises(ValueError, match="LEMONGRAPH_MAX_REPLY_BYTES: '0' is not a whole"):
        ModelSettings.from_env({"LEMONGRAPH_MAX_REPLY_BYTES": "0"})
    with pytest.raises(ValueError, match="LEMONGRAPH_MAX_TOOL_RESPONSE_BYTES: '1MB'"):
        tool_response_bound({"LEMONGRAPH_MAX_TOOL_RESPONSE_BYTES": "1MB"})


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_a_reply_over_the_bound_is_a_too_large_model_error(
    serve: Callable[[Any], str], api: str
) -> None:
    script = StandinScript.model_validate(
        {"rules": [{"when": {"last_message_contains": "text"}, "say": "t" * 70_000},
                   {"call": {"tool": "book", "args": {"when": "a" * 70_000}}}]}
    )  # fmt: skip
    url = f"{serve(build_standin(script))}/v1"
    model = Model(ModelSettings(api_key="sk-test", base_url=url, api=api))  # type: ignore[arg-type]

    async def ask(text: str) -> None:
        request = ModelRequest("conversation", "Help.", (("user", text),), ())
        try:
            await model.call(request)
        finally:
            await model.close()

    with pytest.raises(ModelError) as text:
        asyncio.run(ask("some text"))
    assert text.value.kind == "too_large"
    assert text.value.message == (
        "the reply (text) is 70,000 bytes, over LEMONGRAPH_MAX_REPLY_BYTES (65,536): not kept"
    )
    model = Model(ModelSettings(api_key="sk-test", base_url=url, api=api))  # type: ignore[arg-type]
    with pytest.raises(ModelError) as arguments:
        asyncio.run(ask("book"))
    assert arguments.value.kind == "too_large"
    assert "(tool-call arguments) is 70,0" in arguments.value.message


def test_a_checkpoint_drops_the_oldest_turns_and_never_the_tape() -> None:
    turns = [["person", f"{n}" * 1000, None] for n in range(10)]
    data = {"job_key": "j", "turns": turns, "tape": []}
    raw, dropped = fitted(data, 5_000)
    assert dropped == 6
    assert len(raw) <= 5_000
    assert orjson.loads(raw)["turns"] == turns[6:]
    assert fitted(data, 100_000) == (orjson.dumps(data), 0)
    with pytest.raises(CheckpointTooLarge, match="over the bound of 5,000"):
        fitted({**data, "tape": [{"kind": "model", "text": "x" * 6_000}]}, 5_000)


# -- the service -----------------------------------------------------------------------


def opened(key: str, **subject: str) -> TaskOpenedRecord:
    return live.opened(key).model_copy(update={"subject": subject})


class Recorded:
    """The service's producer, recorded: what it wrote, by topic."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes | None, bytes | None, Headers | None]] = []

    async def send(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Headers | None,
        partition: int | None,
    ) -> None:  # fmt: skip
        self.records.append((topic, key, value, headers))

    def of(self, topic: str, kind: str | None = None) -> list[dict[str, Any]]:
        found = [orjson.loads(v or b"{}") for t, _, v, _ in self.records if t.endswith(topic)]
        return [r for r in found if kind is None or r.get("type") == kind]


def service_on(tmp_path: Path, url: str) -> tuple[AgentService, Recorded]:
    model = ModelSettings(api_key="sk-test", base_url=f"{url}/v1")
    service = AgentService(Settings(data_dir=tmp_path), CATALOG, model)
    recorded = Recorded()
    service.send = recorded.send
    service.partitions[0] = asyncio.Event()
    service.partitions[0].set()
    return service, recorded


def walk(service: AgentService, go: Callable[[], Any]) -> None:
    """Run ``go`` in a loop of its own, then close the service."""

    async def steps() -> None:
        try:
            await go()
        finally:
            await service.close()

    asyncio.run(steps())


async def take(service: AgentService, record: Any, topic: str) -> None:
    """A record of partition 0 as the stream takes it; then its runs, to their end."""
    where = Where(topic, 0, 7, 0, record.job_key.encode(), [])
    await service.on_record(record.model_dump_json(by_alias=True).encode(), where)
    await asyncio.gather(*service.running.values())


def test_a_run_whose_checkpoint_is_over_its_bound_ends_journaled_and_the_job_answers(
    tmp_path: Path, serve: Callable[[Any], str]
) -> None:
    script = StandinScript.model_validate(
        {"rules": [{"when": {"last_message_contains": "long"}, "say": "l" * 30_000},
                   {"when": {"last_message_contains": "there"}, "say": "Yes, here."},
                   {"say": "Hello."}]}
    )  # fmt: skip
    service, recorded = service_on(tmp_path, serve(build_standin(script)))
    service.checkpoint_bound = 20_000

    async def go() -> None:
        tasks, messages = service.topics.tasks, service.topics.messages
        await take(service, opened("job-1"), tasks)
        await take(service, inbound("job-1", "m-1", "a long answer, please"), messages)
        await take(service, inbound("job-1", "m-2", "are you there?"), messages)

    walk(service, go)
    runs = recorded.of("journal", "journal.run")
    assert [r["ended"] for r in runs] == ["done", "checkpoint_too_large", "done"]
    assert [r["run_id"] for r in runs] == ["job-1#1", "job-1#2", "job-1#3"]
    # the 30 KB reply was paid for but never kept, nor sent
    assert [m["text"] for m in recorded.of("messages", "message")] == ["Hello.", "Yes, here."]
    checkpoints = [v for t, _, v, _ in recorded.records if t.endswith("conversations")]
    assert max(len(v or b"") for v in checkpoints) <= 20_000


def test_a_record_that_cannot_be_taken_is_dead_lettered_and_the_next_is_taken(
    tmp_path: Path, serve: Callable[[Any], str]
) -> None:
    service, recorded = service_on(tmp_path, serve(build_standin()))
    service.checkpoint_bound = 20_000
    poison = opened("job-2", blob="s" * 30_000)

    async def go() -> None:
        await take(service, poison, service.topics.tasks)
        assert "job-2" not in service.live  # what it changed is forgotten
        await take(service, opened("job-2"), service.topics.tasks)

    walk(service, go)
    [(key, value, headers)] = [(k, v, h) for t, k, v, h in recorded.records
                               if t.endswith("deadletter")]  # fmt: skip
    assert (key, value) == (b"job-2", poison.model_dump_json(by_alias=True).encode())
    letter = DeadLetter.from_headers(headers or [])
    assert (letter.topic, letter.partition, letter.offset) == (service.topics.tasks, 0, 7)
    assert letter.reason.startswith("not taken: CheckpointTooLarge: the conversation's checkpoint")
    assert service.stats.refused == 1
    # the next record of the job was taken: its run answered
    assert len(recorded.of("messages", "message")) == 1
    assert [r["ended"] for r in recorded.of("journal", "journal.run")] == ["done"]
