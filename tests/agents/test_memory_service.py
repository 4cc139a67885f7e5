"""The agents service and its subjects' facts (docs/memory.md, "Given to
agents"): the service in this process follows the real broker's ``memory``
topic (the test produces the profiles onto it: the memory processor that folds
them is another part's), and the stand-in model over HTTP records what each
request carried. A job for a remembered subject is told its facts in its first
model request, with their event ids; a job for an erased subject (a tombstone)
is told nothing; a flow run on a job is given them as its ``memory`` channel
(agents/memory/profiles.py ``Profiles.channel``, which the service's
``_take_opened`` passes to the flow's inputs)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from agents.dev.standin import build_standin
from agents.model import ModelSettings
from agents.service import AgentService, Where
from stream.runtime.broker import ensure_all_topics
from stream.runtime.config import Settings
from stream.runtime.kafka import producer
from tests.agents.test_service_live import CATALOG, opened
from tests.lanes import Lane, wait_for
from topics import Headers, ProfileFact, SubjectProfile, encode

pytestmark = [pytest.mark.broker, pytest.mark.timeout(120)]

ADA = SubjectProfile(
    subject="s-ada",
    facts=[
        ProfileFact(name="plan_chosen", value="pro", source="world", event_id="e-17",
                    job_key="job-a", valid_from="2026-12-01T09:00:00Z"),
        ProfileFact(name="account_activated", source="tool", event_id="p0@41",
                    job_key="job-a", valid_from="2026-12-01T09:05:00Z"),
    ],
    updated_at="2026-12-01T09:05:00Z",
)  # fmt: skip
GONE = SubjectProfile(
    subject="s-gone",
    facts=[ProfileFact(name="plan_chosen", value="team", source="world", event_id="e-9",
                       job_key="job-z", valid_from="2026-11-01T09:00:00Z")],
)  # fmt: skip


class Recording:
    """An ASGI app that keeps every request body its app is sent."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunks = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if body:
            self.bodies.append(orjson.loads(body))
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def test_a_remembered_subject_is_told_and_an_erased_one_is_not(
    lane: Lane, tmp_path: Path, serve: Callable[[Any], str]
) -> None:
    settings = Settings(
        kafka_url=lane.kafka_url, topic_prefix=lane.prefix, partitions=4, data_dir=tmp_path
    )
    asyncio.run(ensure_all_topics(settings))
    lane.produce(
        [(b"s-ada", encode(ADA)), (b"s-gone", encode(GONE)), (b"s-gone", None)],  # type: ignore[list-item]
        topic="memory",
    )
    standin = Recording(build_standin())
    model = ModelSettings(api_key="sk-test", base_url=f"{serve(standin)}/v1")
    service = AgentService(settings, CATALOG, model)

    async def send(
        topic: str, key: bytes | None, value: bytes | None, headers: Headers | None,
        partition: int | None,
    ) -> None:  # fmt: skip
        return None

    service.send = send

    async def take(key: str, subject: dict[str, Any]) -> None:
        record = opened(key).model_copy(update={"subject": subject})
        where = Where(service.topics.tasks, 0, 0, 0, key.encode(), [])
        service.reading(0, True)
        await service.on_record(record.model_dump_json(by_alias=True).encode(), where)
        service.reading(0, False)
        await asyncio.gather(*service.running.values())

    async def go() -> None:
        stopped = False
        service.memory.followed = True  # as the app sets it: a run waits for the catch-up
        follower = asyncio.create_task(
            service.memory.follow(lane.bootstrap, settings.kafka_security, lambda: stopped)
        )
        service.partitions[0] = asyncio.Event()
        service.partitions[0].set()
        try:
            await take("job-b", {"id": "s-ada", "name": "Ada"})
            await take("job-c", {"id": "s-gone"})
            await take("job-d", {})
            # A flow run on a job is given the same facts as its `memory` channel.
            channel = await service.memory.channel({"id": "s-ada"}, [])
            assert [(f["name"], f["event_id"]) for f in channel] == [
                ("account_activated", "p0@41"), ("plan_chosen", "e-17"),
            ]  # fmt: skip
            assert await service.memory.channel({"id": "s-gone"}, []) == []
            assert await service.memory.channel({}, ["Ada@Example.com"]) == []
        finally:
            stopped = True
            await follower
            await service.close()

    asyncio.run(go())
    assert len(standin.bodies) == 3
    first, erased, nobody = (str(b["instructions"]) for b in standin.bodies)
    lines = first.splitlines()
    at = lines.index("What we know about s-ada:")
    assert lines[at + 1 : at + 3] == [
        "- account_activated (tool, 2026-12-01, event p0@41, job job-a)",
        "- plan_chosen: pro (world, 2026-12-01, event e-17, job job-a)",
    ]
    assert "What we know" not in erased
    assert "team" not in erased
    assert "What we know" not in nobody


def test_the_agents_process_follows_memory_from_its_start(
    lane: Lane, serve: Callable[[Any], str]
) -> None:
    """``lemongraph agents`` as its own process (its app starts the follower):
    a task of a job whose subject has a profile gets the section in its request."""
    (lane.playbooks / "catalog.yaml").write_text(
        "integrations: {email: {}}\nagents: {conversation: {instructions: Help.}}\n"
    )
    settings = Settings(kafka_url=lane.kafka_url, topic_prefix=lane.prefix, partitions=4)
    asyncio.run(ensure_all_topics(settings))
    lane.produce([(b"s-ada", encode(ADA))], topic="memory")
    standin = Recording(build_standin())
    lane.start(
        ["agents"], "agents: ready",
        OPENAI_BASE_URL=f"{serve(standin)}/v1", OPENAI_API_KEY="sk-test",
    )  # fmt: skip
    record = opened("job-p").model_copy(update={"subject": {"id": "s-ada"}})
    lane.produce([(b"job-p", record.model_dump_json(by_alias=True).encode())], topic="tasks")
    wait_for(lambda: standin.bodies, timeout=60, what="the run's first model request")
    assert "- plan_chosen: pro (world, 2026-12-01, event e-17, job job-a)" in str(
        standin.bodies[0]["instructions"]
    )


def test_a_profile_written_before_a_run_asks_is_given_to_that_run(
    lane: Lane, tmp_path: Path
) -> None:
    """After the first catch-up the follower reads on its own pace; a run asks
    for the topic's end as it is now and waits for it (Profiles.latest), so a
    profile acknowledged just before is given, not left to the next run."""
    settings = Settings(
        kafka_url=lane.kafka_url, topic_prefix=lane.prefix, partitions=4, data_dir=tmp_path
    )
    asyncio.run(ensure_all_topics(settings))
    lane.produce([(b"s-gone", encode(GONE))], topic="memory")
    profiles = AgentService(settings, CATALOG, ModelSettings(api_key="sk-test")).memory
    newer = ADA.model_copy(update={"subject": "s-new"})

    async def go() -> list[str]:
        stopped = False
        profiles.followed = True
        follower = asyncio.create_task(
            profiles.follow(lane.bootstrap, settings.kafka_security, lambda: stopped)
        )
        try:
            await profiles.ready()  # the first catch-up
            assert [f.name for f in profiles.facts("s-gone")] == ["plan_chosen"]
            async with producer(lane.bootstrap) as client:
                await (await client.send(lane.topics.memory, encode(newer), key=b"s-new"))
            await profiles.ready()  # at once: the record is acknowledged, not yet read
            return [f.name for f in profiles.facts("s-new")]
        finally:
            stopped = True
            await follower

    assert asyncio.run(go()) == ["plan_chosen", "account_activated"]
