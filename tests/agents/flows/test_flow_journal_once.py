"""``journal.flow`` records across a crash (issue 28 point 11; docs/flows.md,
"Flows in the agents service", "Crash safety").

The driver checkpoints the conversation (``save``) and writes its journal
records (``publish``) as two acknowledged writes: a process killed between a
record and the checkpoint that counts it writes the record again when the run
resumes. The crash is put at every checkpoint in turn (the process dies there:
the write does not land and nothing after it runs), the run resumed from the
last checkpoint that landed: a record written again is the same record, byte
for byte, so a consumer that drops a ``(run_id, event, node, at)`` it has seen
reads each node once, in order."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from itertools import count
from typing import Any

import orjson
import pytest
from pydantic import BaseModel

from agents.catalog import load_catalog
from agents.flows.files import flow_tools
from agents.flows.service import FlowDriver, Flows, answer_input
from agents.run import Conversation
from compiler import CallTool, FlowInput, ModelReply, ToolResult, load_flow
from tests.agents.flows.test_flow_service import CATALOG, FLOW, NODES, opened


class Killed(Exception):
    """The process died here."""


def _run_with_a_crash_at(crash: int, lands: bool) -> tuple[list[dict[str, Any]], bool]:
    """The refund run to its end ("yes"), the process killed at checkpoint
    ``crash`` (0-based, counted over the whole run; before the write lands, or
    just after when ``lands``) and resumed from the last checkpoint that landed:
    the journal.flow records written, and whether the crash happened (False:
    the run has fewer checkpoints)."""
    catalog = load_catalog(CATALOG, "catalog.yaml")
    flow = load_flow(FLOW, "flows/refund.yaml", "refund", tools=flow_tools(catalog))
    flows = Flows({"refund": flow}, {("orders", "resolve"): "refund"})
    journal: list[dict[str, Any]] = []
    landed: list[dict[str, Any]] = []
    saves = count()
    ticks = count()

    async def publish(topic: str, key: str, record: BaseModel) -> None:
        data = record.model_dump(mode="json", by_alias=True)
        if data["type"] == "journal.flow":
            journal.append(data)

    async def save(conv: Conversation) -> None:
        dies = next(saves) == crash
        if dies and not lands:
            raise Killed
        landed.append(orjson.loads(orjson.dumps(conv.to_json())))  # as the changelog keeps it
        if dies:
            raise Killed

    async def execute(action: Any, *, job_key: str, flow: str, run_id: str) -> FlowInput:
        if isinstance(action, CallTool):
            return ToolResult(call_id=action.call_id, ok=True, result={"id": "A-1"})
        return ModelReply(call_id=action.call_id, text='{"action": "refund"}')

    def clock() -> datetime:  # a clock that moves: every reading is a new instant
        return datetime(2026, 1, 5, 9, tzinfo=UTC) + timedelta(seconds=next(ticks))

    driver = FlowDriver(flows, execute, publish, save, clock=clock)

    async def go() -> bool:
        conv = Conversation("o-1")
        conv.open_flow(opened({"order_id": "A-1"}), "refund", {"order_id": "A-1"})
        crashed = False
        for _ in range(2):  # the run, and its resume after the crash
            track = conv.owed_flow() or conv.waiting_flow("o-1/resolve#1/confirm/1")
            if track is None:
                return crashed  # the run is over as its checkpoint says
            try:
                await driver.drive(conv, track)
                if track.status == "waiting":
                    track.queued.append(answer_input("o-1/resolve#1/confirm/1", "yes"))
                    await driver.drive(conv, track)
                return crashed
            except Killed:
                crashed = True
                back = landed[-1] if landed else None
                conv = Conversation.from_json(back) if back is not None else Conversation("o-1")
                if back is None:
                    conv.open_flow(opened({"order_id": "A-1"}), "refund", {"order_id": "A-1"})
        raise AssertionError("the run did not end after one resume")

    crashed = asyncio.run(go())
    return journal, crashed


@pytest.mark.parametrize("lands", [False, True])
@pytest.mark.parametrize("crash", range(13))
def test_a_crash_at_any_checkpoint_writes_no_journal_flow_record_that_differs(
    crash: int, lands: bool
) -> None:
    journal, crashed = _run_with_a_crash_at(crash, lands)
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    kept: list[dict[str, Any]] = []
    for record in journal:
        key = (record["run_id"], record["event"], record["node"], record["at"])
        if key in seen:
            assert record == seen[key]  # written again: the same record
            continue
        seen[key] = record
        kept.append(record)
    events = [r["node"] if r["event"] == "node" else r["event"] for r in kept]
    assert events == ["started", *NODES, "finished"], (crash, crashed, journal)
    if not crashed:
        assert journal == kept
