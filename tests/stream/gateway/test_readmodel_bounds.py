"""What the gateway's read model lets go of, without Kafka: the records a real
engine wrote (``stream.engine.engine.Engine`` over a dict table) applied as the
model's consumer would, and the writes the gateway accepted, interleaved as
they can be in a running system."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from compiler import compile_playbook
from stream.engine.engine import Engine, Record
from stream.engine.registry import Registry
from stream.gateway.readmodels.jobs import AcceptedWrite, ReadModel, idem
from stream.gateway.views import job_view
from topics import MilestoneSnapshot, PlaybookRecord, Topics, encode

TOPICS = Topics("rmb.")
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SPEC = {"key": "p", "version": 1, "milestones": [{"id": "m", "condition": "paid WITHIN 30d"}]}


@dataclass
class Feed:
    """An engine, its table and a read model fed what it writes."""

    model: ReadModel
    engine: Engine = field(init=False)
    store: dict[str, bytes] = field(default_factory=dict)
    offset: int = 0

    def __post_init__(self) -> None:
        playbook = compile_playbook(SPEC)
        self.engine = Engine(
            TOPICS,
            Registry([playbook]),
            lambda k, p: self.store.get(k),
            partitions=1,
            wall_ms=lambda: int((T0 + timedelta(days=1)).timestamp() * 1000),
        )
        record = PlaybookRecord(key="p", version=1, spec=playbook.to_json())
        self.model.apply(TOPICS.playbooks, b"p", encode(record))

    def produce(self, message: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Put ``message`` on the (one-partition) inbox: its offset."""
        at = self.offset
        self.offset += 1
        return at, message

    def decide(self, at: int, message: dict[str, Any], model: ReadModel | None = None) -> int:
        """The engine decides the record at ``at``; ``model`` (default: this
        feed's) reads what it wrote. How many decisions it wrote."""
        stamp = int((T0 + timedelta(minutes=at)).timestamp() * 1000)
        key = str(message["key"]).encode()
        inbox = Record(TOPICS.inbox, 0, at, key, orjson.dumps(message), stamp)
        batch = self.engine.process([inbox])
        for output in batch.outputs:
            (model or self.model).apply(output.topic, output.key, output.value)
        for k, _p, raw in batch.writes():  # the table's changelog, produced with them
            (model or self.model).apply(TOPICS.jobstate, k.encode(), raw)
            self.store[k] = raw
        self.engine.committed(batch)
        return batch.decisions

    def accept(self, at: int, message: dict[str, Any], when: float | None = None) -> None:
        """The gateway's own acknowledged write of ``message`` at ``at``."""
        write = AcceptedWrite(
            type=str(message["type"]), partition=0, offset=at,
            accepted_at="2026-01-05T09:00:00Z", message=message,
        )  # fmt: skip
        if when is not None:
            write = AcceptedWrite(**{**_fields(write), "at": when})
        self.model.accepted(str(message["key"]), write)


def _fields(write: AcceptedWrite) -> dict[str, Any]:
    return {name: getattr(write, name) for name in AcceptedWrite.__slots__}


def pending(model: ReadModel, key: str = "j") -> list[int]:
    entry = model.entry(key)
    assert entry is not None
    return [w.offset for w in job_view(model, entry).pending_writes]


START = {"type": "job.start", "key": "j", "playbook_key": "p"}
PAID = {
    "type": "event",
    "key": "j",
    "action": "paid",
    "idempotency_key": "pay-1",
    "source": "world",
}


def test_a_retried_key_that_makes_no_decision_leaves_no_pending_write() -> None:
    feed = Feed(ReadModel(TOPICS, {}))
    feed.decide(*feed.produce(START))
    first = feed.produce(PAID)
    # A gateway restarted before the first event's decision: it does not know
    # the key, so the client's retry is written again, and is pending.
    retry = feed.produce(PAID)
    feed.accept(*retry)
    assert pending(feed.model) == [2]
    assert feed.decide(*first) == 1
    assert feed.decide(*retry) == 0  # the engine: applied once already, no decision
    assert pending(feed.model) == []
    # The key is now known from the decision: a further retry is answered
    # duplicate without a write (api.py looks it up per source, as the engine).
    entry = feed.model.entry("j")
    assert entry is not None
    assert idem("world", "pay-1") in entry.idempotency
    assert idem("tool", "pay-1") not in entry.idempotency  # another source's key is its own


def test_a_gateway_that_restarts_learns_the_applied_keys_from_the_decisions() -> None:
    # A restarted gateway reads the decisions from the beginning: a fresh model
    # fed what the engine wrote for the start and the keyed event.
    feed = Feed(ReadModel(TOPICS, {}))
    feed.decide(*feed.produce(START))
    feed.decide(*feed.produce(PAID))
    entry = feed.model.entry("j")
    assert entry is not None
    earlier = entry.idempotency[idem("world", "pay-1")]
    assert (earlier.partition, earlier.offset, earlier.message["source"]) == (0, 1, "world")


def test_a_pending_write_is_dropped_after_the_pending_ttl() -> None:
    feed = Feed(ReadModel(TOPICS, {}, pending_ttl=60))
    feed.decide(*feed.produce(START))
    now = 1_800_000_000.0
    feed.accept(*feed.produce({**PAID, "idempotency_key": "old"}), when=now - 61)
    feed.accept(*feed.produce({**PAID, "idempotency_key": "new"}), when=now - 59)
    assert pending(feed.model) == [1, 2]
    assert feed.model.expire_pending(now) == 1
    assert pending(feed.model) == [2]
    assert feed.model.expire_pending(now + 10) == 1
    assert pending(feed.model) == []


def held(model: ReadModel, key: str) -> int:
    return sum(model._held.get(key, {}).values())


def test_one_job_is_held_within_its_byte_budget_newest_first() -> None:
    feed = Feed(ReadModel(TOPICS, {}, job_bytes=300_000))
    feed.decide(*feed.produce(START))
    blob = "x" * 20_000
    for i in range(100):
        event = {**PAID, "action": "noise", "idempotency_key": f"k{i}", "properties": {"b": blob}}
        at, message = feed.produce(event)
        feed.accept(at, message)
        feed.decide(at, message)
    model = feed.model
    # Within the budget, give or take the newest record of a kind (never dropped).
    assert held(model, "j") <= 300_000 + 25_000
    assert model.trimmed > 0
    decisions = list(model.decisions["j"])
    assert 1 < len(decisions) < 100
    assert decisions[-1]["input"]["idempotency_key"] == "k99"  # the newest stay
    assert list(model.events["j"])[-1] == "k99"
    entry = model.entry("j")
    assert entry is not None
    # An accepted write keeps what a retry and the pending list need, not the value.
    assert all("properties" not in w.message for w in entry.idempotency.values())
    assert job_view(model, entry).events == 100  # the snapshot still counts them all


def test_jobs_past_the_limit_are_evicted_whole_and_come_back_as_their_summary() -> None:
    feed = Feed(ReadModel(TOPICS, {}, jobs_kept=5))
    model = feed.model
    watched = model.watch("job-0")
    for i in range(12):
        key = f"job-{i}"
        feed.decide(*feed.produce({**START, "key": key}))
        feed.decide(*feed.produce({**PAID, "key": key}))
    assert len(model.jobs) <= 5 + 1  # the limit, and the job just used
    assert model.evicted >= 6
    assert "job-0" in model.jobs  # watched: never evicted
    assert "job-1" not in model.jobs
    assert "job-1" not in model.decisions
    assert "job-1" in model.gone
    # Read back: its summary, honestly marked, not a 404.
    entry = model.entry("job-1")
    assert entry is not None
    assert entry.in_memory is False
    assert entry.snapshot is not None
    assert (entry.snapshot.status, entry.snapshot.milestones) == ("done", {"m": "done"})
    # Its detail keeps each milestone's state only (the snapshot's milestones).
    assert entry.snapshot.detail == {"m": MilestoneSnapshot(state="done")}
    assert len(model.jobs) <= 5 + 1
    # Its next snapshot brings its snapshot back in full (milestone detail,
    # timers, in memory again); the decisions and events read before it was
    # evicted do not come back: only those read since (the topics have all).
    feed.decide(*feed.produce({**PAID, "key": "job-1", "idempotency_key": "again"}))
    entry = model.entry("job-1")
    assert entry is not None
    assert entry.in_memory is True
    assert entry.snapshot is not None
    assert entry.snapshot.detail != {}
    view = job_view(model, entry)
    assert view.in_memory is True
    assert view.events == 2  # the snapshot counts them all
    assert [d["input"]["idempotency_key"] for d in model.decisions["job-1"]] == ["again"]
    assert list(model.events["job-1"]) == ["again"]
    model.unwatch("job-0", watched)


def test_evicted_summaries_are_bounded_too() -> None:
    feed = Feed(ReadModel(TOPICS, {}, jobs_kept=1))
    for i in range(15):
        feed.decide(*feed.produce({**START, "key": f"job-{i}"}))
    assert len(feed.model.gone) <= 10
    assert feed.model.forgotten >= 4
    assert feed.model.entry("job-0") is None  # forgotten: the topics still have it


def test_the_model_stays_within_its_memory_in_all() -> None:
    feed = Feed(ReadModel(TOPICS, {}, memory_bytes=200_000))
    for i in range(40):
        key = f"job-{i}"
        feed.decide(*feed.produce({**START, "key": key}))
        feed.decide(*feed.produce({**PAID, "key": key, "properties": {"b": "y" * 10_000}}))
    assert feed.model.held_bytes <= 200_000 + 30_000
    assert len(feed.model.jobs) < 40


def test_a_snapshot_older_than_an_evicted_jobs_summary_leaves_no_stranded_entry() -> None:
    feed = Feed(ReadModel(TOPICS, {}, jobs_kept=2))
    model = feed.model
    feed.decide(*feed.produce({**START, "key": "job-a"}))
    older = feed.store["job-a"]  # its state's row on the changelog
    feed.decide(*feed.produce({**PAID, "key": "job-a"}))
    for i in range(3):
        feed.decide(*feed.produce({**START, "key": f"job-{i}"}))
    assert "job-a" in model.gone
    assert "job-a" not in model.jobs
    # The older state read again (a consumer re-reading the log): the
    # summary, newer, stays what the job shows, held and used like any entry...
    model.apply(TOPICS.jobstate, b"job-a", older)
    entry = model.jobs["job-a"]
    assert entry.snapshot is not None
    assert entry.snapshot.seq > 1
    assert not entry.in_memory
    assert sum(model._held["job-a"].values()) > 0
    # ... so it is evicted in its turn, and the limit holds.
    for i in range(3, 6):
        feed.decide(*feed.produce({**START, "key": f"job-{i}"}))
    assert "job-a" not in model.jobs
    assert "job-a" in model.gone
    assert len(model.jobs) <= 2 + 1


BIG = {"note": "x" * 30_000}


def test_undecided_starts_are_counted_trimmed_and_fill_their_budget() -> None:
    model = Feed(ReadModel(TOPICS, {}, jobs_kept=10, memory_bytes=100_000)).model
    feed = Feed(model)
    assert model.pending_bytes == 25_000
    taken = 0
    while not model.full():
        at, message = feed.produce({**START, "key": f"s-{taken}", "subject": BIG, "x": "y"})
        feed.accept(at, message)
        taken += 1
    # Counted: one 30 KB start fills a 25 KB budget (the gateway answers 503
    # gateway_full from here: api.py asks ``full()`` before each write).
    assert taken == 1
    assert model.undecided_bytes > 30_000
    assert model.held_bytes >= model.undecided_bytes
    entry = model.entry("s-0")
    assert entry is not None
    assert entry.start is not None
    # Kept: what a reader of a job not yet decided is shown, nothing more.
    assert set(entry.start.message) == {"type", "key", "playbook_key", "subject"}
    view = job_view(model, entry)
    assert (view.status, view.subject) == ("starting", BIG)
    # Its snapshot decides it: no longer undecided.
    feed.decide(0, {**START, "key": "s-0", "subject": BIG})
    assert model.undecided_bytes == 0
    assert not model.full()


def test_an_undecided_start_expires_after_the_pending_ttl() -> None:
    model = ReadModel(TOPICS, {}, pending_ttl=60, jobs_kept=10, memory_bytes=100_000)
    feed = Feed(model)
    now = 1_800_000_000.0
    for i in range(3):
        at, message = feed.produce({**START, "key": f"s-{i}", "subject": {"n": i}})
        feed.accept(at, message, when=now - 61 if i < 2 else now)
    assert model.expire_pending(now) == 2
    assert model.entry("s-0") is None
    assert "s-0" not in model.jobs
    assert model.entry("s-2") is not None
    assert model.expire_pending(now + 61) == 1
    assert model.jobs == {}
    assert (model.undecided_bytes, model.held_bytes) == (0, 0)
    assert model.listed == []


def test_eviction_does_not_walk_the_busy_jobs() -> None:
    model = ReadModel(TOPICS, {}, jobs_kept=10, memory_bytes=1 << 30, pending_bytes=1 << 30)
    feed = Feed(model)
    for i in range(2_000):  # undecided starts: busy, none can be evicted
        feed.accept(*feed.produce({**START, "key": f"s-{i}"}))
    assert len(model.jobs) == 2_000
    asked = 0
    busy = model._busy

    def counting(key: str) -> bool:
        nonlocal asked
        asked += 1
        return busy(key)

    model._busy = counting  # type: ignore[method-assign]
    for i in range(100):
        feed.decide(*feed.produce({**START, "key": f"d-{i}"}))  # each fits the model
    assert asked < 100 * 10  # was ~2,000 per record: the whole list
    assert len(model.jobs) <= 2_000 + 10 + 1


def test_the_list_index_and_the_evicted_summaries_are_bounded() -> None:
    model = ReadModel(TOPICS, {}, jobs_kept=5, memory_bytes=1 << 20)
    feed = Feed(model)
    for i in range(300):
        feed.decide(*feed.produce({**START, "key": f"job-{i:03}"}))
    assert model.listed == sorted({*model.jobs, *model.gone})
    assert model.listed_by["running"] == model.listed  # each one's status, sorted too
    feed.accept(*feed.produce({**START, "key": "zz"}))
    assert model.listed_by["starting"] == ["zz"]
    assert model.listed[-1] == "zz"
    assert len(model.gone) <= 50
    assert model.gone_bytes == sum(model._gone_size.values()) <= (1 << 20) // 8
    assert model.forgotten > 0


class Captured(ReadModel):
    """Keeps what the engine wrote, to apply it in another order."""

    def __init__(self) -> None:
        super().__init__(TOPICS, {})
        self.records: list[tuple[str, bytes | None, bytes | None]] = []

    def apply(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        self.records.append((topic, key, value))


def test_a_decision_read_after_its_snapshot_and_an_eviction_does_not_hide_the_job() -> None:
    # The model reads decisions and jobs side by side: a job's snapshot can come
    # before its start's decision, and the job be evicted in between.
    feed = Feed(ReadModel(TOPICS, {}, jobs_kept=1))
    model = feed.model
    captured = Captured()
    feed.decide(*feed.produce({**START, "key": "job-a"}), model=captured)
    snapshots = [r for r in captured.records if r[0] == TOPICS.jobstate]
    decisions = [r for r in captured.records if r[0] == TOPICS.decisions]
    for record in snapshots:
        model.apply(*record)
    for i in range(2):
        feed.decide(*feed.produce({**START, "key": f"job-{i}"}))
    assert "job-a" in model.gone
    for record in decisions:
        model.apply(*record)
    entry = model.entry("job-a")  # its summary, not a bare entry that hides it
    assert entry is not None
    assert entry.snapshot is not None
    assert "job-a" in model.listed_by["running"]
    assert all(model.status_of(k) is not None for k in model.listed)
