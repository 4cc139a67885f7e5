"""The demo tools `lemongraph dev` serves, over HTTP: they confirm what the
bundled catalog's tools ask (in answers that pass the tools' success rules),
decline what they cannot do (in 200s that do not), and answer a repeated
Idempotency-Key with the first answer (nothing happens twice)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import httpx2
import orjson

from agents.catalog import load_catalog_file
from agents.dev.demo_tools import TOOL_URLS, build_demo_tools
from agents.tools.executor import Executor, Outcome

ROOT = Path(__file__).resolve().parents[3]


def test_each_catalog_tool_is_confirmed_once_per_key(serve: Callable[[Any], str]) -> None:
    base = serve(build_demo_tools())
    calendar = base + TOOL_URLS["CALENDAR_URL"]
    first = httpx.post(
        f"{calendar}/book", json={"when": "10:00"}, headers={"Idempotency-Key": "k1"}
    )
    again = httpx.post(
        f"{calendar}/book", json={"when": "11:00"}, headers={"Idempotency-Key": "k1"}
    )
    other = httpx.post(
        f"{calendar}/book", json={"when": "12:00"}, headers={"Idempotency-Key": "k2"}
    )
    assert first.status_code == 200
    assert again.json() == first.json()  # the first answer, not a second booking
    assert first.json()["when"] == "10:00"
    assert other.json()["id"] != first.json()["id"]
    crm = base + TOOL_URLS["CRM_URL"]
    assert httpx.post(f"{crm}/activate", json={}).json()["active"] is True
    assert httpx.post(f"{crm}/deal", json={"stage": "qualified"}).json()["stage"] == "qualified"
    billing = base + TOOL_URLS["BILLING_URL"]
    assert httpx.post(f"{billing}/trials", json={"plan": "pro"}).json()["plan"] == "pro"


def test_the_bundled_tools_succeed_on_the_demo_answers_and_declines_record_nothing(
    serve: Callable[[Any], str],
) -> None:
    """Through the executor with the bundled catalog: every tool's demo answer
    passes its success rule; the two declines are 200s that fail it."""
    base = serve(build_demo_tools())
    env = {name: base + path for name, path in TOOL_URLS.items()}
    catalog = load_catalog_file(ROOT / "examples" / "catalog.yaml")
    calls = {
        "schedule_meeting": {"when": "Monday 10:00"},
        "schedule_demo": {"when": "Monday 11:00"},
        "activate_account": {},
        "update_deal": {"stage": "qualified"},
        "get_order": {"id": "A-1"},
        "refund_order": {"id": "A-1"},
        "start_trial": {"plan": "pro"},
    }
    # Every HTTP tool (the MCP one, check_setup: tests/agents/tools/test_mcp.py).
    assert set(calls) == {name for name, tool in catalog.tools.items() if tool.http is not None}
    declines = [
        ("schedule_meeting", {"when": "Sunday 10:00"}, "no free slot on a Sunday"),
        ("refund_order", {"id": "final-7"}, "a final sale is not refunded"),
    ]

    async def go() -> list[Outcome]:
        async with httpx2.AsyncClient() as client:
            executor = Executor(catalog, client, env)
            return [
                await executor.run(
                    job_key="job-1",
                    task_id=f"job-1/{name}",
                    name=name,
                    arguments=orjson.dumps(args).decode(),
                    granted=set(calls),
                    occurrence=1,
                )
                for name, args in [*calls.items(), *[(n, a) for n, a, _ in declines]]
            ]

    *done, meeting, refund = asyncio.run(go())
    for name, outcome in zip(calls, done, strict=True):
        assert outcome.status == "done", (name, outcome.output)
        assert outcome.fact is not None
    for outcome, (_, _, why) in zip((meeting, refund), declines, strict=True):
        assert (outcome.status, outcome.fact, outcome.http_status) == ("failed", None, 200)
        assert why in outcome.output
