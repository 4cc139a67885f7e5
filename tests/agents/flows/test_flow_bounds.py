"""The bounds of a flow run in the agents service (docs/flows.md, "Bounds"):
a fan-out's checkpoints grow with the items, not their square, and read back
after a crash; a fan-out over its maximum and a node's output over its bound
fail the node (its ``onError`` sees why), before any call and never wedging
the checkpoint. In process: the driver with a store standing in for the
changelog, each record measured as the service writes it."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel

from agents.flows.checkpoint import owed_records
from agents.flows.service import FlowDriver, Flows, restore_tracks
from agents.run import Conversation
from compiler import (
    FANOUT_MAX_ITEMS,
    CallModel,
    FlowInput,
    ModelReply,
    ToolResult,
    load_flow,
)
from tests.stream.cli.test_cli_flow_run import flow_run
from topics import TaskOpenedRecord

#: The producer's max request size: no record may be larger.
MAX_REQUEST = 1024 * 1024

SPREAD = """\
version: "1"
inputs: [items]
outputs: [results]
state:
  items: {type: list}
  item: {type: string}
  results: {type: list, reducer: append, default: []}
tools: [look]
start: spread
nodes:
  - {id: spread, type: fanout, over: items, to: one, as: item, onError: END}
  - {id: one, type: tool, tool: look, args: {id: "{{item}}"}, output: results}
edges:
  - {from: one, to: END}
"""
DRAFT = """\
version: "1"
outputs: [answer]
state:
  answer: {type: string}
start: draft
nodes:
  - {id: draft, type: llm, prompt: "Write it all.", output: answer, onError: sorry}
  - {id: sorry, type: llm, prompt: "Say sorry: {{last_error}}", output: answer}
edges:
  - {from: draft, to: END}
  - {from: sorry, to: END}
"""


class Crash(Exception):
    """The service killed in the middle of a run."""


class Rig:
    """A flow's driver, its store (the changelog as the service keeps it) and
    what it wrote."""

    def __init__(self, text: str, name: str, answer: Any) -> None:
        self.flows = Flows({name: load_flow(text, f"flows/{name}.yaml", name)}, {("p", "m"): name})
        self.store: dict[bytes, bytes] = {}
        self.written = 0
        self.largest = 0
        self.calls: list[str] = []
        self.prompts: list[str] = []
        self.answer = answer
        self.crash_at: int | None = None
        self.last_journal: BaseModel | None = None

    def put(self, key: bytes, value: bytes | None) -> None:
        self.written += len(key) + len(value or b"")
        self.largest = max(self.largest, len(value or b""))
        if value is None:
            self.store.pop(key, None)
        else:
            self.store[key] = value

    async def save_records(self, conv: Any, *, after: bool = False) -> None:
        for key, value in owed_records(conv, after=after):
            self.put(key, value)

    async def save(self, conv: Any) -> None:
        raw = orjson.dumps(conv.to_json())  # as the service does: records, its own, tombstones
        await self.save_records(conv)
        self.put(conv.job_key.encode(), raw)
        await self.save_records(conv, after=True)

    async def publish(self, topic: str, key: str, record: BaseModel) -> None:
        raw = orjson.dumps(record.model_dump(mode="json", by_alias=True))
        self.largest = max(self.largest, len(raw))
        self.last_journal = record

    async def execute(self, action: Any, *, job_key: str, flow: str, run_id: str) -> FlowInput:
        if self.crash_at is not None and len(self.calls) == self.crash_at:
            raise Crash
        self.calls.append(action.call_id)
        if isinstance(action, CallModel):
            self.prompts.append(action.prompt)
            return ModelReply(call_id=action.call_id, text=self.answer(action))
        result = {"id": action.args["id"], "note": "looked up, nothing to add"}
        return ToolResult(call_id=action.call_id, ok=True, result=result)

    def driver(self) -> FlowDriver:
        return FlowDriver(
            self.flows, self.execute, self.publish, self.save, save_records=self.save_records
        )

    def start(self, inputs: dict[str, Any]) -> Conversation:
        conv = Conversation("j")
        record = TaskOpenedRecord(
            task_id="j/m", job_key="j", milestone="m", at="2026-01-05T09:00:00Z",
            instructions="", playbook_instructions="", integrations=[],
            deadline="2026-01-08T09:00:00Z", frontier=["m"], playbook_key="p", subject=inputs,
        )  # fmt: skip
        assert conv.open_flow(record, next(iter(self.flows.by_name)), inputs)
        return conv

    def read_back(self) -> Conversation:
        """The conversation as a restarted service reads it from its store."""
        conv = Conversation.from_json(orjson.loads(self.store[b"j"]))
        restore_tracks(conv, self.store.get, self.flows.by_name)
        return conv

    def drive(self, conv: Conversation) -> None:
        track = conv.flows["m"]
        asyncio.run(self.driver().drive(conv, track))


def _fanout(n: int) -> Rig:
    rig = Rig(SPREAD, "spread", None)
    conv = rig.start({"items": [f"i{k:05d}" for k in range(n)]})
    rig.drive(conv)
    track = rig.read_back().flows["m"]
    assert track.status == "finished"
    assert track.state is not None
    assert len(track.state.channels["results"]) == n
    assert len(set(rig.calls)) == len(rig.calls) == n
    assert rig.largest < MAX_REQUEST  # checkpoints and journal records alike
    return rig


def test_a_fanouts_checkpoints_grow_linearly_with_its_items() -> None:
    """300, 3,000 and 10,000 items: the bytes written per item at 10,000 are
    within 2x of those at 300 (every step once wrote the whole run: 300 items
    wrote 46 MB, 1,000 wrote 507 MB), and no record reaches 1 MB."""
    rigs = {n: _fanout(n) for n in (300, 3_000, 10_000)}
    per_item = {n: rig.written / n for n, rig in rigs.items()}
    end = rigs[10_000].last_journal
    assert end is not None
    # Its 10,000 results outgrow a journal record: said, not copied.
    assert str(getattr(end, "outputs", {})["results"]).startswith("output_too_large")
    assert per_item[10_000] < 2 * per_item[300], per_item
    assert per_item[3_000] < 2 * per_item[300], per_item


def test_a_fanout_resumes_from_its_deltas_after_a_crash_calling_nothing_twice() -> None:
    """Killed after 1,500 of 3,000 calls: read back from the base and the
    deltas, the run goes on from there; the call in flight is made again
    (under its id), no completed one is."""
    rig = Rig(SPREAD, "spread", None)
    conv = rig.start({"items": [f"i{k:05d}" for k in range(3_000)]})
    rig.crash_at = 1_500
    with contextlib.suppress(Crash):
        rig.drive(conv)
    rig.crash_at = None
    back = rig.read_back()
    track = back.flows["m"]
    assert track.broken is None
    assert track.status == "running"
    assert track.state is not None
    assert len(track.state.channels["results"]) == 1_500
    rig.drive(back)
    done = rig.read_back().flows["m"]
    assert done.status == "finished"
    assert done.state is not None
    assert len(done.state.channels["results"]) == 3_000
    assert len(rig.calls) == len(set(rig.calls)) == 3_000


def test_a_fanout_over_its_maximum_fails_before_any_call() -> None:
    rig = Rig(SPREAD, "spread", None)
    conv = rig.start({"items": [str(k) for k in range(FANOUT_MAX_ITEMS + 1)]})
    rig.drive(conv)
    track = conv.flows["m"]
    assert rig.calls == []
    assert track.status == "finished"  # its onError: END
    assert track.state is not None
    error = track.state.channels["last_error"]
    assert error["node"] == "spread"
    assert error["message"].startswith("fanout_too_large: the list has 10001 items")
    assert rig.largest < MAX_REQUEST


def test_an_llm_nodes_answer_over_the_bound_fails_it_with_output_too_large() -> None:
    """A 1.5 MB answer is never kept: the node fails with output_too_large,
    its onError says sorry, the run finishes, and no record nears 1 MB; the
    conversation reads back and goes on (its next run is stepped)."""
    big = "x" * (1536 * 1024)

    def answer(action: CallModel) -> str:
        return big if action.node == "draft" else "Sorry, that was too long."

    rig = Rig(DRAFT, "draft", answer)
    conv = rig.start({})
    rig.drive(conv)
    track = conv.flows["m"]
    assert track.status == "finished"
    assert track.state is not None
    assert track.state.outputs == {"answer": "Sorry, that was too long."}
    assert "output_too_large: the answer is 1.5 MB" in rig.prompts[-1]
    assert rig.largest < 64 * 1024  # the answer is in no record
    back = rig.read_back()
    assert back.flows["m"].status == "finished"
    assert back.flows["m"].stepped[1]["error"].startswith("output_too_large")


def test_lemongraph_flow_run_fails_a_15_mb_answer_with_output_too_large(tmp_path: Path) -> None:
    """The real console script and stand-in model: the draft node's 1.5 MB
    answer fails it with output_too_large, its onError answers, the run
    finishes, and no step line carries the answer."""
    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / "draft.yaml").write_text(DRAFT)
    script = tmp_path / "draft.standin.yaml"
    rules = [
        {"when": {"flow_node": "draft"}, "say": "x" * (1536 * 1024)},
        {"when": {"flow_node": "sorry"}, "say": "Sorry, that was too long."},
    ]
    script.write_text(json.dumps({"rules": rules}))

    proc = flow_run(
        "run", str(flows / "draft.yaml"), "--script", str(script), "--json", cwd=tmp_path
    )

    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert max(len(line) for line in proc.stdout.splitlines()) < 64 * 1024
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    end = lines[-1]
    assert end["status"] == "finished"
    assert end["outputs"] == {"answer": "Sorry, that was too long."}
    [failed] = [s["input"] for s in lines if s["kind"] == "step" and s["input"].get("error")]
    # The model's reply bound (LEMONGRAPH_MAX_REPLY_BYTES, 64 KiB) is met before the
    # flow's own (256 KiB): the node fails with output_too_large all the same.
    assert failed["error"].startswith("output_too_large: the reply (text) is 1,572,864 bytes")
    assert "LEMONGRAPH_MAX_REPLY_BYTES" in failed["error"]
