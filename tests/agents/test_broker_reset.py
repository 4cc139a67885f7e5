"""A broker that comes back empty under the agents service and the mail ingress
(docs/operations.md, "When the broker was reset"), on real processes and a
broker of the test's own: the worker stops (exit 78) until its state is
removed, as the docs say; the agents service and the mail ingress notice on
their own (the cluster id) and forget what they held of the old broker, so a
job started again under a key served before the reset gets its agent run and
its email. In one process: a store read from another broker is forgotten at
assignment, and a changelog partition that ends before what the store read of
it is forgotten alone."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiosmtpd.controller import Controller

from agents.dev.standin import StandinScript, build_standin
from agents.model import ModelSettings
from agents.service import AgentService
from agents.stores import ReadMark
from stream.runtime.broker import EmbeddedBroker, cluster_id, ensure_all_topics, free_port
from stream.runtime.config import Settings
from stream.runtime.kafka import KafkaSecurity, producer
from stream.runtime.partitions import home_partition
from stream.runtime.resets import _first_records_differ
from tests.agents.channels.test_mail import CHAT, DOMAIN, SECRET, Sink
from tests.agents.test_service_live import CATALOG, opened
from tests.lanes import Lane, restart_empty, wait_for
from topics import Headers

pytestmark = [pytest.mark.broker, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = StandinScript.model_validate({"rules": [{"say": "Hello from the agent."}]})
PARTITIONS = 4


def chat_lane(url: str, prefix: str, root: Path) -> Lane:
    """A lane on the test's own broker, with the chat playbook and the catalog."""
    mine = Lane(url, prefix, root)
    mine.playbooks.mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "catalog.yaml", mine.playbooks / "catalog.yaml")
    shutil.copytree(ROOT / "examples" / "skills", mine.playbooks / "skills")
    (mine.playbooks / "chat.yaml").write_text(CHAT)
    return mine


def test_a_job_started_again_after_an_empty_broker_gets_its_agent_run_and_email(
    lane: Lane, serve: Callable[[Any], str], tmp_path: Path
) -> None:
    broker = EmbeddedBroker()
    broker.start()
    mine = chat_lane(broker.url, lane.prefix, tmp_path / "own")
    sink = Sink()
    controller = Controller(sink, hostname="127.0.0.1", port=free_port())
    controller.start()
    common = {"REPLY_TOKEN_SECRET": SECRET, "REPLY_DOMAIN": DOMAIN}
    worker_data = str(mine.root / "worker")  # the worker's folder, apart from the agents'
    job = {"type": "job.start", "key": "chat-1", "playbook_key": "chat",
           "contacts": [{"name": "Ada", "email": "ada@example.com"}]}  # fmt: skip
    try:
        worker = mine.start_worker(LEMONGRAPH_DATA_DIR=worker_data)
        agents = mine.start(
            ["agents"], "agents: ready",
            OPENAI_BASE_URL=f"{serve(build_standin(SCRIPT))}/v1", OPENAI_API_KEY="sk-test",
            **common,
        )  # fmt: skip
        ingress = mine.start(
            ["mail-ingress", "--port", str(free_port())], "mail: ready",
            LEMONGRAPH_SMTP_URL=f"smtp://127.0.0.1:{controller.port}",
            MAIL_FROM="agent@lemongraph.test", **common,
        )  # fmt: skip
        mine.send(job)
        wait_for(lambda: sink.mails, what="the agent's first email")

        # The broker restarts empty, on the same port; the topics are made again.
        broker = restart_empty(broker, mine)
        assert worker.proc.wait(60) == 78
        # What the docs say to do for the worker; the agents service and the
        # mail ingress keep running, and their folders.
        shutil.rmtree(worker_data)
        mine.start_worker(LEMONGRAPH_DATA_DIR=worker_data)
        mine.send(job)

        [(_, rcpts, again)] = wait_for(
            lambda: sink.mails[1:], timeout=90, what="the email of the job started again"
        )
        assert rcpts == ["ada@example.com"]
        assert again.get_content().strip() == "Hello from the agent."
        said = "".join(agents.lines)
        assert "was reset or replaced" in said
        assert "docs/operations.md, 'When the broker was reset'" in said
        assert "log was reset" in "".join(ingress.lines)
        assert agents.proc.poll() is None
        assert ingress.proc.poll() is None
        out = [m["value"] for m in mine.read("messages") if m["value"]["direction"] == "out"]
        assert len(out) == 1  # on the new broker: the one run of the job started again
    finally:
        controller.stop()
        mine.kill_workers()
        broker.stop()


# -- in one process: the conversations store at assignment ------------------------------


def service_on(url: str, prefix: str, data: Path) -> tuple[AgentService, list[bytes]]:
    """An agents service whose producer writes to ``url`` (acknowledged); the
    keys of the conversations it wrote."""
    settings = Settings(kafka_url=url, topic_prefix=prefix, partitions=PARTITIONS, data_dir=data)
    service = AgentService(settings, CATALOG, ModelSettings(api_key="sk-test"))
    written: list[bytes] = []

    async def send(
        topic: str, key: bytes | None, value: bytes | None, headers: Headers | None,
        partition: int | None,
    ) -> None:  # fmt: skip
        async with producer(url.removeprefix("kafka://")) as client:
            await (await client.send(topic, value, key=key, partition=partition, headers=headers))
        if topic == service.topics.conversations and key is not None:
            written.append(key)

    service.send = send
    return service, written


async def take_opened(service: AgentService, key: str) -> bool:
    """A task.opened of ``key`` on its home partition: does it owe a run?
    (It is not run.)"""
    home = home_partition(key.encode(), PARTITIONS)
    conv = service._conversation(key, home)
    owes = conv.apply(opened(key))
    conv.ran = conv.inputs  # as if its run were over: nothing is resumed
    await service.save(conv)
    return owes


def test_a_store_read_from_another_broker_is_forgotten_at_assignment(
    kafka_url: str, tmp_path: Path
) -> None:
    prefix = f"reset{free_port()}."
    data = tmp_path / "data"

    async def go() -> None:
        with EmbeddedBroker() as other:
            for url in (other.url, kafka_url):
                await ensure_all_topics(
                    Settings(kafka_url=url, topic_prefix=prefix, partitions=PARTITIONS)
                )
            first, _ = service_on(other.url, prefix, data)
            assert await first.assign(range(PARTITIONS)) == (0, 0)
            assert await take_opened(first, "job-a")  # a new task owes a run
            assert await take_opened(first, "job-b")
            await first.close()
            # The same folder against another broker (another cluster id).
            second, _ = service_on(kafka_url, prefix, data)
            try:
                await second.assign(range(PARTITIONS))
                assert second.db.get(b"job-a") is None
                # the same task again owes its run: the conversation starts anew
                assert await take_opened(second, "job-a")
                now = await cluster_id(kafka_url.removeprefix("kafka://"), KafkaSecurity())
                assert second.offsets.get("cluster") == now
            finally:
                await second.close()

    asyncio.run(go())


def test_a_changelog_partition_that_ends_before_what_was_read_is_forgotten_alone(
    kafka_url: str, tmp_path: Path
) -> None:
    prefix = f"recreated{free_port()}."
    keys = [f"job-{n}" for n in range(12)]
    homes = {k: home_partition(k.encode(), PARTITIONS) for k in keys}
    [moved, kept] = sorted(set(homes.values()))[:2]

    async def go() -> None:
        await ensure_all_topics(
            Settings(kafka_url=kafka_url, topic_prefix=prefix, partitions=PARTITIONS)
        )
        service, _ = service_on(kafka_url, prefix, tmp_path / "data")
        try:
            await service.assign(range(PARTITIONS))
            for key in keys:
                await take_opened(service, key)
            await service.revoke(range(PARTITIONS))
            assert await service.assign(range(PARTITIONS)) == (len(keys), 0)
            # As if the topic had been recreated under the store: what it read
            # of one partition goes past the log's end. A record only the store
            # holds (never on the changelog) tells what was forgotten.
            service.offsets[moved] = 1000
            for partition in (moved, kept):
                service.db[f"local-{partition}".encode()] = b'{"partition": %d}' % partition
            await service.revoke(range(PARTITIONS))
            await service.assign(range(PARTITIONS))
            assert service.db.get(f"local-{moved}".encode()) is None  # forgotten
            assert service.db.get(f"local-{kept}".encode()) is not None  # not that partition
            for key in keys:  # read again from the log, which has them
                assert service.db.get(key.encode()) is not None
            assert 0 < service.changelog.start(moved) < 1000
        finally:
            await service.close()

    asyncio.run(go())


def test_of_a_compacted_log_a_later_record_is_compaction_not_a_reset() -> None:
    mark = ReadMark(5, 1000, 42)
    tp = TopicPartition("t", 0)
    later = SimpleNamespace(offset=7, timestamp=2000, key=b"k", value=b"v")
    other = SimpleNamespace(offset=5, timestamp=2000, key=b"k", value=b"v")
    assert _first_records_differ("t", {0: mark}, {tp: [later]}, compacted=True) == []
    [reset] = _first_records_differ("t", {0: mark}, {tp: [later]}, compacted=False)
    assert "no record at offset 5" in reset.found
    [reset] = _first_records_differ("t", {0: mark}, {tp: [other]}, compacted=True)
    assert "another one" in reset.found
