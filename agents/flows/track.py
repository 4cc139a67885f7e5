"""One flow run as the job's conversation keeps it (docs/flows.md, "Crash
safety"): its state, the actions still to carry out, the inputs received and
not yet stepped, and the inputs stepped so far. A small run is kept whole in
the conversation's record; a large one as a base and a delta per step beside
it (agents/flows/checkpoint.py), so that a step costs what it changed."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from compiler import Flow, FlowInput, FlowRun, FlowState, flow_input_from_json, from_iso, to_iso
from pydantic import BaseModel

from agents.flows.checkpoint import Get, RunLog, read_back

__all__ = ["KEPT_INPUTS", "FlowTrack", "dump", "restore_tracks"]

#: Inputs a track keeps in its record of what was stepped (the oldest go first).
KEPT_INPUTS = 1000

#: ``idle``: a conversational flow's task is open and no message has started a
#: run yet (docs/flows.md, "Conversational flows").
Status = Literal["idle", "running", "waiting", "finished", "failed", "stopped"]


def dump(value: BaseModel) -> dict[str, Any]:
    data: dict[str, Any] = value.model_dump(mode="json", by_alias=True)
    return data


@dataclass
class FlowTrack:
    """One flow run of one milestone's task, as the conversation keeps it."""

    milestone: str
    task_id: str
    flow: str
    #: ``{task_id}#{n}``, n counting the flow runs of the conversation: from our
    #: own data, so call and interrupt ids (docs/flows.md, "Ids") are too.
    run_id: str
    #: The flow's inputs, from the job's subject (its ``inputs`` channels); let
    #: go once the run started (its start, in ``stepped``, holds them).
    inputs: dict[str, Any] = field(default_factory=dict)
    #: The run's state; None until the run started.
    state: FlowState | None = None
    #: Actions returned by a step and not yet carried out, in order (JSON).
    actions: list[dict[str, Any]] = field(default_factory=list)
    #: Inputs received (answers, ticks) and not yet stepped.
    queued: list[dict[str, Any]] = field(default_factory=list)
    #: Every input stepped, in order (the recorded results a replay reads).
    stepped: list[dict[str, Any]] = field(default_factory=list)
    #: The time (ISO) each of ``stepped`` was stepped at: the ``now`` a replay passes.
    stepped_at: list[str] = field(default_factory=list)
    #: How many nodes of the state's trail are journaled (``journal.flow`` node),
    #: whether ``started`` is, and the last one's ``at`` (see ``_journal_nodes``).
    journaled: int = 0
    journaled_start: bool = False
    journaled_at: str | None = None
    #: The interrupt whose question was sent and journaled ``open``.
    asked: str | None = None
    #: Interrupts closed (answered, expired, cancelled): a later answer is ignored.
    closed: list[str] = field(default_factory=list)
    status: Status = "running"
    #: Questions asked again under an id that had closed (a retried ``ask``).
    reasked: int = 0
    #: The contact the open question went to (None: to nobody on a channel, an
    #: approval the operators answer): only they answer it on their channel.
    asked_of: str | None = None
    #: Who gave the answer queued or stepped last (an Answerer's JSON), for the
    #: ``answered`` journal record.
    answered_by: dict[str, Any] | None = None
    #: A conversational flow's run (docs/flows.md, "Conversational flows"): the
    #: person's message it answers (``message_id``, ``contact``, ``channel``,
    #: ``text``, ``value``, ``at``), and the messages that came while it ran,
    #: each owed a run of its own after it, in order.
    turn: dict[str, Any] | None = None
    owed_turns: list[dict[str, Any]] = field(default_factory=list)
    #: How the run is checkpointed: whole, or as a base and deltas.
    log: RunLog = field(default_factory=RunLog, repr=False, compare=False)
    #: Why a run kept as a base and deltas could not be read back (a record
    #: missing): the driver ends it ``failed`` with it.
    broken: str | None = None
    #: Held while the run is stepped, journaled or ended (never while a call is
    #: out): a ``task.closed`` read meanwhile (:meth:`FlowDriver.stop`, from the
    #: service's consumer) waits for the step in hand instead of journaling its
    #: nodes and its end beside it. In memory only.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False, compare=False)

    @property
    def active(self) -> bool:
        return self.status in ("running", "waiting")

    @property
    def owed(self) -> bool:
        """Work is waiting: the start, an action, or an input to step; or, for
        a conversational flow whose run is over (or not begun), a message."""
        work = self.state is None or bool(self.actions) or bool(self.queued)
        if not self.active:
            return bool(self.owed_turns) and self.status in ("idle", "finished", "failed")
        return work or self.broken is not None

    def renew(self, run_id: str, inputs: dict[str, Any], turn: dict[str, Any]) -> None:
        """The next run of a conversational flow, for the message ``turn``: a
        run of its own (its state, its record, its journal), the same task.
        The run before it is over and checkpointed; only its messages still
        owed a run stay."""
        fresh = FlowTrack(self.milestone, self.task_id, self.flow, run_id, inputs=inputs)
        for name in ("state", "actions", "queued", "stepped", "stepped_at", "journaled",
                     "journaled_start", "journaled_at", "asked", "closed", "reasked",
                     "asked_of", "answered_by", "broken"):  # fmt: skip
            setattr(self, name, getattr(fresh, name))
        self.run_id, self.inputs, self.turn, self.status = run_id, inputs, turn, "running"
        # The run before, if it was kept as a base and deltas, leaves its last
        # base's records (keyed by its run id) on the changelog; the
        # conversation's record names the new run only.
        self.log = RunLog()

    def flow_state(self) -> FlowState | None:
        return self.state

    def trail(self) -> tuple[str, ...]:
        return self.state.trail if self.state is not None else ()

    def interrupt(self) -> dict[str, Any] | None:
        """The interrupt the run waits on (JSON), if any."""
        if self.state is None or not self.active or self.state.interrupt is None:
            return None
        return dump(self.state.interrupt)

    def open_interrupt(self) -> str | None:
        """The id of the interrupt that may be answered now (asked, not closed)."""
        found = self.interrupt()
        if found is None or found.get("interrupt_id") != self.asked:
            return None
        return self.asked if self.asked not in self.closed else None

    def expires_at(self) -> datetime | None:
        found = self.interrupt()
        if found is None or not found.get("expires_at"):
            return None
        return datetime.fromisoformat(str(found["expires_at"]).replace("Z", "+00:00"))

    # -- changes the checkpoint follows ------------------------------------------

    def record(self, given: FlowInput, now: datetime) -> None:
        """``given`` was stepped at ``now``: kept (the last ``KEPT_INPUTS``),
        and a delta of a run kept as a base and deltas."""
        data, at = dump(given), to_iso(now)
        self.stepped.append(data)
        self.stepped_at.append(at)
        del self.stepped[:-KEPT_INPUTS]
        del self.stepped_at[:-KEPT_INPUTS]
        self.log.stepped(data, at)

    def take(self) -> None:
        """The first action is carried out."""
        self.actions.pop(0)
        self.log.taken += 1

    def drop_actions(self) -> None:
        """The run ended: no action is left."""
        self.log.taken += len(self.actions)
        self.actions = []

    # -- JSON ---------------------------------------------------------------------

    def small_json(self) -> dict[str, Any]:
        """What the conversation's record keeps of the run in either form."""
        return {
            "milestone": self.milestone,
            "task_id": self.task_id,
            "flow": self.flow,
            "run_id": self.run_id,
            "queued": self.queued,
            "journaled": self.journaled,
            "journaled_start": self.journaled_start,
            "journaled_at": self.journaled_at,
            "asked": self.asked,
            "closed": self.closed,
            "status": self.status,
            "reasked": self.reasked,
            "asked_of": self.asked_of,
            "answered_by": self.answered_by,
            "turn": self.turn,
            "owed_turns": self.owed_turns,
        }

    def run_json(self) -> dict[str, Any]:
        """What grows with the run: kept whole in the conversation's record, or
        as the base of a run kept as a base and deltas."""
        return {
            "inputs": self.inputs,
            "state": dump(self.state) if self.state is not None else None,
            "actions": self.actions,
            "stepped": self.stepped,
            "stepped_at": self.stepped_at,
        }

    def to_json(self) -> dict[str, Any]:
        return self.log.checkpoint(self)

    def restore_run(self, data: Mapping[str, Any]) -> None:
        """Take back what :meth:`run_json` gave."""
        self.inputs = dict(data.get("inputs") or {})
        state = data.get("state")
        self.state = FlowState.model_validate(state) if state is not None else None
        self.actions = list(data.get("actions") or [])
        self.stepped = list(data.get("stepped") or [])
        self.stepped_at = [str(t) for t in data.get("stepped_at") or []]

    def restore_small(self, data: Mapping[str, Any]) -> None:
        """Take back the fields a delta's snapshot keeps (see ``RunLog.mark``)."""
        self.journaled = int(data.get("journaled", self.journaled))
        self.journaled_start = bool(data.get("journaled_start", self.journaled_start))
        self.journaled_at = data.get("journaled_at", self.journaled_at)
        self.status = data.get("status", self.status)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FlowTrack:
        track = cls(
            milestone=str(data["milestone"]),
            task_id=str(data["task_id"]),
            flow=str(data["flow"]),
            run_id=str(data["run_id"]),
            queued=list(data.get("queued") or []),
            journaled=int(data.get("journaled", 0)),
            # A checkpoint from before the key wrote its start before saving.
            journaled_start=bool(data.get("journaled_start", True)),
            journaled_at=data.get("journaled_at"),
            asked=data.get("asked"),
            closed=list(data.get("closed") or []),
            status=data.get("status", "running"),
            reasked=int(data.get("reasked", 0)),
            asked_of=data.get("asked_of"),
            answered_by=data.get("answered_by"),
            turn=data.get("turn"),
            owed_turns=list(data.get("owed_turns") or []),
        )
        if data.get("log") is not None:
            track.log = RunLog.from_json(data["log"])
            track.broken = "its checkpoint was not read back"  # until restore_tracks
        else:
            track.restore_run(data)
        return track


def restore_tracks(conv: Any, get: Get, flows: Mapping[str, Flow]) -> None:
    """Read back the flow runs of a conversation kept as a base and deltas
    (agents/flows/checkpoint.py): the base, then each delta's input stepped
    again (the step function is pure: the same state and actions), and the
    fields of the latest snapshot. A run whose records are missing is left
    ``broken`` (the driver ends it ``failed``, saying why)."""
    for track in conv.flows.values():
        if track.log.gen and track.state is None:
            try:
                run, deltas, size = read_back(conv.job_key, track.run_id, track.log, get)
            except (ValueError, KeyError) as exc:
                track.broken = f"flow run {track.run_id}: {exc}"
                continue
            track.restore_run(run)
            track.log.deltas, track.log.delta_bytes = len(deltas), size
            _step_again(track, deltas, flows.get(track.flow))
            track.broken = None


def _step_again(track: FlowTrack, deltas: list[dict[str, Any]], flow: Flow | None) -> None:
    """The deltas' inputs stepped on the base's state, in order."""
    runner = FlowRun(flow) if flow is not None else None
    state = track.state
    appended: list[dict[str, Any]] = []
    for delta in deltas:
        if "input" in delta:
            track.stepped.append(delta["input"])
            track.stepped_at.append(str(delta["at"]))
            if runner is not None and state is not None:
                given = flow_input_from_json(delta["input"])
                try:
                    state, actions = runner.next(state, given, from_iso(str(delta["at"])))
                except ValueError:
                    runner = None  # another flow now: its next step ends the run
                    continue
                appended += [dump(a) for a in actions]
        snapshot = delta.get("track")
        if snapshot is not None and int(snapshot.get("seq", 0)) > track.log.seq:
            track.restore_small(snapshot)
            track.log.seq, track.log.taken = int(snapshot["seq"]), int(snapshot["taken"])
    del track.stepped[:-KEPT_INPUTS]
    del track.stepped_at[:-KEPT_INPUTS]
    track.state = state
    track.actions = [*track.actions, *appended][track.log.taken :]
