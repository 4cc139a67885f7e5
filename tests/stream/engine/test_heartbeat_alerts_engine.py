"""A heartbeat's alert in the engine, without a broker (docs/schedules.md,
"Heartbeats"; docs/kafka.md, "schedule-runs"): the worker writes a
``heartbeat.alert`` on ``schedule-runs`` after the run's last record, keyed by
the schedule, delivers the alert once (the message id is the run's), and skips
the alert when it reads its own topic back."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import orjson

from tests.stream.engine.engine_harness import on
from tests.stream.engine.test_schedules_engine import T0, Lane, home, prompt_every_5m, slot
from topics import HeartbeatAlert, MessageRecord, ScheduleRunRecord


def written(batch: Any, kind: str) -> list[Any]:
    """The batch's ``schedule-runs`` records of type ``kind``."""
    model = HeartbeatAlert if kind == "heartbeat.alert" else ScheduleRunRecord
    return [
        model.model_validate_json(o.value)
        for o in on(batch, "schedule-runs")
        if orjson.loads(o.value)["type"] == kind
    ]


def test_a_heartbeat_that_is_not_ok_writes_its_alert_beside_its_run_and_delivers_once() -> None:
    lane = Lane()
    p = home("check")
    meta = {"heartbeat": True, "severity": "info"}
    lane.run(lane.define(prompt_every_5m(meta=meta, deliver_to="web:ops-desk")))
    fired = T0 + timedelta(minutes=5)
    lane.run(lane.tick(fired, p))
    sid = slot("check", fired)
    done = lane.run(lane.report("check", sid, fired + timedelta(seconds=3), output="2 waiting."))
    outputs = on(done, "schedule-runs")
    assert [(o.key, o.partition) for o in outputs] == [(b"check", p), (b"check", p)]
    run = ScheduleRunRecord.model_validate_json(outputs[0].value)
    alert = HeartbeatAlert.model_validate_json(outputs[1].value)
    assert (run.run_id, run.status) == (sid, "completed")
    assert (alert.run_id, alert.severity, alert.status, alert.output, alert.delivered_to) == (
        sid, "info", "completed", "2 waiting.", "web:ops-desk",
    )  # fmt: skip
    [message] = [MessageRecord.model_validate_json(o.value) for o in on(done, "messages")]
    assert message.message_id == f"sched-{sid}"
    # Read back from its own topic, the alert is neither decided nor dead-lettered.
    echo = lane.record("schedule-runs", b"check", outputs[1].value, fired + timedelta(seconds=3))
    again = lane.run(echo)
    assert again.outputs == []
    assert again.deadletters == 0

    # The next run times out: a critical alert, whatever meta.severity says.
    later = fired + timedelta(minutes=5)
    lane.run(lane.tick(later, p))
    swept = lane.run(lane.tick(later + timedelta(minutes=5), p))
    assert "timeout" in [r.status for r in written(swept, "schedule.run")]
    [critical] = written(swept, "heartbeat.alert")
    assert (critical.run_id, critical.severity, critical.status) == (
        slot("check", later), "critical", "timeout",
    )  # fmt: skip


def test_a_suppressed_heartbeat_writes_no_alert() -> None:
    lane = Lane()
    p = home("check")
    lane.run(lane.define(prompt_every_5m(meta={"heartbeat": True}, deliver_to="web:ops-desk")))
    fired = T0 + timedelta(minutes=5)
    lane.run(lane.tick(fired, p))
    sid = slot("check", fired)
    done = lane.run(lane.report("check", sid, fired, output=" HEARTBEAT_OK\n"))
    assert [r.status for r in written(done, "schedule.run")] == ["suppressed"]
    assert written(done, "heartbeat.alert") == []
    assert on(done, "messages") == []
