"""Schedules against a real broker and real `lemongraph worker` processes
(docs/schedules.md): exactly once across SIGKILL, downtime and catch-up,
overlap, wake, and the global switch.

Time is the test's: the workers run without a ticker (``--no-ticker``) and the
test produces the ticks itself, each at a chosen virtual instant, so that a
schedule firing every minute shows several slots in seconds. The instants are
in the past (an hour or two before the real clock), which a worker takes as
they are. Definitions are produced with the timestamp of their virtual instant
(a definition's ``now`` is its record's timestamp). Ticks and definitions are
on different topics, whose order a consumer does not keep: before the first
tick, the test waits for a garbage record it put on the definition's
``schedules`` partition to come back as a dead letter, which proves the
definition before it was decided.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import signal
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from stream.engine.worker import register_schedules
from stream.runtime.config import Settings
from stream.runtime.kafka import producer
from stream.runtime.partitions import home_partition
from tests.lanes import Lane, WorkerProcess

pytestmark = [pytest.mark.broker, pytest.mark.timeout(300)]

PARTITIONS = 4
#: An instant on a minute boundary, two hours before the real clock.
BASE = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=2)


def at(minutes: float) -> datetime:
    return BASE + timedelta(minutes=minutes)


def ms(instant: datetime) -> int:
    return int(instant.timestamp() * 1000)


def iso(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


def slot(schedule_id: str, nominal: datetime) -> str:
    """docs/schedules.md, "Exactly once: slot ids"."""
    return "sl-" + hashlib.sha256(f"{schedule_id}\n{iso(nominal)}".encode()).hexdigest()[:20]


def home(key: str) -> int:
    return home_partition(key.encode(), PARTITIONS)


def start_worker(lane: Lane, **env: str) -> WorkerProcess:
    return lane.start(["worker", "--no-ticker", "--loglevel", "warning"], ": ready (group", **env)


def produce(
    lane: Lane,
    topic: str,
    records: list[tuple[bytes | None, bytes | None, int | None, datetime]],
) -> None:
    """(key, value, partition or None, timestamp) records, in order, acknowledged."""
    name = lane.topics.name(topic)

    async def go() -> None:
        async with producer(lane.bootstrap) as client:
            for key, value, partition, stamp in records:
                await client.send_and_wait(
                    name, value, key=key, partition=partition, timestamp_ms=ms(stamp)
                )

    asyncio.run(go())


def define(lane: Lane, *specs: dict[str, Any], when: datetime = BASE) -> None:
    """Produce the definitions, then wait until the worker has decided them."""
    records = []
    for spec in specs:
        body = {
            "type": "schedule",
            "schema": 1,
            "spec": spec,
            "updated_at": iso(when),
            "by": "test",
        }
        key = spec["id"].encode()
        records.append((key, orjson.dumps(body), home(spec["id"]), when))
    produce(lane, "schedules", records)
    for partition in sorted({home(spec["id"]) for spec in specs}):
        probe(lane, "schedules", partition)


_probes = Counter[str]()


def probe(lane: Lane, topic: str, partition: int) -> None:
    """A garbage record on ``topic`` partition ``partition``; returns once it is
    dead-lettered (so every record before it there was decided)."""
    _probes[lane.prefix] += 1
    marker = f"probe-{_probes[lane.prefix]}".encode()
    produce(lane, topic, [(marker, b'{"probe": true}', partition, BASE)])
    lane.wait_until(
        "deadletter", lambda rs: any(r["key"] == marker.decode() for r in rs), timeout=60
    )


def tick(lane: Lane, partitions: set[int], *instants: datetime) -> None:
    records = []
    for instant in instants:
        for partition in sorted(partitions):
            body = {"type": "tick", "schema": 1, "partition": partition, "at": iso(instant)}
            records.append((b"tick", orjson.dumps(body), partition, instant))
    produce(lane, "ticks", records)


def runs(lane: Lane, schedule_id: str | None = None) -> list[dict[str, Any]]:
    return [
        r["value"]
        for r in lane.read("schedule-runs", idle=0.3)
        if r["value"]["type"] == "schedule.run"
        and (schedule_id is None or r["value"]["schedule_id"] == schedule_id)
    ]


def wait_runs(
    lane: Lane, schedule_id: str, predicate: Any, timeout: float = 60
) -> list[dict[str, Any]]:
    records = lane.wait_until(
        "schedule-runs",
        lambda rs: predicate(
            [
                r["value"]
                for r in rs
                if r["value"]["type"] == "schedule.run" and r["value"]["schedule_id"] == schedule_id
            ]
        ),
        timeout=timeout,
    )
    return [
        r["value"]
        for r in records
        if r["value"]["type"] == "schedule.run" and r["value"]["schedule_id"] == schedule_id
    ]


def statuses(records: list[dict[str, Any]]) -> list[tuple[str | None, str]]:
    """(slot, status) of each distinct record (a byte-identical re-emission counts once)."""
    seen: list[bytes] = []
    out = []
    for record in records:
        body = orjson.dumps(record, option=orjson.OPT_SORT_KEYS)
        if body in seen:
            continue
        seen.append(body)
        out.append((record["slot"], record["status"]))
    return out


def every_minute(schedule_id: str, action: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "id": schedule_id,
        "name": schedule_id,
        "schedule": "every 1m",
        "action": action,
        **extra,
    }


START = {"type": "start_job", "playbook_key": "onboarding"}
PROMPT = {"type": "prompt", "agent": "assistant", "prompt": "Anything to do?"}


# -- exactly once -----------------------------------------------------------------------


def test_sigkill_while_slots_are_due_fires_every_slot_once(lane: Lane) -> None:
    slots = 24
    starter = every_minute("starter", START)
    nudger = every_minute(
        "nudger",
        {"type": "send_event", "job_key": "target", "event": {"action": "reminder_due"}},
    )
    # A command schedule (docs/schedules.md, "Command jobs"), in the seed's form:
    # no agents service reports, so each run stays running (allow_all: none skipped).
    runner = {
        "id": "runner",
        "name": "runner",
        "schedule": "every 1m",
        "command": {"tool": "run_tests", "args": {"suite": "smoke"}},
        "overlap": "allow_all",
        "timeout": "1h",
    }
    parts = {home("starter"), home("nudger"), home("runner")}
    began = time.monotonic()
    first = start_worker(lane)
    lane.send({"type": "job.start", "key": "target", "playbook_key": "onboarding"})
    define(lane, starter, nudger, runner)
    ready = time.monotonic()
    # The ticks go out one minute at a time, every 50 ms, from another thread;
    # the worker is killed while they come, and they go on while it is down.
    tick(lane, parts, at(1), at(2))
    wait_runs(lane, "starter", lambda rs: len(rs) >= 2)
    ticker = threading.Thread(
        target=lambda: [(tick(lane, parts, at(m)), time.sleep(0.05)) for m in range(3, slots + 1)]
    )
    ticker.start()
    time.sleep(0.6)
    first.stop(signal.SIGKILL)
    killed = time.monotonic()
    second = start_worker(lane)
    ticker.join()

    def settled(records: list[dict[str, Any]]) -> bool:
        ids = {(r["schedule_id"], r["run_id"]) for r in records if r["status"] == "completed"}
        running = {r["run_id"] for r in records if r["status"] == "running"}
        return len(ids) == 2 * slots and len(running) == slots

    lane.wait_until(
        "schedule-runs",
        lambda rs: settled([r["value"] for r in rs if r["value"]["type"] == "schedule.run"]),
        timeout=90,
    )
    want_starts = {slot("starter", at(m)) for m in range(1, slots + 1)}
    want_events = {slot("nudger", at(m)) for m in range(1, slots + 1)}

    def decided(records: list[dict[str, Any]]) -> bool:
        keys = {r["key"] for r in records if r["value"]["outcome"] == "applied"}
        events = {
            r["value"]["input"].get("idempotency_key")
            for r in records
            if r["key"] == "target" and r["value"]["outcome"] == "applied"
        }
        return want_starts <= keys and want_events <= events

    decisions = lane.wait_until("decisions", decided, timeout=90)
    assert second.stop() == 0

    # one job per start_job slot: one applied job.start per key, any repeat refused
    applied = Counter(
        r["key"]
        for r in decisions
        if r["value"]["outcome"] == "applied" and r["value"]["input"]["type"] == "job.start"
    )
    assert {k: n for k, n in applied.items() if k != "target"} == dict.fromkeys(want_starts, 1)
    refused = [r["value"]["refused"] for r in decisions if r["value"]["outcome"] == "refused"]
    assert all("already exists" in (reason or "") for reason in refused), refused
    # one applied event per send_event slot (a re-sent one is a duplicate: no decision)
    events = Counter(
        r["value"]["input"]["idempotency_key"]
        for r in decisions
        if r["key"] == "target"
        and r["value"]["outcome"] == "applied"
        and r["value"]["input"]["type"] == "event"
    )
    assert events == dict.fromkeys(want_events, 1)
    # the run records: one run per slot, a repeat only byte for byte the same
    bodies: dict[tuple[str, str, str], bytes] = {}
    for record in runs(lane):
        ident = (record["schedule_id"], record["run_id"], record["status"])
        body = orjson.dumps(record, option=orjson.OPT_SORT_KEYS)
        assert bodies.setdefault(ident, body) == body, f"{ident} recorded twice, differently"
    assert {i[1] for i in bodies if i[0] == "starter"} == want_starts
    assert {i[1] for i in bodies if i[0] == "nudger"} == want_events
    # one command run per slot: one run id each, its task on tasks; a task sent
    # again (a batch decided again after the SIGKILL) is byte for byte the same,
    # and the agents service runs a run id once
    want_commands = {slot("runner", at(m)) for m in range(1, slots + 1)}
    assert {i[1] for i in bodies if i[0] == "runner"} == want_commands
    commands: dict[str, bytes] = {}
    for record in lane.read("tasks"):
        task = record["value"]
        if task["type"] != "schedule.command":
            continue  # the started jobs' tasks
        assert (record["key"], task["tool"], task["args"]) == (
            "runner",
            "run_tests",
            {"suite": "smoke"},
        )
        body = orjson.dumps(task, option=orjson.OPT_SORT_KEYS)
        assert commands.setdefault(task["run_id"], body) == body, "a slot dispatched twice"
    assert set(commands) == want_commands
    # every dispatched inbox record names its schedule and run
    dispatched = [r for r in lane.read("inbox") if r["key"] in want_starts]
    assert {r["key"] for r in dispatched} == want_starts
    stopped = "".join(second.lines)
    skipped = re.search(r"(\d+) re-deliveries skipped", stopped)
    print(
        f"\n{slots} slots x 3 schedules: worker ready after {ready - began:.1f}s, "
        f"SIGKILL at {killed - began:.1f}s, all fired once {time.monotonic() - killed:.1f}s "
        f"after; {len(dispatched)} job.start records for {len(want_starts)} jobs, "
        f"{skipped.group(1) if skipped else '?'} re-deliveries skipped by the second worker"
    )


# -- downtime ---------------------------------------------------------------------------


def test_downtime_across_three_slots_is_caught_up_by_the_window(lane: Lane) -> None:
    spec = every_minute("catcher", START, catchup_window="2m")
    p = home("catcher")
    first = start_worker(lane)
    define(lane, spec)
    tick(lane, {p}, at(1))
    wait_runs(lane, "catcher", lambda rs: len(rs) >= 1)
    assert first.stop() == 0
    # down across the slots of minutes 2, 3 and 4; back at minute 5
    second = start_worker(lane)
    tick(lane, {p}, at(5))
    records = wait_runs(lane, "catcher", lambda rs: len(statuses(rs)) >= 5)
    assert second.stop() == 0
    assert statuses(records) == [
        (iso(at(1)), "completed"),
        (iso(at(2)), "missed"),
        (iso(at(3)), "skipped"),
        (iso(at(4)), "skipped"),
        (iso(at(5)), "completed"),
    ]
    by_slot = {r["slot"]: r for r in records}
    assert by_slot[iso(at(2))]["error"] == "missed: older than the catch-up window"
    assert by_slot[iso(at(3))]["error"] == "coalesced"
    assert by_slot[iso(at(5))]["job_key"] == slot("catcher", at(5))


# -- overlap and wake ---------------------------------------------------------------------


def test_overlap_policies_with_prompt_runs_that_stay_active(lane: Lane) -> None:
    ids = {"skip": "ov-skip", "buffer_one": "ov-buffer", "allow_all": "ov-all"}
    specs = [every_minute(i, PROMPT, overlap=o, timeout="1h") for o, i in ids.items()]
    parts = {home(i) for i in ids.values()}
    start_worker(lane)
    define(lane, *specs)
    tick(lane, parts, at(1), at(2), at(3))
    got = {
        i: wait_runs(lane, i, lambda rs, n=n: len(statuses(rs)) >= n)
        for i, n in (("ov-skip", 3), ("ov-buffer", 2), ("ov-all", 3))
    }
    assert statuses(got["ov-skip"]) == [
        (iso(at(1)), "running"),
        (iso(at(2)), "skipped"),
        (iso(at(3)), "skipped"),
    ]
    assert got["ov-skip"][1]["error"] == f"overlap: run {slot('ov-skip', at(1))} still running"
    # buffer_one: minute 2 waited, then minute 3 took its place
    assert statuses(got["ov-buffer"]) == [(iso(at(1)), "running"), (iso(at(2)), "skipped")]
    assert statuses(got["ov-all"]) == [(iso(at(m)), "running") for m in (1, 2, 3)]
    # the first buffered run ends (as the agents service would report it): minute 3 runs
    report = {
        "type": "schedule.report",
        "schema": 1,
        "schedule_id": "ov-buffer",
        "run_id": slot("ov-buffer", at(1)),
        "status": "completed",
        "output": "done",
        "at": iso(at(3.5)),
    }
    produce(lane, "schedule-runs", [(b"ov-buffer", orjson.dumps(report), None, at(3.5))])
    buffered = wait_runs(lane, "ov-buffer", lambda rs: len(statuses(rs)) >= 4)
    assert statuses(buffered)[2:] == [(iso(at(1)), "completed"), (iso(at(3)), "running")]
    tasks = [r["value"] for r in lane.read("tasks") if r["value"]["type"] == "schedule.prompt"]
    per_schedule = Counter(t["schedule_id"] for t in tasks)
    assert per_schedule == {"ov-skip": 1, "ov-buffer": 2, "ov-all": 3}


def test_wake_with_skip_if_running_while_a_run_is_active(lane: Lane) -> None:
    spec = every_minute("waker", PROMPT, timeout="1h")
    p = home("waker")
    start_worker(lane)
    define(lane, spec)
    tick(lane, {p}, at(1))
    wait_runs(lane, "waker", lambda rs: len(rs) >= 1)
    wakes = [
        {
            "type": "schedule.wake",
            "schedule_id": "waker",
            "request_id": "w-1",
            "skip_if_running": True,
        },
        {
            "type": "schedule.wake",
            "schedule_id": "waker",
            "request_id": "w-2",
            "context": {"reason": "urgent"},
        },
        {"type": "schedule.wake", "schedule_id": "waker", "request_id": "w-2"},  # a retry
    ]
    produce(lane, "inbox", [(b"waker", orjson.dumps(w), None, at(1.5)) for w in wakes])
    probe(lane, "inbox", p)  # the three wakes are decided
    records = runs(lane, "waker")
    wake_id = "wk-" + hashlib.sha256(b"waker\nw-1").hexdigest()[:20]
    fired_id = "wk-" + hashlib.sha256(b"waker\nw-2").hexdigest()[:20]
    assert [(r["run_id"], r["status"], r["triggered_by"]) for r in records] == [
        (slot("waker", at(1)), "running", "schedule"),
        (wake_id, "skipped", "wake"),
        (fired_id, "running", "wake"),
    ]
    assert records[1]["error"] == f"skip_if_running: run {slot('waker', at(1))} is running"
    tasks = {
        r["value"]["run_id"]: r["value"]
        for r in lane.read("tasks")
        if r["value"]["type"] == "schedule.prompt"
    }
    assert set(tasks) == {slot("waker", at(1)), fired_id}
    assert tasks[fired_id]["context"] == {"reason": "urgent"}
    assert tasks[fired_id]["prompt"] == 'Anything to do?\n\nContext: {"reason":"urgent"}'


def test_a_wake_before_its_definition_is_held_across_a_restart_and_runs_once(
    lane: Lane,
) -> None:
    """docs/schedules.md, "Wake": a wake read before its schedule's definition
    waits for it in the table (its changelog: the second worker has a data
    directory of its own), a retry of it is held once, and one whose schedule
    is never defined is dead-lettered 5 minutes after it came."""
    p, q = home("late"), home("never")
    wake = {"type": "schedule.wake", "schedule_id": "late", "request_id": "w-1"}
    never = {"type": "schedule.wake", "schedule_id": "never", "request_id": "n-1"}
    first = start_worker(lane, LEMONGRAPH_DATA_DIR=str(lane.root / "data-a"))
    produce(
        lane,
        "inbox",
        [(b"late", orjson.dumps(wake), None, at(0)), (b"never", orjson.dumps(never), None, at(0))],
    )
    probe(lane, "inbox", p)
    probe(lane, "inbox", q)
    assert first.stop() == 0
    assert [r for r in lane.read("deadletter") if r["key"] in ("late", "never")] == []
    second = start_worker(lane, LEMONGRAPH_DATA_DIR=str(lane.root / "data-b"))
    produce(lane, "inbox", [(b"late", orjson.dumps(wake), None, at(0.5))])  # a retry
    probe(lane, "inbox", p)
    define(lane, every_minute("late", START), when=at(1))
    wake_id = "wk-" + hashlib.sha256(b"late\nw-1").hexdigest()[:20]
    lane.wait_until(
        "decisions",
        lambda rs: any(r["key"] == wake_id and r["value"]["outcome"] == "applied" for r in rs),
        timeout=60,
    )
    tick(lane, {q}, at(5) - timedelta(seconds=1), at(5))
    letters = lane.wait_until(
        "deadletter", lambda rs: any(r["key"] == "never" for r in rs), timeout=60
    )
    assert [
        (r["value"]["reason"], r["value"]["value_text"]) for r in letters if r["key"] == "never"
    ] == [("no schedule 'never' was defined within 5m of the wake", orjson.dumps(never).decode())]
    probe(lane, "inbox", p)  # everything before it decided
    assert second.stop() == 0
    woken = [r for r in runs(lane, "late") if r["triggered_by"] == "wake"]
    assert {r["run_id"] for r in woken} == {wake_id}
    assert len(statuses(woken)) == 1
    applied = [
        r
        for r in lane.read("decisions")
        if r["key"] == wake_id and r["value"]["outcome"] == "applied"
    ]
    assert len(applied) == 1
    assert [r for r in lane.read("deadletter") if r["key"] == "late"] == []


# -- the global switch --------------------------------------------------------------------


def test_schedules_switched_off_fire_nothing(lane: Lane) -> None:
    spec = every_minute("quiet", START)
    p = home("quiet")
    first = start_worker(lane, LEMONGRAPH_SCHEDULES_ENABLED="0")
    define(lane, spec)
    tick(lane, {p}, at(1), at(2))
    wake = {"type": "schedule.wake", "schedule_id": "quiet", "request_id": "w"}
    produce(lane, "inbox", [(b"quiet", orjson.dumps(wake), None, at(2.5))])
    probe(lane, "ticks", p)  # the ticks are decided
    probe(lane, "inbox", p)  # and the wake
    records = runs(lane, "quiet")
    assert [(r["status"], r["triggered_by"]) for r in records] == [("skipped", "wake")]
    assert "LEMONGRAPH_SCHEDULES_ENABLED=0" in records[0]["error"]
    assert [r for r in lane.read("inbox") if r["value"].get("type") == "job.start"] == []
    assert first.stop() == 0
    # switched on again: the slots that came due meanwhile go by the catch-up rule
    start_worker(lane)
    tick(lane, {p}, at(3))
    records = wait_runs(lane, "quiet", lambda rs: len(statuses(rs)) >= 4)
    assert statuses(records)[1:] == [
        (iso(at(1)), "missed"),
        (iso(at(2)), "missed"),
        (iso(at(3)), "completed"),
    ]


# -- schedules.yaml -------------------------------------------------------------------------

YAML = """\
schedules:
  - id: morning
    name: Morning review
    schedule: {schedule}
    action: {{type: start_job, playbook_key: onboarding}}
  - name: broken
    schedule: "61 * * * *"
    action: {{type: start_job, playbook_key: onboarding}}
"""


def register(lane: Lane) -> str:
    """What a worker starting in the lane says of its schedules.yaml, as it
    registers it first thing (``register_schedules``, here in process: the
    worker starts of the test below prove that a start runs it)."""
    said: list[str] = []
    settings = Settings.from_env(lane.env(), dotenv=lane.root / "no.env")
    asyncio.run(register_schedules(settings, said.append))
    return "\n".join(said)


def test_schedules_yaml_is_registered_when_absent_or_different(lane: Lane) -> None:
    path = lane.playbooks / "schedules.yaml"
    path.write_text(YAML.format(schedule="weekdays at 09:30"))
    first = start_worker(lane)
    said = "".join(first.lines)
    assert "schedules: 1 in " in said
    assert "1 published (morning)" in said
    assert 'schedules.yaml:6: schedules[1] (broken): schedule: "61 * * * *": minute field' in said
    assert first.stop() == 0
    assert "none changed" in register(lane)  # the same file: nothing to publish
    path.write_text(YAML.format(schedule="weekdays at 10:00"))
    second = start_worker(lane)
    definitions = lane.read("schedules")
    assert [(r["key"], r["partition"]) for r in definitions] == [("morning", home("morning"))] * 2
    assert [r["value"]["spec"]["schedule"] for r in definitions] == [
        "weekdays at 09:30",
        "weekdays at 10:00",
    ]
    assert {r["value"]["by"] for r in definitions} == {"schedules.yaml"}
    audit = lane.read("audit")
    assert [(r["key"], r["value"]["action"], r["value"]["target"]) for r in audit] == [
        ("morning", "create", "schedule:morning"),
        ("morning", "update", "schedule:morning"),
    ]
    assert {r["value"]["by"] for r in audit} == {"schedules.yaml"}
    # An operator pauses it: the file, edited since, does not undo the pause.
    define(lane, {**definitions[-1]["value"]["spec"], "enabled": False})
    assert second.stop() == 0
    path.write_text(YAML.format(schedule="weekdays at 10:30"))
    said = register(lane)
    assert "'morning' of " in said
    assert "was changed by 'test' at 2026-" in said
    assert "none changed" in said
    latest = [r["value"] for r in lane.read("schedules") if r["key"] == "morning"][-1]
    assert (latest["by"], latest["spec"]["enabled"]) == ("test", False)
    assert len(lane.read("audit")) == 2
    # The operator removes it: the file's definition is published again.
    produce(lane, "schedules", [(b"morning", None, home("morning"), BASE)])
    third = start_worker(lane)
    assert "1 published (morning)" in "".join(third.lines)
    latest = [r["value"] for r in lane.read("schedules") if r["key"] == "morning"][-1]
    assert latest is not None
    assert (latest["by"], latest["spec"]["schedule"]) == ("schedules.yaml", "weekdays at 10:30")
    assert [r["value"]["action"] for r in lane.read("audit")][-1] == "create"
    assert third.stop() == 0


# -- a second worker takes over -------------------------------------------------------------


def test_a_second_worker_takes_over_schedules_with_their_state(lane: Lane) -> None:
    """The new owner of a partition recovers its schedules from the table's
    changelog and rebuilds their index: the slots go on, each fired once."""
    ids: dict[int, str] = {}
    n = 0
    while len(ids) < PARTITIONS:
        ids.setdefault(home(f"every-{n}"), f"every-{n}")
        n += 1
    first = start_worker(lane, LEMONGRAPH_DATA_DIR=str(lane.root / "data-a"))
    define(lane, *(every_minute(i, START) for i in ids.values()))
    tick(lane, set(ids), at(1), at(2), at(3))
    for schedule_id in ids.values():
        wait_runs(lane, schedule_id, lambda rs: len(statuses(rs)) >= 3)
    # one more schedule, removed before the handover: its row's tombstone must
    # reach the new owner's table (the changelog's null value deletes it)
    gone = every_minute("gone", START)
    define(lane, gone)
    produce(lane, "schedules", [(b"gone", None, home("gone"), at(3.5))])
    probe(lane, "schedules", home("gone"))
    second = lane.join_worker("--no-ticker", LEMONGRAPH_DATA_DIR=str(lane.root / "data-b"))
    tick(lane, set(ids), at(4), at(5), at(6))
    for schedule_id in ids.values():
        records = wait_runs(lane, schedule_id, lambda rs: len(statuses(rs)) >= 6, timeout=90)
        assert statuses(records) == [(iso(at(m)), "completed") for m in range(1, 7)]
    want = {slot(i, at(m)) for i in ids.values() for m in range(1, 7)}
    lane.wait_until(
        "decisions",
        lambda rs: want <= {r["key"] for r in rs if r["value"]["outcome"] == "applied"},
        timeout=60,
    )
    applied = Counter(
        r["key"] for r in lane.read("decisions") if r["value"]["outcome"] == "applied"
    )
    assert {k: c for k, c in applied.items() if k in want} == dict.fromkeys(want, 1)
    assert runs(lane, "gone") == []
    for worker in (first, second):
        assert worker.stop() == 0
    decided = [
        int(line.split(" records,")[0].rsplit(" ", 1)[1])
        for worker in (first, second)
        for line in worker.lines
        if "worker: stopped" in line
    ]
    assert len(decided) == 2
    assert all(count > 0 for count in decided), decided


def test_a_one_shot_of_the_file_whose_instant_passed_is_not_registered(lane: Lane) -> None:
    (lane.playbooks / "schedules.yaml").write_text(
        "schedules:\n"
        "  - id: gone-by\n"
        "    name: Gone by\n"
        "    at: 2020-01-06T09:00:00Z\n"
        "    action: {type: start_job, playbook_key: onboarding}\n"
        "  - id: ahead\n"
        "    name: Ahead\n"
        "    at: 2099-01-05T09:00:00Z\n"
        "    action: {type: start_job, playbook_key: onboarding}\n"
    )
    said = register(lane)
    assert "one-shot 'gone-by' of " in said
    assert "its instant has passed, so it is not registered" in said
    assert "1 published (ahead)" in said
    assert [r["key"] for r in lane.read("schedules")] == ["ahead"]
    assert "none changed" in register(lane)  # again: the passed one is not published either
