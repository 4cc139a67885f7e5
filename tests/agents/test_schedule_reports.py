"""A prompt schedule's run is given its schedule's previous reports
(docs/schedules.md, "Previous reports"): the newest few, each cut, after the
prompt; kept in the agents' store and on its changelog, so another process
that takes the schedule's partition gives them too. On the real broker; the
stand-in model over HTTP records each request."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agents.dev.standin import StandinScript, build_standin
from agents.model import ModelSettings
from agents.schedule_runs import REPORT_CHARS, reports_key
from agents.service import Where
from tests.agents.test_memory_service import Recording
from tests.agents.test_schedule_prompt import services, task

pytestmark = [pytest.mark.broker, pytest.mark.timeout(120)]

LONG = "x" * (REPORT_CHARS + 200)
SCRIPT = StandinScript.model_validate(
    {
        "rules": [
            {"when": {"last_message_contains": "Check A"}, "say": "first report"},
            {"when": {"last_message_contains": "Check B"}, "say": "second report"},
            {"when": {"last_message_contains": "Check C"}, "say": LONG},
            {"say": "later report"},
        ]
    }
)


def test_a_prompt_run_is_given_its_schedules_previous_reports(
    kafka_url: str, tmp_path: Path, serve: Callable[[Any], str]
) -> None:
    standin = Recording(build_standin(SCRIPT))
    model = ModelSettings(api_key="sk-test", base_url=f"{serve(standin)}/v1")

    async def go() -> None:
        async with services(kafka_url, tmp_path, model) as (topics, make):
            one = make("one")
            await one.assign([1])
            one.prompts.previous = 2
            for n, word in enumerate("ABCD"):
                raw = task("s-daily", f"sl-{n}", "greeter", prompt=f"Check {word}.")
                await one.on_record(raw, Where(topics.tasks, 1, n, 0, b"s-daily", []))
                await asyncio.gather(*one.prompts.running.values())
            # another process assigned the partition reads them back and gives them too
            two = make("two")
            await two.assign([1])
            two.prompts.previous = 2
            assert two.db.get(reports_key("s-daily")) == one.db.get(reports_key("s-daily"))
            raw = task("s-daily", "sl-4", "greeter", prompt="Check E.")
            await two.on_record(raw, Where(topics.tasks, 1, 4, 0, b"s-daily", []))
            await asyncio.gather(*two.prompts.running.values())

    asyncio.run(go())
    turns = [str(b["input"][-1]["content"]) for b in standin.bodies]
    assert len(turns) == 5
    assert turns[0] == "Check A."  # nothing reported yet
    assert turns[1].startswith(
        "Check B.\n\nYour previous reports for this schedule (oldest first):"
    )
    assert "completed): first report" in turns[1]
    third = turns[2].splitlines()
    assert [line.split("): ")[1] for line in third[3:]] == ["first report", "second report"]
    fourth = turns[3]
    assert "first report" not in fourth  # the newest two only
    assert "second report" in fourth
    cut = fourth.splitlines()[-1].split("): ")[1]
    assert len(cut) == REPORT_CHARS
    assert cut.endswith("…")
    assert "later report" in turns[4]
    assert "x" * 20 in turns[4]
