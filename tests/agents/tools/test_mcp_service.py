"""An MCP tool through the real ``lemongraph agents`` process (docs/agents.md,
"MCP servers"): a real engine worker and broker, the stand-in model scripted to
call a tool ``mcp-server-time`` has but the catalog does not grant (refused),
then the granted one; the MCP server's result, not the model's word, settles
the milestone, and its fact names the call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agents.dev.standin import StandinScript, build_standin
from tests.lanes import Lane

pytestmark = [pytest.mark.broker, pytest.mark.timeout(240)]

PLAYBOOK = """\
key: clock
version: 1
name: Check the time
milestones:
  - id: checkTime
    instructions: Find out what time it is in UTC.
    condition: time_checked:timezone == "UTC"
    integrations: [clock]
"""
CATALOG = """\
integrations:
  clock: {tools: [current_time]}
agents:
  conversation: {instructions: Help.}
mcp_servers:
  clock: {command: ["python", "-m", "mcp_server_time", "--local-timezone", "UTC"]}
tools:
  current_time:
    mcp: {server: clock, tool: get_current_time}
    idempotent: true
    writes: false
    records: {fact: time_checked, properties: {timezone: "$.timezone"}}
"""
SCRIPT = StandinScript.model_validate(
    {
        "rules": [
            {"when": {"tool_result": "current_time"}, "say": "It is checked."},
            {"when": {"tool_result": "convert_time"},
             "call": {"tool": "current_time", "args": {"timezone": "UTC"}}},
            {"when": {"next_step": "checkTime"},
             "call": {"tool": "convert_time", "args": {"source_timezone": "UTC"}}},
            {"say": "Hello."},
        ]
    }
)  # fmt: skip


def test_an_mcp_servers_result_settles_a_milestone(lane: Lane, serve: Callable[[Any], str]) -> None:
    for old in lane.playbooks.glob("*.yaml"):
        old.unlink()
    (lane.playbooks / "clock.yaml").write_text(PLAYBOOK)
    (lane.playbooks / "catalog.yaml").write_text(CATALOG)
    lane.start_worker()
    model = serve(build_standin(SCRIPT))
    lane.start(["agents"], "agents: ready", OPENAI_BASE_URL=f"{model}/v1", OPENAI_API_KEY="sk")
    lane.send({"type": "job.start", "key": "m-1", "playbook_key": "clock"})

    def done(records: list[dict[str, Any]]) -> bool:
        return any(r["value"]["status"] == "done" for r in records)

    decisions = lane.wait_until("decisions", done, timeout=150)
    inputs = [d["value"].get("input") or {} for d in decisions]
    [fact] = [i for i in inputs if i.get("source") == "tool"]
    assert (fact["action"], fact["properties"]) == ("time_checked", {"timezone": "UTC"})
    journal = lane.wait_until(
        "journal", lambda rs: any(r["value"]["type"] == "journal.run" for r in rs)
    )
    calls = [r["value"] for r in journal if r["value"]["type"] == "journal.tool_call"]
    refused, called = calls
    # The server has convert_time, the catalog does not grant it: refused, not run.
    assert (refused["tool"], refused["outcome"]) == ("convert_time", "refused")
    assert (called["tool"], called["outcome"], called["fact"]) == (
        "current_time",
        "done",
        "time_checked",
    )
    assert called["url"] == "mcp:clock/get_current_time"
    # The fact names the call: its idempotency key is the journaled call's key.
    assert fact["idempotency_key"] == called["key"]
