"""The agents service's stream takes records in batches (agents/service/intake.py,
docs/agents.md, "Taking a burst"): a batch's checkpoints are written together
and acknowledged before the runs they owe start; a conversation a batch changed
twice is stored between the two records; a checkpoint that cannot be written
dead-letters the records that changed it, and the others' runs still start. The
stand-in model over HTTP answers the runs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from agents.catalog import load_catalog
from agents.dev.standin import StandinScript, build_standin
from agents.model import ModelSettings
from agents.service import AgentService, Where
from stream.runtime.config import Settings
from topics import Headers, MessageRecord, TaskOpenedRecord

CATALOG = load_catalog(
    "integrations: {email: {}}\nagents: {conversation: {instructions: Help.}}\n", "c.yaml"
)


def opened(key: str) -> bytes:
    record = TaskOpenedRecord(
        task_id=f"{key}/first", job_key=key, milestone="first", at="2026-01-05T09:00:00Z",
        instructions="Do it.", playbook_instructions="", integrations=["email"],
        deadline="2026-01-08T09:00:00Z", frontier=["first"], playbook_key="p",
    )  # fmt: skip
    return record.model_dump_json(by_alias=True).encode()


def inbound(key: str, message_id: str) -> bytes:
    record = MessageRecord(
        job_key=key, message_id=message_id, direction="in", channel="web",
        contact="ada@example.com", text="hello?", at="2026-01-05T09:05:00Z",
    )  # fmt: skip
    return record.model_dump_json(by_alias=True).encode()


class Recorded:
    """The service's producer: what it wrote, in order; the checkpoints of the
    jobs in ``refused`` fail as a broker's refusal would."""

    def __init__(self, service: AgentService) -> None:
        self.service = service
        self.written: list[tuple[str, str, dict[str, Any]]] = []
        self.refused: set[str] = set()

    async def send(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Headers | None,
        partition: int | None,
    ) -> None:  # fmt: skip
        name = topic.rsplit(".", 1)[-1]
        job = (key or b"").decode()
        if name == "conversations" and job in self.refused:
            raise RuntimeError("the broker refused the write")
        data = orjson.loads(value) if value else {}
        self.written.append((name, job, data))

    def of(self, topic: str) -> list[str]:
        return [job for name, job, _data in self.written if name == topic]


@pytest.fixture
def service(tmp_path: Path, serve: Callable[[Any], str]) -> tuple[AgentService, Recorded]:
    script = StandinScript.model_validate({"rules": [{"say": "Hello."}]})
    model = ModelSettings(api_key="sk-test", base_url=f"{serve(build_standin(script))}/v1")
    service = AgentService(Settings(data_dir=tmp_path), CATALOG, model)
    service.batched = True
    service.partitions[0] = asyncio.Event()  # partition 0 is assigned and read back
    service.partitions[0].set()
    recorded = Recorded(service)
    service.send = recorded.send
    return service, recorded


def where(topic: str, offset: int, key: str) -> Where:
    return Where(topic, 0, offset, 0, key.encode(), [])


def test_a_batch_is_checkpointed_together_and_its_runs_start_after(
    service: tuple[AgentService, Recorded],
) -> None:
    svc, recorded = service
    tasks = svc.topics.tasks

    async def go() -> None:
        for n in range(5):
            await svc.on_record(opened(f"job-{n}"), where(tasks, n, f"job-{n}"))
        # Taken, in memory: nothing written, no run started.
        assert recorded.written == []
        assert svc.running == {}
        assert sorted(svc.unsaved) == [f"job-{n}" for n in range(5)]
        await svc.stored()
        assert sorted(recorded.of("conversations")) == [f"job-{n}" for n in range(5)]
        assert sorted(svc.running) == [f"job-{n}" for n in range(5)]
        assert svc.unsaved == {}
        assert svc.owed == {}
        await asyncio.gather(*svc.running.values())
        # Each run answered its task, once.
        said = [job for name, job, data in recorded.written if data.get("type") == "message"]
        assert sorted(said) == [f"job-{n}" for n in range(5)]
        # What was stored is what a restart reads back.
        stored = orjson.loads(svc.db[b"job-3"])
        assert [t[0] for t in stored["tasks"]] == ["job-3/first"]  # task_id first
        await svc.close()

    asyncio.run(go())


def test_a_job_changed_twice_in_a_batch_is_stored_in_between(
    service: tuple[AgentService, Recorded],
) -> None:
    svc, recorded = service
    tasks, messages = svc.topics.tasks, svc.topics.messages

    async def go() -> None:
        await svc.on_record(opened("job-a"), where(tasks, 0, "job-a"))
        await svc.on_record(opened("job-b"), where(tasks, 1, "job-b"))
        assert recorded.written == []
        # A second record of job-a: the batch so far is stored (and its runs
        # started) before it is taken.
        await svc.on_record(inbound("job-a", "m-1"), where(messages, 0, "job-a"))
        assert sorted(recorded.of("conversations")) == ["job-a", "job-b"]
        assert list(svc.unsaved) == ["job-a"]
        await svc.stored()
        assert recorded.of("conversations").count("job-a") == 2
        await asyncio.gather(*svc.running.values())
        stored = orjson.loads(svc.db[b"job-a"])
        assert "m-1" in stored["received"]
        await svc.close()

    asyncio.run(go())


def test_a_checkpoint_that_cannot_be_written_dead_letters_its_records(
    service: tuple[AgentService, Recorded],
) -> None:
    svc, recorded = service
    tasks = svc.topics.tasks
    recorded.refused = {"job-bad"}

    async def go() -> None:
        await svc.on_record(opened("job-good"), where(tasks, 0, "job-good"))
        await svc.on_record(opened("job-bad"), where(tasks, 1, "job-bad"))
        await svc.stored()
        assert recorded.of("deadletter") == ["job-bad"]
        [(_, _, letter)] = [w for w in recorded.written if w[0] == "deadletter"]
        assert letter["task_id"] == "job-bad/first"  # the record as it was read
        assert "job-bad" not in svc.running  # no run without its checkpoint
        assert svc.db.get(b"job-bad") is None
        assert "job-good" in svc.running
        await svc.close()  # waits for the runs in flight

    asyncio.run(go())


def test_one_default_concurrency_everywhere_it_is_said() -> None:
    """The service, the bench's option and the docs' table say the same default."""
    import inspect

    from agents.dev.cli import bench_agents
    from agents.service.state import AGENT_CONCURRENCY, ServiceState

    signature = inspect.signature(ServiceState.__init__)
    assert signature.parameters["concurrency"].default == AGENT_CONCURRENCY
    [option] = [p for p in bench_agents.params if p.name == "concurrency"]
    assert option.default == AGENT_CONCURRENCY
    docs = (Path(__file__).parents[2] / "docs" / "agents.md").read_text()
    assert f"| `LEMONGRAPH_AGENT_CONCURRENCY` | `{AGENT_CONCURRENCY}` |" in docs
