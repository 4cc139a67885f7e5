"""The API's wiring, without Kafka: every route is a named function of a router
(stream/gateway/routes/), the operation ids and tags clients generate code from
stay as they are, one paging helper serves both lists, and both read models notice a
log that went backwards (the one follow loop of stream/gateway/readmodels/follow.py)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka.protocol.metadata import MetadataRequest_v5
from aiokafka.structs import TopicPartition
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from stream.gateway.api import ROUTERS, build_api
from stream.gateway.contract import TAGS
from stream.gateway.guard import Guard
from stream.gateway.ratelimit import RateLimiter
from stream.gateway.readmodels import follow
from stream.gateway.readmodels.jobs import ReadModel
from stream.gateway.readmodels.schedules import ScheduleModel
from stream.gateway.routes.shared import Gateway, page
from stream.runtime.kafka import KafkaSecurity
from topics import Topics

TOPICS = Topics("routes.")

#: (method, path, operationId, tag) of every operation in /openapi.json: each route
#: names its operationId and its router its tag (docs/api.md, "The OpenAPI document"),
#: so that renaming a function or a path changes nothing a generated client calls.
OPERATIONS = {
    ("GET", "/healthz", "getHealth", "health"),
    ("GET", "/v1/dev/mail", "listDevMail", "dev"),
    ("POST", "/v1/events", "sendEvent", "events"),
    ("POST", "/v1/files", "uploadFile", "files"),
    ("GET", "/v1/files/{file_id}", "getFile", "files"),
    ("POST", "/v1/inbound/email", "receiveEmail", "inbound"),
    ("GET", "/v1/jobs", "listJobs", "jobs"),
    ("POST", "/v1/jobs", "startJob", "jobs"),
    ("GET", "/v1/jobs/{key}", "getJob", "jobs"),
    ("POST", "/v1/jobs/{key}/answers", "answerInterrupt", "interrupts"),
    ("GET", "/v1/jobs/{key}/decisions", "listDecisions", "jobs"),
    ("GET", "/v1/jobs/{key}/events", "streamJobEvents", "streams"),
    ("GET", "/v1/jobs/{key}/interrupts", "listInterrupts", "interrupts"),
    ("GET", "/v1/jobs/{key}/journal", "listJournal", "jobs"),
    ("GET", "/v1/jobs/{key}/messages", "listMessages", "messages"),
    ("POST", "/v1/jobs/{key}/messages", "sendMessage", "messages"),
    ("GET", "/v1/playbooks", "listPlaybooks", "playbooks"),
    ("GET", "/v1/playbooks/{key}", "getPlaybook", "playbooks"),
    ("GET", "/v1/schedules", "listSchedules", "schedules"),
    ("POST", "/v1/schedules", "createSchedule", "schedules"),
    ("DELETE", "/v1/schedules/{schedule_id}", "deleteSchedule", "schedules"),
    ("GET", "/v1/schedules/{schedule_id}", "getSchedule", "schedules"),
    ("PATCH", "/v1/schedules/{schedule_id}", "updateSchedule", "schedules"),
    ("GET", "/v1/schedules/{schedule_id}/runs", "listScheduleRuns", "schedules"),
    ("POST", "/v1/schedules/{schedule_id}/wake", "wakeSchedule", "schedules"),
    ("POST", "/v1/schedules/{schedule_id}/run", "runSchedule", "schedules"),
    ("POST", "/v1/schedules/{schedule_id}/runs/{run_id}/abort", "abortScheduleRun", "schedules"),
    ("POST", "/v1/schedules/wake", "wakeSchedules", "schedules"),
    ("GET", "/v1/audit", "listAudit", "schedules"),
    ("DELETE", "/v1/subjects/{subject}", "eraseSubject", "subjects"),
    ("GET", "/v1/subjects/{subject}/jobs", "listSubjectJobs", "subjects"),
    ("GET", "/v1/subjects/{subject}/profile", "getSubjectProfile", "subjects"),
}


class _Client:
    async def fetch_all_metadata(self) -> None:
        return None


@dataclass
class _Producer:
    client: _Client = field(default_factory=_Client)


def _gateway() -> Gateway:
    guard = Guard("s" * 32, RateLimiter(100, 100), 1 << 20)
    model = ReadModel(TOPICS, {})
    return Gateway(model, _Producer(), guard)  # type: ignore[arg-type]


def test_every_route_is_a_named_function_of_its_router() -> None:
    routes = [r for router in ROUTERS for r in router.routes if isinstance(r, APIRoute)]
    assert len(routes) == len(OPERATIONS) + 3  # and /, /docs, /docs/assets/{name}
    for route in routes:
        endpoint = route.endpoint
        assert "<locals>" not in endpoint.__qualname__, route.path
        assert getattr(sys.modules[endpoint.__module__], endpoint.__name__) is endpoint


def test_every_operation_names_its_id_and_one_tag() -> None:
    # A route added without them (FastAPI would make its id up from the function
    # and the path) fails here, whoever adds it: set operation_id= in its
    # decorator and tags= on its router (one of contract.TAGS).
    tags = {tag["name"] for tag in TAGS}
    for router in ROUTERS:
        for route in router.routes:
            if isinstance(route, APIRoute) and route.include_in_schema:
                assert route.operation_id, f"{route.path}: no operation_id"
                assert len(route.tags) == 1, (route.path, route.tags)
                assert route.tags[0] in tags, (route.path, route.tags)


def test_the_operation_ids_and_tags_stay() -> None:
    schema = build_api(_gateway()).openapi()
    found = {
        (method.upper(), path, operation["operationId"], *operation["tags"])
        for path, methods in schema["paths"].items()
        for method, operation in methods.items()
    }
    assert found == OPERATIONS
    assert [tag["name"] for tag in schema["tags"]] == [tag["name"] for tag in TAGS]


def test_a_page_starts_after_the_cursor() -> None:
    keys = ["a", "b", "c", "d", "e"]
    assert page(keys, None, 2) == (["a", "b"], "b")
    assert page(keys, "b", 2) == (["c", "d"], "d")
    assert page(keys, "d", 2) == (["e"], None)
    assert page(keys, "bb", 10) == (["c", "d", "e"], None)
    assert page(keys, "e", 2) == ([], None)
    assert page([], None, 5) == ([], None)


@dataclass
class _Record:
    offset: int
    key: bytes | None = None
    value: bytes | None = None
    timestamp: int = 0


class _Client:
    """What the follow loop asks of a consumer's connection: each topic's
    metadata (one partition each; stream/runtime/kafka.py, ``topics_metadata``)."""

    def get_random_node(self) -> int:
        return 0

    async def send(self, node: int, request: Any) -> _Metadata:
        return _Metadata(request.build(MetadataRequest_v5).topics)


@dataclass
class _Metadata:
    names: list[str]

    def to_object(self) -> dict[str, Any]:
        one = [{"partition": 0}]
        return {"topics": [{"topic": n, "error_code": 0, "partitions": one} for n in self.names]}


class _Consumer:
    """What the follow loop asks of a consumer: one partition per topic, the
    batches given, then nothing (and ``stopping`` set once they are read)."""

    def __init__(self, batches: list[tuple[str, list[int], int]], stopping: asyncio.Event):
        self.batches = batches  # (topic, offsets delivered, high watermark after)
        self.stopping = stopping
        self.high: dict[TopicPartition, int] = {}
        self.read: dict[TopicPartition, int] = {}

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    @property
    def _client(self) -> _Client:
        return _Client()

    def assign(self, tps: list[TopicPartition]) -> None: ...

    async def seek_to_beginning(self, *tps: TopicPartition) -> None: ...

    async def getmany(self, **_: Any) -> dict[TopicPartition, list[_Record]]:
        if not self.batches:
            self.stopping.set()
            return {}
        topic, offsets, high = self.batches.pop(0)
        tp = TopicPartition(topic, 0)
        self.high[tp] = high
        self.read[tp] = offsets[-1] + 1 if offsets else self.read.get(tp, 0)
        return {tp: [_Record(o) for o in offsets]} if offsets else {}

    def highwater(self, tp: TopicPartition) -> int | None:
        return self.high.get(tp)

    async def position(self, tp: TopicPartition) -> int:
        return self.read.get(tp, 0)

    def pause(self, *tps: TopicPartition) -> None: ...

    def resume(self, *tps: TopicPartition) -> None: ...


def _jobs() -> ReadModel:
    return ReadModel(TOPICS, {})


def _schedules() -> ScheduleModel:
    return ScheduleModel(TOPICS)


@pytest.mark.parametrize("made", [_jobs, _schedules], ids=["jobs", "schedules"])
@pytest.mark.parametrize(
    ("second", "what"),
    [(([1], 3), "it delivered offset 1 again"), (([], 1), "its log now ends at offset 1")],
    ids=["offset-again", "log-shorter"],
)
def test_a_read_model_notices_a_log_that_went_backwards(
    monkeypatch: pytest.MonkeyPatch,
    made: Callable[[], ReadModel | ScheduleModel],
    second: tuple[list[int], int],
    what: str,
) -> None:
    model = made()
    topic = model.followed()[0]
    said: list[str] = []

    async def run() -> None:
        stopping = asyncio.Event()
        consumer = _Consumer([(topic, [0, 1, 2], 3), (topic, *second)], stopping)
        monkeypatch.setattr(follow, "new_consumer", lambda *a, **k: consumer)
        await model.follow("localhost:9", KafkaSecurity(), stopping, said.append)

    asyncio.run(run())
    assert model.reset is not None
    assert model.reset.startswith(f"{topic} partition 0 was reset or recreated")
    assert f"had read it up to offset 2, but {what}" in model.reset
    assert said[-1] == f"gateway: {model.reset}"
    assert not model.following


def test_healthz_names_a_reset_of_the_schedules_topics() -> None:
    gateway = _gateway()
    app = build_api(gateway)
    assert gateway.schedules is not None
    assert gateway.subjects is not None
    gateway.model.caught_up = gateway.schedules.caught_up = gateway.subjects.caught_up = True
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 200
        gateway.schedules.reset = "routes.schedules partition 0 was reset or recreated: ..."
        answer = client.get("/healthz")
    assert answer.status_code == 503
    assert answer.json()["status"] == "degraded"
    assert answer.json()["problem"] == gateway.schedules.reset
