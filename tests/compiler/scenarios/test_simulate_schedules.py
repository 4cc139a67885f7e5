"""Schedules on the virtual clock (docs/schedules.md, "Proving schedules on a
virtual clock"): scenario files declaring schedules and a span, run through the
pure state machine. The expected slots are written out by hand from the time
zone rules (and, for the DST days, from the page's tables)."""

from __future__ import annotations

import pytest
import yaml

from compiler import (
    ScenarioError,
    ScheduleScenarioResult,
    parse_scenarios,
    run_schedule_scenario,
    validate_schedule,
)


def simulate(text: str) -> list[ScheduleScenarioResult]:
    parsed = parse_scenarios(text, "t.scenario.yaml")
    parsed.check_schedule_fields("t.scenario.yaml")
    assert isinstance(parsed.schedules, list)
    schedules = [validate_schedule(item) for item in parsed.schedules]
    return [run_schedule_scenario(schedules, s, "t.scenario.yaml") for s in parsed.scenarios]


def one(schedule: dict[str, object], **scenario: object) -> ScheduleScenarioResult:
    spec = {"name": "s", **scenario}
    text = yaml.safe_dump({"schedules": [schedule], "scenarios": [spec]})
    (result,) = simulate(text)
    return result


def nightly(expr: str, tz: str) -> dict[str, object]:
    return {
        "id": "n",
        "name": "N",
        "schedule": expr,
        "timezone": tz,
        "action": {"type": "start_job", "playbook_key": "p"},
    }


def prompt(**extra: object) -> dict[str, object]:
    return {
        "id": "hb",
        "name": "Heartbeat",
        "schedule": "every 30m",
        "action": {"type": "prompt", "agent": "watcher", "prompt": "Check."},
        **extra,
    }


# -- daylight saving ------------------------------------------------------------------


def test_new_york_spring_forward_fires_once_just_after_the_jump() -> None:
    result = one(nightly("30 2 * * *", "America/New_York"), base="2026-03-07T00:00:00Z", until="3d")
    assert result.runs == (
        "2026-03-07T07:30:00Z n completed",
        "2026-03-08T07:00:00Z n completed",  # 03:00 EDT: 02:30 does not exist
        "2026-03-09T06:30:00Z n completed",
    )
    assert result.passed


def test_new_york_fall_back_fires_once_at_the_first_occurrence() -> None:
    result = one(nightly("30 1 * * *", "America/New_York"), base="2026-10-31T00:00:00Z", until="3d")
    assert result.runs == (
        "2026-10-31T05:30:00Z n completed",
        "2026-11-01T05:30:00Z n completed",  # 01:30 EDT; not again at 01:30 EST (06:30Z)
        "2026-11-02T06:30:00Z n completed",
    )


def test_an_hourly_schedule_fires_every_elapsed_hour_through_fall_back() -> None:
    result = one(nightly("0 * * * *", "America/New_York"), base="2026-11-01T04:30:00Z", until="3h")
    assert result.runs == (
        "2026-11-01T05:00:00Z n completed",  # 01:00 EDT
        "2026-11-01T06:00:00Z n completed",  # 01:00 EST
        "2026-11-01T07:00:00Z n completed",  # 02:00 EST
    )


def test_lord_howe_half_hour_shifts() -> None:
    spring = one(
        nightly("15 2 * * *", "Australia/Lord_Howe"), base="2026-10-02T12:00:00Z", until="3d"
    )
    assert spring.runs == (
        "2026-10-02T15:45:00Z n completed",  # 02:15 +10:30
        "2026-10-03T15:30:00Z n completed",  # 02:30 +11, just after the jump
        "2026-10-04T15:15:00Z n completed",  # 02:15 +11
    )
    autumn = one(
        nightly("*/30 * * * *", "Australia/Lord_Howe"), base="2026-04-04T14:00:00Z", until="2h"
    )
    # Every 30 elapsed minutes while 01:30-02:00 happens twice.
    assert [line.split()[0] for line in autumn.runs] == [
        "2026-04-04T14:30:00Z",
        "2026-04-04T15:00:00Z",
        "2026-04-04T15:30:00Z",
        "2026-04-04T16:00:00Z",
    ]


def test_a_utc_schedule_is_unaffected() -> None:
    result = one(nightly("30 2 * * *", "UTC"), base="2026-03-07T00:00:00Z", until="3d")
    assert [line.split()[0] for line in result.runs] == [
        "2026-03-07T02:30:00Z",
        "2026-03-08T02:30:00Z",
        "2026-03-09T02:30:00Z",
    ]


# -- downtime and catch-up ----------------------------------------------------------


def test_downtime_across_three_slots_fires_the_newest_and_records_the_rest_missed() -> None:
    result = one(
        nightly("0 * * * *", "UTC"),
        base="2026-03-09T09:30:00Z",
        until="5h",
        down=[{"from": "1h", "to": "3h45m"}],
    )
    # Back at 13:15; the window is one period (1h): 11:00 and 12:00 are older.
    assert result.runs == (
        "2026-03-09T10:00:00Z n completed",
        "2026-03-09T11:00:00Z n missed",
        "2026-03-09T12:00:00Z n missed",
        "2026-03-09T13:00:00Z n completed",
        "2026-03-09T14:00:00Z n completed",
    )
    late = [r for r in result.records if r["slot"] == "2026-03-09T13:00:00Z"]
    assert late[0]["at"] == "2026-03-09T13:15:00Z"  # it fired when the worker was back


def test_a_wide_window_coalesces_and_allow_all_fires_each() -> None:
    window = {**nightly("0 * * * *", "UTC"), "catchup_window": "1d"}
    args = {"base": "2026-03-09T09:30:00Z", "until": "4h", "down": [{"from": "1h", "to": "3h45m"}]}
    coalesced = one(window, **args)
    assert coalesced.counts == {"completed": 2, "skipped": 2}
    skipped = [r for r in coalesced.records if r["status"] == "skipped"]
    assert {r["error"] for r in skipped} == {"coalesced"}
    every = one({**window, "overlap": "allow_all"}, **args)
    assert every.counts == {"completed": 4}


def test_a_long_downtime_is_never_a_flood() -> None:
    result = one(
        nightly("* * * * *", "UTC"),
        base="2026-03-09T09:00:00Z",
        until="3h",
        down=[{"from": "1m", "to": "3h"}],
    )
    missed = [r for r in result.records if r["status"] == "missed"]
    assert len(missed) == 101  # 100 one by one, then one for the rest
    # Back at 12:00: by default (one period) only the newest slot due fires, so
    # 09:01 .. 11:59 are missed: 100 records, then one for the other 79.
    assert missed[-1]["missed_count"] == 79
    assert (missed[-1]["slot"], missed[-1]["slot_last"]) == (
        "2026-03-09T10:41:00Z",
        "2026-03-09T11:59:00Z",
    )
    assert result.counts["missed"] == 179
    assert result.runs[-1] == "2026-03-09T12:00:00Z n completed"


# -- prompt runs: overlap, timeouts, retries, heartbeats, wake ---------------------------


@pytest.mark.parametrize(
    ("overlap", "second"),
    [
        ("skip", "2026-03-09T10:00:00Z hb skipped"),
        ("buffer_one", "2026-03-09T10:00:00Z hb completed"),
        ("allow_all", "2026-03-09T10:00:00Z hb completed"),
    ],
)
def test_overlap(overlap: str, second: str) -> None:
    result = one(
        prompt(overlap=overlap, timeout="2h"),
        base="2026-03-09T09:00:00Z",
        until="1h15m",
        replies={"hb": [{"output": "slow", "after": "40m"}, "fast"]},
    )
    assert result.runs == ("2026-03-09T09:30:00Z hb completed", second)
    starts = {r["slot"]: r["at"] for r in result.records if r["status"] == "running"}
    if overlap == "buffer_one":
        assert starts["2026-03-09T10:00:00Z"] == "2026-03-09T10:10:00Z"  # when the first ended
    if overlap == "allow_all":
        assert starts["2026-03-09T10:00:00Z"] == "2026-03-09T10:00:00Z"  # alongside


def test_a_silent_run_times_out_and_is_retried_after_the_backoff() -> None:
    result = one(
        prompt(timeout="5m", max_retries=1, retry_backoff="1m"),
        base="2026-03-09T09:00:00Z",
        until="45m",
        replies={"hb": [{"never": True}, "HEARTBEAT_OK"]},
    )
    assert result.runs == (
        "2026-03-09T09:30:00Z hb timeout",
        "2026-03-09T09:30:00Z hb completed (retry)",
    )
    retry = next(r for r in result.records if r["triggered_by"] == "retry")
    assert retry["attempt"] == 1
    assert retry["at"] == "2026-03-09T09:36:00Z"  # timed out at 09:35, then 1m


@pytest.mark.parametrize(
    ("reply", "status", "delivered"),
    [
        ("HEARTBEAT_OK", "suppressed", False),
        (" HEARTBEAT_OK\n", "suppressed", False),
        ("Status: OK", "completed", True),
        ("HEARTBEAT_OK extra", "completed", True),
        ({"status": "failed", "error": "model down"}, "failed", True),
    ],
)
def test_heartbeats(reply: object, status: str, delivered: bool) -> None:
    result = one(
        prompt(meta={"heartbeat": True}, deliver_to="web:ops-desk"),
        base="2026-03-09T09:00:00Z",
        until="30m",
        replies={"hb": [reply]},
    )
    assert result.runs == (f"2026-03-09T09:30:00Z hb {status}",)
    assert [d.target for d in result.deliveries] == (["web:ops-desk"] if delivered else [])


def test_wake_with_skip_if_running_while_a_run_is_active() -> None:
    result = one(
        prompt(timeout="1h"),
        base="2026-03-09T09:00:00Z",
        until="59m",
        replies={"hb": [{"output": "done", "after": "20m"}, "woken"]},
        wakes=[
            {"at": "35m", "schedule": "hb", "skip_if_running": True},
            {"at": "55m", "schedule": "hb", "skip_if_running": True, "context": {"t": "T-1"}},
        ],
    )
    assert result.runs == (
        "2026-03-09T09:30:00Z hb completed",
        "2026-03-09T09:35:00Z hb skipped (wake)",
        "2026-03-09T09:55:00Z hb completed (wake)",
    )
    woken = [r for r in result.records if r["triggered_by"] == "wake"]
    assert "is running" in woken[0]["error"]
    assert woken[-1]["context"] == {"t": "T-1"}


def test_a_scenario_runs_a_paused_schedule_now_and_aborts_the_run() -> None:
    paused = prompt(enabled=False)
    result = one(
        paused,
        base="2026-03-09T09:00:00Z",
        until="1h",
        replies={"hb": [{"never": True}, {"output": "done", "after": "2m"}]},
        wakes=[
            {"at": "10m", "schedule": "hb", "control": "run"},
            {"at": "12m", "schedule": "hb", "control": "abort"},
            {"at": "20m", "schedule": "hb", "control": "run", "request_id": "again"},
        ],
    )
    assert result.failures == ()
    assert result.runs == (
        "2026-03-09T09:10:00Z hb aborted (manual)",
        "2026-03-09T09:20:00Z hb completed (manual)",
    )
    # An abort with nothing running, or of a run the scenario names, says which.
    late = one(
        paused,
        base="2026-03-09T09:00:00Z",
        until="1h",
        wakes=[{"at": "30m", "schedule": "hb", "control": "abort"}],
    )
    assert late.failures == (
        "wake #1: abort of 'hb' at 2026-03-09T09:30:00Z: nothing is running "
        "(name the run with run:)",
    )
    with pytest.raises(ScenarioError, match="set control: abort"):
        one(paused, base="2026-03-09T09:00:00Z", until="1h",
            wakes=[{"at": "1m", "schedule": "hb", "run": "mn-1"}])  # fmt: skip


# -- expectations and refusals ------------------------------------------------------------


def test_expectations_are_compared() -> None:
    schedule = nightly("30 2 * * *", "America/New_York")
    wrong = one(
        schedule,
        base="2026-03-07T00:00:00Z",
        until="3d",
        expect={
            "runs": [
                "2026-03-07T07:30:00Z n completed",
                "2026-03-08T07:30:00Z n completed",  # the wall time that does not exist
            ],
            "count": {"completed": 3, "missed": 1},
        },
    )
    assert not wrong.passed
    assert wrong.failures == (
        "runs: expected 2, got 3",
        "runs: #2: expected '2026-03-08T07:30:00Z n completed', "
        "got '2026-03-08T07:00:00Z n completed'",
        "runs: also '2026-03-09T06:30:00Z n completed' (got #3)",
        "count: expected 1 missed, got 0",
    )


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            "scenarios: [{name: s, base: 2026-01-05T09:00:00Z}]\n",
            "a scenario file names a playbook or schedules",
        ),
        (
            "playbook: p.yaml\nschedules: []\nscenarios: [{name: s, base: 2026-01-05T09:00:00Z}]\n",
            "not both",
        ),
    ],
)
def test_a_file_names_a_playbook_or_schedules(text: str, words: str) -> None:
    with pytest.raises(ScenarioError, match=words):
        parse_scenarios(text, "t.scenario.yaml")


def test_fields_that_mean_nothing_for_the_kind_are_refused_with_their_line() -> None:
    text = (
        "schedules: []\n"
        "scenarios:\n"
        "  - name: s\n"
        "    base: 2026-01-05T09:00:00Z\n"
        "    events: [{at: 1h, action: x}]\n"
        "    expect: {status: done}\n"
    )
    parsed = parse_scenarios(text, "t.scenario.yaml")
    with pytest.raises(ScenarioError) as caught:
        parsed.check_schedule_fields("t.scenario.yaml")
    lines = str(caught.value).splitlines()
    assert "t.scenario.yaml:3:11: scenarios.0: a schedule scenario needs until (its span)" in lines
    assert "t.scenario.yaml:5:13: scenarios.0.events: a schedule scenario has no job" in lines
    assert any(line.startswith("t.scenario.yaml:6:") and "expect.status" in line for line in lines)
    job = parse_scenarios(
        "playbook: p.yaml\nscenarios:\n  - name: s\n    base: 2026-01-05T09:00:00Z\n"
        "    down: [{from: 1h, to: 2h}]\n",
        "t.scenario.yaml",
    )
    with pytest.raises(ScenarioError, match=r":5:11: scenarios\.0\.down: only a scenario over"):
        job.check_schedule_fields("t.scenario.yaml")


def test_a_down_span_must_end_after_it_starts() -> None:
    text = (
        "schedules: []\nscenarios:\n  - name: s\n    base: 2026-01-05T09:00:00Z\n"
        "    until: 1d\n    down: [{from: 2h, to: 1h}]\n"
    )
    with pytest.raises(ScenarioError, match=r"down\.0: to \(1h\) must be after from \(2h\)"):
        parse_scenarios(text, "t.scenario.yaml")


def test_a_repeated_reply_answers_every_run_and_runs_of_compares_one_schedule() -> None:
    text = yaml.safe_dump(
        {
            "schedules": [prompt(meta={"heartbeat": True}), nightly("0 9 * * *", "Europe/Paris")],
            "scenarios": [
                {
                    "name": "s",
                    "base": "2026-03-28T00:00:00Z",
                    "until": "2d",
                    "replies": {"hb": [{"output": "HEARTBEAT_OK", "repeat": True}]},
                    "expect": {
                        "runs_of": {
                            # Paris moves to CEST on 2026-03-29: 09:00 is 08:00Z, then 07:00Z.
                            "n": [
                                "2026-03-28T08:00:00Z n completed",
                                "2026-03-29T07:00:00Z n completed",
                            ]
                        },
                        "count": {"completed": 2, "suppressed": 96},
                    },
                }
            ],
        }
    )
    (result,) = simulate(text)
    assert result.passed, result.failures
    wrong = simulate(text.replace("2026-03-29T07:00:00Z n", "2026-03-29T08:00:00Z n"))[0]
    assert wrong.failures == (
        "runs_of.n: #2: expected '2026-03-29T08:00:00Z n completed', "
        "got '2026-03-29T07:00:00Z n completed'",
    )


def test_pause_and_resume_catch_nothing_up() -> None:
    result = one(
        {**nightly("*/30 * * * *", "UTC")},
        base="2026-03-09T09:00:00Z",
        until="3h",
        changes=[
            {"at": "40m", "schedule": "n", "set": {"enabled": False}},
            {"at": "2h10m", "schedule": "n", "set": {"enabled": True}},
        ],
    )
    # Paused from 09:40 to 11:10: 10:00, 10:30 and 11:00 are neither fired nor recorded.
    assert [line.split()[0] for line in result.runs] == [
        "2026-03-09T09:30:00Z",
        "2026-03-09T11:30:00Z",
        "2026-03-09T12:00:00Z",
    ]


def test_removing_a_schedule_aborts_its_active_run_and_stops_it() -> None:
    result = one(
        prompt(timeout="1h"),
        base="2026-03-09T09:00:00Z",
        until="2h",
        replies={"hb": [{"output": "late", "after": "50m"}]},
        changes=[{"at": "45m", "schedule": "hb", "remove": True}],
        wakes=[{"at": "1h", "schedule": "hb"}],  # nothing to wake any more
    )
    assert result.runs == ("2026-03-09T09:30:00Z hb aborted",)
    bad = one(
        prompt(),
        base="2026-03-09T09:00:00Z",
        until="1h",
        changes=[{"at": "10m", "schedule": "hb", "set": {"schedule": "61 * * * *"}}],
    )
    assert bad.failures[0].startswith('change #1: schedule: "61 * * * *": minute field')


def test_a_wake_is_listed_at_its_instant_not_when_it_ended() -> None:
    # Woken at 09:10, its reply takes 40 minutes: it ends at 09:50, after the
    # 09:30 slot fired; it is listed (and ordered) at 09:10, before that slot.
    result = one(
        prompt(timeout="2h", overlap="allow_all"),
        base="2026-03-09T09:00:00Z",
        until="55m",
        replies={"hb": [{"output": "slow", "after": "40m"}, "fast"]},
        wakes=[{"at": "10m", "schedule": "hb"}],
    )
    assert result.runs == (
        "2026-03-09T09:10:00Z hb completed (wake)",
        "2026-03-09T09:30:00Z hb completed",
    )
    [woken] = [r for r in result.records if r["triggered_by"] == "wake" and r["ended_at"]]
    assert woken["at"] == "2026-03-09T09:50:00Z"


def test_a_failed_expectation_lists_every_difference_up_to_ten() -> None:
    every = nightly("0 * * * *", "UTC")
    got = [f"2026-03-09T{h:02}:00:00Z n completed" for h in range(1, 24)]
    wanted = list(got)
    wanted[1] = wanted[1].replace("completed", "missed")  # #2 differs
    del wanted[4]  # the 05:00 run is not expected
    wanted.append("2026-03-10T00:30:00Z n completed")  # expected, never happens
    wrong = one(every, base="2026-03-09T00:30:00Z", until="23h", expect={"runs": wanted})
    assert wrong.failures == (  # as many runs as expected, but not the same ones
        "runs: #2: expected '2026-03-09T02:00:00Z n missed', "
        "got '2026-03-09T02:00:00Z n completed'",
        "runs: also '2026-03-09T05:00:00Z n completed' (got #5)",
        "runs: #23: missing '2026-03-10T00:30:00Z n completed'",
    )
    # Many differences: the first ten, then how many more.
    shifted = [line.replace(":00:00Z", ":00:01Z") for line in got]
    many = one(every, base="2026-03-09T00:30:00Z", until="23h", expect={"runs": shifted})
    assert len(many.failures) == 11
    assert many.failures[0] == f"runs: #1: expected {shifted[0]!r}, got {got[0]!r}"
    assert many.failures[9] == f"runs: #10: expected {shifted[9]!r}, got {got[9]!r}"
    assert many.failures[10] == "runs: and 13 more difference(s)"


@pytest.mark.parametrize(
    ("resume", "after"),
    [
        (None, ()),  # a retry due while paused is skipped, and the retries end there
        ("50m", ()),  # resumed after it was due: it does not come back
        ("35m", ("2026-03-09T09:30:00Z hb completed (retry)",)),  # resumed before: it runs
    ],
)
def test_a_retry_due_while_paused_is_skipped_and_ends_the_retries(
    resume: str | None, after: tuple[str, ...]
) -> None:
    # The 09:30 run fails at 09:32 after the pause at 09:31 (a run going is not
    # stopped); its retry is due at 09:37.
    changes: list[dict[str, object]] = [{"at": "31m", "schedule": "hb", "set": {"enabled": False}}]
    if resume is not None:
        changes.append({"at": resume, "schedule": "hb",
                        "set": {"enabled": True}})  # fmt: skip
    result = one(
        prompt(timeout="5m", max_retries=2, retry_backoff="5m"),
        base="2026-03-09T09:00:00Z",
        until="55m",
        replies={"hb": [{"status": "failed", "error": "down", "after": "2m"}, "fine"]},
        changes=changes,
    )
    retried = () if after else ("2026-03-09T09:30:00Z hb skipped (retry)",)
    assert result.runs == ("2026-03-09T09:30:00Z hb failed", *retried, *after)
    if not after:
        [skipped] = [r for r in result.records if r["triggered_by"] == "retry"]
        assert (skipped["at"], skipped["attempt"], skipped["error"]) == (
            "2026-03-09T09:37:00Z",
            1,
            "paused",
        )
