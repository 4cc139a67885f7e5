"""Schedules in the engine, without a broker (docs/schedules.md, docs/kafka.md):
definitions from ``schedules``, wakes from the inbox, reports from
``schedule-runs`` and ticks, decided by ``compiler.schedule_step`` and stored in
the engine's table under ``"\\x00schedule/<id>"``.

The harness (tests/stream/engine/engine_harness.py) commits each batch as the Faust
layer does. Expected ids are computed here from their documented formula
(docs/schedules.md, "Exactly once: slot ids"), never by the code under test.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from stream.cli import main
from stream.engine.engine import Engine, Record
from stream.engine.schedules import (
    SCHEDULE_PREFIX,
    Schedules,
    peek_schedule,
    schedule_key,
)
from stream.runtime.config import ConfigError, Settings
from stream.runtime.files import load_schedules_file, playbook_files, schedules_file
from stream.runtime.partitions import home_partition
from tests.stream.engine.engine_harness import (
    QUICK,
    TOPICS,
    Harness,
    decisions,
    letters,
    ms,
    on,
    registry,
)
from topics import (
    FORWARDED_FROM_HEADER,
    SCHEDULE_HEADER,
    SCHEDULE_RUN_HEADER,
    InboxEvent,
    JobStart,
    MessageRecord,
    SchedulePromptTask,
    ScheduleRunRecord,
)

#: A Monday, 09:00 UTC: slots of "every 5m" come at 09:05, 09:10...
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
PARTITIONS = 4


def slot(schedule_id: str, nominal: datetime) -> str:
    iso = nominal.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return "sl-" + hashlib.sha256(f"{schedule_id}\n{iso}".encode()).hexdigest()[:20]


def wake_run(schedule_id: str, request: str) -> str:
    return "wk-" + hashlib.sha256(f"{schedule_id}\n{request}".encode()).hexdigest()[:20]


def iso(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


class Lane:
    """An engine with schedules on a dict table; offsets per topic and partition."""

    def __init__(
        self,
        store: dict[tuple[str, int], bytes] | None = None,
        *,
        enabled: bool = True,
        offsets: dict[tuple[str, int], int] | None = None,
    ) -> None:
        self.h = Harness(registry(QUICK), store, PARTITIONS)
        self.enabled = enabled
        self.schedules = Schedules(TOPICS, enabled=enabled)
        self.h.engine = Engine(
            TOPICS,
            self.h.registry,
            self.h.load,
            partitions=PARTITIONS,
            wall_ms=lambda: ms(self.h.wall),
            schedules=self.schedules,
            scan=self.h.scan,
        )
        self.offsets: dict[tuple[str, int], int] = {} if offsets is None else offsets

    @property
    def store(self) -> dict[tuple[str, int], bytes]:
        return self.h.store

    def restart(self, *, enabled: bool | None = None) -> Lane:
        """A new worker process on the same table (nothing rebuilt: the due-time
        index is in it)."""
        fresh = Lane(
            self.store, enabled=self.enabled if enabled is None else enabled, offsets=self.offsets
        )
        fresh.h.next_offset = self.h.next_offset
        fresh.h.engine.assigned()
        return fresh

    def waiting(self) -> int:
        """How many schedules have a row in the due-time index."""
        return sum(
            1 for p in range(PARTITIONS) for _d, kind, _n in self.h.due_rows(p) if kind == "s"
        )

    def next_due(self, schedule_id: str) -> int | None:
        """The schedule's due time in the table's due-time index (one row at most)."""
        rows = [
            due
            for due, kind, name in self.h.due_rows(home(schedule_id))
            if kind == "s" and name == schedule_id
        ]
        assert len(rows) <= 1, rows
        return rows[0] if rows else None

    def record(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        at: datetime,
        partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> Record:
        if partition is None:
            partition = home_partition(key, PARTITIONS) if key else 0
        name = TOPICS.name(topic)
        offset = self.offsets.get((name, partition), 0)
        self.offsets[(name, partition)] = offset + 1
        return Record(name, partition, offset, key, value, ms(at), headers or [])

    def define(self, spec: dict[str, Any], at: datetime = T0, **kw: Any) -> Record:
        value = orjson.dumps(
            {"type": "schedule", "schema": 1, "spec": spec, "updated_at": iso(at), "by": "test"}
        )
        return self.record("schedules", spec["id"].encode(), value, at, **kw)

    def tombstone(self, schedule_id: str, at: datetime) -> Record:
        return self.record("schedules", schedule_id.encode(), None, at)

    def report(self, schedule_id: str, run_id: str, at: datetime, **fields: Any) -> Record:
        body = {
            "type": "schedule.report",
            "schema": 1,
            "schedule_id": schedule_id,
            "run_id": run_id,
            "status": "completed",
            "output": "",
            "at": iso(at),
            **fields,
        }
        return self.record("schedule-runs", schedule_id.encode(), orjson.dumps(body), at)

    def wake(self, schedule_id: str, at: datetime, **fields: Any) -> Record:
        body = {"type": "schedule.wake", "schedule_id": schedule_id, **fields}
        return self.h.inbox(orjson.dumps(body), at=at, key=schedule_id.encode())

    def tick(self, at: datetime, partition: int) -> Record:
        value = orjson.dumps(
            {"type": "tick", "schema": 1, "partition": partition, "at": at.isoformat()}
        )
        return self.record("ticks", b"tick", value, at, partition)

    def run(self, *records: Record, commit: bool = True) -> Any:
        return self.h.run(records, commit=commit)


def home(key: str) -> int:
    return home_partition(key.encode(), PARTITIONS)


def runs(batch: Any) -> list[ScheduleRunRecord]:
    return [ScheduleRunRecord.model_validate_json(o.value) for o in on(batch, "schedule-runs")]


def starts(batch: Any) -> list[tuple[Any, JobStart]]:
    out = []
    for o in on(batch, "inbox"):
        data = orjson.loads(o.value)
        if data["type"] == "job.start":
            out.append((o, JobStart.model_validate(data)))
    return out


def every_5m(schedule_id: str = "review", **extra: Any) -> dict[str, Any]:
    return {
        "id": schedule_id,
        "name": "Review",
        "schedule": "every 5m",
        "action": {"type": "start_job", "playbook_key": "quick", "subject": {"n": 1}},
        **extra,
    }


def prompt_every_5m(schedule_id: str = "check", **extra: Any) -> dict[str, Any]:
    return {
        "id": schedule_id,
        "name": "Check",
        "schedule": "every 5m",
        "action": {"type": "prompt", "agent": "helper", "prompt": "Anything to do?"},
        **extra,
    }


# -- definitions, storage, timers ----------------------------------------------------


def test_a_definition_is_stored_on_its_home_partition_with_its_due_time() -> None:
    lane = Lane()
    batch = lane.run(lane.define(every_5m()))
    assert batch.deadletters == 0
    p = home("review")
    raw = lane.store[(schedule_key("review"), p)]
    assert schedule_key("review") == "\x00schedule/review"
    assert peek_schedule(raw) == (p, ms(T0 + timedelta(minutes=5)))
    assert lane.next_due("review") == ms(T0 + timedelta(minutes=5))
    # a definition fires nothing by itself, and says nothing on schedule-runs
    assert on(batch, "inbox") == []
    assert runs(batch) == []


def test_a_tick_fires_the_due_slot_once_as_a_job_start_with_the_schedules_headers() -> None:
    lane = Lane()
    p = home("review")
    lane.run(lane.define(every_5m()))
    early = lane.run(lane.tick(T0 + timedelta(minutes=4, seconds=59), p))
    assert on(early, "inbox") == []
    assert runs(early) == []
    due = T0 + timedelta(minutes=5, seconds=1)
    other = (p + 1) % PARTITIONS
    assert on(lane.run(lane.tick(due, other)), "inbox") == []  # another partition's tick
    batch = lane.run(lane.tick(due, p))
    sid = slot("review", T0 + timedelta(minutes=5))
    [(out, start)] = starts(batch)
    assert (start.key, start.playbook_key, start.subject) == (sid, "quick", {"n": 1})
    assert out.key == sid.encode()
    assert out.partition == home(sid)
    assert out.timestamp_ms == ms(due)  # the job is decided at the instant the slot fired
    assert out.headers == [(SCHEDULE_HEADER, b"review"), (SCHEDULE_RUN_HEADER, sid.encode())]
    [run] = runs(batch)
    assert (run.run_id, run.status, run.triggered_by, run.job_key) == (
        sid,
        "completed",
        "schedule",
        sid,
    )
    assert run.slot == "2026-03-02T09:05:00Z"
    [o] = on(batch, "schedule-runs")
    assert (o.key, o.partition) == (b"review", p)
    # the same tick again, or a later one before the next slot: nothing
    again = lane.run(lane.tick(due + timedelta(seconds=30), p))
    assert on(again, "inbox") == []
    assert runs(again) == []
    assert peek_schedule(lane.store[(schedule_key("review"), p)])[1] == ms(
        T0 + timedelta(minutes=10)
    )


def test_a_dispatched_job_start_starts_one_job_and_a_second_copy_is_refused() -> None:
    lane = Lane()
    p = home("review")
    lane.run(lane.define(every_5m()))
    batch = lane.run(lane.tick(T0 + timedelta(minutes=5), p))
    [(out, _start)] = starts(batch)
    copy = Record(TOPICS.inbox, out.partition, 0, out.key, out.value, out.timestamp_ms or 0, [])
    first = decisions(lane.run(copy))
    again = Record(TOPICS.inbox, out.partition, 1, out.key, out.value, out.timestamp_ms or 0, [])
    second = decisions(lane.run(again))
    assert [d.outcome for d in first] == ["applied"]
    [refused] = second
    assert refused.outcome == "refused"
    assert refused.refused == f"job {out.key.decode()!r} already exists"


def test_a_crash_after_the_acks_re_decides_the_same_slot_byte_for_byte() -> None:
    lane = Lane()
    p = home("review")
    lane.run(lane.define(every_5m()))
    tick = lane.tick(T0 + timedelta(minutes=5, seconds=2), p)
    lost = lane.run(tick, commit=False)  # produced and acked, never stored
    again = lane.restart().run(tick)
    assert [(o.topic, o.key, o.value, o.partition, o.headers) for o in again.outputs] == [
        (o.topic, o.key, o.value, o.partition, o.headers) for o in lost.outputs
    ]
    assert len(starts(again)) == 1


def test_the_index_is_read_from_the_table_after_a_restart() -> None:
    lane = Lane()
    lane.run(lane.define(every_5m()), lane.define(every_5m("other", schedule="every 10m")))
    fresh = lane.restart()
    assert fresh.next_due("review") == ms(T0 + timedelta(minutes=5))
    assert fresh.next_due("other") == ms(T0 + timedelta(minutes=10))
    # no job timers: the schedules' rows are a range of their own
    assert all(kind == "s" for p in range(PARTITIONS) for _d, kind, _n in fresh.h.due_rows(p))
    batch = fresh.run(fresh.tick(T0 + timedelta(minutes=10), home("other")))
    fired = {r.schedule_id for r in runs(batch)}
    assert fired == ({"other", "review"} if home("review") == home("other") else {"other"})


def test_a_re_delivered_definition_is_recognised_by_the_partitions_watermark() -> None:
    lane = Lane()
    record = lane.define(every_5m())
    lane.run(record)
    batch = lane.run(record)
    assert batch.skipped == 1
    assert batch.decisions == 0


def test_an_update_keeps_the_last_slot_and_a_pause_fires_nothing() -> None:
    lane = Lane()
    p = home("review")
    lane.run(lane.define(every_5m()))
    lane.run(lane.tick(T0 + timedelta(minutes=5), p))
    paused = every_5m(enabled=False)
    lane.run(lane.define(paused, at=T0 + timedelta(minutes=6)))
    assert lane.next_due("review") is None
    assert on(lane.run(lane.tick(T0 + timedelta(minutes=30), p)), "inbox") == []
    resumed = lane.run(lane.define(every_5m(), at=T0 + timedelta(minutes=31)))
    assert runs(resumed) == []  # nothing caught up or recorded for the paused span
    batch = lane.run(lane.tick(T0 + timedelta(minutes=35), p))
    assert [s.key for _o, s in starts(batch)] == [slot("review", T0 + timedelta(minutes=35))]


def test_a_tombstone_deletes_the_row_and_aborts_the_active_run() -> None:
    lane = Lane()
    p = home("check")
    lane.run(lane.define(prompt_every_5m()))
    lane.run(lane.tick(T0 + timedelta(minutes=5), p))
    batch = lane.run(lane.tombstone("check", T0 + timedelta(minutes=6)))
    assert [(r.status, r.run_id) for r in runs(batch)] == [
        ("aborted", slot("check", T0 + timedelta(minutes=5)))
    ]
    assert (schedule_key("check"), p, None) in batch.writes()
    assert lane.store.get((schedule_key("check"), p)) is None
    assert lane.next_due("check") is None
    later = lane.run(lane.tick(T0 + timedelta(minutes=20), p))
    assert later.outputs == []


# -- what is refused ------------------------------------------------------------------


def test_an_invalid_definition_is_dead_lettered_with_its_bytes_and_the_field() -> None:
    lane = Lane()
    bad = every_5m(schedule="61 * * * *")
    record = lane.define(bad)
    batch = lane.run(record)
    [letter] = letters(batch)
    assert letter.value == record.value
    assert letter.key == b"review"
    assert "schedule" in letter.reason
    assert "61" in letter.reason
    assert (schedule_key("review"), home("review")) not in lane.store


def test_a_definition_whose_id_is_not_its_key_is_dead_lettered() -> None:
    lane = Lane()
    record = lane.define(every_5m())
    wrong = Record(
        record.topic,
        home("nope"),
        0,
        b"nope",
        record.value,
        record.timestamp_ms,
        [],
    )
    [letter] = letters(lane.run(wrong))
    assert "is not the record key 'nope'" in letter.reason


def test_a_definition_off_its_home_partition_is_dead_lettered_naming_the_home() -> None:
    lane = Lane()
    p = home("review")
    wrong = (p + 1) % PARTITIONS
    batch = lane.run(lane.define(every_5m(), partition=wrong))
    [letter] = letters(batch)
    assert f"home partition {p}" in letter.reason
    assert letter.partition == wrong
    assert lane.store.get((schedule_key("review"), wrong)) is None


def test_a_failing_schedule_does_not_stop_the_batch() -> None:
    lane = Lane()
    p = home("review")
    lane.run(lane.define(every_5m()))
    # a stored state that cannot be read: the tick dead-letters and goes on
    key = (schedule_key("review"), p)
    lane.store[key] = lane.store[key].split(b"\n")[0] + b"\n{not json"
    batch = lane.run(
        lane.tick(T0 + timedelta(minutes=5), p), lane.define(every_5m("other"), partition=None)
    )
    [letter] = letters(batch)
    assert "schedule 'review'" in letter.reason
    assert (schedule_key("other"), home("other")) in lane.store


# -- send_event and prompt ------------------------------------------------------------


def test_a_send_event_slot_is_an_event_with_the_run_id_as_its_idempotency_key() -> None:
    lane = Lane()
    spec = {
        "id": "nudge",
        "name": "Nudge",
        "schedule": "every 5m",
        "action": {
            "type": "send_event",
            "job_key": "job-7",
            "event": {"action": "reminder_due", "properties": {"n": 2}},
        },
    }
    lane.run(lane.define(spec))
    batch = lane.run(lane.tick(T0 + timedelta(minutes=5), home("nudge")))
    [out] = on(batch, "inbox")
    event = InboxEvent.model_validate_json(out.value)
    sid = slot("nudge", T0 + timedelta(minutes=5))
    assert (event.key, event.action, event.properties, event.source) == (
        "job-7",
        "reminder_due",
        {"n": 2},
        "world",
    )
    assert event.idempotency_key == sid
    assert out.partition == home("job-7")
    assert out.key == b"job-7"
    assert [(r.status, r.job_key) for r in runs(batch)] == [("completed", "job-7")]


def test_a_prompt_slot_is_a_task_and_its_report_ends_the_run() -> None:
    lane = Lane()
    p = home("check")
    lane.run(lane.define(prompt_every_5m(deliver_to="web:job-9")))
    fired = T0 + timedelta(minutes=5)
    batch = lane.run(lane.tick(fired, p))
    sid = slot("check", fired)
    [out] = on(batch, "tasks")
    task = SchedulePromptTask.model_validate_json(out.value)
    assert (out.key, out.partition) == (b"check", p)
    assert (task.run_id, task.agent, task.prompt, task.attempt) == (
        sid,
        "helper",
        "Anything to do?",
        0,
    )
    assert task.deadline == "2026-03-02T09:10:00Z"
    assert task.slot == "2026-03-02T09:05:00Z"
    assert [r.status for r in runs(batch)] == ["running"]
    done = lane.run(lane.report("check", sid, fired + timedelta(seconds=3), output="All calm."))
    assert [(r.status, r.output, r.delivered_to) for r in runs(done)] == [
        ("completed", "All calm.", "web:job-9")
    ]
    [message_out] = on(done, "messages")
    message = MessageRecord.model_validate_json(message_out.value)
    assert (message.job_key, message.message_id, message.direction, message.channel) == (
        "job-9",
        f"sched-{sid}",
        "out",
        "web",
    )
    assert message.text.endswith("All calm.")  # the text is the state machine's
    assert message_out.partition == home("job-9")
    # a second report of the same run: nothing
    assert lane.run(lane.report("check", sid, fired + timedelta(seconds=4))).outputs == []


def test_the_workers_own_run_records_are_not_read_back_and_misplaced_reports_go_home() -> None:
    lane = Lane()
    p = home("check")
    lane.run(lane.define(prompt_every_5m()))
    batch = lane.run(lane.tick(T0 + timedelta(minutes=5), p))
    [own] = on(batch, "schedule-runs")
    echo = lane.record("schedule-runs", own.key, own.value, T0 + timedelta(minutes=5))
    assert lane.run(echo).outputs == []
    sid = slot("check", T0 + timedelta(minutes=5))
    misplaced = lane.report("check", sid, T0 + timedelta(minutes=6))
    elsewhere = Record(
        misplaced.topic,
        (p + 1) % PARTITIONS,
        0,
        misplaced.key,
        misplaced.value,
        misplaced.timestamp_ms,
        [],
    )
    forwarded = lane.run(elsewhere)
    [copy] = forwarded.outputs
    assert (copy.topic, copy.partition, copy.value) == (TOPICS.schedule_runs, p, misplaced.value)
    assert (FORWARDED_FROM_HEADER, b"p%d@0" % elsewhere.partition) in (copy.headers or [])


# -- wake --------------------------------------------------------------------------


def test_a_wake_fires_now_once_per_request_with_its_context() -> None:
    lane = Lane()
    lane.run(lane.define(every_5m()))
    at = T0 + timedelta(minutes=1)
    record = lane.wake("review", at, request_id="r-1", context={"why": "manual"})
    batch = lane.run(record)
    run_id = wake_run("review", "r-1")
    assert [(r.run_id, r.triggered_by, r.context) for r in runs(batch)] == [
        (run_id, "wake", {"why": "manual"})
    ]
    assert [s.key for _o, s in starts(batch)] == [run_id]
    again = lane.run(lane.wake("review", at + timedelta(seconds=1), request_id="r-1"))
    assert again.outputs == []


def test_a_wake_without_a_request_id_is_named_by_its_inbox_position_even_forwarded() -> None:
    lane = Lane()
    lane.run(lane.define(every_5m()))
    p = home("review")
    elsewhere = (p + 1) % PARTITIONS
    original = lane.h.inbox(
        orjson.dumps({"type": "schedule.wake", "schedule_id": "review"}),
        at=T0 + timedelta(minutes=1),
        key=b"review",
        partition=elsewhere,
    )
    forwarded = lane.run(original)
    [copy] = forwarded.outputs
    assert (copy.topic, copy.partition) == (TOPICS.inbox, p)
    at_home = lane.h.inbox(
        copy.value, at=T0 + timedelta(minutes=1), key=b"review", headers=copy.headers
    )
    batch = lane.run(at_home)
    request = f"p{elsewhere}@{original.offset}"
    assert [r.run_id for r in runs(batch)] == [wake_run("review", request)]


def test_a_wake_with_skip_if_running_while_a_run_is_active_is_skipped() -> None:
    lane = Lane()
    p = home("check")
    lane.run(lane.define(prompt_every_5m()))
    lane.run(lane.tick(T0 + timedelta(minutes=5), p))
    batch = lane.run(
        lane.wake("check", T0 + timedelta(minutes=6), request_id="w", skip_if_running=True)
    )
    [run] = runs(batch)
    assert run.status == "skipped"
    assert on(batch, "tasks") == []
    assert (
        run.error == f"skip_if_running: run {slot('check', T0 + timedelta(minutes=5))} is running"
    )


def test_a_catch_up_of_many_schedules_comes_a_tick_at_a_time() -> None:
    # Down for 3 hours, each "every 1m" schedule has ~180 slots to decide: 100
    # missed records, one for the rest and a fire. One tick must not put every
    # schedule's records in one batch: past the budget the rest wait for the
    # next tick, and in the end each schedule is decided once, as if alone.
    lane = Lane()
    p = 0
    ids = [f"s{i}" for i in range(200) if home(f"s{i}") == p][:20]
    spec = {"schedule": "every 1m", "action": {"type": "start_job", "playbook_key": "quick"}}
    lane.run(*(lane.define({"id": i, "name": i, **spec}) for i in ids))
    lane.schedules.tick_budget = 500
    later = T0 + timedelta(hours=3)
    lane.h.wall = later + timedelta(seconds=5)
    decided: list[str] = []
    sizes = []
    for n in range(10):
        batch = lane.run(lane.tick(later + timedelta(seconds=n), p))
        sizes.append(len(batch.outputs))
        decided += [r.schedule_id for r in runs(batch) if r.status == "completed"]
        if len(decided) == len(ids):
            break
    assert sorted(decided) == sorted(ids)  # each fired once
    assert len(sizes) > 1
    assert max(sizes) <= 500 + 110, sizes  # the budget, and one schedule's records past it
    assert lane.waiting() == len(ids)  # all back in the index, for their next slot


def test_a_decision_whose_records_would_be_too_large_is_dead_lettered() -> None:
    # A wake's context goes into its prompt task twice (the prompt and the
    # field) and into the state while its run is active: past what a record may
    # be, the broker would refuse the batch on every restart. The wake is
    # dead-lettered instead, and nothing of it is written.
    lane = Lane()
    lane.run(lane.define(prompt_every_5m()))
    p = home("check")
    before = lane.store[(schedule_key("check"), p)]
    big = {"blob": "x" * 600_000}
    batch = lane.run(lane.wake("check", T0 + timedelta(seconds=1), request_id="w0", context=big))
    [letter] = letters(batch)
    assert "tasks record would be" in letter.reason, letter.reason
    assert on(batch, "tasks") == []
    assert runs(batch) == []
    assert lane.store[(schedule_key("check"), p)] == before
    # Active runs that together would make the state too large: the wake that
    # would cross the line is refused; the earlier ones run.
    half = {"blob": "x" * 400_000}
    for n in range(2):
        batch = lane.run(
            lane.wake("check", T0 + timedelta(seconds=2 + n), request_id=f"w{n + 1}", context=half)
        )
        assert batch.deadletters == 0
        assert len(on(batch, "tasks")) == 1
    batch = lane.run(lane.wake("check", T0 + timedelta(seconds=5), request_id="w3", context=half))
    [letter] = letters(batch)
    assert "the schedule's state would be" in letter.reason, letter.reason
    assert on(batch, "tasks") == []
    # The worker goes on: the next slot is decided (skipped: the wakes' runs
    # are still active).
    batch = lane.run(lane.tick(T0 + timedelta(minutes=5), p))
    assert [(r.status, r.run_id) for r in runs(batch)] == [
        ("skipped", slot("check", T0 + timedelta(minutes=5)))
    ]


# -- the global switch --------------------------------------------------------------------


def test_switched_off_ticks_fire_nothing_and_keep_the_index_and_wakes_are_skipped() -> None:
    lane = Lane(enabled=False)
    p = home("review")
    lane.run(lane.define(every_5m()))
    assert lane.store.get((schedule_key("review"), p)) is not None  # definitions are stored
    batch = lane.run(lane.tick(T0 + timedelta(minutes=5), p))
    assert batch.outputs == []
    assert lane.next_due("review") == ms(T0 + timedelta(minutes=5))
    woken = lane.run(lane.wake("review", T0 + timedelta(minutes=6), request_id="w"))
    [run] = runs(woken)
    assert run.status == "skipped"
    assert "LEMONGRAPH_SCHEDULES_ENABLED=0" in (run.error or "")
    assert starts(woken) == []
    # switched on again: the slot that came due meanwhile fires by the catch-up rule
    on_again = lane.restart(enabled=True)
    fired = on_again.run(on_again.tick(T0 + timedelta(minutes=7), p))
    assert [s.key for _o, s in starts(fired)] == [slot("review", T0 + timedelta(minutes=5))]


def test_schedule_rows_are_not_jobs() -> None:
    lane = Lane()
    lane.run(lane.define(every_5m()))
    keys = [key for key, _p in lane.store]
    assert all(k.startswith("\x00") for k in keys)
    assert any(k.startswith(SCHEDULE_PREFIX) for k in keys)


@pytest.mark.parametrize("overlap", ["skip", "buffer_one", "allow_all"])
def test_overlap_of_prompt_runs(overlap: str) -> None:
    lane = Lane()
    p = home("check")
    lane.run(lane.define(prompt_every_5m(overlap=overlap, timeout="1h")))
    lane.run(lane.tick(T0 + timedelta(minutes=5), p))
    second = lane.run(lane.tick(T0 + timedelta(minutes=10), p))
    first_id = slot("check", T0 + timedelta(minutes=5))
    second_id = slot("check", T0 + timedelta(minutes=10))
    statuses = [(r.run_id, r.status) for r in runs(second)]
    if overlap == "skip":
        assert statuses == [(second_id, "skipped")]
        assert on(second, "tasks") == []
    elif overlap == "buffer_one":
        assert statuses == []
        assert on(second, "tasks") == []
        ended = lane.run(lane.report("check", first_id, T0 + timedelta(minutes=11)))
        assert [(r.run_id, r.status) for r in runs(ended)] == [
            (first_id, "completed"),
            (second_id, "running"),
        ]
        assert len(on(ended, "tasks")) == 1
    else:
        assert statuses == [(second_id, "running")]
        assert len(on(second, "tasks")) == 1


# -- schedules.yaml ----------------------------------------------------------------------


def test_schedules_yaml_is_not_a_playbook_and_its_problems_name_line_and_field(
    tmp_path: Path,
) -> None:
    (tmp_path / "schedules.yaml").write_text(
        "schedules:\n"
        "  - name: Lead review\n"
        "    schedule: weekdays at 09:30\n"
        "    action: {type: start_job, playbook_key: lead}\n"
        "  - name: Bad zone\n"
        "    schedule: hourly\n"
        "    timezone: Mars/Olympus\n"
        "    action: {type: start_job, playbook_key: lead}\n"
        "  - id: lead-review\n"
        "    name: Again\n"
        "    schedule: hourly\n"
        "    action: {type: start_job, playbook_key: lead}\n"
    )
    assert playbook_files(tmp_path) == []
    assert schedules_file(tmp_path) == tmp_path / "schedules.yaml"
    found = load_schedules_file(tmp_path / "schedules.yaml")
    assert [s.id for s in found.schedules] == ["lead-review"]
    path = tmp_path / "schedules.yaml"
    assert found.problems[0].startswith(f"{path}:5: schedules[1] (Bad zone): timezone")
    assert found.problems[1] == (
        f"{path}:9: schedules[2] (lead-review): id 'lead-review' is also used by schedules[0]"
    )
    result = CliRunner().invoke(main, ["check", str(tmp_path)])
    assert result.exit_code == 1
    assert f"{path}:5: schedules[1] (Bad zone): timezone" in result.output


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("- a\n", "expected one key, schedules"),
        ("schedules: 3\n", "schedules: must be a list"),
        ("schedules: [\n", "schedules.yaml:"),
    ],
)
def test_a_schedules_file_of_the_wrong_shape_is_one_problem(
    tmp_path: Path, text: str, problem: str
) -> None:
    (tmp_path / "schedules.yaml").write_text(text)
    found = load_schedules_file(tmp_path / "schedules.yaml")
    assert found.schedules == []
    [line] = found.problems
    assert problem in line


def test_switched_off_a_changed_definition_or_a_report_fires_nothing() -> None:
    lane = Lane(enabled=False)
    p = home("review")
    lane.run(lane.define(every_5m()))
    lane.run(lane.tick(T0 + timedelta(minutes=6), p))  # slot 09:05 came due, switched off
    changed = lane.run(lane.define(every_5m(name="Review, renamed"), at=T0 + timedelta(minutes=7)))
    assert starts(changed) == []
    assert runs(changed) == []


def test_switched_off_a_report_ends_its_run_and_keeps_the_buffered_slot() -> None:
    lane = Lane()
    p = home("check")
    lane.run(lane.define(prompt_every_5m(overlap="buffer_one", timeout="1h")))
    lane.run(lane.tick(T0 + timedelta(minutes=5), p))
    lane.run(lane.tick(T0 + timedelta(minutes=10), p))  # 09:10 waits for 09:05's run
    off = lane.restart(enabled=False)
    first = slot("check", T0 + timedelta(minutes=5))
    ended = off.run(off.report("check", first, T0 + timedelta(minutes=11)))
    assert [(r.run_id, r.status) for r in runs(ended)] == [(first, "completed")]
    assert on(ended, "tasks") == []
    # switched on again, the buffered slot runs (at the latest at the next due time)
    on_again = off.restart(enabled=True)
    fired = on_again.run(
        on_again.tick(T0 + timedelta(minutes=12), p),
        on_again.tick(T0 + timedelta(minutes=15), p),
    )
    second = slot("check", T0 + timedelta(minutes=10))
    assert (second, "running") in [(r.run_id, r.status) for r in runs(fired)]
    assert next(t.run_id for t in map(_task, on(fired, "tasks"))) == second


def _task(output: Any) -> SchedulePromptTask:
    return SchedulePromptTask.model_validate_json(output.value)


@pytest.mark.parametrize(
    ("raw", "enabled"), [("", True), ("1", True), ("0", False), ("false", False), ("on", True)]
)
def test_the_global_switch_is_read_from_the_environment(
    tmp_path: Path, raw: str, enabled: bool
) -> None:
    settings = Settings.from_env({"LEMONGRAPH_SCHEDULES_ENABLED": raw}, tmp_path / ".env")
    assert settings.schedules_enabled is enabled


def test_a_switch_that_is_not_one_or_zero_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="LEMONGRAPH_SCHEDULES_ENABLED='maybe' must be 1 or 0"):
        Settings.from_env({"LEMONGRAPH_SCHEDULES_ENABLED": "maybe"}, tmp_path / ".env")
