"""The schedules API (docs/api.md, "Schedules") through the real gateway and the
real embedded broker: create, list, show, pause, resume, delete, wake and runs;
what each write puts on `schedules`, the inbox and `audit`; 422 with the field and
position, 409, 401 and 403; the read model's bounds; and, with a real worker, a
wake that starts a job and comes back as a run."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from stream.gateway.readmodels.schedules import ScheduleModel
from stream.runtime.partitions import home_partition
from tests.stream.gateway.conftest import GatewayProcess, Lane, wait_for
from topics import HeartbeatAlert, ScheduleRunRecord, Topics, encode

pytestmark = [pytest.mark.broker, pytest.mark.timeout(180)]

REVIEW = {
    "id": "lead-review",
    "name": "Lead review",
    "schedule": "weekdays at 09:30",
    "timezone": "America/New_York",
    "action": {"type": "start_job", "playbook_key": "lead-qualification"},
}


def ok(response: httpx.Response, status: int = 200) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    return body


def error_of(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    assert body["error"]["code"] == code, body
    assert "Traceback" not in response.text
    detail: dict[str, Any] = body["error"]
    return detail


def values(lane: Lane, topic: str, key: str) -> list[Any]:
    return [r["value"] for r in lane.read(topic) if r["key"] == key]


def test_a_schedule_is_created_listed_shown_paused_resumed_and_deleted(
    lane: Lane, start_gateway: Callable[..., GatewayProcess]
) -> None:
    gateway = start_gateway()
    token = gateway.token(name="ops-ada")
    with gateway.client(token) as client:
        created = ok(client.post("/v1/schedules", json=REVIEW), 201)
        assert created["id"] == "lead-review"
        assert created["enabled"] is True
        assert created["cron"] == "30 9 * * 1-5"
        assert created["schedule"] == "weekdays at 09:30"
        # Normalised: the defaults are filled in.
        spec = created["spec"]
        assert spec["overlap"] == "skip"
        assert spec["max_retries"] == 0
        assert spec["timeout"] == "5m"
        # Its next five slots, in its time zone and in UTC.
        assert len(created["next"]) == 5
        first = created["next"][0]
        assert first["timezone"] == "America/New_York"
        assert first["local"][11:16] == "09:30"
        assert first["abbreviation"] in ("EST", "EDT")
        utc = datetime.fromisoformat(first["utc"].replace("Z", "+00:00"))
        assert utc > datetime.now(UTC)
        assert utc.hour in (13, 14)
        assert utc.minute == 30
        assert [s["utc"] for s in created["next"]] == sorted(s["utc"] for s in created["next"])

        # The same id again is refused; a slug id comes from the name.
        again = client.post("/v1/schedules", json=REVIEW)
        assert "PATCH" in error_of(again, 409, "schedule_exists")["message"]
        second = {**REVIEW, "name": "Queue Check!", "schedule": "every 30m"}
        del second["id"]
        queue = ok(client.post("/v1/schedules", json=second), 201)
        assert queue["id"] == "queue-check"
        # The catch-up window in effect, which the stored spec leaves out when defaulted.
        assert "catchup_window" not in queue["spec"]
        assert queue["catchup_window_effective"] == "one period (30m, the default)"
        assert created["catchup_window_effective"].startswith("one period, the default")

        listed = ok(client.get("/v1/schedules"))
        assert listed["total"] == 2
        assert httpx.get(f"{gateway.api}/healthz").json()["schedules"] == 2
        assert listed["next"] is None
        assert [s["id"] for s in listed["schedules"]] == ["lead-review", "queue-check"]
        assert len(listed["schedules"][0]["next"]) == 3
        page = ok(client.get("/v1/schedules", params={"limit": 1}))
        assert [s["id"] for s in page["schedules"]] == ["lead-review"]
        rest = ok(client.get("/v1/schedules", params={"limit": 1, "cursor": page["next"]}))
        assert [s["id"] for s in rest["schedules"]] == ["queue-check"]
        assert rest["next"] is None

        shown = ok(client.get("/v1/schedules/lead-review"))
        assert shown["spec"] == spec
        assert shown["by"] == "ops-ada"
        assert shown["last_run"] is None
        assert shown["active_runs"] == []

        # Pause: nothing is next; resume: slots again.
        paused = ok(client.patch("/v1/schedules/lead-review", json={"enabled": False}))
        assert paused["enabled"] is False
        assert paused["next"] == []
        assert ok(client.get("/v1/schedules", params={"enabled": False}))["total"] == 1
        resumed = ok(client.patch("/v1/schedules/lead-review", json={"enabled": True}))
        assert resumed["enabled"] is True
        assert len(resumed["next"]) == 5
        # An update of another field, and a no-op (which writes nothing).
        renamed = ok(client.patch("/v1/schedules/lead-review", json={"name": "Leads"}))
        assert renamed["name"] == "Leads"
        ok(client.patch("/v1/schedules/lead-review", json={"name": "Leads"}))
        # A field set to null goes back to its default.
        changed = ok(client.patch("/v1/schedules/lead-review", json={"overlap": "buffer_one"}))
        assert changed["spec"]["overlap"] == "buffer_one"
        windowed = client.patch("/v1/schedules/queue-check", json={"catchup_window": "2h"})
        assert ok(windowed)["catchup_window_effective"] == "2h"
        # The seed's form of a command job replaces the action (docs/schedules.md,
        # "Command jobs"); it is stored as the action.
        command = {"tool": "run_tests", "args": {"suite": "smoke"}}
        scripted = ok(client.patch("/v1/schedules/queue-check", json={"command": command}))
        assert scripted["spec"]["action"] == {"type": "command", **command}
        assert "command" not in scripted["spec"]
        bad = client.patch("/v1/schedules/queue-check", json={"command": {"tool": "t", "args": []}})
        assert error_of(bad, 422, "invalid_schedule")["field"] == "command.args"
        reset = ok(client.patch("/v1/schedules/lead-review", json={"overlap": None}))
        assert reset["spec"]["overlap"] == "skip"
        # The id cannot change.
        moved = client.patch("/v1/schedules/lead-review", json={"id": "other"})
        assert error_of(moved, 422, "invalid_schedule")["field"] == "id"
        assert set(moved.json()["error"]) == {"code", "message", "field", "position"}

        gone = ok(client.delete("/v1/schedules/lead-review"))
        assert gone["deleted"] is True
        assert gone["id"] == "lead-review"
        error_of(client.get("/v1/schedules/lead-review"), 404, "schedule_not_found")
        error_of(client.delete("/v1/schedules/lead-review"), 404, "schedule_not_found")
        error_of(
            client.patch("/v1/schedules/nope", json={"enabled": False}), 404, "schedule_not_found"
        )
        assert ok(client.get("/v1/schedules"))["total"] == 1

    # What went on the topics: the definitions, then the tombstone.
    definitions = values(lane, "schedules", "lead-review")
    enabled = [d and d["spec"].get("enabled") for d in definitions]
    assert enabled == [True, False, True, True, True, True, None]
    assert definitions[0]["type"] == "schedule"
    assert definitions[0]["by"] == "ops-ada"
    assert definitions[-1] is None  # the tombstone
    audit = values(lane, "audit", "lead-review")
    actions = [a["action"] for a in audit]
    assert actions == ["create", "pause", "resume", "update", "update", "update", "delete"]
    assert {a["by"] for a in audit} == {"ops-ada"}
    assert {a["target"] for a in audit} == {"schedule:lead-review"}
    assert audit[3]["detail"] == {"changed": ["name"]}
    assert audit[1]["detail"] == {"enabled": False}  # pause
    assert audit[2]["detail"] == {"enabled": True}  # resume

    # A gateway started later reads the same from the topics.
    later = start_gateway()
    with later.client(later.token()) as client:
        listed = wait_for(
            lambda: (r := ok(client.get("/v1/schedules")))["total"] == 1 and r, what="schedules"
        )
        assert [s["id"] for s in listed["schedules"]] == ["queue-check"]
        error_of(client.get("/v1/schedules/lead-review"), 404, "schedule_not_found")


@pytest.mark.parametrize(
    ("change", "field", "position", "words"),
    [
        ({"schedule": "61 * * * *"}, "schedule", 1, "minute field (position 1): 61"),
        ({"schedule": "30 9 * * 8"}, "schedule", 10, "day of week field (position 10)"),
        ({"schedule": "every 7m"}, "schedule", None, "divide"),
        # A field missing: the end of the text, where it would start.
        ({"schedule": "* * * *"}, "schedule", 8, '"* * * *": position 8: expected 5 fields'),
        ({"timezone": "Mars/Olympus_Mons"}, "timezone", None, "Mars/Olympus_Mons"),
        ({"overlap": "sometimes"}, "overlap", None, "sometimes"),
        ({"jitter": "soon"}, "jitter", None, "soon"),
        ({"actoin": {}}, "actoin", None, "did you mean"),
        ({"action": {"type": "start_job"}}, "action.playbook_key", None, "playbook_key"),
    ],
)
def test_an_invalid_definition_answers_422_naming_the_field_and_position(
    module_lane: Lane,
    shared_gateway: GatewayProcess,
    change: dict[str, Any],
    field: str,
    position: int | None,
    words: str,
) -> None:
    gateway = shared_gateway  # each case with a schedule id of its own
    mine = {**REVIEW, "id": f"review-{uuid.uuid4().hex[:8]}"}
    with gateway.client(gateway.token()) as client:
        body = {**mine, **change}
        error = error_of(client.post("/v1/schedules", json=body), 422, "invalid_schedule")
        assert error["field"] == field, error
        if position is not None:
            assert error["position"] == position, error
        assert words in error["message"], error
        # A PATCH with the same mistake is refused too, and nothing changes.
        ok(client.post("/v1/schedules", json=mine), 201)
        patched = client.patch(f"/v1/schedules/{mine['id']}", json=change)
        assert error_of(patched, 422, "invalid_schedule")["field"] == field
        assert (
            ok(client.get(f"/v1/schedules/{mine['id']}"))["spec"]["schedule"] == REVIEW["schedule"]
        )
        # Not an object at all: the framework's 422 (or 400 for no JSON).
        error_of(client.post("/v1/schedules", json=[1, 2]), 422, "invalid_body")
        broken = client.post(
            "/v1/schedules", content=b"{", headers={"Content-Type": "application/json"}
        )
        error_of(broken, 400, "malformed_json")
    assert len(values(module_lane, "schedules", mine["id"])) == 1  # only the valid create


def test_tokens_are_checked_and_only_world_tokens_write(shared_gateway: GatewayProcess) -> None:
    gateway = shared_gateway
    review = {**REVIEW, "id": "tokens-review"}  # its own, on the shared gateway
    with gateway.client() as anonymous:
        error_of(anonymous.get("/v1/schedules"), 401, "token_missing")
        error_of(anonymous.post("/v1/schedules", json=review), 401, "token_missing")
    with gateway.client("lemongraph_sk_bad.sig") as forged:
        error_of(forged.post("/v1/schedules", json=review), 401, "token_invalid")
    with gateway.client(gateway.token(name="ops")) as world:
        ok(world.post("/v1/schedules", json=review), 201)
    for source in ("agent", "tool"):
        with gateway.client(gateway.token(source=source, name=source)) as client:
            refused = client.post("/v1/schedules", json={**review, "id": f"by-{source}"})
            assert source in error_of(refused, 403, "source_not_allowed")["message"]
            error_of(
                client.patch("/v1/schedules/tokens-review", json={"enabled": False}),
                403,
                "source_not_allowed",
            )
            error_of(client.delete("/v1/schedules/tokens-review"), 403, "source_not_allowed")
            error_of(client.post("/v1/schedules/tokens-review/wake"), 403, "source_not_allowed")
            # Reading is any token's.
            assert ok(client.get("/v1/schedules/tokens-review"))["enabled"] is True
            assert ok(client.get("/v1/schedules/tokens-review/runs"))["runs"] == []


def test_the_schedules_routes_share_the_rate_limit(
    start_gateway: Callable[..., GatewayProcess],
) -> None:
    gateway = start_gateway(LEMONGRAPH_RATE_LIMIT="0.5", LEMONGRAPH_RATE_BURST="2")
    with gateway.client(gateway.token()) as client:
        statuses = [client.get("/v1/schedules").status_code for _ in range(4)]
    assert statuses[:2] == [200, 200], statuses
    assert 429 in statuses[2:], statuses


def test_a_wake_goes_to_the_inbox_once_per_request_id(
    module_lane: Lane, shared_gateway: GatewayProcess
) -> None:
    lane, gateway = module_lane, shared_gateway  # its own schedule id, wake-review
    with gateway.client(gateway.token(name="ops")) as client:
        ok(client.post("/v1/schedules", json={**REVIEW, "id": "wake-review"}), 201)
        woken = ok(
            client.post(
                "/v1/schedules/wake-review/wake",
                json={"context": {"reason": "a big lead came in"}, "skip_if_running": True},
                headers={"Idempotency-Key": "wake-1"},
            ),
            202,
        )
        assert woken["request_id"] == "wake-1"
        assert woken["duplicate"] is False
        assert woken["run_id"].startswith("wk-")
        again = ok(
            client.post("/v1/schedules/wake-review/wake", json={"request_id": "wake-1"}), 202
        )
        assert again["duplicate"] is True
        assert again["run_id"] == woken["run_id"]
        # No body at all: a request id is made up.
        bare = ok(client.post("/v1/schedules/wake-review/wake"), 202)
        assert bare["request_id"] != "wake-1"
        assert bare["run_id"] != woken["run_id"]
        error_of(client.post("/v1/schedules/nope/wake"), 404, "schedule_not_found")
        differ = client.post(
            "/v1/schedules/wake-review/wake",
            json={"request_id": "a"},
            headers={"Idempotency-Key": "b"},
        )
        error_of(differ, 422, "invalid_body")
        error_of(
            client.post("/v1/schedules/wake-review/wake", json={"context": []}), 422, "invalid_body"
        )
        # From inside a prompt run: its origin header goes on the record
        # (docs/schedules.md, "Wake loops"); a malformed one is refused.
        origin = {"Lemongraph-Schedule-Origin": "queue-check/wk-1a, lead-review/sl-2b"}
        ok(client.post("/v1/schedules/wake-review/wake", headers=origin), 202)
        for bad in ("queue check/wk-1", "queue-check", ",".join(["a/wk-1"] * 9)):
            refused = client.post(
                "/v1/schedules/wake-review/wake", headers={"Lemongraph-Schedule-Origin": bad}
            )
            detail = error_of(refused, 422, "invalid_header")
            assert "Lemongraph-Schedule-Origin" in detail["message"]
    wakes = [v for v in values(lane, "inbox", "wake-review") if v["type"] == "schedule.wake"]
    assert len(wakes) == 3
    assert wakes[0]["schedule_id"] == "wake-review"
    assert wakes[0]["request_id"] == "wake-1"
    assert wakes[0]["context"] == {"reason": "a big lead came in"}
    assert wakes[0]["skip_if_running"] is True
    assert wakes[0]["origin"] == []  # a person's wake comes from no run
    assert wakes[2]["origin"] == ["queue-check/wk-1a", "lead-review/sl-2b"]
    audit = [a for a in values(lane, "audit", "wake-review") if a["action"] == "wake"]
    assert len(audit) == 3
    assert audit[0]["detail"]["run_id"] == woken["run_id"]
    assert audit[2]["detail"]["origin"] == wakes[2]["origin"]


def test_a_start_job_naming_no_registered_playbook_is_accepted_with_a_warning(
    module_lane: Lane, shared_gateway: GatewayProcess
) -> None:
    lane, gateway = module_lane, shared_gateway  # its own schedule ids, warn-*
    # The lane's playbooks (lead-qualification, onboarding, payment-reminders) are registered.
    with gateway.client(gateway.token()) as client:
        wait_for(
            lambda: (
                "onboarding" in {p["key"] for p in ok(client.get("/v1/playbooks"))["playbooks"]}
            ),
            what="the playbooks",
        )
        typo = {
            **REVIEW,
            "id": "warn-review",
            "action": {"type": "start_job", "playbook_key": "onbaording"},
        }
        # (the REVIEW action's lead-qualification is registered: no warning)
        created = ok(client.post("/v1/schedules", json=typo), 201)
        assert created["warnings"] == [
            "action.playbook_key: no playbook 'onbaording' is registered (did you mean "
            "'onboarding'?): until one is, each run's job.start is refused (the run reads "
            "refused, with the core's reason)"
        ]
        assert ok(client.get("/v1/schedules/warn-review"))["warnings"] == []
        fixed = ok(
            client.patch(
                "/v1/schedules/warn-review",
                json={"action": {"type": "start_job", "playbook_key": "onboarding"}},
            )
        )
        assert fixed["warnings"] == []
        other = {
            **REVIEW,
            "id": "warn-prompt",
            "action": {"type": "prompt", "agent": "x", "prompt": "y"},
        }
        assert ok(client.post("/v1/schedules", json=other), 201)["warnings"] == []
    # Written as asked: a warning refuses nothing.
    assert values(lane, "schedules", "warn-review")[0]["spec"]["action"]["playbook_key"] == (
        "onbaording"
    )


def run_record(sid: str, rid: str, status: str, at: str, **more: Any) -> tuple[bytes, bytes]:
    record = ScheduleRunRecord(
        schedule_id=sid,
        run_id=rid,
        status=status,  # type: ignore[arg-type]
        triggered_by=more.pop("triggered_by", "schedule"),
        root_run_id=rid,
        at=at,
        **more,
    )
    return sid.encode(), encode(record)


def test_runs_are_read_from_schedule_runs_newest_first_and_paged(
    module_lane: Lane, shared_gateway: GatewayProcess
) -> None:
    lane, gateway = module_lane, shared_gateway  # its own schedule id, heartbeat
    prompt = {
        "id": "heartbeat",
        "name": "Heartbeat",
        "schedule": "every 30m",
        "action": {"type": "prompt", "agent": "conversation", "prompt": "Anything to do?"},
        "meta": {"heartbeat": True},
    }
    with gateway.client(gateway.token()) as client:
        ok(client.post("/v1/schedules", json=prompt), 201)
        # What the worker writes (records of its shapes, on the real topic).
        lane.produce(
            [
                run_record("heartbeat", "sl-1", "missed", "2026-12-01T08:00:00Z",
                           slot="2026-12-01T06:00:00Z", slot_last="2026-12-01T07:00:00Z",
                           missed_count=3),
                run_record("heartbeat", "sl-2", "running", "2026-12-01T08:30:00Z",
                           slot="2026-12-01T08:30:00Z", started_at="2026-12-01T08:30:00Z"),
                run_record("heartbeat", "sl-3", "skipped", "2026-12-01T09:00:00Z",
                           slot="2026-12-01T09:00:00Z", error="overlap: run sl-2 still running"),
                run_record("heartbeat", "sl-2", "suppressed", "2026-12-01T09:01:00Z",
                           ended_at="2026-12-01T09:01:00Z", output="HEARTBEAT_OK",
                           suppressed=True),
            ],
            topic="schedule-runs",
        )  # fmt: skip

        def three() -> dict[str, Any] | None:
            body = ok(client.get("/v1/schedules/heartbeat/runs"))
            done = body["kept"] == 3 and body["runs"][1]["status"] == "suppressed"
            return body if done else None

        runs = wait_for(three, what="the runs")
        assert [r["run_id"] for r in runs["runs"]] == ["sl-3", "sl-2", "sl-1"]
        folded = runs["runs"][1]
        # The run's two records folded into one: its start kept, its end added.
        assert folded["started_at"] == "2026-12-01T08:30:00Z"
        assert folded["ended_at"] == "2026-12-01T09:01:00Z"
        assert folded["suppressed"] is True
        assert runs["runs"][2]["missed_count"] == 3
        assert runs["runs"][0]["error"].startswith("overlap")

        page = ok(client.get("/v1/schedules/heartbeat/runs", params={"limit": 2}))
        assert [r["run_id"] for r in page["runs"]] == ["sl-3", "sl-2"]
        rest = ok(
            client.get("/v1/schedules/heartbeat/runs", params={"limit": 2, "cursor": page["next"]})
        )
        assert [r["run_id"] for r in rest["runs"]] == ["sl-1"]
        assert rest["next"] is None
        only = ok(client.get("/v1/schedules/heartbeat/runs", params={"status": "missed"}))
        assert [r["run_id"] for r in only["runs"]] == ["sl-1"]

        shown = ok(client.get("/v1/schedules/heartbeat"))
        assert shown["last_run"]["run_id"] == "sl-3"
        assert shown["active_runs"] == []
        assert shown["runs_kept"] == 3
        # Its health (docs/schedules.md, "Health"): the last run that ran (sl-3 was
        # skipped), the next slot, and what the runs add up to.
        health = shown["health"]
        assert health["last_run"] == {
            "run_id": "sl-2", "status": "suppressed", "triggered_by": "schedule",
            "at": "2026-12-01T09:01:00Z",
        }  # fmt: skip
        assert health["next_run"] == shown["next"][0]["utc"]
        counts = {k: v for k, v in health.items() if isinstance(v, int)}
        assert counts == {
            "retries": 0, "suppressed": 1, "missed": 3, "skipped": 1, "failed": 0,
            "failed_in_a_row": 0, "stale_recoveries": 0, "alerts": 0,
        }  # fmt: skip
        # A run that never reported, ended by the worker's sweep, its retry that
        # failed (written twice: counted once), and the heartbeat's alert.
        alert = HeartbeatAlert(
            schedule_id="heartbeat",
            run_id="sl-5",
            severity="critical",
            status="timeout",
            triggered_by="schedule",
            name="Heartbeat",
            error="timeout: no report within 5m",
            at="2026-12-01T09:35:00Z",
        )
        failed = run_record(
            "heartbeat",
            "rt-1",
            "failed",
            "2026-12-01T09:40:00Z",
            triggered_by="retry",
            attempt=1,
            error="model_error",
        )
        lane.produce(
            [
                run_record("heartbeat", "sl-5", "running", "2026-12-01T09:30:00Z"),
                run_record("heartbeat", "sl-5", "timeout", "2026-12-01T09:35:00Z",
                           error="timeout: no report within 5m"),
                (b"heartbeat", encode(alert)),
                failed,
                failed,
            ],
            topic="schedule-runs",
        )  # fmt: skip

        def failing() -> dict[str, Any] | None:
            listed = ok(client.get("/v1/schedules"))["schedules"]
            row = next(s for s in listed if s["id"] == "heartbeat")["health"]
            return row if row["last_run"]["run_id"] == "rt-1" and row["alerts"] else None

        row = wait_for(failing, what="the health")
        assert row["failed"] == row["failed_in_a_row"] == 2
        assert (row["stale_recoveries"], row["retries"], row["alerts"]) == (1, 1, 1)
        assert row["last_alert"] == {
            "run_id": "sl-5",
            "severity": "critical",
            "at": "2026-12-01T09:35:00Z",
        }
        error_of(client.get("/v1/schedules/nope/runs"), 404, "schedule_not_found")
        error_of(
            client.get("/v1/schedules/heartbeat/runs", params={"limit": 0}), 422, "invalid_query"
        )
        # A status that is no run status is refused, naming the ones there are.
        bogus = client.get("/v1/schedules/heartbeat/runs", params={"status": "bogus"})
        message = error_of(bogus, 422, "invalid_query")["message"]
        assert message.startswith("status: 'bogus' is not a run status (pending, running, ")
        assert "aborted" in message


def test_a_jobs_schedule_delivers_to_its_conversation_an_operators_nowhere(
    shared_gateway: GatewayProcess,
) -> None:
    # docs/schedules.md, "Delivery": the default target is the owner's.
    asked = {"type": "prompt", "agent": "conversation", "prompt": "Anything?"}
    prompt = {"name": "Owned", "schedule": "hourly", "action": asked}
    with shared_gateway.client(shared_gateway.token()) as client:
        owned = ok(
            client.post("/v1/schedules", json={**prompt, "id": "owned", "job_key": "job-7"}), 201
        )
        assert (owned["spec"]["job_key"], owned["spec"]["deliver_to"]) == ("job-7", "web:job-7")
        mine = ok(client.post("/v1/schedules", json={**prompt, "id": "operators"}), 201)
        assert mine["spec"]["deliver_to"] == "none"
        assert "job_key" not in mine["spec"]
        # A change of owner moves a default target; an explicit one stays.
        moved = ok(client.patch("/v1/schedules/owned", json={"job_key": "job-8"}))
        assert moved["spec"]["deliver_to"] == "web:job-8"
        mailed = ok(
            client.patch("/v1/schedules/owned", json={"deliver_to": "email:ops@example.com"})
        )
        kept = ok(client.patch("/v1/schedules/owned", json={"job_key": "job-9"}))
        assert mailed["spec"]["deliver_to"] == kept["spec"]["deliver_to"] == "email:ops@example.com"
        back = ok(client.patch("/v1/schedules/owned", json={"deliver_to": None}))
        assert back["spec"]["deliver_to"] == "web:job-9"
        bad = client.post("/v1/schedules", json={**prompt, "id": "bad", "job_key": " padded"})
        assert error_of(bad, 422, "invalid_schedule")["field"] == "job_key"
        for sid in ("owned", "operators"):
            ok(client.delete(f"/v1/schedules/{sid}"))


def test_the_read_model_keeps_its_bounds() -> None:
    topics = Topics("bounds.")
    one = len(orjson.dumps({**orjson.loads(run_record("s0", "r0", "completed", "a")[1]), "seq": 1}))
    # Room for six runs: two schedules' four each do not fit.
    model = ScheduleModel(topics, schedules_kept=3, runs_kept=4, runs_bytes=6 * one + 5)
    for n in range(5):
        spec = {"id": f"s{n}", "name": f"s{n}", "schedule": "hourly"}
        record = encode({"type": "schedule", "spec": spec, "updated_at": "x", "by": "t"})
        model.apply(topics.schedules, f"s{n}".encode(), record, n)
    assert model.listed == ["s0", "s1", "s2"]
    assert model.untracked == 2
    assert model.full()
    # An older record read late changes nothing; a newer tombstone deletes.
    model.apply(topics.schedules, b"s1", None, 10)
    model.apply(topics.schedules, b"s1", encode({"type": "schedule", "spec": {"id": "s1"},
                                                  "updated_at": "x", "by": "t"}), 9)  # fmt: skip
    assert model.listed == ["s0", "s2"]
    paused = {"id": "s2", "name": "s2", "schedule": "hourly", "enabled": False}
    record = encode({"type": "schedule", "spec": paused, "updated_at": "x", "by": "t"})
    model.apply(topics.schedules, b"s2", record, 11)
    assert model.listed_by == {True: ["s0"], False: ["s2"]}
    for n in range(10):
        model.apply(topics.schedule_runs, b"s0", run_record("s0", f"r{n}", "completed", "a")[1], n)
    assert [r["run_id"] for r in model.newest_runs("s0", 10)[0]] == ["r9", "r8", "r7", "r6"]
    # Past the bytes of all runs, the stalest schedule's oldest runs go first.
    for n in range(30):
        model.apply(topics.schedule_runs, b"s2", run_record("s2", f"q{n}", "completed", "a")[1], n)
    assert model.runs_held <= 6 * one + 5
    assert len(model.runs.get("s0", ())) < 4
    assert len(model.runs["s2"]) == 4
    assert model.dropped_runs > 0
    # A record that does not decode is counted and skipped.
    model.apply(topics.schedule_runs, b"s2", b"{not json", 99)
    assert model.skipped == 1


def test_a_definition_off_its_home_partition_is_not_a_schedule_here_either() -> None:
    # The worker dead-letters it (docs/kafka.md, "schedules"); the read model
    # must not serve it, nor let its offset hide the real one.
    topics = Topics("misplaced.")
    model = ScheduleModel(topics)
    model.partitions = 4
    spec = {"id": "s1", "name": "s1", "schedule": "hourly"}
    record = encode({"type": "schedule", "spec": spec, "updated_at": "x", "by": "t"})
    home = home_partition(b"s1", 4)
    model.apply(topics.schedules, b"s1", record, 50, (home + 1) % 4)
    assert model.get("s1") is None
    assert model.skipped == 1
    model.apply(topics.schedules, b"s1", record, 3, home)
    assert model.listed == ["s1"]


def test_runs_of_ids_never_defined_do_not_grow_the_read_model() -> None:
    # Each id's runs are dropped for the bytes bound; what is left of such ids
    # (their maps' entries and run counters) must go with them.
    topics = Topics("ghosts.")
    one = len(orjson.dumps({**orjson.loads(run_record("g0", "r", "completed", "a")[1]), "seq": 1}))
    model = ScheduleModel(topics, runs_kept=1, runs_bytes=5 * one)
    spec = {"id": "kept", "name": "kept", "schedule": "hourly"}
    record = encode({"type": "schedule", "spec": spec, "updated_at": "x", "by": "t"})
    model.apply(topics.schedules, b"kept", record, 0)
    for n in range(3):
        model.apply(topics.schedule_runs, *run_record("kept", f"k{n}", "completed", "a"), n)
    assert [r["run_id"] for r in model.newest_runs("kept", 5)[0]] == ["k2"]
    for n in range(1000):
        model.apply(topics.schedule_runs, *run_record(f"g{n}", "r", "completed", "a"), n)
    assert model.runs_held <= 5 * one
    assert len(model.runs) <= 5
    assert len(model._sizes) <= 5
    assert len(model._seq) <= 6  # the held ids', and the defined schedule's counter
    assert model._seq["kept"] == 3
    assert set(model.health) <= {"kept", *model.runs}  # the ghosts' health went with them
    assert model.health_of("kept").last_run == {
        "run_id": "k2",
        "status": "completed",
        "triggered_by": "schedule",
        "at": "a",
    }


def test_a_wake_with_a_worker_starts_a_job_and_comes_back_as_a_run(
    lane: Lane, gateway: GatewayProcess
) -> None:
    lane.start_worker()
    with gateway.client(gateway.token(name="ops")) as client:
        body = {
            "id": "onboard-daily",
            "name": "Onboard daily",
            "schedule": "daily at 04:00",
            "action": {"type": "start_job", "playbook_key": "onboarding"},
        }
        ok(client.post("/v1/schedules", json=body), 201)
        woken = ok(client.post("/v1/schedules/onboard-daily/wake", json={"request_id": "w1"}), 202)

        def completed() -> dict[str, Any] | None:
            runs = ok(client.get("/v1/schedules/onboard-daily/runs"))["runs"]
            return next((r for r in runs if r["status"] == "completed"), None)

        run = wait_for(completed, timeout=60, what="the wake run")
        assert run["run_id"] == woken["run_id"]
        assert run["triggered_by"] == "wake"
        job = run.get("job_key")
        assert job, run
        wait_for(lambda: client.get(f"/v1/jobs/{job}").status_code == 200, what="the job")

        # Paused, a wake is recorded skipped, and says why.
        ok(client.patch("/v1/schedules/onboard-daily", json={"enabled": False}))
        paused = ok(client.post("/v1/schedules/onboard-daily/wake", json={"request_id": "w2"}), 202)

        def skipped() -> dict[str, Any] | None:
            runs = ok(client.get("/v1/schedules/onboard-daily/runs"))["runs"]
            return next((r for r in runs if r["run_id"] == paused["run_id"]), None)

        refused = wait_for(skipped, timeout=60, what="the paused wake's run")
        assert refused["status"] == "skipped"
        assert refused["error"] == "paused"

        # A job.start the core refuses (a misspelled playbook): the run reads
        # refused with the core's reason, here, in the CLI, and as a filter.
        typo = {**body, "id": "typo", "action": {"type": "start_job", "playbook_key": "onbaording"}}
        ok(client.post("/v1/schedules", json=typo), 201)
        woken = ok(client.post("/v1/schedules/typo/wake", json={"request_id": "t1"}), 202)

        def judged() -> dict[str, Any] | None:
            runs = ok(client.get("/v1/schedules/typo/runs"))["runs"]
            return next((r for r in runs if r["status"] != "completed"), None)

        run = wait_for(judged, timeout=60, what="the refused run")
        assert run["run_id"] == woken["run_id"]
        assert run["status"] == "refused"
        assert "onbaording" in run["error"], run
        assert client.get(f"/v1/jobs/{run['job_key']}").status_code == 404
        assert ok(client.get("/v1/schedules/typo"))["last_run"]["status"] == "refused"
        page = ok(client.get("/v1/schedules/typo/runs", params={"status": "refused"}))
        assert [r["run_id"] for r in page["runs"]] == [run["run_id"]]
        # The applied start of the first schedule is not refused.
        runs = ok(client.get("/v1/schedules/onboard-daily/runs"))["runs"]
        assert {r["status"] for r in runs} == {"completed", "skipped"}
    [line] = lane.cli("schedule", "runs", "typo").stdout.splitlines()
    assert line.split()[1:3] == ["refused", "wake"], line
    assert f"job {run['job_key']}  error: {run['error']}" in line


def test_the_cli_and_the_api_see_each_others_writes(
    module_lane: Lane, shared_gateway: GatewayProcess, tmp_path: Path
) -> None:
    lane, gateway = module_lane, shared_gateway  # its own schedule ids, from-cli and review-cli
    path = tmp_path / "one.yaml"
    path.write_text(
        "id: from-cli\nname: From the CLI\nschedule: hourly\n"
        "action: {type: start_job, playbook_key: onboarding}\n"
    )
    lane.cli("schedule", "add", str(path))
    with gateway.client(gateway.token(name="ops")) as client:
        shown = wait_for(
            lambda: (r := client.get("/v1/schedules/from-cli")).status_code == 200 and r.json(),
            what="the CLI's schedule at the gateway",
        )
        assert shown["by"] == "cli"
        assert shown["cron"] == "0 * * * *"
        ok(client.post("/v1/schedules", json={**REVIEW, "id": "review-cli"}), 201)
        ok(client.patch("/v1/schedules/from-cli", json={"enabled": False}))
    listed = lane.cli("schedule", "list").stdout.splitlines()
    ours = [
        line.split()[:2] for line in listed if line.split()[:1] in (["from-cli"], ["review-cli"])
    ]
    assert ours == [
        ["from-cli", "paused"],
        ["review-cli", "enabled"],
    ]
    assert "updated " in lane.cli("schedule", "show", "review-cli").stdout
    lane.cli("schedule", "remove", "review-cli")
    with gateway.client(gateway.token()) as client:
        wait_for(
            lambda: client.get("/v1/schedules/review-cli").status_code == 404,
            what="the CLI's delete at the gateway",
        )
